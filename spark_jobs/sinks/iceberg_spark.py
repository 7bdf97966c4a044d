"""The Iceberg sink's ``spark`` engine (``sinks.iceberg.engine: spark``): the tables of
:class:`~spark_jobs.sinks.iceberg_format.IcebergFormat`, in the same catalog, merged by Spark's
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
(:mod:`spark_jobs.sinks.lake_sink`).  Compaction runs Iceberg's ``rewrite_data_files`` (small
files, and every file with deletes: the deletes folded back) and
``rewrite_position_delete_files``; the expiry ``expire_snapshots`` and ``remove_orphan_files``
(:meth:`IcebergSparkEngine.compact`, :meth:`IcebergSparkEngine.expire`).

The driver reads the catalog and the tables' metadata with pyiceberg (owner, schema, batch
markers; ``cdc verify``'s rows, position deletes applied); every write is Spark's.
"""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.iceberg_catalog import warehouse_uri
from spark_jobs.sinks.iceberg_format import IcebergFormat, ancestry, batch_property, evolve_columns
from spark_jobs.sinks.iceberg_maintenance import expiry_cutoffs
from spark_jobs.sinks.lake_format import OWNER_PROPERTY
from spark_jobs.sinks.lake_spark import (
    SparkEngine,
    java_error,
    lake_session,
    merge_statement,
    quote,
    spark_type,
    sql_literal,
    temp_view,
)
from spark_jobs.sinks.lake_stage import StagingArea
from spark_jobs.sinks.lake_types import DELETED_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["IcebergSparkEngine", "catalog_conf", "jdbc_catalog", "pgpass_password", "MERGE_ON_READ", "ORPHAN_MARGIN",
           "CATALOG_DOWN", "jdbc_message"]

#: The table properties of merge-on-read: MERGE, UPDATE and DELETE write position deletes.
MERGE_ON_READ = {"write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.delete.mode": "merge-on-read"}
#: Iceberg's exceptions of a commit that lost the race with another writer.
_CONFLICTS = ("CommitFailedException", "ValidationException", "CommitStateUnknownException")
#: How old a file no snapshot names must be before ``remove_orphan_files`` deletes it: such
#: files are left by failed writes (the expired snapshots' files go with the expiry), and a
#: file younger than this may belong to a write under way, another job's included.  Iceberg's
#: procedure refuses less than a day (its Java action, which takes less, is not public to Python).
ORPHAN_MARGIN = timedelta(hours=24)
#: Iceberg's exceptions of a catalog database that cannot be reached.
CATALOG_DOWN = ("UncheckedSQLException", "Connection refused", "SQLTransientConnectionException", "PSQLException",
                "Failed to connect", "SQLiteException")


def jdbc_message(exc: Exception) -> str:
    """A JDBC error's first line without a URL or a password."""
    return re.sub(r"jdbc:[^\s,)]+", "jdbc:...", java_error(exc))


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


def catalog_conf(fmt: IcebergFormat) -> dict[str, str]:
    """Spark's settings of the format's catalog: Iceberg's ``SparkCatalog`` over a
    ``JdbcCatalog`` named ``catalog_name`` (the name pyiceberg's ``SqlCatalog`` files its
    tables under), on the catalog database, with the sink's FileIO properties."""
    jdbc, login = jdbc_catalog(fmt.catalog_uri)
    prefix = f"spark.sql.catalog.{fmt.catalog_name}"
    return {prefix: "org.apache.iceberg.spark.SparkCatalog", f"{prefix}.type": "jdbc", f"{prefix}.uri": jdbc,
            f"{prefix}.warehouse": warehouse_uri(fmt.warehouse), f"{prefix}.jdbc.schema-version": "V1",
            **{f"{prefix}.{k}": v for k, v in login.items()},
            **{f"{prefix}.{k}": v for k, v in fmt.properties.items()}}


