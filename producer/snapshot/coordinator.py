"""Incremental snapshots: signals in, chunk reads bracketed by OPEN/CLOSE markers out.

The coordinator is driven by the producer's main loop, in binlog order:

* ``on_signal`` for every row inserted into the signal table (user signals and the
  producer's own window markers) and every signal of the Kafka signal channel;
* ``on_schema_change`` for every DDL of a table;
* ``poll`` between binlog items: while a snapshot is active and not paused it keeps up
  to ``parallelism`` chunks in flight.  A chunk reader (a thread with its own
  connection) INSERTs the OPEN marker, SELECTs the chunk's key range (keyset on the
  primary or surrogate key, ``LIMIT chunk_size``), INSERTs the CLOSE marker;
* when the binlog reader reaches a chunk's CLOSE marker, ``on_signal`` returns a
  :class:`ReleasedChunk`: the rows and the OPEN and CLOSE positions.  The main loop
  writes them after every change logged up to CLOSE, which is the ordering DESIGN.md
  section 3 promises.  Deduplication (the DBLog rule) happens downstream.

A chunk is read again, instead of released, when its table saw DDL while the chunk was in
flight (TRUNCATE and column changes write no row events; a SELECT may have used the old
column list) or when its read failed (the server went away): the same range, a new window.

The parts: signal actions (:mod:`.actions`), the chunk planner (:mod:`.chunk_planner`),
the chunk readers and the marker rows (:mod:`.chunk_reader`), the stored state
(:mod:`.state`); this module drives them.  Buffered rows are bounded by
``parallelism x chunk_size`` whatever the table size.

In read-only mode (``read_only``) no marker row is written: chunks are read quietly and
their windows bounded by GTID sets (:mod:`.gtid_windows`); the session hands the
coordinator each transaction boundary (``poll(boundary)``, ``release_quiet``) and the
record keys it writes while such chunks are in flight (``track``).

Marker rows carry this process's run id, so a marker left in the binlog by an earlier
process (before a crash) is never taken for one of this process's chunks.  Marker rows
are deleted once their chunk is released (Debezium's insert/delete strategy).

Its state (``state()``, see :mod:`.state`) is stored with the producer's offsets, so a
restart resumes from the last released frontier of each table, and writes the CLOSE
marker rows of windows a dead run left open.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Callable

from common.config import SourceConfig
from contract.errors import BadSignal
from contract.notifications import Notification
from contract.position import BinlogPosition
from contract.signals import WINDOW_CLOSE, WINDOW_OPEN, parse_signal
from producer.snapshot.actions import ACTIONS, jobs_kept, table_jobs
from producer.snapshot.blocking import BlockingQueue
from producer.snapshot.chunk_planner import ChunkPlanner
from producer.snapshot.chunk_reader import ChunkReader, MarkerRows
from producer.snapshot.chunk_windows import ChunkWindows
from producer.snapshot.chunks import DeleteMissing, InflightChunk, MarkerSeen, ReleasedChunk
from producer.snapshot.gtid_windows import Boundary, MarkerSlots
from producer.snapshot.missing_tables import RECHECK_S, MissingTables
from producer.snapshot.state import SavedSnapshot, TableJob, encode_key
from producer.snapshot.table_reader import read_table_def
from producer.table_schema import TableDef

log = logging.getLogger(__name__)


def _same(table: TableDef) -> TableDef:
    return table


def _read_captured(conn, job: TableJob, resolve: Callable[[TableDef], TableDef]) -> TableDef | None:
    """The table of ``job`` as its events carry it (None: gone): the column controls resolve it
    (producer/column_controls.py), so a chunk SELECTs only the captured columns and is cut on
    the events' key (``message_key_columns`` too)."""
    tdef = read_table_def(conn, *job.db_table)
    return None if tdef is None else resolve(tdef)


