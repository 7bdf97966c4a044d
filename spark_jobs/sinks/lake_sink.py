"""What the lake sinks (Delta Lake, Iceberg) share: the tasks' staged parts, the frame of the
driver's commit, its exactly-once check and the tables' ownership.

A micro-batch reaches a lake table in one commit (:meth:`LakeSink.commit`):

1. the merge tasks stage their partitions' changes (:meth:`LakeSink.stage`: one Parquet
   file per run, per key the change with the highest position, nothing visible);
2. once every task of the batch is done, the engine (:mod:`spark_jobs.sinks.lake_engine`)
   reduces the table's parts to one change per key (the ``driver`` engine on the driver,
   :func:`~spark_jobs.sinks.lake_stage.reduce_changes`; the ``spark`` engine in the executors)
   and merges them into the table by position in one commit: a row is replaced only by a
   change with a higher position; a delete removes the row (or, with ``soft_delete``, flags it
   ``__cdc_deleted`` and keeps the delete's position);
3. that commit carries the job's *application id* and the batch id (Delta: the commit's
   application transaction, app id and version; Iceberg: the snapshot's summary, and with the
   ``driver`` engine a table property written in the same metadata commit), so a batch
   replayed after a crash finds itself committed and commits nothing (the format reads it:
   :meth:`~spark_jobs.sinks.lake_format.LakeFormat.committed_batch`); the table's latest
   version never holds half a batch.

The application id names the job's checkpoint (:func:`app_id`): a merge job started on a new
checkpoint (lost Kafka history, ``cdc stack up`` after the embedded broker restarted) counts
its batches from 0 again under a new id.  The *owner* (``cdc-merge:<kafka.topic_prefix>``) is
written into each table the job creates; a table owned by another pipeline, or made by
someone else, is refused with a message naming it (two pipelines must not share tables).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.batch import ApplyResult, check_position
from spark_jobs.sinks.interface import BatchSink
from spark_jobs.sinks.lake_engine import LakeEngine
from spark_jobs.sinks.lake_format import BATCHES_HELD, OWNER_PROPERTY, LakeFormat, batches_held
from spark_jobs.sinks.lake_stage import reduce_changes
from spark_jobs.sinks.lake_types import changes_table
from spark_jobs.sinks.layout import TableLayout, cached_layout

log = logging.getLogger(__name__)

#: How often a commit that lost a race with another writer is tried again.
COMMIT_ATTEMPTS = 5


def release_unused_memory() -> None:
    """Give what pyarrow's memory pool keeps of a commit's freed memory back to the system.
    The default pool (mimalloc) keeps freed pages for reuse: after each copy-on-write commit
    of the ``driver`` engine it held about as much as the commit's largest working set so far
    (the files it rewrote, growing with the table), 220-240 MB of private memory at 410,000
    rows (docs/lake.md, "Memory")."""
    pa.default_memory_pool().release_unused()


def app_id(owner: str, source_name: str, query_id: str) -> str:
    """The application id of a merge job's commits: its pipeline, its source and its
    checkpoint's query id (Spark keeps it in the checkpoint's ``metadata``)."""
    return f"{owner}/{source_name}/{query_id}"


class LakeSink(BatchSink):
    """A :class:`~spark_jobs.sinks.interface.BatchSink` of lake tables: a format
    (:class:`~spark_jobs.sinks.lake_format.LakeFormat`: where the tables are, what they hold)
    and an engine (:class:`~spark_jobs.sinks.lake_engine.LakeEngine`: what writes them) passed
    in; this class is the commit's frame both share (the tasks' staged parts, the exactly-once
    check, the owner, a lost race tried again, maintenance on its schedule, DROP and RENAME).
    :class:`~spark_jobs.sinks.delta.DeltaSink` and :class:`~spark_jobs.sinks.iceberg.IcebergSink`
    build it from their sections."""

    def __init__(self, fmt: LakeFormat, engine: LakeEngine, *, compact_every: int = 0, compact_min_files: int = 0,
                 retention_hours: float | None = None) -> None:
        self.format = fmt
        self.engine = engine
        self.staging = engine.staging
        self.compact_every = compact_every
        self.compact_min_files = compact_min_files
        self.retention_hours = retention_hours
        self._layouts: dict[tuple[str, tuple], TableLayout] = {}
        self._commits: dict[tuple[str, str], int] = {}  # per table, since the sink was made
        #: Commits that lost a race with another writer and were tried again, since the sink was made.
        self.lost_races = 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_layouts": {}}

    @property
    def FORMAT(self) -> str:  # noqa: N802 - the format's name, as the sinks' messages say it
        """The format's name, in messages (``Delta``, ``Iceberg``)."""
        return self.format.NAME

    @property
    def soft_delete(self) -> bool:
        """Whether a delete flags its row ``__cdc_deleted`` instead of removing it."""
        return self.engine.soft_delete

    # -- in the merge tasks ----------------------------------------------------------------------
    def stage(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], records: Sequence[Any], *,
              batch_id: int, partition: int, app: str = "") -> dict:
        layout = cached_layout(self._layouts, value_schema, key_columns)
        changes = reduce_changes(changes_table(layout, records, small_ints=self.format.SMALL_INTS), layout.key_names)
        part = self.staging.write(app or "job", db, table, batch_id, partition, changes, layout.key_names)
        part["input"] = len(records)
        return part

    # -- on the driver -------------------------------------------------------------------------
    def commit(self, db: str, table: str, staged: Sequence[dict], *, batch_id: int, app: str = "",
               owner: str = "", meta: dict[str, str] | None = None, keep_staged: bool = False) -> ApplyResult:
        app = app or "job"
        key = list(staged[0]["key"])
        given = sum(int(p.get("input", p["rows"])) for p in staged)
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                result = self._commit_once(db, table, staged, key, batch_id, app, owner, given, meta or {})
                break
            except LakeCommitConflict as exc:
                if attempt == COMMIT_ATTEMPTS:
                    raise SinkUnavailable(f"{self.FORMAT} table of {db}.{table}: batch {batch_id} lost the race with "
                                          f"another writer {attempt} times ({exc}); the batch is retried") from exc
                self.lost_races += 1
                log.info("%s table of %s.%s: another writer committed first (%s); trying again", self.FORMAT, db,
                         table, exc)
                time.sleep(0.05 * attempt)
        if not keep_staged:  # (the lake committer removes what it committed itself: spark_jobs.commit.lake_committer)
            self.staging.remove_batch(app, db, table, batch_id)
            self.staging.remove_older(app, db, table, batch_id)
        done = self._commits[(db, table)] = self._commits.get((db, table), 0) + 1
        if self._compaction_due(db, table, done):
            self._maintain(db, table, "compaction", lambda: self.compact(db, table))
            if self.retention_hours is not None:
                self._maintain(db, table, "removing old versions",
                               lambda: self.remove_old_versions(db, table, self.retention_hours))
        release_unused_memory()
        return result

    def _compaction_due(self, db: str, table: str, done: int) -> bool:
        """Whether the table is compacted after its commit number ``done``: every
        ``compact_every`` commits, and after any commit that leaves it with
        ``compact_min_files`` small files (a copy-on-write commit writes a file per file it
        rewrites: counting commits alone lets them pile up between two compactions)."""
        if self.compact_every and done % self.compact_every == 0:
            return True
        if not self.compact_min_files:
            return False
        try:
            return self.small_file_count(db, table) >= self.compact_min_files
        except Exception as exc:  # noqa: BLE001 - the batch is committed; counted again after the next one
            log.warning("%s table of %s.%s: its small files could not be counted (%s)", self.FORMAT, db, table, exc)
            return False

    def _commit_once(self, db: str, table: str, staged: Sequence[dict], key: list[str], batch_id: int, app: str,
                     owner: str, given: int, meta: dict[str, str]) -> ApplyResult:
        handle = self.format.load_table(db, table)
        if handle is not None:
            self.check_owner(handle, db, table, owner)
            done = self.format.committed_batch(handle, app)
            if done is not None and done >= batch_id:  # a replay: committed before the crash
                log.info("%s table of %s.%s: batch %d is committed already (app %s); not applied again",
                         self.FORMAT, db, table, batch_id, app)
                return ApplyResult(skipped=given)
        return self.engine.apply(handle, db, table, staged, key, batch_id, app, owner, given, meta)

    def check_owner(self, handle: Any, db: str, table: str, owner: str) -> None:
        """Refuse a table another pipeline owns, or that the merge job did not make."""
        found = self.format.owner(handle)
        if found is None:
            raise SinkError(f"the {self.FORMAT} table of {db}.{table} ({self.where(db, table)}) was not made by the "
                            "merge job (it has no cdc.owner property): give the sink another location, or drop or "
                            "move that table")
        if owner and found != owner:
            raise SinkError(f"the {self.FORMAT} table of {db}.{table} ({self.where(db, table)}) is written by another "
                            f"pipeline ({found!r}, this one is {owner!r}): two pipelines must not share lake tables; "
                            "give this sink another location")

    def _maintain(self, db: str, table: str, what: str, fn: Callable[[], Any]) -> None:
        """Run a maintenance step after a commit; a failure is logged, not the batch's."""
        try:
            done = fn()
        except Exception as exc:  # noqa: BLE001 - the batch is committed; maintenance waits for the next turn
            log.warning("%s table of %s.%s: %s failed (%s); tried again at the next compaction (compact_every: %d, "
                        "compact_min_files: %d)", self.FORMAT, db, table, what, exc, self.compact_every,
                        self.compact_min_files)
        else:
            log.info("%s table of %s.%s: %s: %s", self.FORMAT, db, table, what, done)

    def prepare(self) -> None:
        """Make what the sink's tables share (Iceberg: its catalog) before the queries start."""
        self.format.prepare()
        self.engine.prepare()

    def in_commit_thread(self) -> None:
        """Called by the lake committer's thread as it starts (:meth:`LakeEngine.in_commit_thread`)."""
        self.engine.in_commit_thread()

    def close(self) -> None:
        self.format.close()

    def committed_batch(self, db: str, table: str, app: str) -> int | None:
        """The last batch ``app`` committed to the table (None: none, or no table)."""
        handle = self.format.load_table(db, table)
        return None if handle is None else self.format.committed_batch(handle, app)

    # -- the driver's table operations (markers, DROP and RENAME TABLE) ----------------------------
    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        return self.engine.delete_below(db, table, position, where)

    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        """Drop the lake table of ``db.table``; with ``below`` (the DROP's position) only its
        rows below it go, and the table only when nothing is left (rows above it belong to a
        table created again under the same name)."""
        if self.format.load_table(db, table) is None:
            return False
        if below is not None:
            self.engine.delete_rows_below(db, table, check_position(below))
            if self.engine.has_rows(db, table):
                return True
        self.engine.remove(db, table)
        return True

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        """The lake table of ``db.table`` becomes that of ``to_db.to_table`` (dropped instead
        when that one exists: the producer snapshots a renamed table); with ``position`` a
        table holding a row written after it is left (a table created again under the old
        name).  ``renamed``, ``dropped`` or ``none``."""
        if self.format.load_table(db, table) is None:
            return "none"
        if position is not None and self.engine.rows_above(db, table, check_position(position)):
            return "none"
        if self.format.load_table(to_db, to_table) is not None:
            self.drop_table(db, table)
            return "dropped"
        self.engine.move(db, table, to_db, to_table)
        return "renamed"

    def applied_positions(self) -> dict[tuple[str, str], str]:
        return self.format.applied_positions()

    # -- what the tools and benchmarks use: the format's reads, the engine's writes ---------------
    def where(self, db: str, table: str) -> str:
        """Where the table of ``db.table`` is (a path or a catalog identifier), in messages."""
        return self.format.where(db, table)

    def load_table(self, db: str, table: str) -> Any:
        """The format's handle of the table of ``db.table``, or None when there is none yet."""
        return self.format.load_table(db, table)

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        """A new, empty table of ``db.table`` owned by ``owner`` (an application id); its handle."""
        return self.engine.create_table(db, table, schema, key, owner)

    def tables(self) -> list[tuple[str, str]]:
        """``(db, table)`` of every lake table of the sink."""
        return self.format.tables()

    def read_batches(self, db: str, table: str) -> Iterator[pa.RecordBatch] | None:
        """The table's rows in Arrow batches (None: no such table)."""
        return self.format.read_batches(db, table)

    def duckdb_scan(self, db: str, table: str) -> str:
        """DuckDB's table function reading the table."""
        return self.format.duckdb_scan(db, table)

    def file_count(self, db: str, table: str) -> int:
        """Data files in the table's latest version."""
        return self.format.file_count(db, table)

    def small_file_count(self, db: str, table: str) -> int:
        """The table's data files that :meth:`compact` would merge (0: no table)."""
        return self.format.small_file_count(db, table)

    def compact(self, db: str, table: str) -> dict:
        """Compact the table's small files; what was done."""
        return self.engine.compact(db, table)

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """Remove what only versions older than ``retention_hours`` need; what was done."""
        return self.engine.remove_old_versions(db, table, retention_hours)

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table, the ``(app, batch)`` of every batch it holds."""
        return self.format.commit_marks(db, table)

    def commits(self, db: str, table: str) -> list[tuple[str, int]]:
        """``(app, batch)`` of every micro-batch the merge job's commits to the table hold, oldest
        first (a batch held by two commits: twice)."""
        return [pair for held in self.commit_marks(db, table) for pair in held]


__all__ = ["LakeSink", "OWNER_PROPERTY", "BATCHES_HELD", "batches_held", "app_id", "release_unused_memory"]
