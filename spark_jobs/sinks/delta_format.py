"""The Delta Lake format (``sinks.delta``): one Delta table per source table (per route target
for routed shards) at ``<path>/<db>/<table>``, read with delta-rs (the ``deltalake`` package,
no JVM) whichever engine writes it (:mod:`spark_jobs.sinks.delta_driver`: delta-rs,
:mod:`spark_jobs.sinks.delta_spark`: delta-spark): the table's log (owner, schema, the
application transaction of each batch, the files and their statistics, the job's commits)
and its rows (DataFusion's reader, deletion vectors applied).

The key columns and the position carry file statistics (``delta.dataSkippingStatsColumns``,
:meth:`DeltaFormat.configuration`), which the MERGE's file pruning,
:meth:`DeltaFormat.key_upper_bound` and :meth:`DeltaFormat.applied_positions` read.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.lake_format import EMPTY_TABLE, OWNER_PROPERTY, LakeFormat, batches_held
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["DeltaFormat", "quote_delta", "literal", "fits_delta_column", "query", "retyped", "delta_errors",
           "LOG_RETENTION", "retention_interval"]

#: The table property that says how long the log keeps its entries.
LOG_RETENTION = "delta.logRetentionDuration"


def retention_interval(hours: float) -> str:
    """A retention of ``hours`` as a Delta table property's interval (whole minutes, rounded
    up: ``0.5`` is 30 minutes, not 0)."""
    return f"interval {math.ceil(hours * 60)} minutes"


def _user_metadata(entry: dict) -> dict:
    """A commit's ``userMetadata`` (delta-spark's commits carry the app and batch there, as JSON)."""
    try:
        meta = json.loads(entry.get("userMetadata") or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


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


def retyped(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
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


def query(handle: Any, sql: str) -> pa.RecordBatchReader:
    """A SQL query over the table (as ``t``) by delta-rs's DataFusion reader, deletion vectors applied."""
    from deltalake import QueryBuilder
    return pa.RecordBatchReader.from_stream(QueryBuilder().register("t", handle).execute(sql))


def delta_errors() -> tuple[type[Exception], type[Exception], type[Exception]]:
    """delta-rs's errors of a lost commit race, of anything else, and of a missing table."""
    from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
    return CommitFailedError, DeltaError, TableNotFoundError