class IcebergSparkEngine(SparkEngine):
    """Iceberg tables of a JDBC catalog, written by Spark (see the module docstring)."""

    conflicts = _CONFLICTS

    format: IcebergFormat

    def __init__(self, fmt: IcebergFormat, staging: StagingArea, *, soft_delete: bool = False) -> None:
        if not fmt.catalog_name.replace("_", "").isalnum():
            raise SinkError(f"sinks.iceberg.catalog_name {fmt.catalog_name!r}: letters, digits and _ only (it names "
                            "the catalog in Spark SQL)")
        super().__init__(fmt, staging, soft_delete=soft_delete)
        self.catalog_name = fmt.catalog_name

    def session(self) -> Any:
        """The session, with the sink's catalog set (a runtime setting: a session built
        without this configuration's catalog gets it on first use)."""
        spark = lake_session()
        prefix = f"spark.sql.catalog.{self.catalog_name}"
        if spark.conf.get(prefix, None) is None:
            for k, v in catalog_conf(self.format).items():
                spark.conf.set(k, v)
        return spark

    def spark_name(self, db: str, table: str) -> str:
        """The table as Spark SQL names it: ``catalog.namespace.table``."""
        return ".".join(quote(p) for p in (self.catalog_name, *self.format.identifier(db, table)))

    def spark_error(self, what: str, db: str, table: str, exc: Exception) -> SinkError:
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
        ident = self.format.identifier(db, table)
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
        handle = self.format.load_table(db, table)
        if handle is None:
            raise SinkUnavailable(f"the Iceberg table of {db}.{table} was created but cannot be loaded")
        return handle

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        return evolve_columns(self.format, handle, db, table, schema, key, self._change_columns)

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

    def merge_frame(self, db: str, table: str, changes: Any, columns: list[str], key: list[str], batch_id: int,
                     app: str, bounds: tuple | None, meta: dict[str, str]) -> tuple[int, int] | None:
        commit = uuid.uuid4().hex
        prefix = "spark.sql.iceberg.snapshot-property."
        conf = {f"{prefix}cdc.app": app, f"{prefix}cdc.batch": str(batch_id), f"{prefix}cdc.commit": commit,
                **{prefix + k: v for k, v in meta.items()}}
        with temp_view(changes) as view:
            self.run_sql(f"the MERGE of batch {batch_id}", db, table,
                      merge_statement(self.spark_name(db, table), view, columns, key, soft_delete=self.soft_delete,
                                      bounds=bounds), conf)
        after = self.format.load_table(db, table)
        snap = after.current_snapshot() if after is not None else None
        props = snap.summary.additional_properties if snap is not None and snap.summary else {}
        if props.get("cdc.commit") != commit:
            return 0, 0  # no snapshot: the MERGE changed nothing
        metric = lambda name: int(props.get(f"spark.merge-into.num-target-rows-{name}") or 0)  # noqa: E731
        changed = metric("inserted") + metric("updated")
        return (changed, 0) if self.soft_delete else (changed, metric("deleted"))

    def append_frame(self, db: str, table: str, changes: Any, columns: list[str], batch_id: int, app: str,
                      meta: dict[str, str]) -> None:
        rows = changes.selectExpr(*[quote(c) if c != DELETED_COLUMN else f"false AS {quote(c)}" for c in columns])
        writer = (rows.writeTo(self.spark_name(db, table)).option("snapshot-property.cdc.app", app)
                  .option("snapshot-property.cdc.batch", str(batch_id))
                  .option("snapshot-property.cdc.commit", uuid.uuid4().hex))
        for k, v in meta.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        self.run(f"the append of batch {batch_id}", db, table, writer.append)

    def _count(self, db: str, table: str, predicate: str) -> int:
        rows = self.run_sql("reading", db, table,
                            f"SELECT count(*) FROM {self.spark_name(db, table)} WHERE {predicate}")
        return int(rows[0][0])

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        if self.format.load_table(db, table) is None:
            return 0
        predicate = self.spark_predicate(position, where)
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

    def remove(self, db: str, table: str) -> None:
        self.run_sql("dropping the table", db, table, f"DROP TABLE {self.spark_name(db, table)} PURGE")

    def move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        to = self.format.identifier(to_db, to_table)
        self.run_sql("creating the namespace", db, table,
                  f"CREATE NAMESPACE IF NOT EXISTS {quote(self.catalog_name)}.{quote(to[0])}")
        self.run_sql("renaming the table", db, table,
                  f"ALTER TABLE {self.spark_name(db, table)} RENAME TO {quote(to[0])}.{quote(to[1])}")

    # -- maintenance (Iceberg's Spark procedures) ------------------------------------------------
    def _call(self, db: str, table: str, procedure: str, args: str) -> dict:
        ident = ".".join(self.format.identifier(db, table))
        rows = self.run_sql(procedure, db, table,
                         f"CALL {quote(self.catalog_name)}.system.{procedure}(table => {sql_literal(ident)}{args})")
        return rows[0].asDict() if rows else {}

    def compact(self, db: str, table: str) -> dict:
        """``rewrite_data_files``: small files bin-packed into files of ``target_file_size`` and
        every data file with position deletes written again without the deleted rows (the
        deletes folded back), then ``rewrite_position_delete_files`` (the delete files left
        dangling removed, the rest compacted)."""
        handle = self.format.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        data = self._call(db, table, "rewrite_data_files", ", options => map("
                          f"'target-file-size-bytes', '{int(self.format.target_file_size)}', 'min-input-files', '2', "
                          "'delete-file-threshold', '1', 'remove-dangling-deletes', 'true')")
        deletes = self._call(db, table, "rewrite_position_delete_files",
                             ", options => map('rewrite-all', 'true')")
        return {"files_removed": int(data.get("rewritten_data_files_count") or 0),
                "files_added": int(data.get("added_data_files_count") or 0),
                "delete_files_removed": int(deletes.get("rewritten_delete_files_count") or 0)
                + int(data.get("removed_delete_files_count") or 0)}

    def expire(self, db: str, table: str, retention_hours: float, max_snapshots: int | None = None) -> dict:
        """``expire_snapshots`` older than ``retention_hours`` and, with ``max_snapshots``, all
        but the newest ``max_snapshots`` (the current one stays;
        :func:`~spark_jobs.sinks.iceberg_maintenance.expiry_cutoffs`), then
        ``remove_orphan_files`` (files no snapshot names, left by failed writes, older than the
        same cutoff and at least :data:`ORPHAN_MARGIN`: a younger one may belong to a commit
        under way).  The batch markers of the snapshots that go are kept as table
        properties first (:meth:`IcebergFormat.committed_batch` reads them)."""
        handle = self.format.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        snapshots = handle.metadata.snapshots
        now = datetime.now(timezone.utc)
        by_snapshot, by_file = expiry_cutoffs([s.timestamp_ms for s in snapshots], now, retention_hours, max_snapshots)
        self._keep_batch_markers(db, table, handle)
        expired = self._call(db, table, "expire_snapshots", f", older_than => TIMESTAMP {_ts(by_snapshot)}, "
                                                          "retain_last => 1")
        orphans = self._remove_orphan_files(db, table, min(by_file, now - ORPHAN_MARGIN))
        after = self.format.load_table(db, table)
        removed = sum(int(expired.get(k) or 0) for k in ("deleted_data_files_count",
                                                          "deleted_position_delete_files_count",
                                                          "deleted_equality_delete_files_count",
                                                          "deleted_manifest_files_count",
                                                          "deleted_manifest_lists_count"))
        return {"snapshots_expired": len(snapshots) - len(after.metadata.snapshots),
                "files_removed": removed + orphans}

    def _remove_orphan_files(self, db: str, table: str, older_than: datetime) -> int:
        """Iceberg's ``remove_orphan_files``: the files under the table's location that no
        snapshot or metadata names, written before ``older_than``; how many went (a row each)."""
        ident = ".".join(self.format.identifier(db, table))
        return len(self.run_sql("remove_orphan_files", db, table,
                             f"CALL {quote(self.catalog_name)}.system.remove_orphan_files(table => "
                             f"{sql_literal(ident)}, older_than => TIMESTAMP {_ts(older_than)})"))

    def _keep_batch_markers(self, db: str, table: str, handle: Any) -> None:
        """The newest batch of each app along the current snapshot's ancestry as the table
        property ``cdc.batch.<app>``, where it is newer than the property's."""
        found: dict[str, int] = {}
        for snap in ancestry(handle):
            props = snap.summary.additional_properties if snap.summary else {}
            if "cdc.app" in props and "cdc.batch" in props and props["cdc.app"] not in found:
                found[props["cdc.app"]] = int(props["cdc.batch"])
        newer = {batch_property(a): str(b) for a, b in found.items()
                 if int(handle.properties.get(batch_property(a), -1)) < b}
        if newer:
            self.run_sql("keeping the batch markers", db, table, f"ALTER TABLE {self.spark_name(db, table)} SET "
                      "TBLPROPERTIES (" + ", ".join(f"{sql_literal(k)} = {sql_literal(v)}"
                                                   for k, v in newer.items()) + ")")

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """:meth:`expire` at the retention, with the sink's ``max_snapshots``."""
        return self.expire(db, table, retention_hours, self.format.max_snapshots)


def _ts(when: datetime) -> str:
    """A UTC time as a Spark SQL timestamp literal's text."""
    return "'" + when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"
