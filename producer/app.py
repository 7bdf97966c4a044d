"""``cdc produce``: the binlog producer's main loop.

read binlog (BinlogReader, in a child process: ReaderProcess) -> filter (CaptureFilter)
-> build records (EventBuilder) -> write (KafkaWriter) -> commit batches with the offset
record (OffsetStore).

A lost source connection is retried with backoff from the last position handed to
Kafka; a Kafka write failure restarts the pipeline from the stored offset (so the
events of the failed batch are written again); a configuration problem stops with a
message.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import pymysql
from confluent_kafka import KafkaException

from common.config import CDCConfig
from common.errors import ConfigError, OffsetLookupError, ServerError, SourceUnavailable
from common.gc_tuning import tune_gc
from common.kafka.clients import check_connection, kafka_away, producer_config
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from common.sql.sessions import connect, read_session
from contract.markers import decode_marker
from contract.position import BinlogPosition, is_position
from contract.topics import markers_topic
from producer.binlog import server as src
from producer.binlog.process import GC_THRESHOLDS, ReaderProcess
from producer.capture_filter import CaptureFilter
from producer.online_schema_change import OnlineSchemaChanges
from producer.column_controls import ColumnControls
from producer.errors import BinlogPurgedError, WriterError
from producer.events.builder import EventBuilder, type_modes
from producer.events.outbox import OutboxRouter
from producer.kafka_writer import KafkaWriter
from producer.metrics import ProducerMetrics, status_file
from producer.offset_store import LocalOffsetCopy, OffsetStore
from producer.record_encoder import from_avro_bodies
from producer.session import StreamSession
from producer.signal_channel import KafkaSignalChannel
from producer.snapshot.coordinator import SnapshotCoordinator
from producer.snapshot.gtid_windows import MarkerSlots
from producer.snapshot.select_overrides import check_overrides
from producer.snapshot.table_reader import list_tables, read_table_def
from producer.startup import Startup

log = logging.getLogger(__name__)

#: ER_SOURCE_FATAL_ERROR_READING_BINLOG (MariaDB's ER_MASTER_FATAL_ERROR_READING_BINLOG): the
#: server's answer to a binlog dump it cannot serve.
BINLOG_DUMP_FATAL = 1236


class ProducerApp:
    """The producer: connects, plans the start (:mod:`producer.startup`), runs a
    :class:`~producer.session.StreamSession`, and starts again after a lost connection or a
    failed Kafka write."""

    def __init__(self, cfg: CDCConfig, source: str | None = None) -> None:
        # The producer reads one server: with ``sources``, the entry named ``source``
        # (:meth:`CDCConfig.for_source`: its settings, topic prefix and producer name).
        cfg = cfg.for_source(source).for_part("producer")  # (and its own Kafka login, when it has one)
        if cfg.kafka.input == "debezium":
            raise ConfigError(f"kafka.input is 'debezium': the topics under {cfg.kafka.topic_prefix!r} are Debezium's, "
                              "so the producer does not run (the merge job and cdc verify read them)")
        self.cfg = cfg
        self.filter = CaptureFilter(cfg.source)
        # gh-ost's and pt-osc's copies under way (their ALTERs, until the cut-over), across sessions
        self.online_schema_changes = OnlineSchemaChanges(self.filter.listed)
        # Which columns the events carry, and their keys: a bad pattern stops the start here.
        self.columns = ColumnControls.from_config(cfg.source)
        # Debezium's outbox event router (producer.outbox): a bad pattern stops the start here.
        self.outbox = OutboxRouter(cfg.producer.outbox, cfg.kafka.topic_prefix) if cfg.producer.outbox else None
        self.store = OffsetStore(cfg.kafka, cfg.producer.name)
        self.local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
        #: ``cdc produce --recover``: how to recover from lost Kafka history on this start
        self.recover: str | None = None
        self.metrics = ProducerMetrics(cfg.producer.name)
        self.metrics.queue_capacity = int(producer_config(cfg.kafka).get("queue.buffering.max.messages", 100000))
        self.startup = Startup(cfg, self.store, self.local)
        self.stopping = threading.Event()
        self.state_dir = Path(cfg.state_dir)
        self.status_file = status_file(cfg)

    def stop(self) -> None:
        self.stopping.set()

    # -- main loop ------------------------------------------------------------------------
    def run(self, *, max_events: int | None = None, idle_exit_s: float | None = None) -> int:
        """Stream until stopped (SIGTERM/SIGINT or :meth:`stop`).  ``idle_exit_s``: return
        after that long without new binlog events and without a snapshot under way (tests,
        benchmarks; a paused snapshot does not keep it running)."""
        server = self.metrics.start_server(self.cfg.producer.metrics_port, self.cfg.producer.health_stall_s)
        check_connection(self.cfg.kafka)  # a refused TLS handshake or SASL login stops here, named
        tune_gc(GC_THRESHOLDS)
        delay = 0.5
        try:
            while not self.stopping.is_set():
                try:
                    return self._run_once(max_events=max_events, idle_exit_s=idle_exit_s)
                except (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, OSError,
                        SourceUnavailable, ServerError) as exc:  # (ServerError: an ERR of the binlog client's)
                    if isinstance(exc, ServerError) and exc.code == BINLOG_DUMP_FATAL:
                        # (the server will not send what was asked, and will not on a retry: MySQL's
                        # "purged required binary logs", a GTID set it does not know, a binlog it
                        # cannot read)
                        raise BinlogPurgedError(
                            f"the source {self.cfg.source.host}:{self.cfg.source.port} refused to send its binlog "
                            f"from the producer's position: {exc}. Point the producer at a server that has these "
                            "transactions, or set producer.startup.when_needed: snapshot and start it again") from exc
                    log.warning("source connection lost (%s); reconnecting in %.1fs", exc, delay)
                    self.metrics.disconnected(f"the source connection was lost ({exc}); reconnecting")
                except WriterError as exc:
                    log.error("Kafka write failed (%s); restarting from the stored position in %.1fs", exc, delay)
                    self.metrics.disconnected(f"a Kafka write failed ({exc}); restarting")
                except (KafkaException, OffsetLookupError) as exc:  # a read (schemas, offsets, signals)
                    if isinstance(exc, KafkaException) and not kafka_away(exc):
                        raise
                    log.warning("Kafka is away or moving (%s); starting again from the stored position in %.1fs",
                                exc, delay)
                    self.metrics.disconnected(f"Kafka is away or moving ({exc}); starting again")
                self.stopping.wait(delay)
                delay = min(delay * 2, 30.0)
            return 0
        finally:
            self.metrics.disconnected("stopped")
            if server is not None:
                server.shutdown()
                server.server_close()

    def _run_once(self, *, max_events: int | None, idle_exit_s: float | None) -> int:
        cfg = self.cfg
        conn = connect(cfg.source)
        try:
            info = src.check_server(conn)
            src.check_grants(conn, read_only=cfg.snapshot.read_only, signal_table=cfg.source.signal_table)
            self._check_columns(conn)
            self._check_outbox(conn)
            check_overrides(conn, cfg.source.snapshot_select_statement_overrides, self.filter.captures)
            self.store.ensure()
            stored = self.store.load()
            state = self.startup.plan(conn, info, stored, self.recover)
        finally:
            conn.close()
        builder = EventBuilder(cfg.kafka.topic_prefix, cfg.producer.name, info.server_id,
                               tombstones=cfg.producer.tombstones, controls=self.columns,
                               modes=type_modes(cfg.producer))
        if self.outbox is not None:  # (the chunk reads leave the outbox table's rows as values: the router reads them)
            builder.read_encoding = self.outbox.read_encoding(builder.read_encoding)
        # The reader process starts first: it reads ahead while the writer connects.  Records made
        # from Avro bodies: it encodes the row images of the captured tables too (the signal
        # table's rows are read here).
        # (the outbox table's rows too: the router reads their values)
        by_values = {cfg.source.signal_table} | ({cfg.producer.outbox.table} if self.outbox else set())
        builder.versions.transcoded = cfg.producer.format == "debezium-json"
        images = builder.stream_encoding(by_values) if from_avro_bodies(cfg.producer.format) else None
        reader = ReaderProcess(cfg.source, state.resume, is_mariadb=info.is_mariadb,
                               batch_rows=max(1, cfg.producer.batch_size // 4), file_base=state.file_base,
                               images=images)
        try:
            writer = KafkaWriter(cfg.kafka, cfg.producer.name, transactions=cfg.kafka.transactions,
                                 offsets_topic=self.store.topic)
            try:
                coordinator = SnapshotCoordinator(
                    signal_table=cfg.source.signal_table, chunk_size=cfg.snapshot.chunk_size,
                    parallelism=cfg.snapshot.parallelism, captures=self.filter.captures,
                    connect=lambda: read_session(cfg.source), state=state.extra.get("snapshot"),
                    read_only=cfg.snapshot.read_only, is_mariadb=info.is_mariadb, file_base=state.file_base,
                    slots=self.marker_slots() if cfg.snapshot.read_only else None, source=cfg.source,
                    owner=cfg.producer.name, resolve=self.columns.resolve, blocking=state.extra.get("blocking"),
                    blocking_spans=state.extra.get("blocking_spans"))
                stored_signal = state.extra.get("signal_offset")
                signals = (KafkaSignalChannel(cfg.kafka, cfg.producer.name,
                                              stored_signal if isinstance(stored_signal, int) else None)
                           if "kafka" in cfg.source.signal_channels else None)
                session = StreamSession(self, writer, builder, reader, state, info, coordinator, signals)
                self.metrics.queue_length = writer.producer.__len__
                self.metrics.set_connected()
                try:
                    return session.loop(max_events=max_events, idle_exit_s=idle_exit_s)
                finally:
                    session.blocking.drop_read()
                    coordinator.close()
                    if signals is not None:
                        signals.close()
            finally:
                writer.close()
        finally:
            reader.close()


    def _check_columns(self, conn) -> None:
        """The column settings applied to every captured table now: a key column that is not
        a column of a table, or a key column left out, stops the start naming the setting
        (a table created later is checked when its first row comes)."""
        if not self.columns.active:
            return
        tables = (read_table_def(conn, db, t) for db, t in list_tables(conn) if self.filter.captures(db, t))
        self.columns.check(t for t in tables if t is not None)

    def _check_outbox(self, conn) -> None:
        """``producer.outbox`` against the outbox table now: a column it names that the table
        does not have (or its events leave out), or a table not captured, stops the start naming
        the setting (a table created later is checked when its first row comes)."""
        if self.outbox is None:
            return
        db, name = self.outbox.db, self.outbox.name
        table = read_table_def(conn, db, name)
        self.outbox.check(table, self.columns.resolve(table) if table is not None else None,
                          captured=self.filter.captures(db, name))

    def marker_slots(self) -> MarkerSlots:
        """Positions of read-only windows and blocking snapshots' rows, above the last marker in
        Kafka: a killed run may have written markers and rows at the point where this run closes
        its first window (the writer has fenced it off by now)."""
        cfg = self.cfg
        topic = markers_topic(cfg.kafka.topic_prefix)
        try:
            (low, end), = end_offsets(cfg.kafka.bootstrap_servers, [(topic, 0)],
                                      client_config=cfg.kafka.client_settings()).values()
        except KafkaException:
            return MarkerSlots()  # no markers topic yet
        top = None
        for msg in read_topic(cfg.kafka.bootstrap_servers, topic, start={0: max(low, end - 256)},
                              client_config=cfg.kafka.client_settings()):
            p = decode_marker(msg.value()).get("position") if msg.value() else None
            if is_position(p) and (top is None or p > top):
                top = p
        slots = MarkerSlots()
        if top is not None:
            slots.reserve(BinlogPosition.decode(top), cfg.snapshot.chunk_size)
        return slots


def run_producer(cfg: CDCConfig, *, recover: str | None = None, source: str | None = None, **kw) -> int:
    """Run the producer of ``source`` (a ``sources`` entry; None: the only source) until stopped."""
    app = ProducerApp(cfg, source)
    app.recover = recover

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("stopping (signal %d)", signum)
        app.stop()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    return app.run(**kw)
