"""The stream session's blocking snapshots (:mod:`producer.snapshot.blocking`): at the first
transaction boundary after the signal the stream pauses, the tables are read whole and their
rows written at the pause point, each batch committed with the pause point as the stored
position (and the request still stored, so a restart takes the snapshot again); then the
request is dropped and the stream goes on from where it paused.

Notifications are Debezium's for a blocking snapshot (its initial snapshot's: aggregate type
``Initial Snapshot``; STARTED, IN_PROGRESS with ``current_collection_in_progress``,
TABLE_SCAN_COMPLETED with ``scanned_collection``, ``total_rows_scanned`` and ``status``,
COMPLETED; ``connector_name`` and ``data_collections`` in each), with the project's own
``tables`` / ``table`` / ``rows`` beside them (``cdc snapshot --follow`` and the metrics read those).
"""

from __future__ import annotations

import logging
import time

from common.errors import ServerError
from contract.notifications import Notification
from contract.position import BinlogPosition
from producer.binlog.server import current_position
from producer.session_services import SessionServices
from producer.snapshot.blocking import AGGREGATE_TYPE, BlockingRead, BlockingRequest, snapshot_record
from producer.snapshot.chunk_windows import MAX_READ_FAILURES
from producer.snapshot.chunks import MarkerSeen, ReleasedChunk
from producer.snapshot.gtid_windows import Boundary, MarkerSlots
from producer.snapshot.missing_tables import RECHECK_S, MissingTables
from producer.snapshot.state import TableJob, encode_key
from producer.snapshot.table_reader import read_table_def

log = logging.getLogger(__name__)


