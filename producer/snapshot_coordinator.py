"""Incremental snapshots: signals in, chunk reads bracketed by OPEN/CLOSE markers out.

The coordinator is driven by the producer's main loop, in binlog order:

* ``on_signal`` for every row inserted into the signal table (user signals and the
  producer's own window markers);
* ``poll`` between binlog items: when a snapshot is active, not paused and no chunk is
  in flight, it reads the next chunk -- INSERT the OPEN marker, SELECT the chunk (keyset
  on the primary or surrogate key, up to the maximum key read when the table started),
  INSERT the CLOSE marker -- and keeps the rows;
* when the binlog reader reaches that chunk's CLOSE marker, ``on_signal`` returns a
  :class:`ReleasedChunk`: the rows, the OPEN and CLOSE positions.  The main loop writes
  them after every change logged up to CLOSE, which is the ordering DESIGN.md section 3
  promises.  Deduplication (the DBLog rule) happens downstream.

Its state (``state()``) is stored with the producer's offsets, so a restart resumes after
the last released chunk; a chunk read but not released is read again.

STATUS: groundwork for the incremental snapshot issue.  Not wired into the producer's
main loop yet and not covered by integration tests; parallel readers are not written.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from cdc.sql import quote_table
from producer.position import BinlogPosition
from producer.signals import WINDOW_CLOSE, WINDOW_OPEN, BadSignal, Signal, parse_signal
from producer.snapshot_filter import FilterRefused, validate_filter
from producer.table_reader import estimated_rows, list_tables, max_key, read_chunk, read_table_def
from producer.table_schema import TableDef

log = logging.getLogger("cdc.snapshot")


@dataclass
class TableJob:
    table: str  # db.table
    condition: str | None = None  # validated filter
    surrogate_key: str | None = None
    max_key: list | None = None
    last_key: list | None = None  # key of the last row of the last released chunk
    rows: int = 0
    chunks: int = 0
    estimated: int = 0
    started: bool = False


@dataclass
class Notification:
    type: str  # STARTED, IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED, PAUSED, RESUMED, ABORTED, SKIPPED, LOG
    snapshot_id: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"aggregateType": "Incremental Snapshot", "type": self.type, "id": self.snapshot_id,
                "additionalData": self.data, "timestamp": int(time.time() * 1000)}


@dataclass
class PendingChunk:
    chunk_id: int
    table: str
    rows: list[dict]
    table_def: TableDef
    last_key: list | None
    open_position: BinlogPosition | None = None


@dataclass
class ReleasedChunk:
    snapshot_id: str
    chunk_id: int
    table_def: TableDef
    rows: list[dict]
    open_position: BinlogPosition
    close_position: BinlogPosition
    key_columns: list[str]


class SnapshotCoordinator:
    def __init__(self, *, signal_table: str, chunk_size: int, captures: Callable[[str, str], bool],
                 connect: Callable[[], Any], state: dict | None = None,
                 notify: Callable[[Notification], None] = lambda n: None) -> None:
        self.signal_table = signal_table
        self.chunk_size = chunk_size
        self.captures = captures
        self._connect = connect
        self._conn = None
        self.notify = notify
        self.snapshot_id: str | None = None
        self.jobs: list[TableJob] = []
        self.paused = False
        self.chunk_seq = 0
        self.pending: PendingChunk | None = None
        if state:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict | None:
        if self.snapshot_id is None:
            return None
        return {"snapshot_id": self.snapshot_id, "paused": self.paused, "chunk_seq": self.chunk_seq,
                "jobs": [asdict(j) for j in self.jobs]}

    def _restore(self, st: dict) -> None:
        self.snapshot_id = st["snapshot_id"]
        self.paused = st.get("paused", False)
        self.chunk_seq = st.get("chunk_seq", 0)
        self.jobs = [TableJob(**j) for j in st.get("jobs", [])]
        log.info("snapshot %s resumes: %s", self.snapshot_id, ", ".join(
            f"{j.table} after {j.last_key}" for j in self.jobs))

    @property
    def active(self) -> bool:
        return self.snapshot_id is not None and bool(self.jobs)

    def progress(self) -> list[dict]:
        return [{"table": j.table, "rows": j.rows, "estimated": max(j.estimated, j.rows), "chunks": j.chunks}
                for j in self.jobs]

    # -- connection ----------------------------------------------------------------------
    def conn(self):
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    # -- signals -------------------------------------------------------------------------
    def on_signal(self, row: dict, position: BinlogPosition) -> ReleasedChunk | None:
        try:
            sig = parse_signal(row)
        except BadSignal as exc:
            self._bad(exc)
            return None
        if sig.type == WINDOW_OPEN:
            if self.pending is not None and sig.data.get("chunk_id") == self.pending.chunk_id \
                    and sig.data.get("snapshot_id") == self.snapshot_id:
                self.pending.open_position = position
            return None
        if sig.type == WINDOW_CLOSE:
            return self._close(sig, position)
        handler = {"execute-snapshot": self._execute, "stop-snapshot": self._stop,
                   "pause-snapshot": self._pause, "resume-snapshot": self._resume, "log": self._log}[sig.type]
        try:
            handler(sig)
        except BadSignal as exc:
            self._bad(exc)
        return None

    def _bad(self, exc: BadSignal) -> None:
        log.warning("%s; the producer keeps streaming", exc)
        self.notify(Notification("SKIPPED", exc.signal_id, {"reason": exc.reason}))

    def _resolve_tables(self, sig: Signal) -> list[str]:
        known = [f"{d}.{t}" for d, t in list_tables(self.conn()) if self.captures(d, t)]
        out: list[str] = []
        for pattern in sig.data_collections:
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise BadSignal(sig.id, f"data collection {pattern!r} is not a valid regular expression: {exc}")
            hits = [t for t in known if t == pattern or rx.fullmatch(t)]
            if not hits:
                raise BadSignal(sig.id, f"table {pattern!r} is unknown or not captured")
            out += [h for h in hits if h not in out]
        return out

    def _execute(self, sig: Signal) -> None:
        tables = self._resolve_tables(sig)
        conds = sig.conditions
        unknown = set(conds) - set(tables)
        if unknown:
            raise BadSignal(sig.id, f"additional-conditions name tables not in the snapshot: {sorted(unknown)}")
        jobs = []
        for name in tables:
            db, table = name.split(".", 1)
            tdef = read_table_def(self.conn(), db, table)
            if tdef is None:
                raise BadSignal(sig.id, f"table {name} does not exist")
            keys = [sig.surrogate_key] if sig.surrogate_key else tdef.primary_key
            if not keys:
                raise BadSignal(sig.id, f"table {name} has no primary key: give a 'surrogate-key'")
            for k in keys:
                if k not in tdef.column_names:
                    raise BadSignal(sig.id, f"surrogate key {k!r} is not a column of {name}")
            condition = None
            if name in conds:
                try:
                    condition = validate_filter(conds[name], tdef.column_names)
                except FilterRefused as exc:
                    raise BadSignal(sig.id, f"filter for {name} refused: {exc}") from None
            jobs.append(TableJob(name, condition, sig.surrogate_key))
        if self.snapshot_id is None:
            self.snapshot_id = sig.id or uuid.uuid4().hex
            self.jobs = jobs
            self.notify(Notification("STARTED", self.snapshot_id, {"tables": tables}))
        else:  # a snapshot is running: add its tables
            have = {j.table for j in self.jobs}
            self.jobs += [j for j in jobs if j.table not in have]
            self.notify(Notification("STARTED", self.snapshot_id, {"tables": tables, "added": True}))
        log.info("snapshot %s: tables %s", self.snapshot_id, ", ".join(j.table for j in self.jobs))

    def _stop(self, sig: Signal) -> None:
        if self.snapshot_id is None:
            return
        wanted = sig.data_collections
        if wanted:
            drop = {j.table for j in self.jobs if any(j.table == w or re.fullmatch(w, j.table) for w in wanted)}
        else:
            drop = {j.table for j in self.jobs}
        self.jobs = [j for j in self.jobs if j.table not in drop]
        if self.pending and self.pending.table in drop:
            self.pending = None
        self.notify(Notification("ABORTED", self.snapshot_id, {"tables": sorted(drop)}))
        if not self.jobs:
            self._finish()

    def _pause(self, sig: Signal) -> None:  # noqa: ARG002
        if self.snapshot_id is not None and not self.paused:
            self.paused = True
            self.notify(Notification("PAUSED", self.snapshot_id))

    def _resume(self, sig: Signal) -> None:  # noqa: ARG002
        if self.snapshot_id is not None and self.paused:
            self.paused = False
            self.notify(Notification("RESUMED", self.snapshot_id))

    def _log(self, sig: Signal) -> None:
        log.info("signal %s: %s", sig.id, sig.data.get("message", ""))
        self.notify(Notification("LOG", sig.id, {"message": str(sig.data.get("message", ""))}))

    def _finish(self) -> None:
        if self.snapshot_id is not None:
            self.notify(Notification("COMPLETED", self.snapshot_id))
        self.snapshot_id, self.jobs, self.pending, self.paused = None, [], None, False

    # -- chunks --------------------------------------------------------------------------
    def poll(self) -> None:
        """Read the next chunk if one is due (called between binlog items)."""
        if not self.active or self.paused or self.pending is not None:
            return
        job = self.jobs[0]
        db, table = job.table.split(".", 1)
        conn = self.conn()
        tdef = read_table_def(conn, db, table)  # every chunk: DDL during the snapshot is picked up
        if tdef is None:  # dropped meanwhile
            self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id, {"table": job.table, "dropped": True}))
            self.jobs.pop(0)
            if not self.jobs:
                self._finish()
            return
        keys = [job.surrogate_key] if job.surrogate_key else tdef.primary_key
        if not job.started:
            mk = max_key(conn, tdef, keys)
            job.max_key = list(mk) if mk is not None else None
            job.estimated = estimated_rows(conn, db, table)
            job.started = True
        if job.max_key is None:  # empty table
            self._table_done(job)
            return
        self.chunk_seq += 1
        chunk_id = self.chunk_seq
        marker = json.dumps({"snapshot_id": self.snapshot_id, "chunk_id": chunk_id, "table": job.table})
        self._insert_marker(f"{self.snapshot_id[:40]}-{chunk_id}-open", WINDOW_OPEN, marker)
        rows = read_chunk(conn, tdef, keys, after=job.last_key, upto=job.max_key, condition=job.condition,
                          limit=self.chunk_size)
        self._insert_marker(f"{self.snapshot_id[:40]}-{chunk_id}-close", WINDOW_CLOSE, marker)
        last = [rows[-1][k] for k in keys] if rows else None
        self.pending = PendingChunk(chunk_id, job.table, rows, tdef, last)

    def _insert_marker(self, sid: str, kind: str, data: str) -> None:
        with self.conn().cursor() as cur:
            cur.execute(f"INSERT INTO {quote_table(self.signal_table)} (id, type, data) VALUES (%s, %s, %s)",
                        (sid, kind, data))

    def _cleanup_markers(self, chunk_id: int) -> None:
        with self.conn().cursor() as cur:
            cur.execute(f"DELETE FROM {quote_table(self.signal_table)} WHERE id IN (%s, %s)",
                        (f"{self.snapshot_id[:40]}-{chunk_id}-open", f"{self.snapshot_id[:40]}-{chunk_id}-close"))

    def _close(self, sig: Signal, position: BinlogPosition) -> ReleasedChunk | None:
        p = self.pending
        if p is None or sig.data.get("chunk_id") != p.chunk_id or sig.data.get("snapshot_id") != self.snapshot_id:
            return None  # a marker of a chunk this process did not read (read again after a restart)
        self.pending = None
        job = self.jobs[0]
        keys = [job.surrogate_key] if job.surrogate_key else p.table_def.primary_key
        open_pos = p.open_position or position
        released = ReleasedChunk(self.snapshot_id, p.chunk_id, p.table_def, p.rows, open_pos, position, keys)
        job.rows += len(p.rows)
        job.chunks += 1
        self._cleanup_markers(p.chunk_id)
        if p.last_key is None or len(p.rows) < self.chunk_size:
            self._table_done(job)
        else:
            job.last_key = p.last_key
            self.notify(Notification("IN_PROGRESS", self.snapshot_id or "", {
                "table": job.table, "chunk": p.chunk_id, "rows": job.rows, "estimated": job.estimated}))
        return released

    def _table_done(self, job: TableJob) -> None:
        self.notify(Notification("TABLE_SCAN_COMPLETED", self.snapshot_id or "", {"table": job.table,
                                                                                 "rows": job.rows}))
        self.jobs.remove(job)
        if not self.jobs:
            self._finish()
