"""The snapshot coordinator's chunk windows: a chunk's rows are released once the binlog
stream has passed its window (its CLOSE marker row, or for a read-only window the GTID set
after the read); CLOSE markers the server did not take are written again, windows a killed
run left open are reaped, and a read that failed is taken back to be read again (the
table's snapshot aborted after ``MAX_READ_FAILURES`` failures of one range).
"""

from __future__ import annotations

import json
import logging
import time

from contract.notifications import Notification
from contract.position import BinlogPosition
from contract.signals import WINDOW_CLOSE, WINDOW_OPEN, Signal
from producer.snapshot.chunk_reader import MarkerRows, QuietRead, Unclosed
from producer.snapshot.chunks import DeleteMissing, InflightChunk, MarkerSeen, ReleasedChunk
from producer.snapshot.gtid_windows import Boundary, window_passed
from producer.snapshot.state import TableJob

log = logging.getLogger(__name__)

#: Reads of one range that may fail while the server answers (a query it refuses) before
#: the table's snapshot is aborted.  A lost connection is retried without limit.
MAX_READ_FAILURES = 5


class ChunkWindows:
    """The snapshot coordinator's chunk windows (mixed into
    :class:`~producer.snapshot.coordinator.SnapshotCoordinator`): the chunks whose window the
    stream passed released, their CLOSE markers written (again, after a lost connection),
    the markers of unclosed windows reaped, and a failed read taken back."""

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
        if d.get("producer", self.owner) != self.owner:
            # Another producer's window (a source sharing this server's signal table): its own
            # producer publishes it, writes its CLOSE and removes its rows.  Acting on it here
            # wrote its CLOSE before its reader did, whose chunk then failed on the duplicate
            # row, again and again: that producer's snapshot never ended.
            return None, None
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

    def _close(self, ch: InflightChunk, sig: Signal, position: BinlogPosition) -> ReleasedChunk | None:
        del self.inflight[ch.chunk_id]
        self._delete_markers([sig.id, MarkerRows.open_id(sig.id)])
        try:
            rows = ch.future.result()
        except Exception as exc:  # noqa: BLE001 - a DDL race, a lost connection, a query the server refuses
            self._read_failed(ch, exc)
            return None
        return self._release(ch, rows, position)

    def _read_failed(self, ch: InflightChunk, exc: BaseException) -> None:
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

    def _release(self, ch: InflightChunk, rows: list[dict], position: BinlogPosition) -> ReleasedChunk | None:
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
