"""What the lake sinks (Delta Lake, Iceberg) share: the tasks' staged parts, the frame of the
driver's commit, its exactly-once check and the tables' ownership.

A micro-batch reaches a lake table in one commit (:meth:`LakeSinkBase.commit`):

1. the merge tasks stage their partitions' changes (:meth:`LakeSinkBase.stage`: one Parquet
   file per run, per key the change with the highest position, nothing visible);
2. the driver, once every task of the batch is done, reads the table's parts, reduces them
   to one change per key (:func:`~spark_jobs.sinks.lake_stage.reduce_changes`) and merges them
   into the table by position in one commit: a row is replaced only by a change with a higher
   position; a delete removes the row (or, with ``soft_delete``, flags it ``__cdc_deleted``
   and keeps the delete's position);
3. that commit carries the job's *application id* and the batch id (Delta: the commit's
   application transaction, app id and version; Iceberg: a table property written in the
   same metadata commit and the snapshot's summary), so a batch replayed after a crash finds
   itself committed and commits nothing; the table's latest version never holds half a batch.

The application id names the job's checkpoint (:func:`app_id`): a merge job started on a new
checkpoint (lost Kafka history, ``cdc stack up`` after the embedded broker restarted) counts
its batches from 0 again under a new id.  The *owner* (``cdc-merge:<kafka.topic_prefix>``) is
written into each table the job creates; a table owned by another pipeline, or made by
someone else, is refused with a message naming it (two pipelines must not share tables).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, ClassVar, Sequence

import pyarrow as pa

from common.errors import UnsupportedType
from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.batch import ApplyResult, check_position
from spark_jobs.sinks.interface import BatchSink
from spark_jobs.sinks.lake_stage import StagingArea, reduce_changes
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN, changes_table, lake_schema, lake_schema_of
from spark_jobs.sinks.layout import TableLayout, cached_layout
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

#: The table property naming the pipeline that writes a lake table.
OWNER_PROPERTY = "cdc.owner"
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


class LakeSinkBase(BatchSink):
    """A :class:`~spark_jobs.sinks.interface.BatchSink` of lake tables.

    Subclasses implement the format: ``load_table`` (the table, or None), ``_owner`` and
    ``_committed_batch`` (read from a loaded table), ``create_table`` (a new table of an Arrow
    schema, owned by ``owner``), ``_schema`` (a loaded table's Arrow schema), ``_evolve``
    (columns added, types widened or the table written again), ``_merge`` (the reduced
    changes in one commit tagged with the batch) and the driver's table operations."""

    #: Whether the format has 16-bit integers (Iceberg has not).
    SMALL_INTS: ClassVar[bool] = True
    #: The sink's format, in messages.
    FORMAT: ClassVar[str] = "lake"

    def __init__(self, staging: str, *, soft_delete: bool = False, compact_every: int = 0,
                 compact_min_files: int = 0, retention_hours: int | None = None) -> None:
        self.staging = StagingArea(staging)
        self.soft_delete = soft_delete
        self.compact_every = compact_every
        self.compact_min_files = compact_min_files
        self.retention_hours = retention_hours
        self._layouts: dict[tuple[str, tuple], TableLayout] = {}
        self._commits: dict[tuple[str, str], int] = {}  # per table, since the sink was made
        #: Commits that lost a race with another writer and were tried again, since the sink was made.
        self.lost_races = 0

    # -- in the merge tasks ----------------------------------------------------------------------
    def _layout(self, value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
        return cached_layout(self._layouts, value_schema, key_columns)

    def stage(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], records: Sequence[Any], *,
              batch_id: int, partition: int, app: str = "") -> dict:
        layout = self._layout(value_schema, key_columns)
        changes = reduce_changes(changes_table(layout, records, small_ints=self.SMALL_INTS), layout.key_names)
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
        handle = self.load_table(db, table)
        if handle is not None:
            self.check_owner(handle, db, table, owner)
            done = self._committed_batch(handle, app)
            if done is not None and done >= batch_id:  # a replay: committed before the crash
                log.info("%s table of %s.%s: batch %d is committed already (app %s); not applied again",
                         self.FORMAT, db, table, batch_id, app)
                return ApplyResult(skipped=given)
        return self._apply(handle, db, table, staged, key, batch_id, app, owner, given, meta)

    def _apply(self, handle: Any, db: str, table: str, staged: Sequence[dict], key: list[str], batch_id: int,
               app: str, owner: str, given: int, meta: dict[str, str]) -> ApplyResult:
        """The batch's staged parts merged into the table (``handle``: None when there is none
        yet) in one commit tagged with ``app`` and ``batch_id``.  Here the ``driver`` engine's:
        the parts read and reduced on the driver, merged by the format's library
        (:meth:`_merge`); the ``spark`` engine's is :class:`~spark_jobs.sinks.lake_spark.SparkMerge`'s."""
        changes = reduce_changes(self.staging.read(staged), key)
        superseded = given - changes.num_rows
        target = lake_schema_of(changes.schema, self.soft_delete)
        if handle is None:
            handle = self.create_table(db, table, target, key, owner)
        else:
            handle = self._evolve(handle, db, table, target, key)
        upserted, deleted = self._merge(handle, db, table, self._conformed(handle, changes), key, batch_id, app, meta)
        skipped = max(0, changes.num_rows - upserted - deleted)  # older than the table's rows
        return ApplyResult(upserted=upserted, deleted=deleted, skipped=skipped, superseded=superseded)

    def _conformed(self, handle: Any, changes: pa.Table) -> pa.Table:
        """The changes with the table's columns, in its order and types (a column the changes
        lack is null: records written before it was added), and the op."""
        schema = self._schema(handle)
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

    def check_owner(self, handle: Any, db: str, table: str, owner: str) -> None:
        """Refuse a table another pipeline owns, or that the merge job did not make."""
        found = self._owner(handle)
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

    def in_commit_thread(self) -> None:
        """Called by the lake committer's thread as it starts (the ``spark`` engine: its Spark
        jobs in the ``lake`` pool of the fair scheduler)."""

    def committed_batch(self, db: str, table: str, app: str) -> int | None:
        """The last batch ``app`` committed to the table (None: none, or no table)."""
        handle = self.load_table(db, table)
        return None if handle is None else self._committed_batch(handle, app)

    # -- the driver's table operations (DROP and RENAME TABLE) -----------------------------------
    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        """Drop the lake table of ``db.table``; with ``below`` (the DROP's position) only its
        rows below it go, and the table only when nothing is left (rows above it belong to a
        table created again under the same name)."""
        handle = self.load_table(db, table)
        if handle is None:
            return False
        if below is not None:
            self._delete_rows_below(db, table, check_position(below))
            if self._has_rows(db, table):
                return True
        self._remove(db, table)
        return True

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        """The lake table of ``db.table`` becomes that of ``to_db.to_table`` (dropped instead
        when that one exists: the producer snapshots a renamed table); with ``position`` a
        table holding a row written after it is left (a table created again under the old
        name).  ``renamed``, ``dropped`` or ``none``."""
        handle = self.load_table(db, table)
        if handle is None:
            return "none"
        if position is not None and self._rows_above(db, table, check_position(position)):
            return "none"
        if self.load_table(to_db, to_table) is not None:
            self.drop_table(db, table)
            return "dropped"
        self._move(db, table, to_db, to_table)
        return "renamed"

    # -- the format's part ---------------------------------------------------------------------
    def where(self, db: str, table: str) -> str:
        """Where the table of ``db.table`` is (a path or a catalog identifier), in messages."""
        raise NotImplementedError

    def load_table(self, db: str, table: str) -> Any:
        """The format's handle of the table of ``db.table`` (a ``DeltaTable``, a pyiceberg ``Table``),
        or None when there is none yet (public: the benchmarks and tools read tables through it)."""
        raise NotImplementedError

    def _owner(self, handle: Any) -> str | None:
        raise NotImplementedError

    def _committed_batch(self, handle: Any, app: str) -> int | None:
        raise NotImplementedError

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        """A new, empty table of ``db.table`` with the Arrow ``schema``, keyed by ``key`` and owned by
        ``owner`` (an application id); its handle (public: a benchmark fills tables it made so)."""
        raise NotImplementedError

    def _schema(self, handle: Any) -> pa.Schema:
        raise NotImplementedError

    def _evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        raise NotImplementedError

    def _merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
               app: str, meta: dict[str, str]) -> tuple[int, int]:
        """Merge the reduced changes by position in one commit tagged with ``app`` and
        ``batch_id`` (and ``meta``, more of the commit's metadata); ``(rows upserted, rows deleted)``."""
        raise NotImplementedError

    def _delete_rows_below(self, db: str, table: str, position: str) -> None:
        """Remove the table's rows below ``position`` (whatever ``soft_delete`` says)."""
        raise NotImplementedError

    def _has_rows(self, db: str, table: str) -> bool:
        raise NotImplementedError

    def _rows_above(self, db: str, table: str, position: str) -> bool:
        """Whether the table holds a row at a position above ``position``."""
        raise NotImplementedError

    def _remove(self, db: str, table: str) -> None:
        raise NotImplementedError

    def _move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        raise NotImplementedError

    def compact(self, db: str, table: str) -> dict:
        """Compact the table's small files; what was done."""
        raise NotImplementedError

    def small_file_count(self, db: str, table: str) -> int:
        """The table's data files that :meth:`compact` would merge (0: no table)."""
        raise NotImplementedError

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """Remove what only versions older than ``retention_hours`` need (files, snapshots, log
        entries): every version committed since stays readable; what was done."""
        raise NotImplementedError

    def tables(self) -> list[tuple[str, str]]:
        """``(db, table)`` of every lake table of the sink."""
        raise NotImplementedError

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (those the format still keeps, oldest
        first), the ``(app, batch)`` of every micro-batch it holds."""
        raise NotImplementedError

    def commits(self, db: str, table: str) -> list[tuple[str, int]]:
        """``(app, batch)`` of every micro-batch the merge job's commits to the table hold, oldest
        first (a batch held by two commits: twice)."""
        return [pair for held in self.commit_marks(db, table) for pair in held]


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


__all__ = ["LakeSinkBase", "LakeCommitConflict", "OWNER_PROPERTY", "BATCHES_HELD", "batches_held", "app_id", "evolved_schema", "lake_schema_of",
           "POSITION_COLUMN", "lake_schema"]
