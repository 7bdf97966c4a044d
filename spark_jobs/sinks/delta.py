"""The Delta Lake sink (``sinks.delta``): one Delta table per source table (per route target
for routed shards) at ``<path>/<db>/<table>``; its ``driver`` engine (the default) here,
written with delta-rs (the ``deltalake`` package, no JVM), a MERGE by position per table per
micro-batch on the driver, copy-on-write; the ``spark`` engine is
:class:`~spark_jobs.sinks.delta_spark.DeltaSparkSink`.

Exactly once: each commit carries the merge job's application transaction (app id, version
= the batch id: :mod:`spark_jobs.sinks.lake_base`), so a replayed batch finds
``transaction_version(app) >= batch`` and commits nothing.  ``change_data_feed`` turns on
Delta's change data feed (``table_changes`` / ``load_cdf``).  The key columns and the
position carry file statistics (``delta.dataSkippingStatsColumns``), which the MERGE's file
pruning and :meth:`DeltaSink.applied_positions` read.

A column whose type changes so that the table's type cannot hold the new values is the one
case that writes the whole table again: one overwrite commit, the old values cast where they
fit and null where not (the producer snapshots a table after DDL that retypes a column, and
refills them).  Columns a newer schema adds are added.  Columns are never dropped.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.batch import check_position
from spark_jobs.sinks.delta_maintenance import LOG_RETENTION, DeltaMaintenance, retention_interval
from spark_jobs.sinks.lake_base import OWNER_PROPERTY, LakeSinkBase, evolved_schema
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.registry import register_sink

log = logging.getLogger(__name__)

__all__ = ["DeltaSink", "quote_delta", "literal", "fits_delta_column", "LOG_RETENTION", "retention_interval"]


def quote_delta(name: str) -> str:
    """A column name as a delta-rs (DataFusion) SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: Any) -> str:
    """A string value as a SQL literal."""
    return "'" + str(value).replace("'", "''") + "'"


def fits_delta_column(table_type: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether values of ``wanted`` fit the table's column type without loss (the changes are
    then cast into it; no table change)."""
    if table_type == wanted:
        return True
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if table_type in ints and wanted in ints:
        return ints.index(wanted) <= ints.index(table_type)
    if pa.types.is_floating(table_type) and pa.types.is_floating(wanted):
        return wanted.bit_width <= table_type.bit_width
    if pa.types.is_decimal(table_type) and pa.types.is_decimal(wanted):
        return wanted.scale <= table_type.scale and \
            wanted.precision - wanted.scale <= table_type.precision - table_type.scale
    if pa.types.is_timestamp(table_type) and pa.types.is_timestamp(wanted):
        return table_type.tz == wanted.tz
    return pa.types.is_string(table_type) and pa.types.is_string(wanted)


def _retyped(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``batches`` in ``schema``'s columns and types (DataFusion's string and binary views as the
    table's types; a column a batch lacks, or a value that does not fit a new type: null)."""
    for b in batches:
        cols = []
        for f in schema:
            col = b.column(f.name) if f.name in b.schema.names else pa.nulls(b.num_rows, f.type)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    col = pa.nulls(b.num_rows, f.type)
            cols.append(col)
        yield pa.RecordBatch.from_arrays(cols, schema=schema)


def _query(handle: Any, sql: str) -> pa.RecordBatchReader:
    """A SQL query over the table (as ``t``) by delta-rs's DataFusion reader, deletion vectors applied."""
    from deltalake import QueryBuilder
    return pa.RecordBatchReader.from_stream(QueryBuilder().register("t", handle).execute(sql))


def _delta_errors() -> tuple[type[Exception], type[Exception], type[Exception]]:
    from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
    return CommitFailedError, DeltaError, TableNotFoundError


