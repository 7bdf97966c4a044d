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
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from common.config import SourceConfig
from contract.errors import BadSignal
from contract.notifications import Notification
from contract.position import BinlogPosition
from contract.signals import WINDOW_CLOSE, WINDOW_OPEN, Signal, parse_signal
from producer.snapshot.actions import ACTIONS, table_jobs
from producer.snapshot.chunk_planner import ChunkPlanner
from producer.snapshot.chunk_reader import ChunkReader, MarkerRows, QuietRead, Unclosed
from producer.snapshot.gtid_windows import Boundary, MarkerSlots, window_passed
from producer.snapshot.state import KeyRange, TableJob, encode_key
from producer.snapshot.table_reader import read_table_def
from producer.table_schema import TableDef

log = logging.getLogger(__name__)

#: Reads of one range that may fail while the server answers (a query it refuses) before
#: the table's snapshot is aborted.  A lost connection is retried without limit.
MAX_READ_FAILURES = 5


@dataclass
class MarkerSeen:
    """A window marker of this process's chunk, at its binlog position (for the markers topic)."""

    kind: str  # OPEN | CLOSE
    snapshot_id: str
    chunk_id: int
    table: str
    key_range: dict
    position: BinlogPosition
    extra: dict = field(default_factory=dict)  # read-only windows: the GTID sets bounding the read


@dataclass
class DeleteMissing:
    """A table of a ``delete-missing`` snapshot was read completely: downstream, the sinks
    delete its rows below ``below`` that the snapshot did not refresh."""

    snapshot_id: str
    table: str
    below: BinlogPosition


@dataclass
class _Chunk:
    chunk_id: int
    job: TableJob
    key_range: KeyRange
    table_def: TableDef
    keys: list[str]
    future: Future
    close_marker: tuple[str, str] = ("", "")  # (id, data) of its CLOSE marker row
    open_position: BinlogPosition | None = None
    invalid: str | None = None  # why it must be read again instead of released
    quiet: Boundary | None = None  # read-only: the boundary it was submitted at
    changed: set = field(default_factory=set)  # read-only: record keys written for its table since
    ahead: bool = False  # its read was looked at for the next chunk's start (_read_ahead)
    marker_data: dict = field(init=False)  # the key range as planned (its markers carry it)

    def __post_init__(self) -> None:
        self.marker_data = {"lo": encode_key(self.key_range.lo), "hi": encode_key(self.key_range.hi)}


@dataclass
class ReleasedChunk:
    snapshot_id: str
    chunk_id: int
    table_def: TableDef
    rows: list[dict]
    open_position: BinlogPosition
    close_position: BinlogPosition
    key_columns: list[str]
    # read-only windows: record keys changed inside the window (their rows are dropped),
    # and the markers to write before the rows
    changed: set | None = None
    markers: tuple[MarkerSeen, ...] = ()


