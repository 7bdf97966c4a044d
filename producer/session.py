"""One connected run of the producer: the binlog reader's items in, records out.

:class:`StreamSession` reads the binlog reader's items in order: row changes become change
events (:mod:`producer.events.builder`), rows of the signal table go to the snapshot
coordinator (user signals, window markers, released chunks), DDL becomes schema change
events; batches are committed with the offset record at transaction ends (or when a batch
is full or old), and at idle moments with a heartbeat.  Between items (every
``SIGNAL_POLL_S`` at most) and at idle moments the Kafka signal channel is read
(:mod:`producer.signal_channel`); its next offset rides with the offset record.
"""

from __future__ import annotations

import json
import logging
import time

from contract.markers import delete_missing_marker, marker_record, window_marker
from contract.notifications import Notification
from contract.position import BinlogPosition
from contract.records import heartbeat_record
from contract.signals import is_window_marker
from contract.topics import markers_topic, notifications_topic
from producer.binlog.process import ReaderProcess
from producer.binlog.reader import Idle, ResumePoint, RowChanges, SchemaChange, TransactionEnd, based
from producer.binlog.server import ServerInfo
from producer.events.builder import EventBuilder
from producer.kafka_writer import KafkaWriter
from producer.record_encoder import RecordEncoder, from_avro_bodies
from producer.schema_changes import SessionSchemaChanges
from producer.session_blocking import SessionBlocking
from producer.session_new_tables import SessionNewTables
from producer.session_services import ProducerParts
from producer.session_start import SessionStart
from producer.signal_channel import KafkaSignalChannel
from producer.snapshot.chunks import MarkerSeen, ReleasedChunk
from producer.snapshot.coordinator import SnapshotCoordinator
from producer.snapshot.gtid_windows import Boundary
from producer.startup import ProducerState
from producer.transaction_metadata import TransactionMetadata
from producer.write_path import WritePaths

log = logging.getLogger(__name__)

#: A rows event's kind and the op of its change events (Debezium's skipped.operations names ops).
ROW_OPS = {"insert": "c", "update": "u", "delete": "d"}

#: The Kafka signal channel is read between binlog items at most this often (s).
SIGNAL_POLL_S = 0.1