class DeltaFormat(LakeFormat):
    """Delta tables under ``path`` (see the module docstring)."""

    NAME = "Delta"

    def __init__(self, path: str, *, storage_options: dict[str, str] | None = None, change_data_feed: bool = False,
                 target_file_size: int = 128 * 1024 * 1024) -> None:
        if not path:
            raise SinkError("sinks.delta.path must be set")
        self.path = str(path).rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.change_data_feed = change_data_feed
        self.target_file_size = target_file_size

    def default_staging(self) -> str:
        return f"{self.path}/_cdc_staging"

    # -- where ---------------------------------------------------------------------------------
    def table_uri(self, db: str, table: str) -> str:
        """The table's directory (a path or a URI)."""
        if not db or not table or "/" in db + table or db in (".", "..") or table in (".", ".."):
            raise SinkError(f"{db!r}.{table!r} cannot name a Delta table directory")
        return f"{self.path}/{db}/{table}"

    def where(self, db: str, table: str) -> str:
        return self.table_uri(db, table)

    def fs(self) -> tuple[pafs.FileSystem, str]:
        """The file system of ``path`` and the path in it."""
        try:
            return pafs.FileSystem.from_uri(self.path)
        except (pa.ArrowInvalid, ValueError):
            return pafs.LocalFileSystem(), self.path

    def remove_dir(self, db: str, table: str) -> None:
        """Delete the table's directory (a DROP: both engines)."""
        fs, root = self.fs()
        fs.delete_dir(f"{root}/{db}/{table}")

    def move_dir(self, db: str, table: str, to_db: str, to_table: str) -> None:
        """Move the table's directory to that of ``to_db.to_table`` (a RENAME: both engines)."""
        fs, root = self.fs()
        fs.create_dir(f"{root}/{to_db}", recursive=True)
        fs.move(f"{root}/{db}/{table}", f"{root}/{to_db}/{to_table}")

    def configuration(self, key: list[str], owner: str) -> dict[str, str]:
        """The properties of a new table keyed by ``key``, owned by ``owner``."""
        conf = {OWNER_PROPERTY: owner or "cdc-merge",
                "delta.dataSkippingStatsColumns": ",".join(key + [POSITION_COLUMN])}
        if self.change_data_feed:
            conf["delta.enableChangeDataFeed"] = "true"
        return conf

    # -- the table ------------------------------------------------------------------------------
    def load_table(self, db: str, table: str) -> Any:
        from deltalake import DeltaTable
        _, delta_error, not_found = delta_errors()
        uri = self.table_uri(db, table)
        try:
            return DeltaTable(uri, storage_options=self.storage_options or None)
        except not_found:
            return None
        except (delta_error, OSError) as exc:
            raise SinkUnavailable(f"cannot open the Delta table of {db}.{table} at {uri}: {exc}") from exc

    def owner(self, handle: Any) -> str | None:
        return handle.metadata().configuration.get(OWNER_PROPERTY)

    def committed_batch(self, handle: Any, app: str) -> int | None:
        return handle.transaction_version(app)

    def schema(self, handle: Any) -> pa.Schema:
        return pa.schema(handle.schema().to_arrow())

    def key_upper_bound(self, handle: Any, column: str) -> Any:
        actions = pa.table(handle.get_add_actions(flatten=True))
        if "num_records" in actions.column_names:
            actions = actions.filter(pc.greater(pc.fill_null(actions.column("num_records"), 1), 0))
        if actions.num_rows == 0:
            return EMPTY_TABLE
        col = f"max.{column}"
        if col not in actions.column_names or actions.column(col).null_count:
            return None  # a file without statistics of the column
        return pc.max(actions.column(col)).as_py()

    def read_batches(self, db: str, table: str) -> Iterator[pa.RecordBatch] | None:
        """The table's rows in Arrow batches (None: no such table), deletion vectors applied
        (delta-rs's DataFusion reader; ``to_pyarrow_dataset`` refuses them)."""
        handle = self.load_table(db, table)
        return None if handle is None else retyped(query(handle, "SELECT * FROM t"), self.schema(handle))

    def duckdb_scan(self, db: str, table: str) -> str:
        """DuckDB's table function reading the table (its delta extension)."""
        return "delta_scan(" + literal(self.table_uri(db, table)) + ")"

    def tables(self) -> list[tuple[str, str]]:
        fs, root = self.fs()
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

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (within the log's retention, oldest
        first), the ``(app, batch)`` of every batch it holds
        (:func:`~spark_jobs.sinks.lake_format.batches_held`)."""
        handle = self.load_table(db, table)
        if handle is None:
            return []
        out = []
        for entry in reversed(handle.history()):
            meta = entry if "cdc.batch" in entry else _user_metadata(entry)  # (delta-rs's commits; delta-spark's)
            if "cdc.batch" in meta:
                out.append(batches_held(meta))
        return out

    def small_file_count(self, db: str, table: str) -> int:
        """Data files of the latest version below half of ``target_file_size`` (two of them always
        make one file of OPTIMIZE's, which bin-packs files up to the target; counting every file
        below the target would count what it leaves, a table of files just below it, each time)."""
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        sizes = pa.table(handle.get_add_actions(flatten=True)).column("size_bytes")
        return int(pc.sum(pc.less(sizes, self.target_file_size // 2)).as_py() or 0)

    def file_count(self, db: str, table: str) -> int:
        handle = self.load_table(db, table)
        return 0 if handle is None else len(handle.file_uris())

    def files_on_disk(self, db: str, table: str) -> int:
        """Data files under the table's directory, whichever version holds them (what VACUUM prunes)."""
        fs, root = self.fs()
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{db}/{table}", allow_not_found=True, recursive=True))
        return sum(1 for i in infos if i.type == pafs.FileType.File and "/_delta_log/" not in i.path
                   and not i.base_name.startswith("."))  # (Hadoop's hidden .crc beside each local file)

    def deletion_vectors(self, db: str, table: str) -> int:
        """Data files of the latest version that carry a deletion vector (rows marked deleted)."""
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        return len(pa.RecordBatchReader.from_stream(handle.deletion_vectors()).read_all())