class SessionBlocking:
    """What a :class:`~producer.session.StreamSession` (``session``: it pauses, commits and
    writes) does for a blocking snapshot."""

    def __init__(self, session: SessionServices) -> None:
        self.session = session
        self._marker_slots: MarkerSlots | None = None
        #: a snapshot transaction begun ahead of the stream, held until the stream reaches its point
        self._ahead: BlockingRead | None = None

    def due(self, item) -> None:
        """At a transaction boundary with a blocking snapshot asked for: take it now."""
        queue = self.session.coord.blocking
        at = self.session.boundary(item)
        if at is None:
            return
        slots = self._slots()
        if not slots.ready(at.based):  # (a killed run wrote markers further on: pause there)
            return
        req = queue.requests[0]
        try:
            read = self._read(req, at)
            if read is None:
                return
            self._snapshot(req, at, slots, read)
        except ServerError as exc:  # the server refused a read (a lost connection is retried by the producer)
            req.failures += 1
            if req.failures < MAX_READ_FAILURES:
                log.warning("blocking snapshot %s: a read failed (%s); taken again at the next boundary",
                            req.snapshot_id, exc)
                self.session.commit(self.session.current_resume())
                return
            log.error("blocking snapshot %s: a read failed %d times (%s); the snapshot is aborted", req.snapshot_id,
                      req.failures, exc)
            self._notify("ABORTED", req, reason=f"read failed {req.failures} times: {exc}")
        queue.requests.pop(0)
        self.session.commit(self.session.current_resume())

    def _read(self, req: BlockingRequest, at: Boundary) -> BlockingRead | None:
        """The snapshot transaction to read ``req``'s tables in with the stream paused at ``at``;
        None: not here, the stream goes on.  A keyless table's rows must hold exactly the
        transactions up to the pause point (a later one, in the rows and streamed after them,
        would count twice): its snapshot, when it holds more (begun a little after ``at``), is
        kept while the stream goes on to the boundary at its point, and that boundary is the
        pause point; passed or not known, it is begun again at the next boundary."""
        read, self._ahead = self._ahead, None
        if read is not None and read.where(at) not in (0, 1):
            log.info("blocking snapshot %s: the stream passed %s, the point of the read begun for it, without a "
                     "boundary there; begun again", req.snapshot_id, read.point)
            read.close()
            read = None
        held = read is not None
        if read is None:
            cfg = self.session.cfg
            read = BlockingRead(cfg.source, cfg.snapshot.chunk_size, self.session.info.is_mariadb)
            try:
                read.open(at)
            except BaseException:
                read.close()
                raise
        where = read.where(at)
        if not req.exact or where == 0:
            return read
        if where == 1:
            if not held:
                log.info("blocking snapshot %s: the read begun at %s holds later transactions (up to %s); the "
                         "stream goes on to there, its pause point", req.snapshot_id, at.point, read.point)
            self._ahead = read
            return None
        log.info("blocking snapshot %s: the point of the read begun at %s is not known (a commit while it began); "
                 "begun again at the next boundary", req.snapshot_id, at.point)
        read.close()
        return None

    def drop_read(self) -> None:
        """The session ends: a read begun ahead of the stream is ended (begun again by the next
        session, at its first boundary)."""
        read, self._ahead = self._ahead, None
        if read is not None:
            read.close()

    def progress(self) -> dict | None:
        """The metrics' running snapshot while a blocking one is under way (None: none is)."""
        reqs = self.session.coord.blocking.requests
        return {"snapshot_id": reqs[0].snapshot_id, "paused": False, "tables": []} if reqs else None

    def _slots(self) -> MarkerSlots:
        """Positions at pause points: the read-only windows' own (one sequence of positions), or
        a sequence above the last marker in Kafka (a killed run's rows at the same point)."""
        if self.session.coord.read_only:
            return self.session.coord.slots
        if self._marker_slots is None:
            self._marker_slots = self.session.app.marker_slots()
        return self._marker_slots

    def _notify(self, kind: str, req: BlockingRequest, **data) -> None:
        base = {"connector_name": self.session.cfg.producer.name, "data_collections": ",".join(req.tables)}
        self.session.notify(Notification(kind, req.snapshot_id, {**base, **data}, aggregate_type=AGGREGATE_TYPE))

    def _snapshot(self, req: BlockingRequest, at: Boundary, slots: MarkerSlots, read: BlockingRead) -> None:
        log.info("blocking snapshot %s: the stream pauses at %s; reading %s", req.snapshot_id, at.point,
                 ", ".join(req.tables))
        self._notify("STARTED", req, tables=req.tables, signal=req.snapshot_id)
        seq = time.time_ns() // 1_000_000 * 1000  # (chunk ids no run before used)
        try:
            for n, job in enumerate(req.jobs):
                seq = self._table(req, job, read, at, slots, seq, first=n == 0, last=n == len(req.jobs) - 1)
        finally:
            read.close()
        self._notify("COMPLETED", req)
        log.info("blocking snapshot %s completed; the stream goes on from %s", req.snapshot_id, at.point)

    def _table(self, req: BlockingRequest, job: TableJob, read: BlockingRead, at: Boundary,
               slots: MarkerSlots, seq: int, *, first: bool, last: bool) -> int:
        """One table read whole and written; the last chunk id used."""
        tdef = self._table_def(job)
        if tdef is None:
            self._notify("TABLE_SCAN_COMPLETED", req, scanned_collection=job.table, status="SUCCEEDED",
                         total_rows_scanned="0", table=job.table, rows=0, dropped=True)
            return seq
        tdef = self.session.coord.resolve(tdef)
        keys = [job.surrogate_key] if job.surrogate_key else tdef.primary_key
        self._notify("IN_PROGRESS", req, current_collection_in_progress=job.table, table=job.table)
        rows, first_batch = 0, True
        for batch, last_batch in read.batches(tdef, keys, job.condition):
            end = len(batch) - 1
            marks = [snapshot_record(first and first_batch and i == 0, last and last_batch and i == end,
                                     first_batch and i == 0, last_batch and i == end) for i in range(len(batch))]
            start = 0
            for i in range(1, len(batch) + 1):  # runs of rows with the same mark: a window each
                if i == len(batch) or marks[i] != marks[start]:
                    seq += 1
                    self.session.write_chunk(self._chunk(req, job, tdef, keys, batch[start:i], marks[start], at,
                                                         slots, seq))
                    start = i
            rows += len(batch)
            first_batch = False
            if self.session.batch_events >= self.session.cfg.producer.batch_size:
                self.session.commit(self.session.current_resume())
        end = BinlogPosition.from_binlog(*current_position(self.session.coord.conn()))
        spans = self.session.coord.blocking.spans
        spans.read(job.table, (at.point.file_index, at.point.pos), (end.file_index, end.pos))
        self._notify("TABLE_SCAN_COMPLETED", req, scanned_collection=job.table, status="SUCCEEDED",
                     total_rows_scanned=str(rows), table=job.table, rows=rows)
        log.info("blocking snapshot %s: %s read, %d rows", req.snapshot_id, job.table, rows)
        return seq

    def _table_def(self, job: TableJob):
        """The table's definition on the server, None when it is gone: a table missing there
        is waited for (:class:`~producer.snapshot.missing_tables.MissingTables`: a two-step
        cut-over's moment without it), up to the grace, the stream paused meanwhile."""
        missing = MissingTables()
        while True:
            tdef = read_table_def(self.session.coord.conn(), *job.db_table)
            if tdef is not None:
                missing.found(job.table)
                return tdef
            if not missing.waits(job.table, time.monotonic()):
                return None
            time.sleep(RECHECK_S)

    @staticmethod
    def _chunk(req: BlockingRequest, job: TableJob, tdef, keys: list[str], rows: list[dict], mark: str,
               at: Boundary, slots: MarkerSlots, chunk_id: int) -> ReleasedChunk:
        """Rows as a window of their own at the pause point: OPEN, CLOSE, then the rows."""
        open_at, close_at = slots.window(at.based, len(rows))
        key_range = {"lo": encode_key([rows[0][k] for k in keys]),
                     "hi": encode_key([rows[-1][k] for k in keys])} if keys else None  # (None: a keyless table)
        markers = tuple(MarkerSeen(kind, req.snapshot_id, chunk_id, job.table, key_range, p, {"blocking": True})
                        for kind, p in (("OPEN", open_at), ("CLOSE", close_at)))
        return ReleasedChunk(req.snapshot_id, chunk_id, tdef, rows, open_at, close_at, keys, markers=markers,
                             snapshot_record=mark, server_id=0 if req.first_start else None)