class StreamSession:
    """One connected run: reader + writer, until stopped or an error.  Its parts, each handed
    the session (they write, notify and commit through it): the start's snapshots and schemas
    (``start``, ``new_tables``), the schema changes of the binlog (``schema_changes``) and the
    blocking snapshots (``blocking``)."""

    def __init__(self, app: ProducerParts, writer: KafkaWriter, builder: EventBuilder, reader: ReaderProcess,
                 state: ProducerState, info: ServerInfo, coordinator: SnapshotCoordinator,
                 signals: KafkaSignalChannel | None = None) -> None:
        self.app, self.writer, self.builder, self.reader = app, writer, builder, reader
        self.state, self.info = state, info
        self.encoder = RecordEncoder(app.cfg.kafka, app.cfg.producer.format, writer.produce)
        self.coord, self.outbox = coordinator, app.outbox  # (outbox: producer.events.outbox routes its table's rows)
        coordinator.notify = self.notify
        if from_avro_bodies(app.cfg.producer.format):  # chunk rows encoded where they are read (chunk_process)
            coordinator.readers.encoding = builder.read_encoding
        coordinator.readers.on_read = reader.wake  # the loop polls the coordinator when a read is done
        self.cfg = app.cfg
        self.prefix = self.cfg.kafka.topic_prefix
        self.batch_events = 0
        self.batch_started = time.monotonic()
        self.last_heartbeat = time.monotonic()
        self.txn = TransactionMetadata(self.prefix, writer.produce)  # (producer.transaction_metadata)
        # How each table's rows are written: routed, by the native emitter, as records built here
        self.paths = WritePaths(builder, self.encoder, writer, outbox=app.outbox,
                                windows=coordinator if coordinator.read_only else None,
                                txn=self.txn if self.cfg.producer.transaction_metadata else None)
        # Where to restart to lose nothing of what has been handled: a ResumePoint, or the
        # last RowChanges handled (its resume point, built when needed).
        self._handled: ResumePoint | RowChanges = state.resume
        # The resume point last committed: the stream going idle commits a newer one even when
        # what came since produced nothing (marker rows deleted, tables not captured), so the
        # stored offsets reach the binlog's end and a restart does not read those events again.
        self._committed: tuple[str, int] | None = (state.resume.file, state.resume.pos) \
            if state.resume and state.stored else None
        self._stored_last = state.stored_last.encode() if state.stored_last is not None else None
        self.gtids = state.gtids  # the GTIDs passed (read-only windows close by them; stored with the offsets)
        # The Kafka signal channel (None: off), and whether rows of the signal table other
        # than window markers are user signals (the source channel).
        self.signals = signals
        self.source_signals = "source" in self.cfg.source.signal_channels
        # producer.skipped_operations (Debezium's skipped.operations): the row events not written
        self.skipped_kinds = frozenset(k for k, op in ROW_OPS.items() if op in self.cfg.producer.skipped_operations)
        self._signals_due = 0.0
        if signals is None:  # switched off: switched on again, it starts at the channel's end
            state.extra.pop("signal_offset", None)
        else:  # the first commit stores where this producer started reading signals
            state.extra["signal_offset"] = signals.next_offset
        self.start = SessionStart(self)
        self.new_tables = SessionNewTables(self, self.start)
        self.schema_changes, self.blocking = SessionSchemaChanges(self), SessionBlocking(self)

    def current_resume(self) -> ResumePoint:
        h = self._handled
        return h.resume if type(h) is RowChanges else h

    def loop(self, *, max_events: int | None, idle_exit_s: float | None) -> int:
        cfg, app = self.cfg, self.app
        total = 0
        last_activity = time.monotonic()
        self.start.schemas()
        self.new_tables.start_snapshots()  # (the start's own, or the newly added tables')
        coord = self.coord
        if coord.blocking.requests:  # (at the start position, before any change: the initial one, a restarted one)
            self.blocking.due(self._handled)
        coord.poll(self.boundary(self._handled))
        if self.start.streaming_done():  # (a mode that does not stream, its snapshot done before)
            self.commit(self.current_resume())
            return 0
        metrics = app.metrics
        for item in self.reader:
            kind = type(item)
            metrics.alive_at = time.monotonic()  # (/healthz: the loop moves)
            if kind is RowChanges:
                last_activity = metrics.alive_at
                self._handled = item
                if app.filter.is_signal(item.db, item.table):
                    self._signal(item)
                elif item.kind in self.skipped_kinds or app.filter.ignored(item.db, item.table, item.kind):
                    metrics.filtered(len(item.rows) - item.first)
                else:
                    if max_events is None:
                        total += self._produce(item, item.first, len(item.rows))
                    else:  # row by row, to stop after the row that reaches max_events
                        for i in range(item.first, len(item.rows)):
                            total += self._produce(item, i, i + 1)
                            if total >= max_events:
                                self._handled = item.resume_after(i)
                                break
            elif kind is TransactionEnd:
                self._handled = item.resume
                if item.gtid:
                    self.gtids.add(item.gtid)
                metrics.transaction(item.gtid)
                if self.txn.open is not None:
                    self.batch_events += self.txn.end(item)
                if self._due():
                    self.commit(item.resume)
            elif kind is Idle:
                if item.resume is not None:
                    self._handled = item.resume
                metrics.idle()
                if item.resume is not None and (self.batch_events or
                                                (item.resume.file, item.resume.pos) != self._committed):
                    self.commit(item.resume)
                self._heartbeat()
                if coord.working:  # (a snapshot's chunks are work, with or without binlog events)
                    last_activity = time.monotonic()
                elif idle_exit_s is not None and time.monotonic() - last_activity >= idle_exit_s:
                    break
            elif kind is SchemaChange:
                last_activity = time.monotonic()
                self._handled = item.resume
                if item.gtid:
                    self.gtids.add(item.gtid)
                self.schema_changes.follow(item)
            if self.signals is not None and (kind is Idle or time.monotonic() >= self._signals_due):
                self._kafka_signals(self.signals)
            if coord.busy:
                boundary = self.boundary(item) if coord.read_only else None
                coord.poll(boundary)
                if boundary is not None:
                    for chunk in coord.release_quiet(boundary):
                        self.write_chunk(chunk)
                self._write_deletions()
            if coord.blocking.requests and kind is not RowChanges:  # (a blocking snapshot: at a boundary)
                self.blocking.due(item)
            if self.batch_events >= cfg.producer.batch_size * 4:
                # A very large transaction: commit mid-transaction (resume = its start + last change).
                self.commit(self.current_resume())
            if app.stopping.is_set() or (max_events is not None and total >= max_events) or self.start.streaming_done():
                break
        if self.batch_events or self.writer.in_batch:
            self.commit(self.current_resume())
        return 0

    def boundary(self, item) -> Boundary | None:
        """The stream's place after ``item`` when that is a transaction boundary (read-only
        chunk windows open and close there), else None."""
        kind = type(item)
        if kind is TransactionEnd or kind is SchemaChange:
            resume = item.resume
        elif kind is Idle or kind is ResumePoint:
            resume = item.resume if kind is Idle else item
        else:
            return None
        if resume is None or not resume.file:
            return None
        point = resume.position()
        return Boundary(point, based(point, self.state.file_base), self.gtids)

    def _produce(self, item: RowChanges, start: int, stop: int) -> int:
        """Write the events of rows ``start`` to ``stop - 1`` by their table's write path
        (:mod:`producer.write_path`); their number."""
        table = (item.db, item.table)
        path = self.paths.get(table) or self.paths.choose(table)
        records, events = path.write(item, start, stop, self._stored_last)
        return self._written(records, events, item.ts_ms, (item.db, item.table, item.kind))

    def _written(self, records: int, events: int, ts_ms: int, what: tuple[str, str, str]) -> int:
        """``records`` were written (``events`` of them change events of ``what``): counted in the
        batch and the metrics; their number."""
        if records:
            self.batch_events += records
            self.app.metrics.event(ts_ms, events, what)
        return records

    def _due(self) -> bool:
        return self.batch_events > 0 and (self.batch_events >= self.cfg.producer.batch_size or
                                          time.monotonic() - self.batch_started >= self.cfg.producer.batch_interval_s)

    def commit(self, resume: ResumePoint) -> None:
        # The GTIDs passed at ``resume``: a commit inside a transaction resumes at its start,
        # and the transaction's GTID is added at its end.
        self.state.extra["gtid"] = str(self.gtids)
        self.start.schemas_kept()
        if (blocking := self.coord.blocking.state()) is None:
            self.state.extra.pop("blocking", None)
        else:
            self.state.extra["blocking"] = blocking
        if resume.file and self.coord.blocking.spans:  # (nothing to do, and nothing parsed, without spans)
            passed = resume.position()
            self.coord.blocking.spans.passed((passed.file_index, passed.pos))
        if (spans := self.coord.blocking.spans.state()) is None:
            self.state.extra.pop("blocking_spans", None)
        else:
            self.state.extra["blocking_spans"] = spans
        snap = self.coord.state()
        if snap is None:
            self.state.extra.pop("snapshot", None)
        else:
            self.state.extra["snapshot"] = snap
        self.app.metrics.snapshot_progress = self.blocking.progress() if snap is None or snap["snapshot_id"] is None \
            else {"snapshot_id": snap["snapshot_id"], "paused": snap["paused"], "tables": self.coord.progress()}
        key, value = self.app.store.record({"resume": resume.to_json(), **self.state.extra})
        t0 = time.monotonic()
        self.writer.commit(key, value)
        took = time.monotonic() - t0
        self.app.local.save(value)  # after Kafka has it: the local copy is never ahead of Kafka
        self.batch_events = 0
        self.batch_started = time.monotonic()
        self._committed = (resume.file, resume.pos)
        self.app.metrics.committed(resume, took)
        self.app.metrics.write_status(self.app.status_file, resume)

    # -- snapshots ---------------------------------------------------------------------------
    def _signal(self, item: RowChanges) -> None:
        """Rows inserted into the signal table: user signals and the chunk window markers.
        (The DELETEs that clean up marker rows are not signals.)"""
        if item.kind != "insert":
            return
        for i in range(item.first, len(item.rows)):
            _, row, _, _ = item.images(i)
            row = row or {}
            if not self.source_signals and not is_window_marker(row):
                log.warning("signal %r inserted into %s is not acted on: the source signal channel is off "
                            "(source.signal_channels: %s)", row.get("id"), self.cfg.source.signal_table,
                            ", ".join(self.cfg.source.signal_channels) or "none")
                continue
            marker, released = self.coord.on_signal(row, item.base.with_row(2 * i))
            if marker is not None:
                self._write_window_marker(marker)
            if released is not None:
                self.write_chunk(released)
        self._write_deletions()

    def _kafka_signals(self, channel: KafkaSignalChannel) -> None:
        """Signals of the Kafka channel, handed to the coordinator as signal table rows are.
        The channel's next offset goes into the offset record, committed in the same
        transaction as what the signals caused: each is acted on once."""
        self._signals_due = time.monotonic() + SIGNAL_POLL_S
        got = channel.poll()
        if channel.next_offset == self.state.extra.get("signal_offset"):
            return
        position = _signal_position(self.current_resume(), self.state.file_base)
        for sig in got:
            if sig.error is not None:
                self.coord.bad_signal(sig.error)
            else:  # never a window marker (refused by the channel): nothing to write but notifications
                self.coord.on_signal(sig.row or {}, position)
        self.state.extra["signal_offset"] = channel.next_offset
        self.batch_events += 1  # the stored offset moved: commit it with the next batch

    def write_marker(self, marker: dict) -> None:
        self.writer.ensure_topic(markers_topic(self.prefix), partitions=1)
        self.writer.produce(*marker_record(self.prefix, marker))
        self.batch_events += 1

    def _write_window_marker(self, m: MarkerSeen) -> None:
        self.write_marker(window_marker(m.kind, m.snapshot_id, m.chunk_id, m.table, m.key_range, m.position,
                                        **m.extra))

    def _write_deletions(self) -> None:
        """DELETE_MISSING markers of the delete-missing tables read completely: after their
        chunks' rows, so a reader that sees the marker has every row of the snapshot before it."""
        for d in self.coord.take_deletions():
            self.write_marker(delete_missing_marker(d.snapshot_id, d.table, d.below))
            log.info("snapshot %s: %s read completely; the sinks delete its rows below position %s that the "
                     "snapshot did not find (delete-missing)", d.snapshot_id, d.table, d.below.encode())

    def write_chunk(self, chunk: ReleasedChunk) -> int:
        if chunk.markers:  # read-only windows: OPEN and CLOSE go with the rows, and before them
            for m in chunk.markers:
                self._write_window_marker(m)
            # acknowledged first: rows of a killed run's batch that stay visible (a producer
            # without transactions) come with their window, and the next run's first
            # windows are placed above it (producer.app.marker_slots)
            self.writer.flush()
        what = (chunk.table_def.db, chunk.table_def.name, "read")
        if self.outbox is not None and (n := self.outbox.write_chunk(self, chunk)) is not None:
            return self._written(n, n, int(time.time() * 1000), what)
        if self.writer.emitter is not None and not chunk.changed:
            emitted = self.builder.emit_chunk(chunk, self.encoder, self.writer)  # (rows encoded where read)
            if emitted is not None:
                return self._written(emitted, emitted, int(time.time() * 1000), what)
        records = self.builder.chunk_records(chunk, self.encoder)
        if chunk.changed:  # read-only windows: the DBLog rule, here (gtid_windows)
            records = [r for r in records if r[1] not in chunk.changed]
        if records:
            self.writer.produce_all(records)
        return self._written(len(records), len(records), int(time.time() * 1000), what)

    def notify(self, n: Notification) -> None:
        self.app.metrics.snapshots.notification(n.type, n.snapshot_id, n.data)
        self.writer.ensure_topic(notifications_topic(self.prefix), partitions=1)
        self.writer.produce(*n.record(self.prefix))
        self.batch_events += 1
        log.info("snapshot notification %s %s %s", n.type, n.snapshot_id, json.dumps(n.data, default=str))

    def _heartbeat(self) -> None:
        interval = self.cfg.producer.heartbeat_interval_s
        if interval and time.monotonic() - self.last_heartbeat >= interval:
            resume = self.current_resume()
            self.writer.produce(*heartbeat_record(self.prefix, self.cfg.producer.name, resume.file, resume.pos))
            self.last_heartbeat = time.monotonic()
            self.commit(resume)


def _signal_position(resume: ResumePoint, file_base: int) -> BinlogPosition:
    """The session's binlog position, for a signal of the Kafka channel (only window markers
    use theirs, and those never come through it)."""
    try:
        return resume.position(file_base)
    except ValueError:  # no file yet (started by GTID set)
        return BinlogPosition(0, 0)
