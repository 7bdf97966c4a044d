"""What a lake *engine* gives a :class:`~spark_jobs.sinks.lake_sink.LakeSink`: every write to
its format's tables (a table made or evolved, a batch's staged parts merged in one commit,
the driver's table operations, compaction and old versions removed), and the ``driver``
engine's commit (:class:`DriverEngine`).

Two engines per format (``sinks.<format>.engine``): ``driver``, the format's Python library
on the driver (:class:`~spark_jobs.sinks.delta_driver.DeltaDriverEngine`, delta-rs;
:class:`~spark_jobs.sinks.iceberg_driver.IcebergDriverEngine`, pyiceberg), and ``spark``,
Spark's executors (:class:`~spark_jobs.sinks.delta_spark.DeltaSparkEngine`,
:class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkEngine`, over
:class:`~spark_jobs.sinks.lake_spark.SparkEngine`).  An engine is given its format (the
tables' place and reads) and the sink's staging area (the tasks' parts).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pyarrow as pa

from common.errors import UnsupportedType
from spark_jobs.sinks.batch import ApplyResult
from spark_jobs.sinks.lake_format import LakeFormat
from spark_jobs.sinks.lake_stage import StagingArea, reduce_changes
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN, lake_schema_of

__all__ = ["LakeEngine", "DriverEngine", "evolved_schema", "conformed"]


class LakeEngine:
    """The writes to a format's tables (see the module docstring)."""

    def __init__(self, fmt: LakeFormat, staging: StagingArea, *, soft_delete: bool = False) -> None:
        self.format = fmt
        self.staging = staging
        self.soft_delete = soft_delete

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        """A new, empty table of ``db.table`` with the Arrow ``schema``, keyed by ``key`` and owned
        by ``owner``; its handle (a table made meanwhile by another writer:
        :class:`~spark_jobs.errors.LakeCommitConflict`)."""
        raise NotImplementedError

    def apply(self, handle: Any, db: str, table: str, staged: Sequence[dict], key: list[str], batch_id: int,
              app: str, owner: str, given: int, meta: dict[str, str]) -> ApplyResult:
        """The batch's staged parts merged into the table (``handle``: None when there is none
        yet) by position in one commit tagged with ``app`` and ``batch_id`` (and ``meta``)."""
        raise NotImplementedError

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        """Delete (or, with ``soft_delete``, flag) the rows below ``position`` (and of ``where``'s values); how many."""
        raise NotImplementedError

    def delete_rows_below(self, db: str, table: str, position: str) -> None:
        """Remove the table's rows below ``position`` (whatever ``soft_delete`` says)."""
        raise NotImplementedError

    def has_rows(self, db: str, table: str) -> bool:
        """Whether the table holds a row."""
        raise NotImplementedError

    def rows_above(self, db: str, table: str, position: str) -> bool:
        """Whether the table holds a row at a position above ``position``."""
        raise NotImplementedError

    def remove(self, db: str, table: str) -> None:
        """Drop the table and its files."""
        raise NotImplementedError

    def move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        """The table of ``db.table`` becomes that of ``to_db.to_table``."""
        raise NotImplementedError

    def compact(self, db: str, table: str) -> dict:
        """Compact the table's small files; what was done."""
        raise NotImplementedError

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """Remove what only versions older than ``retention_hours`` need (files, snapshots, log
        entries): every version committed since stays readable; what was done."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Made ready before the queries start (nothing by default)."""

    def in_commit_thread(self) -> None:
        """Called by the lake committer's thread as it starts (the ``spark`` engine: its Spark
        jobs in the ``lake`` pool of the fair scheduler)."""


class DriverEngine(LakeEngine):
    """The ``driver`` engine's commit: the batch's parts read and reduced on the driver, the
    table made or evolved, the changes merged by the format's library (:meth:`merge`)."""

    def apply(self, handle: Any, db: str, table: str, staged: Sequence[dict], key: list[str], batch_id: int,
              app: str, owner: str, given: int, meta: dict[str, str]) -> ApplyResult:
        changes = reduce_changes(self.staging.read(staged), key)
        superseded = given - changes.num_rows
        target = lake_schema_of(changes.schema, self.soft_delete)
        if handle is None:
            handle = self.create_table(db, table, target, key, owner)
        else:
            handle = self.evolve(handle, db, table, target, key)
        upserted, deleted = self.merge(handle, db, table, conformed(self.format.schema(handle), changes), key,
                                       batch_id, app, meta)
        skipped = max(0, changes.num_rows - upserted - deleted)  # older than the table's rows
        return ApplyResult(upserted=upserted, deleted=deleted, skipped=skipped, superseded=superseded)

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        """The table with ``schema``'s columns (added, types widened, or the table written
        again); its handle."""
        raise NotImplementedError

    def merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
              app: str, meta: dict[str, str]) -> tuple[int, int]:
        """Merge the reduced changes (the table's columns and the op) by position in one commit
        tagged with ``app`` and ``batch_id`` (and ``meta``); ``(rows upserted, rows deleted)``."""
        raise NotImplementedError


def conformed(schema: pa.Schema, changes: pa.Table) -> pa.Table:
    """The changes with the table's columns (``schema``), in its order and types (a column the
    changes lack is null: records written before it was added), and the op."""
    arrays, fields = [], []
    for f in schema:
        if f.name == DELETED_COLUMN:
            continue
        if f.name in changes.column_names:
            col = changes.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise UnsupportedType(f"column {f.name!r}: the changes' {col.type} does not fit the "
                                          f"table's {f.type}: {exc}") from exc
        else:
            col = pa.nulls(changes.num_rows, f.type)
        arrays.append(col)
        fields.append(pa.field(f.name, f.type, nullable=True))
    arrays.append(changes.column(OP_COLUMN))
    fields.append(pa.field(OP_COLUMN, pa.string(), nullable=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def evolved_schema(current: pa.Schema, wanted: pa.Schema,
                   widens: Callable[[pa.DataType, pa.DataType], bool]) -> tuple[list[pa.Field], list[str]]:
    """What ``wanted`` (a newer schema's columns) changes in ``current``: the fields to add
    (at the end, before nothing: lake columns are never dropped) and the names of columns
    whose type changed in a way ``widens`` does not allow in place."""
    have = {f.name: f for f in current}
    added = [f for f in wanted if f.name not in have]
    retyped = [f.name for f in wanted if f.name in have and have[f.name].type != f.type
               and not widens(have[f.name].type, f.type)]
    return added, retyped