class SnapshotCoordinator:
    def __init__(self, *, signal_table: str, chunk_size: int, captures: Callable[[str, str], bool],
                 connect: Callable[[], Any], parallelism: int = 1, state: dict | None = None,
                 notify: Callable[[Notification], None] = lambda n: None, read_only: bool = False,
                 is_mariadb: bool = True, slots: MarkerSlots | None = None, file_base: int = 0,
                 source: SourceConfig | None = None) -> None:
        self.read_only = read_only
        self.is_mariadb = is_mariadb
        self.slots = slots or MarkerSlots()
        self._boundary: Boundary | None = None
        self.chunk_size = chunk_size
        self.parallelism = parallelism
        self.captures = captures
        self._connect = connect
        self._conn = None
        self.notify = notify
        self.markers = MarkerRows(signal_table)
        self.planner = ChunkPlanner(chunk_size, parallelism, file_base)
        self.readers = ChunkReader(connect, self.markers, chunk_size, parallelism, source)
        self.run_id = uuid.uuid4().hex[:12]
        self.snapshot_id: str | None = None
        self.jobs: list[TableJob] = []
        self.paused = False
        self.chunk_seq = 0
        self.inflight: dict[int, _Chunk] = {}
        self._retry_after = 0.0
        # CLOSE markers a failed reader could not write: written when the server is back,
        # so no window stays open downstream.
        self._pending_closes: list[tuple[str, str]] = []
        self._aborted: set[str] = set()  # tables whose snapshot was aborted (reads kept failing, key dropped)
        self._done: list[DeleteMissing] = []  # delete-missing tables read completely, for the markers topic
        if state:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict | None:
        if self.snapshot_id is None and not self._pending_closes and not self.inflight:
            return None
        # Windows opened downstream that no CLOSE marker closed yet: after a restart they are
        # closed by CLOSE marker rows written then (their readers are gone).
        unclosed = [list(ch.close_marker) for ch in self.inflight.values()
                    if ch.open_position is not None and ch.quiet is None]
        return {"snapshot_id": self.snapshot_id, "paused": self.paused, "chunk_seq": self.chunk_seq,
                "jobs": [j.to_state() for j in self.jobs],
                "unclosed": unclosed + [list(c) for c in self._pending_closes]}

    def _restore(self, st: dict) -> None:
        self._pending_closes = [(str(i), str(d)) for i, d in st.get("unclosed", [])]
        if st.get("snapshot_id") is None:
            return  # only CLOSE markers were owed
        self.snapshot_id = st["snapshot_id"]
        self.paused = st.get("paused", False)
        # Chunk ids an earlier process used after its last stored state must not be used
        # again (its markers may still come through the binlog): continue from the clock.
        self.chunk_seq = max(int(st.get("chunk_seq", 0)), time.time_ns() // 1_000_000 * 1000)
        self.jobs = [TableJob.from_state(j) for j in st.get("jobs", [])]
        log.info("snapshot %s resumes%s: %s", self.snapshot_id, " (paused)" if self.paused else "", ", ".join(
            f"{j.table} after key {j.frontier}" if j.frontier is not None else j.table for j in self.jobs))

    @property
    def active(self) -> bool:
        return self.snapshot_id is not None and bool(self.jobs)

    @property
    def busy(self) -> bool:
        """Whether :meth:`poll` has work: a snapshot, chunks in flight, CLOSE rows owed."""
        return self.active or bool(self.inflight) or bool(self._pending_closes)

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
        jobs, skipped = table_jobs(self.conn(), tables, signal_id, conditions=conditions,
                                   surrogate_key=surrogate_key, skippable=skippable, delete_missing=delete_missing)
        for name, reason in skipped:
            log.warning("signal %r: %s; the table is skipped, the others are snapshotted", signal_id, reason)
            self.notify(Notification("SKIPPED", signal_id, {"table": name, "reason": reason}))
        tables = [j.table for j in jobs]
        if self.snapshot_id is not None and reason:
            # started by the producer after DDL: a table the running snapshot reads is read
            # again from its start (what it read so far may predate the DDL)
            for old in [j for j in self.jobs if j.table in tables]:
                for j in jobs:
                    if j.table == old.table and old.delete_missing:
                        j.delete_missing = True
                self.jobs.remove(old)
        elif self.snapshot_id is not None and delete_missing:
            # a table already in the running snapshot is read again with delete-missing
            self.jobs = [j for j in self.jobs if j.table not in tables or j.delete_missing]
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
        running = {j.table for j in self.jobs} & tables
        if running:
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

    def _start_table(self, job: TableJob) -> bool:
        conn = self.conn()
        tdef = read_table_def(conn, *job.db_table)
        if tdef is None:
            self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id or "", {"table": job.table,
                                                                                       "dropped": True}))
            self._remove(job)
            return False
        keys = self.planner.start_table(conn, job, tdef)
        log.info("snapshot %s: %s, key %s up to %s (about %d rows)", self.snapshot_id, job.table, ",".join(keys),
                 job.max_key, job.estimated)
        return True

    def _submit(self, job: TableJob) -> bool:
        conn = self.conn()
        tdef = read_table_def(conn, *job.db_table)  # every chunk: DDL during the snapshot is picked up
        if tdef is None:  # dropped meanwhile
            self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id or "", {"table": job.table,
                                                                                       "dropped": True}))
            self._remove(job)
            return True
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
                             "run": self.run_id, "range": {"lo": encode_key(rng.lo), "hi": encode_key(rng.hi)}})
        if self.read_only:
            at = self._boundary
            fut = self.readers.submit_quiet(tdef, keys, rng, job.condition, is_mariadb=self.is_mariadb,
                                            anchor=at.point, anchor_gtids=at.gtids.copy())
            self.inflight[chunk_id] = _Chunk(chunk_id, job, rng, tdef, keys, fut, quiet=at)
            return True
        prefix = f"{(self.snapshot_id or '')[:24]}-{self.run_id}-{chunk_id}"  # marker row ids: <= 64 characters
        fut = self.readers.submit(prefix, marker, tdef, keys, rng, job.condition)
        self.inflight[chunk_id] = _Chunk(chunk_id, job, rng, tdef, keys, fut, (f"{prefix}-close", marker))
        return True

    # -- read-only windows ---------------------------------------------------------------
    def tracking(self, db: str, table: str) -> list[set]:
        """The changed-key sets of the read-only chunks of ``db.table`` in flight (the
        session adds the record keys it writes for the table)."""
        return [ch.changed for ch in self.inflight.values() if ch.quiet is not None and ch.job.db_table == (db, table)]

    def release_quiet(self, at: Boundary) -> list[ReleasedChunk]:
        """The read-only chunks whose window the stream has passed at ``at``, in the order
        they were submitted; a failed read is taken back to be read again."""
        out = []
        for ch in sorted(self.inflight.values(), key=lambda c: c.chunk_id):
            if ch.quiet is None or not ch.future.done():
                continue
            exc = ch.future.exception()
            if exc is not None:
                del self.inflight[ch.chunk_id]
                self._read_failed(ch, exc)
                continue
            read: QuietRead = ch.future.result()
            if not window_passed(read.end, read.gtids_after, at):
                continue
            slots = self.slots.window(at.based, len(read.rows))
            if slots is None:  # a killed run wrote markers further on: wait to pass them
                continue
            del self.inflight[ch.chunk_id]
            open_at, close_at = slots
            ch.open_position = open_at
            extra = {"read_only": True, "gtids_before": str(read.gtids_before), "gtids_after": str(read.gtids_after),
                     "changes_from": ch.quiet.based.encode()}
            snapshot_id = self.snapshot_id or ""  # (the last chunk's release ends the snapshot)
            released = self._release(ch, read.rows, close_at)
            if released is not None:
                released.changed = ch.changed
                released.markers = tuple(MarkerSeen(kind, snapshot_id, ch.chunk_id, ch.job.table,
                                                    ch.marker_data, p, extra)
                                         for kind, p in (("OPEN", open_at), ("CLOSE", close_at)))
                out.append(released)
        return out

    def _insert_pending_closes(self) -> None:
        while self._pending_closes:
            sid, data = self._pending_closes[0]
            try:
                self.markers.insert_close(self.conn(), sid, data)
            except Exception as exc:  # noqa: BLE001 - still away: next poll
                log.info("CLOSE marker %s not written yet (%s)", sid, exc)
                self._conn = None
                self._retry_after = time.monotonic() + 2.0
                return
            self._pending_closes.pop(0)

    def _reap_unclosed(self) -> None:
        """Chunks whose reader could not write the CLOSE marker: read them again later."""
        for ch in list(self.inflight.values()):
            if ch.future.done() and isinstance(ch.future.exception(), Unclosed):
                del self.inflight[ch.chunk_id]
                if ch.future.exception().close is not None:
                    self._pending_closes.append(ch.future.exception().close)
                self._retry_after = time.monotonic() + 2.0
                log.warning("snapshot %s: chunk %d of %s failed (%s); read again in 2s", self.snapshot_id,
                            ch.chunk_id, ch.job.table, ch.future.exception().__cause__)
                if ch.job in self.jobs:
                    ch.job.retry(ch.key_range)

    def _delete_markers(self, marker_ids: list[str]) -> None:
        try:
            self.markers.delete(self.conn(), marker_ids)
        except Exception as exc:  # noqa: BLE001 - cleanup only; the rows are removed next time
            log.warning("could not delete window marker rows %s: %s", marker_ids, exc)
            self._conn = None

    def _window_marker(self, sig: Signal, position: BinlogPosition) -> tuple[MarkerSeen | None, ReleasedChunk | None]:
        d = sig.data
        ch = self.inflight.get(d.get("chunk_id")) if d.get("run") == self.run_id else None
        kind = "OPEN" if sig.type == WINDOW_OPEN else "CLOSE"
        if ch is None:
            # A marker of a chunk this process does not own (an earlier process's, or one
            # whose reader failed): still published, so downstream no window stays open.
            if sig.type == WINDOW_CLOSE:  # remove its rows
                self._delete_markers([sig.id, MarkerRows.open_id(sig.id)])
            elif sig.id.endswith("-open"):
                # Its reader is gone and may never have written the CLOSE: write one (a
                # second CLOSE of a window is harmless downstream; rows never come for it).
                self._pending_closes.append((MarkerRows.close_id(sig.id), json.dumps(d)))
            try:
                seen = MarkerSeen(kind, str(d["snapshot_id"]), int(d["chunk_id"]), str(d["table"]),
                                  dict(d.get("range") or {}), position)
            except (KeyError, TypeError, ValueError):
                return None, None
            return (seen if "." in seen.table else None), None
        seen = MarkerSeen(kind, d.get("snapshot_id"), ch.chunk_id, ch.job.table, ch.marker_data, position)
        if kind == "OPEN":
            ch.open_position = position
            return seen, None
        return seen, self._close(ch, sig, position)

    def _close(self, ch: _Chunk, sig: Signal, position: BinlogPosition) -> ReleasedChunk | None:
        del self.inflight[ch.chunk_id]
        self._delete_markers([sig.id, MarkerRows.open_id(sig.id)])
        try:
            rows = ch.future.result()
        except Exception as exc:  # noqa: BLE001 - a DDL race, a lost connection, a query the server refuses
            self._read_failed(ch, exc)
            return None
        return self._release(ch, rows, position)

    def _read_failed(self, ch: _Chunk, exc: BaseException) -> None:
        """The chunk's read failed: read it again (after a pause), or abort the table's
        snapshot after MAX_READ_FAILURES failures of the same range."""
        job = ch.job
        if ch.invalid is None:
            ch.invalid = f"read failed: {exc}"
            ch.key_range.failures += 1
            self._retry_after = time.monotonic() + 1.0
            if ch.key_range.failures >= MAX_READ_FAILURES and job in self.jobs:
                log.error("snapshot %s: reading %s failed %d times (%s); the table's snapshot is aborted",
                          self.snapshot_id, job.table, ch.key_range.failures, exc)
                self.notify(Notification("ABORTED", self.snapshot_id or "", {
                    "tables": [job.table], "reason": f"chunk read failed {ch.key_range.failures} times: {exc}"}))
                self._aborted.add(job.table)
                self._remove(job)
                return
        if job in self.jobs:
            job.retry(ch.key_range)
            log.info("snapshot %s: chunk %d of %s is read again (%s)", self.snapshot_id, ch.chunk_id, job.table,
                     ch.invalid)

    def _release(self, ch: _Chunk, rows: list[dict], position: BinlogPosition) -> ReleasedChunk | None:
        """The chunk's rows, read, as of its CLOSE at ``position`` (None when it must be
        read again: DDL meanwhile, stopped, its OPEN not seen)."""
        job = ch.job
        if ch.invalid or job not in self.jobs or ch.open_position is None:
            reason = ch.invalid or ("its OPEN marker was not seen" if ch.open_position is None else "stopped")
            if job in self.jobs:
                job.retry(ch.key_range)
                log.info("snapshot %s: chunk %d of %s is read again (%s)", self.snapshot_id, ch.chunk_id, job.table,
                         reason)
            return None
        full = len(rows) >= self.chunk_size
        last = [rows[-1][k] for k in ch.keys] if rows else None
        job.released(ch.key_range, last, full, len(rows))
        released = ReleasedChunk(self.snapshot_id or "", ch.chunk_id, ch.table_def, rows, ch.open_position, position,
                                 ch.keys)
        self.notify(Notification("IN_PROGRESS", self.snapshot_id or "", {
            "table": job.table, "chunk": ch.chunk_id, "rows": job.rows, "estimated": max(job.estimated, job.rows)}))
        if job.done:
            self._table_done(job)
        return released

    def _remove(self, job: TableJob) -> None:
        if job in self.jobs:
            self.jobs.remove(job)
        if not self.jobs:
            self._finish()

    def take_deletions(self) -> list[DeleteMissing]:
        """The delete-missing tables read completely since the last call."""
        done, self._done = self._done, []
        return done

    def _table_done(self, job: TableJob) -> None:
        if job.delete_missing and job.below is not None:
            self._done.append(DeleteMissing(self.snapshot_id or "", job.table, BinlogPosition.decode(job.below)))
        self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id or "", {"table": job.table,
                                                                                   "rows": job.rows}))
        log.info("snapshot %s: %s done, %d rows in %d chunks", self.snapshot_id, job.table, job.rows, job.chunks)
        self._remove(job)
