"""The Iceberg sink's ``spark`` engine (``sinks.iceberg.engine: spark``): the tables of
:class:`~spark_jobs.sinks.iceberg.IcebergSink`, in the same catalog, merged by Spark's
executors with Iceberg's Spark runtime over a JDBC catalog (Iceberg's ``JdbcCatalog`` on the
same PostgreSQL or SQLite database, the same tables pyiceberg's ``SqlCatalog`` reads).

Per table per micro-batch, Spark's executors MERGE the batch's changes by position into the
table, merge-on-read (``write.merge.mode``/``update``/``delete`` = ``merge-on-read``, format
v2): a replaced or deleted row is written as a position delete, its data file stays; the cost
of a batch follows the batch and the files its keys fall in, not the table.  The snapshot of
the commit carries the merge job's application id and batch id (``cdc.app``, ``cdc.batch``,
Iceberg's ``spark.sql.iceberg.snapshot-property.*``), checked before each commit along the
current snapshot's ancestry (and the table property ``cdc.batch.<app>``, which maintenance
writes before it expires snapshots): a replayed batch finds itself committed
(:mod:`spark_jobs.sinks.lake_base`).  Compaction runs Iceberg's ``rewrite_data_files`` (small
files, and every file with deletes: the deletes folded back) and
``rewrite_position_delete_files``; the expiry ``expire_snapshots`` and ``remove_orphan_files``
(:mod:`spark_jobs.sinks.iceberg_spark_maintenance`).

The driver reads the catalog and the tables' metadata with pyiceberg (owner, schema, batch
markers; ``cdc verify``'s rows, position deletes applied); every write is Spark's.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pyarrow as pa

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.iceberg import IcebergSink, warehouse_uri
from spark_jobs.sinks.iceberg_spark_maintenance import CATALOG_DOWN, IcebergSparkMaintenance, jdbc_message
from spark_jobs.sinks.lake_base import OWNER_PROPERTY
from spark_jobs.sinks.lake_spark import (
    SparkMerge,
    java_error,
    lake_session,
    merge_statement,
    quote,
    spark_type,
    sql_literal,
    temp_view,
)
from spark_jobs.sinks.lake_types import DELETED_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.registry import register_sink

log = logging.getLogger(__name__)

__all__ = ["IcebergSparkSink", "jdbc_catalog", "pgpass_password", "MERGE_ON_READ"]

#: The table properties of merge-on-read: MERGE, UPDATE and DELETE write position deletes.
MERGE_ON_READ = {"write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.delete.mode": "merge-on-read"}
#: Iceberg's exceptions of a commit that lost the race with another writer.
_CONFLICTS = ("CommitFailedException", "ValidationException", "CommitStateUnknownException")

def jdbc_catalog(catalog_uri: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and login of Iceberg's ``JdbcCatalog`` for the catalog database of
    ``catalog_uri`` (the SQLAlchemy URL pyiceberg's ``SqlCatalog`` takes): PostgreSQL or SQLite."""
    from sqlalchemy.engine import make_url
    try:
        url = make_url(catalog_uri)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's parse errors
        raise SinkError(f"sinks.iceberg.catalog_uri is not a database URL: {type(exc).__name__}") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise SinkError("sinks.iceberg.catalog_uri: an SQLite catalog must be a file (sqlite:////path/catalog.db)")
        return f"jdbc:sqlite:{url.database}", {}
    if backend == "postgresql":
        query = dict(url.query)
        passfile = query.pop("passfile", None)  # (libpq's; the JDBC driver has none: read here)
        host = query.pop("host", None) or url.host
        if not host or str(host).startswith("/"):
            raise SinkError("sinks.iceberg.catalog_uri: Spark's JDBC catalog reaches PostgreSQL over TCP: give a "
                            "host name, not a Unix socket")
        params = "&".join(f"{k}={v}" for k, v in sorted(query.items()) if isinstance(v, str))
        jdbc = f"jdbc:postgresql://{host}:{url.port or 5432}/{url.database or ''}" + (f"?{params}" if params else "")
        login = {}
        if url.username:
            login["jdbc.user"] = url.username
        password = url.password
        if password is None and isinstance(passfile, str):
            try:
                text = open(passfile, encoding="utf-8").read()
            except OSError as exc:
                raise SinkError(f"sinks.iceberg.catalog_uri: cannot read its passfile ({exc.strerror})") from None
            password = pgpass_password(text, str(host), int(url.port or 5432), url.database or "", url.username or "")
        if password:
            login["jdbc.password"] = str(password)
        return jdbc, login
    raise SinkError(f"sinks.iceberg.catalog_uri: Spark's JDBC catalog takes PostgreSQL or SQLite, not {backend}")


