"""What a lake *format* gives a :class:`~spark_jobs.sinks.lake_sink.LakeSink`: where its tables
are and what they hold, read with the format's Python library (delta-rs, pyiceberg), whichever
engine writes them.

A lake sink is a format and an engine (:mod:`spark_jobs.sinks.lake_engine`) passed in:
:class:`~spark_jobs.sinks.delta_format.DeltaFormat` or
:class:`~spark_jobs.sinks.iceberg_format.IcebergFormat`, written by the ``driver`` engine of
the format (delta-rs, pyiceberg) or its ``spark`` engine (delta-spark, Iceberg's Spark runtime).
The engines read a table through its format too (its handle, schema, owner, the batch it
holds, its key statistics).
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar, Iterator

import pyarrow as pa

__all__ = ["LakeFormat", "EMPTY_TABLE", "OWNER_PROPERTY", "BATCHES_HELD", "batches_held"]

log = logging.getLogger(__name__)

#: The table property naming the pipeline that writes a lake table.
OWNER_PROPERTY = "cdc.owner"
#: A key column's upper bound in a table without rows (:meth:`LakeFormat.key_upper_bound`).
EMPTY_TABLE = object()


class LakeFormat:
    """Where a format's tables are and what they hold (the reads of both engines)."""

    #: The format's name, in messages.
    NAME: ClassVar[str] = "lake"
    #: Whether the format has 16-bit integers (Iceberg has not).
    SMALL_INTS: ClassVar[bool] = True
    #: The format's tables' data files at the size compaction writes (bytes).
    target_file_size: int

    def default_staging(self) -> str:
        """Where the tasks stage a batch's parts when the sink's ``staging_path`` is not set."""
        raise NotImplementedError

    def where(self, db: str, table: str) -> str:
        """Where the table of ``db.table`` is (a path or a catalog identifier), in messages."""
        raise NotImplementedError

    def load_table(self, db: str, table: str) -> Any:
        """The format's handle of the table of ``db.table`` (a ``DeltaTable``, a pyiceberg
        ``Table``), or None when there is none yet."""
        raise NotImplementedError

    def owner(self, handle: Any) -> str | None:
        """The pipeline that owns the table (its ``cdc.owner`` property), None: not the merge job's."""
        raise NotImplementedError

    def committed_batch(self, handle: Any, app: str) -> int | None:
        """The last batch ``app`` committed to the table (None: none)."""
        raise NotImplementedError

    def schema(self, handle: Any) -> pa.Schema:
        """The table's Arrow schema."""
        raise NotImplementedError

    def key_upper_bound(self, handle: Any, column: str) -> Any:
        """An upper bound of the integer column ``column`` in the table's live files (from their
        statistics, no data read), :data:`EMPTY_TABLE` for a table
        without rows, None if unknown."""
        return None

    def tables(self) -> list[tuple[str, str]]:
        """``(db, table)`` of every lake table of the sink."""
        raise NotImplementedError

    def read_batches(self, db: str, table: str) -> Iterator[pa.RecordBatch] | None:
        """The table's rows in Arrow batches, deletes applied (None: no such table)."""
        raise NotImplementedError

    def duckdb_scan(self, db: str, table: str) -> str:
        """DuckDB's table function reading the table."""
        raise NotImplementedError

    def applied_positions(self) -> dict[tuple[str, str], str]:
        """Per table, the highest position it holds."""
        raise NotImplementedError

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (those the format still keeps, oldest
        first), the ``(app, batch)`` of every micro-batch it holds."""
        raise NotImplementedError

    def small_file_count(self, db: str, table: str) -> int:
        """The table's data files below half of ``target_file_size``, which compaction merges (0: no table)."""
        raise NotImplementedError

    def file_count(self, db: str, table: str) -> int:
        """Data files in the table's latest version."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Make what the format's tables share (Iceberg: its catalog) before the queries start."""

    def close(self) -> None:
        """Let go of the format's connections (made again on next use)."""


#: A commit's metadata naming the merge queries' batches it holds (the lake committer's
#: commits: JSON ``{app: [first batch, last batch]}``), beside ``cdc.app``/``cdc.batch``.
BATCHES_HELD = "cdc.batches"


def batches_held(meta: dict) -> list[tuple[str, int]]:
    """``(app, batch)`` of every micro-batch a commit holds, from its metadata: the batches of
    ``cdc.batches`` (a commit of the lake committer), else its ``cdc.app`` and ``cdc.batch``."""
    if BATCHES_HELD in meta:
        try:
            spans = json.loads(meta[BATCHES_HELD])
            return [(str(app), b) for app, (lo, hi) in sorted(spans.items()) for b in range(int(lo), int(hi) + 1)]
        except (ValueError, TypeError) as exc:
            log.warning("a lake commit's %s cannot be read (%s): counted by its cdc.batch", BATCHES_HELD, exc)
    if "cdc.batch" not in meta:
        return []
    return [(str(meta.get("cdc.app", "")), int(meta["cdc.batch"]))]