@register_sink("delta")
class DeltaSink(DeltaMaintenance, LakeSinkBase):
    """Source tables as Delta tables under ``path`` (see the module docstring)."""

    FORMAT = "Delta"

    @classmethod
    def from_config(cls, section: Any) -> "DeltaSink":
        """The sink of ``sinks.delta``."""
        return cls(section.path, storage_options={k: v.get_secret_value() if hasattr(v, "get_secret_value") else v
                                                  for k, v in (section.storage_options or {}).items()},
                   staging=section.staging_path or None, soft_delete=section.soft_delete,
                   change_data_feed=section.change_data_feed, compact_every=section.compact_every,
                   compact_min_files=section.compact_min_files, retention_hours=section.retention_hours,
                   target_file_size=section.target_file_size)

    def __init__(self, path: str, *, storage_options: dict[str, str] | None = None, staging: str | None = None,
                 soft_delete: bool = False, change_data_feed: bool = False, compact_every: int = 0,
                 compact_min_files: int = 0, retention_hours: int | None = None,
                 target_file_size: int = 128 * 1024 * 1024) -> None:
        if not path:
            raise SinkError("sinks.delta.path must be set")
        self.path = str(path).rstrip("/")
        self.storage_options = dict(storage_options or {})
        super().__init__(staging or f"{self.path}/_cdc_staging", soft_delete=soft_delete, compact_every=compact_every,
                         compact_min_files=compact_min_files, retention_hours=retention_hours)
        self.change_data_feed = change_data_feed
        self.target_file_size = target_file_size

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_layouts"] = {}
        return state

    # -- where ---------------------------------------------------------------------------------
    def table_uri(self, db: str, table: str) -> str:
        if not db or not table or "/" in db + table or db in (".", "..") or table in (".", ".."):
            raise SinkError(f"{db!r}.{table!r} cannot name a Delta table directory")
        return f"{self.path}/{db}/{table}"

    def where(self, db: str, table: str) -> str:
        return self.table_uri(db, table)

    def read_batches(self, db: str, table: str) -> Iterator[pa.RecordBatch] | None:
        """The table's rows in Arrow batches (None: no such table), deletion vectors applied
        (the ``spark`` engine's: delta-rs's DataFusion reader; ``to_pyarrow_dataset`` refuses them)."""
        handle = self.load_table(db, table)
        return None if handle is None else _retyped(_query(handle, "SELECT * FROM t"), self._schema(handle))

    def duckdb_scan(self, db: str, table: str) -> str:
        """DuckDB's table function reading the table (its delta extension)."""
        return "delta_scan(" + literal(self.table_uri(db, table)) + ")"

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        try:
            return pafs.FileSystem.from_uri(self.path)
        except (pa.ArrowInvalid, ValueError):
            return pafs.LocalFileSystem(), self.path

    # -- the table ------------------------------------------------------------------------------
    def load_table(self, db: str, table: str) -> Any:
        from deltalake import DeltaTable
        _, delta_error, not_found = _delta_errors()
        uri = self.table_uri(db, table)
        try:
            return DeltaTable(uri, storage_options=self.storage_options or None)
        except not_found:
            return None
        except (delta_error, OSError) as exc:
            raise SinkUnavailable(f"cannot open the Delta table of {db}.{table} at {uri}: {exc}") from exc

    def _owner(self, handle: Any) -> str | None:
        return handle.metadata().configuration.get(OWNER_PROPERTY)

    def _committed_batch(self, handle: Any, app: str) -> int | None:
        return handle.transaction_version(app)

    def _schema(self, handle: Any) -> pa.Schema:
        return pa.schema(handle.schema().to_arrow())

    def _configuration(self, key: list[str], owner: str) -> dict[str, str]:
        conf = {OWNER_PROPERTY: owner or "cdc-merge",
                "delta.dataSkippingStatsColumns": ",".join(key + [POSITION_COLUMN])}
        if self.change_data_feed:
            conf["delta.enableChangeDataFeed"] = "true"
        return conf

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        from deltalake import DeltaTable
        _, delta_error, _ = _delta_errors()
        uri = self.table_uri(db, table)
        try:
            return DeltaTable.create(uri, schema, mode="error", name=f"{db}.{table}",
                                     configuration=self._configuration(key, owner),
                                     storage_options=self.storage_options or None, raise_if_key_not_exists=False)
        except delta_error as exc:
            if "already exists" in str(exc).lower():  # another writer made it first: load it and check it
                raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
            raise SinkUnavailable(f"cannot create the Delta table of {db}.{table} at {uri}: {exc}") from exc
        except OSError as exc:
            raise SinkUnavailable(f"cannot create the Delta table of {db}.{table} at {uri}: {exc} (is "
                                  "sinks.delta.path writable by the merge job?)") from exc

    def _evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        current = self._schema(handle)
        added, retyped = evolved_schema(current, schema, fits_delta_column)
        if retyped:
            return self._rewrite(handle, db, table, current, schema, retyped)
        if added:
            from deltalake import Schema as DeltaSchema
            fields = DeltaSchema.from_arrow(pa.schema(added)).fields
            handle.alter.add_columns(fields)
            log.info("Delta table of %s.%s: columns added: %s", db, table, ", ".join(f.name for f in added))
        return handle

    def _rewrite(self, handle: Any, db: str, table: str, current: pa.Schema, wanted: pa.Schema,
                 retyped: list[str]) -> Any:
        """The table written again with ``retyped`` columns of ``wanted``'s types, in one commit."""
        from deltalake import write_deltalake
        types = {f.name: f.type for f in wanted}
        schema = pa.schema([pa.field(f.name, types.get(f.name, f.type), nullable=True) for f in current] +
                           [f for f in wanted if f.name not in current.names])
        log.warning("Delta table of %s.%s: column(s) %s changed type beyond what the table holds; writing the table "
                    "again with the new type(s) (values that do not fit are null until the snapshot refills them)",
                    db, table, ", ".join(retyped))

        old = _query(handle, "SELECT * FROM t")  # (opened here: delta-rs cannot open it while it writes; streamed)
        write_deltalake(handle, pa.RecordBatchReader.from_batches(schema, _retyped(old, schema)), mode="overwrite",
                        schema_mode="overwrite", storage_options=self.storage_options or None)
        return self.load_table(db, table)

    def _merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
               app: str, meta: dict[str, str]) -> tuple[int, int]:
        from deltalake import CommitProperties, Transaction
        conflict, delta_error, _ = _delta_errors()
        q = quote_delta
        columns = [n for n in changes.column_names if n != OP_COLUMN]
        every = {q(c): f"s.{q(c)}" for c in columns}
        is_delete = f"s.{q(OP_COLUMN)} = 'd'"
        newer = f"s.{q(POSITION_COLUMN)} > t.{q(POSITION_COLUMN)}"
        merger = handle.merge(
            changes, " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key), source_alias="s", target_alias="t",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app, version=batch_id)],
                                               custom_metadata={"cdc.app": app, "cdc.batch": str(batch_id), **meta}))
        if self.soft_delete:
            flag = q(DELETED_COLUMN)
            merger = (merger
                      .when_matched_update({q(POSITION_COLUMN): f"s.{q(POSITION_COLUMN)}", flag: "true"},
                                           predicate=f"{is_delete} AND {newer}")
                      .when_matched_update({**every, flag: "false"}, predicate=f"NOT {is_delete} AND {newer}")
                      .when_not_matched_insert({**{q(c): f"s.{q(c)}" for c in key + [POSITION_COLUMN]}, flag: "true"},
                                               predicate=is_delete)
                      .when_not_matched_insert({**every, flag: "false"}, predicate=f"NOT {is_delete}"))
        else:
            merger = (merger
                      .when_matched_delete(predicate=f"{is_delete} AND {newer}")
                      .when_matched_update(every, predicate=f"NOT {is_delete} AND {newer}")
                      .when_not_matched_insert(every, predicate=f"NOT {is_delete}"))
        try:
            m = merger.execute()
        except conflict as exc:
            raise LakeCommitConflict(str(exc)) from exc
        except delta_error as exc:
            raise SinkError(f"Delta table of {db}.{table}: the MERGE of batch {batch_id} failed: {exc}") from exc
        except OSError as exc:
            raise SinkUnavailable(f"Delta table of {db}.{table}: the MERGE of batch {batch_id} failed: {exc}") from exc
        changed = int(m.get("num_target_rows_inserted", 0)) + int(m.get("num_target_rows_updated", 0))
        if self.soft_delete:
            deletes = int(pc.sum(pc.equal(changes.column(OP_COLUMN), "d")).as_py() or 0)
            deleted = min(deletes, changed)
            return changed - deleted, deleted
        return changed, int(m.get("num_target_rows_deleted", 0))

    # -- the driver's table operations --------------------------------------------------------------
    def _predicate(self, position: str, where: dict | None) -> str:
        check_position(position)
        conds = [f"{quote_delta(POSITION_COLUMN)} < {literal(position)}"]
        conds += [f"{quote_delta(c)} = {literal(v)}" for c, v in (where or {}).items()]
        return " AND ".join(conds)

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        predicate = self._predicate(position, where)
        if self.soft_delete:
            m = handle.update({quote_delta(DELETED_COLUMN): "true", quote_delta(POSITION_COLUMN): literal(position)},
                              predicate=f"{predicate} AND NOT coalesce({quote_delta(DELETED_COLUMN)}, false)")
            return int(m.get("num_updated_rows", 0))
        return int(handle.delete(predicate).get("num_deleted_rows", 0))

    def _delete_rows_below(self, db: str, table: str, position: str) -> None:
        handle = self.load_table(db, table)
        if handle is not None:
            handle.delete(self._predicate(position, None))

    def _has_rows(self, db: str, table: str) -> bool:
        handle = self.load_table(db, table)
        return handle is not None and handle.count() > 0

    def _rows_above(self, db: str, table: str, position: str) -> bool:
        handle = self.load_table(db, table)
        return handle is not None and _query(handle, f"SELECT 1 FROM t WHERE {quote_delta(POSITION_COLUMN)} > "
                                                      f"{literal(position)} LIMIT 1").read_all().num_rows > 0

    def _remove(self, db: str, table: str) -> None:
        fs, root = self._fs()
        fs.delete_dir(f"{root}/{db}/{table}")

    def _move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        fs, root = self._fs()
        fs.create_dir(f"{root}/{to_db}", recursive=True)
        fs.move(f"{root}/{db}/{table}", f"{root}/{to_db}/{to_table}")

    def tables(self) -> list[tuple[str, str]]:
        fs, root = self._fs()
        found = []
        for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True, recursive=False)):
            if info.type != pafs.FileType.Directory or info.base_name.startswith("_"):
                continue
            for t in fs.get_file_info(pafs.FileSelector(info.path, allow_not_found=True)):
                log_dir = fs.get_file_info(f"{t.path}/_delta_log")
                if t.type == pafs.FileType.Directory and log_dir.type == pafs.FileType.Directory:
                    found.append((info.base_name, t.base_name))
        return sorted(found)

    def applied_positions(self) -> dict[tuple[str, str], str]:
        out = {}
        for db, table in self.tables():
            handle = self.load_table(db, table)
            if handle is None:
                continue
            actions = pa.table(handle.get_add_actions(flatten=True))
            col = f"max.{POSITION_COLUMN}"
            if actions.num_rows and col in actions.column_names:
                top = pc.max(actions.column(col)).as_py()
                if top:
                    out[(db, table)] = top
        return out