def pgpass_password(text: str, host: str, port: int, database: str, user: str) -> str | None:
    """The password a libpq password file (``hostname:port:database:username:password`` lines,
    ``*`` matching anything, ``\\:`` and ``\\\\`` escaped) gives for this login: the first line that
    matches, None if none does."""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields, field, escaped = [], "", False
        for ch in line:
            if escaped:
                field, escaped = field + ch, False
            elif ch == "\\":
                escaped = True
            elif ch == ":" and len(fields) < 4:
                fields.append(field)
                field = ""
            else:
                field += ch
        fields.append(field)
        if len(fields) != 5:
            continue
        wanted = (host, str(port), database, user)
        if all(f == "*" or f == w for f, w in zip(fields[:4], wanted)):
            return fields[4]
    return None


@register_sink("iceberg", engine="spark")
class IcebergSparkSink(SparkMerge, IcebergSparkMaintenance, IcebergSink):
    """Source tables as Iceberg tables of a JDBC catalog, written by Spark (see the module docstring)."""

    conflicts = _CONFLICTS

    def __init__(self, catalog_uri: str, warehouse: str, *, catalog_name: str = "cdc", **kw: Any) -> None:
        if not catalog_name.replace("_", "").isalnum():
            raise SinkError(f"sinks.iceberg.catalog_name {catalog_name!r}: letters, digits and _ only (it names "
                            "the catalog in Spark SQL)")
        super().__init__(catalog_uri, warehouse, catalog_name=catalog_name, **kw)

    def catalog_conf(self) -> dict[str, str]:
        """Spark's settings of the sink's catalog: Iceberg's ``SparkCatalog`` over a
        ``JdbcCatalog`` named ``catalog_name`` (the name pyiceberg's ``SqlCatalog`` files its
        tables under), on the catalog database, with the sink's FileIO properties."""
        jdbc, login = jdbc_catalog(self.catalog_uri)
        prefix = f"spark.sql.catalog.{self.catalog_name}"
        conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc", f"{prefix}.uri": jdbc,
                f"{prefix}.warehouse": warehouse_uri(self.warehouse), f"{prefix}.jdbc.schema-version": "V1",
                **{f"{prefix}.{k}": v for k, v in login.items()},
                **{f"{prefix}.{k}": v for k, v in self.properties.items()}}
        return conf

    def _spark(self) -> Any:
        """The session, with the sink's catalog set (a runtime setting: a session built
        without this configuration's catalog gets it on first use)."""
        spark = lake_session()
        prefix = f"spark.sql.catalog.{self.catalog_name}"
        if spark.conf.get(prefix, None) is None:
            for k, v in self.catalog_conf().items():
                spark.conf.set(k, v)
        return spark

    def spark_name(self, db: str, table: str) -> str:
        """The table as Spark SQL names it: ``catalog.namespace.table``."""
        return ".".join(quote(p) for p in (self.catalog_name, *self.identifier(db, table)))

    def _spark_error(self, what: str, db: str, table: str, exc: Exception) -> SinkError:
        """A catalog database that cannot be reached :class:`SinkUnavailable` (without its URL),
        an unwritable warehouse too, the rest :class:`SinkError`."""
        text = str(exc)
        if any(d in text for d in CATALOG_DOWN):
            return SinkUnavailable(f"the Iceberg catalog database cannot be reached (table {db}.{table}): "
                                   f"{jdbc_message(exc)}")
        if any(m in text for m in ("AccessDeniedException", "Mkdirs failed", "ParentNotDirectoryException",
                                   "Permission denied", "Failed to create file")):
            return SinkUnavailable(f"Iceberg table of {db}.{table}: {what} failed: {java_error(exc)} (is "
                                   "sinks.iceberg.warehouse writable by the merge job?)")
        return SinkError(f"Iceberg table of {db}.{table}: {what} failed: {java_error(exc)}")

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        ident = self.identifier(db, table)
        props = {OWNER_PROPERTY: owner or "cdc-merge", "format-version": "2", **MERGE_ON_READ,
                 "write.parquet.compression-codec": "zstd", "cdc.key": ",".join(key),
                 # (each commit writes a metadata file: keep the last 100, as Iceberg's default count)
                 "write.metadata.delete-after-commit.enabled": "true"}
        columns = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in schema)
        self.run_sql("creating the namespace", db, table,
                  f"CREATE NAMESPACE IF NOT EXISTS {quote(self.catalog_name)}.{quote(ident[0])}")
        try:
            self.run_sql("creating the table", db, table,
                      f"CREATE TABLE {self.spark_name(db, table)} ({columns}) USING iceberg TBLPROPERTIES ("
                      + ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in props.items()) + ")")
        except SinkError as exc:
            if "already exists" in str(exc).lower():
                raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
            raise
        handle = self.load_table(db, table)
        if handle is None:
            raise SinkUnavailable(f"the Iceberg table of {db}.{table} was created but cannot be loaded")
        return handle

    def _change_columns(self, handle: Any, db: str, table: str, dropped: list[str], added: list[pa.Field],
                        widened: list[pa.Field]) -> None:
        name = self.spark_name(db, table)
        for c in dropped:
            self.run_sql("dropping a retyped column", db, table, f"ALTER TABLE {name} DROP COLUMN {quote(c)}")
        if added:
            self.run_sql("adding columns", db, table, f"ALTER TABLE {name} ADD COLUMNS ("
                      + ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in added) + ")")
        for f in widened:
            self.run_sql("widening a column", db, table,
                      f"ALTER TABLE {name} ALTER COLUMN {quote(f.name)} TYPE {spark_type(f.type)}")

    def _merge_frame(self, db: str, table: str, changes: Any, columns: list[str], key: list[str], batch_id: int,
                     app: str, bounds: tuple | None, meta: dict[str, str]) -> tuple[int, int] | None:
        commit = uuid.uuid4().hex
        prefix = "spark.sql.iceberg.snapshot-property."
        conf = {f"{prefix}cdc.app": app, f"{prefix}cdc.batch": str(batch_id), f"{prefix}cdc.commit": commit,
                **{prefix + k: v for k, v in meta.items()}}
        with temp_view(changes) as view:
            self.run_sql(f"the MERGE of batch {batch_id}", db, table,
                      merge_statement(self.spark_name(db, table), view, columns, key, soft_delete=self.soft_delete,
                                      bounds=bounds), conf)
        after = self.load_table(db, table)
        snap = after.current_snapshot() if after is not None else None
        props = snap.summary.additional_properties if snap is not None and snap.summary else {}
        if props.get("cdc.commit") != commit:
            return 0, 0  # no snapshot: the MERGE changed nothing
        metric = lambda name: int(props.get(f"spark.merge-into.num-target-rows-{name}") or 0)  # noqa: E731
        changed = metric("inserted") + metric("updated")
        return (changed, 0) if self.soft_delete else (changed, metric("deleted"))

    def _append_frame(self, db: str, table: str, changes: Any, columns: list[str], batch_id: int, app: str,
                      meta: dict[str, str]) -> None:
        rows = changes.selectExpr(*[quote(c) if c != DELETED_COLUMN else f"false AS {quote(c)}" for c in columns])
        writer = (rows.writeTo(self.spark_name(db, table)).option("snapshot-property.cdc.app", app)
                  .option("snapshot-property.cdc.batch", str(batch_id))
                  .option("snapshot-property.cdc.commit", uuid.uuid4().hex))
        for k, v in meta.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        self._run(f"the append of batch {batch_id}", db, table, writer.append)

    def _count(self, db: str, table: str, predicate: str) -> int:
        rows = self.run_sql("reading", db, table,
                            f"SELECT count(*) FROM {self.spark_name(db, table)} WHERE {predicate}")
        return int(rows[0][0])

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        if self.load_table(db, table) is None:
            return 0
        predicate = self._spark_predicate(position, where)
        name = self.spark_name(db, table)
        if self.soft_delete:
            predicate += f" AND NOT coalesce({quote(DELETED_COLUMN)}, false)"
            doomed = self._count(db, table, predicate)
            if doomed:
                self.run_sql("flagging rows below a marker", db, table,
                          f"UPDATE {name} SET {quote(DELETED_COLUMN)} = true, {quote(POSITION_COLUMN)} = "
                          f"{sql_literal(position)} WHERE {predicate}")
            return doomed
        doomed = self._count(db, table, predicate)
        if doomed:
            self.run_sql("deleting rows below a marker", db, table, f"DELETE FROM {name} WHERE {predicate}")
        return doomed

    def _remove(self, db: str, table: str) -> None:
        self.run_sql("dropping the table", db, table, f"DROP TABLE {self.spark_name(db, table)} PURGE")

    def _move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        to = self.identifier(to_db, to_table)
        self.run_sql("creating the namespace", db, table,
                  f"CREATE NAMESPACE IF NOT EXISTS {quote(self.catalog_name)}.{quote(to[0])}")
        self.run_sql("renaming the table", db, table,
                  f"ALTER TABLE {self.spark_name(db, table)} RENAME TO {quote(to[0])}.{quote(to[1])}")