class SnapshotCoordinator(ChunkWindows):
    def __init__(self, *, signal_table: str, chunk_size: int, captures: Callable[[str, str], bool],
                 connect: Callable[[], Any], parallelism: int = 1, state: dict | None = None,
                 notify: Callable[[Notification], None] = lambda n: None, read_only: bool = False,
                 is_mariadb: bool = True, slots: MarkerSlots | None = None, file_base: int = 0,
                 source: SourceConfig | None = None, owner: str = "",
                 resolve: Callable[[TableDef], TableDef] = _same, blocking: list | None = None,
                 blocking_spans: dict | None = None) -> None:
        self.read_only, self.resolve = read_only, resolve  # (resolve: the table as its events carry it)
        # (the session takes them)
        self.blocking = BlockingQueue(blocking, getattr(source, "include_tables", None), blocking_spans)
        # The producer's name, in each window marker it writes: a marker of another producer
        # sharing the signal table (another source on the same server) is none of this one's.
        self.owner = owner
        self.is_mariadb, self.slots = is_mariadb, slots or MarkerSlots()
        self._boundary: Boundary | None = None
        self.chunk_size, self.parallelism = chunk_size, parallelism
        self.captures = captures
        self._connect, self._conn = connect, None
        self.notify = notify
        self.markers = MarkerRows(signal_table)
        self.planner = ChunkPlanner(chunk_size, parallelism, file_base)
        self.readers = ChunkReader(connect, self.markers, chunk_size, parallelism, source)
        self.overrides = getattr(source, "snapshot_select_statement_overrides", None)
        self.run_id = uuid.uuid4().hex[:12]
        self.snapshot_id: str | None = None
        self.jobs: list[TableJob] = []
        self.paused = False
        self.chunk_seq = 0
        self.inflight: dict[int, InflightChunk] = {}
        self._retry_after = 0.0
        # CLOSE markers a failed reader could not write: written when the server is back,
        # so no window stays open downstream.
        self._pending_closes: list[tuple[str, str]] = []
        self._aborted: set[str] = set()  # tables whose snapshot was aborted (reads kept failing, key dropped)
        self.missing = MissingTables()  # tables the server did not show when their chunk was due
        self._done: list[DeleteMissing] = []  # delete-missing tables read completely, for the markers topic
        if state:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict | None:
        if self.snapshot_id is None and not self._pending_closes and not self.inflight:
            return None
        # Windows opened downstream that no CLOSE marker closed yet: after a restart they are
        # closed by CLOSE marker rows written then (their readers are gone).
        unclosed = [tuple(ch.close_marker) for ch in self.inflight.values()
                    if ch.open_position is not None and ch.quiet is None]
        return SavedSnapshot(self.snapshot_id, self.paused, self.chunk_seq, self.jobs,
                             unclosed + self._pending_closes).to_state()

    def _restore(self, st: dict) -> None:
        saved = SavedSnapshot.from_state(st, time.time_ns())
        self._pending_closes = saved.closes
        if saved.snapshot_id is None:
            return  # only CLOSE markers were owed
        self.snapshot_id, self.paused, self.chunk_seq, self.jobs = (saved.snapshot_id, saved.paused, saved.chunk_seq,
                                                                    saved.jobs)
        log.info("snapshot %s resumes%s: %s", self.snapshot_id, " (paused)" if self.paused else "", ", ".join(
            f"{j.table} after key {j.frontier}" if j.frontier is not None else j.table for j in self.jobs))

    @property
    def active(self) -> bool:
        return self.snapshot_id is not None and bool(self.jobs)

    @property
    def busy(self) -> bool:
        """Whether :meth:`poll` has work: a snapshot, chunks in flight, CLOSE rows owed."""
        return self.active or bool(self.inflight) or bool(self._pending_closes)

    @property
    def working(self) -> bool:
        """Whether a snapshot is under way: chunks to read (not paused), chunks in flight, CLOSE
        rows owed, a blocking snapshot asked for.  (A producer told to exit when idle does not while it is.)"""
        return self.active and not self.paused or bool(self.inflight or self._pending_closes or self.blocking.requests)

    def progress(self) -> list[dict]:
        return [{"table": j.table, "rows": j.rows, "estimated": max(j.estimated, j.rows), "chunks": j.chunks,
                 "paused": self.paused} for j in self.jobs]

    # -- connections ---------------------------------------------------------------------
    def conn(self):
        """The coordinator's own session (planning, marker cleanup, CLOSE rows owed)."""
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        self.readers.close()
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
        self._conn = None
        self.inflight.clear()

    # -- signals -------------------------------------------------------------------------
    def on_signal(self, row: dict, position: BinlogPosition) -> tuple[MarkerSeen | None, ReleasedChunk | None]:
        """Handle one inserted signal row; returns the marker seen (for the markers topic)
        and the chunk released by a CLOSE marker, if any."""
        try:
            sig = parse_signal(row)
        except BadSignal as exc:
            self._bad(exc)
            return None, None
        if sig.type in (WINDOW_OPEN, WINDOW_CLOSE):
            return self._window_marker(sig, position)
        try:
            ACTIONS[sig.type].run(self, sig)
        except BadSignal as exc:
            self._bad(exc)
        return None, None

    def on_schema_change(self, db: str, table: str | None) -> None:
        """DDL on ``db.table`` (``table`` None: the whole database): chunks of it in flight
        are read again."""
        for ch in self.inflight.values():
            cdb, ctable = ch.job.db_table
            if cdb == db and (table is None or ctable == table) and ch.invalid is None:
                ch.invalid = "DDL on the table while the chunk was in flight"

    def bad_signal(self, exc: BadSignal) -> None:
        """A signal that cannot be acted on, refused before :meth:`on_signal` (a Kafka record
        that is not even a signal row): reported as a bad signal row is."""
        self._bad(exc)

    def _bad(self, exc: BadSignal) -> None:
        log.warning("%s; the producer keeps streaming", exc)
        self.notify(Notification("SKIPPED", exc.signal_id, {"reason": exc.reason}))

    def add_tables(self, tables: list[str], signal_id: str, *, conditions: dict[str, str] | None = None,
                   surrogate_key: str | None = None, skippable: set[str] | frozenset = frozenset(),
                   delete_missing: bool = False, reason: str | None = None) -> None:
        """Start a snapshot of ``tables`` (db.table, captured), or add them to the running one
        (a table that cannot be snapshotted: :func:`~producer.snapshot.actions.table_jobs`);
        ``reason``: why the producer started it by itself (in the STARTED notification)."""
        jobs, skipped = table_jobs(self.conn(), tables, signal_id, resolve=self.resolve, conditions=conditions,
                                   surrogate_key=surrogate_key, skippable=skippable, delete_missing=delete_missing,
                                   overrides=self.overrides)
        for name, reason in skipped:
            log.warning("signal %r: %s; the table is skipped, the others are snapshotted", signal_id, reason)
            self.notify(Notification("SKIPPED", signal_id, {"table": name, "reason": reason}))
        tables = [j.table for j in jobs]
        if self.snapshot_id is not None:
            self.jobs = jobs_kept(self.jobs, jobs, after_ddl=bool(reason), delete_missing=delete_missing)
        if self.snapshot_id is None:
            self.snapshot_id = signal_id or uuid.uuid4().hex
            self.jobs = jobs
            self.notify(Notification("STARTED", self.snapshot_id, {"tables": tables, "signal": signal_id,
                                                                   **({"reason": reason} if reason else {})}))
        else:  # a snapshot is running: add its tables
            have = {j.table for j in self.jobs}
            self.jobs += [j for j in jobs if j.table not in have]
            self.notify(Notification("STARTED", self.snapshot_id, {"tables": tables, "added": True,
                                                                   "signal": signal_id,
                                                                   **({"reason": reason} if reason else {})}))
        log.info("snapshot %s: tables %s", self.snapshot_id, ", ".join(j.table for j in self.jobs))

    def tables_gone(self, tables: set[str]) -> None:
        """``tables`` (db.table) were dropped or renamed: the running snapshot stops reading them."""
        if running := {j.table for j in self.jobs} & tables:
            self.stop_tables(running)

    def stop_tables(self, drop: set[str]) -> None:
        """Drop ``drop`` from the running snapshot (chunks of them in flight are not released)."""
        self.jobs = [j for j in self.jobs if j.table not in drop]
        for ch in self.inflight.values():
            if ch.job.table in drop:
                ch.invalid = "stopped"
        self.notify(Notification("ABORTED", self.snapshot_id or "", {"tables": sorted(drop)}))
        log.info("snapshot %s: stopped %s", self.snapshot_id, ", ".join(sorted(drop)) or "nothing")
        if not self.jobs:
            self._finish(completed=False)

    def _finish(self, *, completed: bool = True) -> None:
        if self.snapshot_id is not None and completed:
            data = {"aborted_tables": sorted(self._aborted)} if self._aborted else {}
            self.notify(Notification("COMPLETED", self.snapshot_id, data))
            log.info("snapshot %s completed%s", self.snapshot_id,
                     f" (aborted: {', '.join(sorted(self._aborted))})" if self._aborted else "")
        self.snapshot_id, self.jobs, self.paused, self._aborted = None, [], False, set()

    # -- chunks --------------------------------------------------------------------------
    def poll(self, boundary: Boundary | None = None) -> None:
        """Start chunk reads while fewer than ``parallelism`` are in flight (called between
        binlog items).  Read-only mode starts them at transaction boundaries only
        (``boundary``: where the stream stands, None inside a transaction)."""
        self._boundary = boundary
        if self.read_only and boundary is None:
            return
        if self.inflight:
            self._reap_unclosed()
            self._read_ahead()
        if self._pending_closes and time.monotonic() >= self._retry_after:
            self._insert_pending_closes()
        if not self.active or self.paused or time.monotonic() < self._retry_after:
            return
        # ``parallelism`` reads at once; one more chunk may wait, read, for its CLOSE marker
        # (buffered rows: at most (parallelism + 1) x chunk_size)
        while self._reading() < self.parallelism and len(self.inflight) <= self.parallelism and self.active:
            job = self._next_job()
            if job is None:
                return
            if not self._submit(job):
                return

    def _reading(self) -> int:
        """Chunks in flight whose read has not been looked at yet (:meth:`_read_ahead`)."""
        return sum(1 for ch in self.inflight.values() if not ch.ahead)

    def _read_ahead(self) -> None:
        """A chunk read that filled the chunk size has found where the next chunk of its
        range starts: its range ends at its last row now, and the rest is planned as a range
        of its own.  So the next chunk is read while this one waits for its CLOSE marker to
        come through the binlog and is written to Kafka, instead of after (keyset reads are
        otherwise one after the other).  Should this chunk not be released (DDL in its window,
        its OPEN marker not seen), its range, now ending at its last row, is read again."""
        for ch in self.inflight.values():
            if ch.ahead or not ch.future.done():
                continue
            ch.ahead = True
            if ch.quiet is not None or ch.future.exception() is not None or ch.job not in self.jobs:
                continue
            rows = ch.future.result()
            if len(rows) >= self.chunk_size:
                ch.job.split(ch.key_range, [rows[-1][k] for k in ch.keys])

    def _next_job(self) -> TableJob | None:
        """The first table with a range to read (tables go in order; the next one starts
        when every range of the one before is planned)."""
        for job in list(self.jobs):
            if not job.started:
                if not self._start_table(job):
                    continue
            if job.done:
                self._table_done(job)
                continue
            busy = {id(c.key_range) for c in self.inflight.values()}
            if any(id(r) not in busy for r in job.outstanding) or not job.planned_all:
                return job
            return None  # wait for this table's chunks before the next table
        return None

    def _present(self, job: TableJob) -> TableDef | None:
        """The table of ``job`` as it is now; None when the server does not show it: waited for
        (:mod:`producer.snapshot.missing_tables`), or, missing too long, its scan completed as
        dropped and ``job`` removed."""
        tdef = _read_captured(self.conn(), job, self.resolve)  # every chunk: DDL during the snapshot is picked up
        if tdef is not None:
            self.missing.found(job.table)
        elif self.missing.waits(job.table, time.monotonic()):
            self._retry_after = time.monotonic() + RECHECK_S
        else:
            self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id or "", {"table": job.table,
                                                                                       "dropped": True}))
            self._remove(job)
        return tdef

    def _start_table(self, job: TableJob) -> bool:
        tdef = self._present(job)
        if tdef is None:
            return False
        keys = self.planner.start_table(self.conn(), job, tdef)
        log.info("snapshot %s: %s, key %s up to %s (about %d rows)", self.snapshot_id, job.table, ",".join(keys),
                 job.max_key, job.estimated)
        return True

    def _submit(self, job: TableJob) -> bool:
        tdef = self._present(job)
        if tdef is None:
            return job not in self.jobs  # (dropped: go on with the others; missing: wait)
        conn = self.conn()
        keys = self.planner.keys(job, tdef)
        if any(k not in tdef.column_names for k in keys):
            log.error("snapshot %s: key column(s) %s of %s are gone; the table's snapshot is aborted",
                      self.snapshot_id, keys, job.table)
            self.notify(Notification("ABORTED", self.snapshot_id or "", {"tables": [job.table],
                                                                         "reason": "key column dropped"}))
            self._aborted.add(job.table)
            self._remove(job)
            return True
        rng = self.planner.next_range(conn, job, tdef, keys, {id(c.key_range) for c in self.inflight.values()})
        self.chunk_seq += 1
        chunk_id = self.chunk_seq
        marker = json.dumps({"snapshot_id": self.snapshot_id, "chunk_id": chunk_id, "table": job.table,
                             "run": self.run_id, "producer": self.owner,
                             "range": {"lo": encode_key(rng.lo), "hi": encode_key(rng.hi)}})
        if self.read_only:
            at = self._boundary
            fut = self.readers.submit_quiet(tdef, keys, rng, job.condition, is_mariadb=self.is_mariadb,
                                            anchor=at.point, anchor_gtids=at.gtids.copy())
            self.inflight[chunk_id] = InflightChunk(chunk_id, job, rng, tdef, keys, fut, quiet=at)
            return True
        prefix = f"{(self.snapshot_id or '')[:24]}-{self.run_id}-{chunk_id}"  # marker row ids: <= 64 characters
        fut = self.readers.submit(prefix, marker, tdef, keys, rng, job.condition)
        self.inflight[chunk_id] = InflightChunk(chunk_id, job, rng, tdef, keys, fut, (f"{prefix}-close", marker))
        return True
