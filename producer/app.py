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

import json
import logging
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

import schemas
from common.config import CDCConfig
from common.errors import SourceUnavailable
from common.sql.sessions import connect, read_session
from producer import binlog_source as src
from producer.binlog_reader import Idle, ResumePoint, RowChanges, SchemaChange, TransactionEnd
from producer.capture_filter import CaptureFilter
from producer.event_builder import EventBuilder
from producer.errors import BinlogPurgedError, KafkaHistoryLost, ProducerStopped, WriterError
from producer.kafka_writer import KafkaWriter
from producer.metrics import ProducerMetrics
from producer.offset_store import LocalOffsetCopy, OffsetStore, lost_history
from producer.pipeline import ReaderProcess
from contract.errors import BadSignal
from contract.position import BinlogPosition
from producer.snapshot_coordinator import MarkerSeen, Notification, ReleasedChunk, SnapshotCoordinator
from producer.table_reader import list_tables

log = logging.getLogger(__name__)

_DDL = re.compile(
    r"^\s*(?P<verb>CREATE|ALTER|DROP|TRUNCATE|RENAME)\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?"
    r"(?P<kind>TABLE|DATABASE|SCHEMA)?\s*(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(?P<name>(?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)", re.IGNORECASE)
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([\w$]+)")


def _without_comments(ddl: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", ddl, flags=re.S)


def ddl_target(ddl: str, default_db: str) -> tuple[str, str | None, str | None]:
    """``(verb, db, table)`` of a table or database DDL statement.

    ``table`` is None for database statements; ``("", None, None)`` for anything else
    (users, grants, views, routines...), which is never published: such statements can
    carry passwords."""
    m = _DDL.match(_without_comments(ddl))
    if not m:
        return "", None, None
    verb, kind = m.group("verb").lower(), (m.group("kind") or "").upper()
    if verb == "truncate" and not kind:
        kind = "TABLE"  # TRUNCATE t
    if kind not in ("TABLE", "DATABASE", "SCHEMA"):
        return "", None, None
    parts = [a.replace("``", "`") if a else b for a, b in _IDENT.findall(m.group("name"))]
    if kind in ("DATABASE", "SCHEMA"):
        return verb, parts[0], None
    if len(parts) == 2:
        return verb, parts[0], parts[1]
    return verb, default_db or None, parts[0]


# ALTER clauses that change existing rows without logging row events: a column renamed
# (RENAME COLUMN, CHANGE), or added with a value for the existing rows (DEFAULT, or NOT
# NULL and its implicit default).
_DRIFT_ALTER = re.compile(r"\bRENAME\s+COLUMN\b|\bCHANGE\b|\bADD\b(?:\s+COLUMN)?[^,;]*\b(?:DEFAULT|NOT\s+NULL)\b",
                          re.I)


def sink_drift(verb: str, ddl: str) -> str | None:
    """What a table DDL statement leaves the table sinks unable to follow row for row, as
    advice for the log; None when they follow (see docs/operations.md, schema changes)."""
    if verb == "truncate":
        return ("no row events are logged for TRUNCATE, so the sink tables keep their rows: empty the sink "
                "tables, then trigger a snapshot of the table (cdc snapshot) to bring back rows written since")
    if verb == "alter" and _DRIFT_ALTER.search(_without_comments(ddl)):
        return ("rows the statement changed without row events (a column renamed, or added with a value "
                "for the existing rows) reach the sink tables only when they change again: trigger a snapshot "
                "of the table (cdc snapshot) to refresh them")
    return None


#: How a producer recovers when Kafka lost its history (producer.lost_history).
RECOVERY_MODES = ("stop", "resume", "snapshot")


@dataclass
class ProducerState:
    resume: ResumePoint
    stored_last: BinlogPosition | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ProducerApp:
    def __init__(self, cfg: CDCConfig) -> None:
        self.cfg = cfg
        self.filter = CaptureFilter(cfg.source)
        self.store = OffsetStore(cfg.kafka, cfg.producer.name)
        self.local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
        #: ``cdc produce --recover``: how to recover from lost Kafka history on this start
        self.recover: str | None = None
        self.metrics = ProducerMetrics()
        self._stop = threading.Event()
        self.state_dir = Path(cfg.state_dir)

    def stop(self) -> None:
        self._stop.set()

    # -- start position ---------------------------------------------------------------
    def _startup(self, conn, info: src.ServerInfo, stored: dict | None) -> ProducerState:
        local = self.local.load()
        problem = lost_history(stored, local)
        if problem is not None:
            return self._recover(conn, problem, local)
        if local is not None and self.recover and self.recover != "stop":
            log.info("--recover %s: Kafka holds this producer's history, nothing to recover", self.recover)
        if stored and stored.get("resume"):
            r = stored["resume"]
            src.check_position_available(conn, r["file"])
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            log.info("resuming from stored position %s:%s (last change %s)", r["file"], r["pos"], r.get("last"))
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last,
                                 {k: v for k, v in stored.items() if k not in ("resume", "ts_ms")})
        st = self.cfg.producer.startup
        extra: dict[str, Any] = {}
        if st.mode in ("latest", "initial"):
            file, pos = src.current_position(conn)
            if st.mode == "initial":
                extra["initial_snapshot"] = "pending"
                log.info("startup mode 'initial': streaming from %s:%s; the captured tables' snapshot is handed "
                         "to the snapshot coordinator", file, pos)
            resume = ResumePoint(file, pos)
        elif st.mode == "earliest":
            file, pos = src.earliest_position(conn)
            resume = ResumePoint(file, pos)
        elif st.mode == "position":
            if not st.file or st.pos is None:
                raise ProducerStopped("startup.mode=position needs startup.file and startup.pos")
            src.check_position_available(conn, st.file)
            resume = ResumePoint(st.file, int(st.pos))
        elif st.mode == "gtid":
            if not st.gtid_set:
                raise ProducerStopped("startup.mode=gtid needs startup.gtid_set")
            resume = ResumePoint("", 4, gtid_set=src.validate_gtid_set(st.gtid_set, info))
        elif st.mode == "timestamp":
            if not st.timestamp:
                raise ProducerStopped("startup.mode=timestamp needs startup.timestamp")
            file, pos = src.earliest_position(conn)
            resume = ResumePoint(file, pos, skip_to_timestamp=src.parse_timestamp(st.timestamp))
        else:  # pragma: no cover - validated by the config model
            raise ProducerStopped(f"unknown startup mode {st.mode}")
        log.info("no stored position: starting at %s (startup.mode=%s)",
                 resume.gtid_set or f"{resume.file}:{resume.pos}", st.mode)
        return ProducerState(resume, None, extra)

    def _recover(self, conn, problem: str, local: dict) -> ProducerState:
        """Kafka lost this producer's history (``problem``): stop, or recover as asked."""
        r = local["resume"]
        requested = (local.get("recover") or {}).get("mode")
        mode = self.recover or requested or self.cfg.producer.lost_history
        kept = f"{r['file']}:{r['pos']}" + (f" (last change {r['last']})" if r.get("last") else "")
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(local.get("ts_ms", 0) / 1000))
        what = (f"Kafka lost the history of producer '{self.cfg.producer.name}': {problem} in "
                f"{self.store.topic} on {self.cfg.kafka.bootstrap_servers}, but the position it committed last, "
                f"{kept} at {when}, is kept in {self.local.path}. The broker was emptied or the topic deleted, or "
                f"this is another Kafka cluster. The change events written before that position are gone from "
                f"Kafka: consumers that had not read them lost them")
        try:
            src.check_position_available(conn, r["file"])
            in_binlog = True
        except BinlogPurgedError:
            in_binlog = False
        if mode == "stop":
            resume_hint = (f"re-publish from {r['file']}:{r['pos']} (the binlog still has it); changes before it that "
                           "a consumer had not read stay lost to it" if in_binlog else
                           f"not possible: the binlog no longer has {r['file']}")
            raise KafkaHistoryLost(
                f"{what}.\nRecover with one of:\n"
                f"  cdc produce --recover resume     {resume_hint}\n"
                f"  cdc produce --recover snapshot   stream from {'there' if in_binlog else 'the current position'} "
                f"and snapshot every captured table again (delete-missing: the sinks also drop rows deleted "
                f"meanwhile), so the sinks and the clean changelog are whole again\n"
                f"(producer.lost_history: resume|snapshot does the same on every start; cdc produce --reset-offsets "
                f"forgets both positions and starts as producer.startup says)", local, self.local.path)
        extra = {k: v for k, v in local.items() if k not in ("resume", "ts_ms", "recover")}
        if mode == "resume":
            if not in_binlog:
                raise ProducerStopped(f"{what}.\nRecovery by resume is not possible: the binlog no longer has "
                                      f"{r['file']}. Use: cdc produce --recover snapshot")
            log.error("%s. Recovering (%s): re-publishing from %s; changes before it that a consumer had not read "
                      "stay lost to it (the merge job stops and names them)", what, mode, kept)
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last, extra)
        # snapshot: stream on from the kept position when the binlog has it, and read every
        # captured table again; delete-missing removes from the sinks what was deleted meanwhile
        extra.pop("snapshot", None)
        extra["initial_snapshot"] = "pending"
        extra["initial_delete_missing"] = True
        if in_binlog:
            log.error("%s. Recovering (%s): streaming from %s and snapshotting every captured table again "
                      "(delete-missing)", what, mode, kept)
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last, extra)
        file, pos = src.current_position(conn)
        log.error("%s. The binlog no longer has %s either. Recovering (%s): streaming from the current position "
                  "%s:%s and snapshotting every captured table again (delete-missing)", what, r["file"], mode, file, pos)
        return ProducerState(ResumePoint(file, pos), None, extra)

    # -- main loop ------------------------------------------------------------------------
    def run(self, *, max_events: int | None = None, idle_exit_s: float | None = None) -> int:
        """Stream until stopped (SIGTERM/SIGINT or :meth:`stop`).  ``idle_exit_s``: return
        after that long without new binlog events (tests, benchmarks)."""
        self.metrics.start_server(self.cfg.producer.metrics_port)
        delay = 0.5
        while not self._stop.is_set():
            try:
                return self._run_once(max_events=max_events, idle_exit_s=idle_exit_s)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionError, OSError,
                    SourceUnavailable) as exc:
                log.warning("source connection lost (%s); reconnecting in %.1fs", exc, delay)
            except WriterError as exc:
                log.error("Kafka write failed (%s); restarting from the stored position in %.1fs", exc, delay)
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)
        return 0

    def _run_once(self, *, max_events: int | None, idle_exit_s: float | None) -> int:
        cfg = self.cfg
        conn = connect(cfg.source)
        try:
            info = src.check_server(conn)
            self.store.ensure()
            stored = self.store.load()
            state = self._startup(conn, info, stored)
        finally:
            conn.close()
        # The reader process starts first: it reads ahead while the writer connects.
        reader = ReaderProcess(cfg.source, state.resume, is_mariadb=info.is_mariadb,
                               batch_rows=max(1, cfg.producer.batch_size // 4))
        try:
            writer = KafkaWriter(cfg.kafka, cfg.producer.name, transactions=cfg.kafka.transactions,
                                 fmt=cfg.producer.format, offsets_topic=self.store.topic)
            try:
                builder = EventBuilder(cfg.kafka.topic_prefix, cfg.producer.name, info.server_id,
                                       key_columns=cfg.source.key_columns, excluded_columns=cfg.source.exclude_columns)
                coordinator = SnapshotCoordinator(
                    signal_table=cfg.source.signal_table, chunk_size=cfg.snapshot.chunk_size,
                    parallelism=cfg.snapshot.parallelism, captures=self.filter.captures,
                    connect=lambda: read_session(cfg.source), state=state.extra.get("snapshot"))
                session = _Session(self, writer, builder, reader, state, info, coordinator)
                try:
                    return session.loop(max_events=max_events, idle_exit_s=idle_exit_s)
                finally:
                    coordinator.close()
            finally:
                writer.close()
        finally:
            reader.close()


class _Session:
    """One connected run: reader + writer, until stopped or an error."""

    def __init__(self, app: ProducerApp, writer: KafkaWriter, builder: EventBuilder, reader: ReaderProcess,
                 state: ProducerState, info: src.ServerInfo, coordinator: SnapshotCoordinator) -> None:
        self.app, self.writer, self.builder, self.reader, self.state, self.info = app, writer, builder, reader, state, info
        self.coord = coordinator
        coordinator.notify = self._notify
        self.cfg = app.cfg
        self.prefix = self.cfg.kafka.topic_prefix
        self.batch_events = 0
        self.batch_started = time.monotonic()
        self.last_heartbeat = time.monotonic()
        self.schema_change_schema = None
        self._txn: dict | None = None  # the open transaction's metadata (transaction_metadata on)
        # Where to restart to lose nothing of what has been handled: a ResumePoint, or the
        # last RowChanges handled (its resume point, built when needed).
        r = state.resume
        self._handled: ResumePoint | RowChanges = ResumePoint(r.file, r.pos, r.last)
        self._stored_last = state.stored_last.encode() if state.stored_last is not None else None

    def current_resume(self) -> ResumePoint:
        h = self._handled
        return h.resume if type(h) is RowChanges else h

    def loop(self, *, max_events: int | None, idle_exit_s: float | None) -> int:
        cfg, app = self.cfg, self.app
        total = 0
        last_activity = time.monotonic()
        if self.state.extra.get("initial_snapshot") == "pending":
            self._start_initial_snapshot()
        coord = self.coord
        coord.poll()
        for item in self.reader:
            kind = type(item)
            if kind is RowChanges:
                last_activity = time.monotonic()
                self._handled = item
                if app.filter.is_signal(item.db, item.table):
                    self._signal(item)
                elif not app.filter.ignored(item.db, item.table, item.kind):
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
                if self._txn is not None:
                    self._txn_end(item)
                if self._due():
                    self._commit(item.resume)
            elif kind is Idle:
                if item.resume is not None:
                    self._handled = item.resume
                app.metrics.idle()
                if self.batch_events and item.resume is not None:
                    self._commit(item.resume)
                self._heartbeat()
                if idle_exit_s is not None and time.monotonic() - last_activity >= idle_exit_s:
                    break
            elif kind is SchemaChange:
                last_activity = time.monotonic()
                self._handled = item.resume
                self._schema_change(item)
            if coord.busy:
                coord.poll()
                self._write_deletions()
            if self.batch_events >= cfg.producer.batch_size * 4:
                # A very large transaction: commit mid-transaction (resume = its start + last change).
                self._commit(self.current_resume())
            if app._stop.is_set() or (max_events is not None and total >= max_events):
                break
        if self.batch_events or self.writer.in_batch:
            self._commit(self.current_resume())
        return 0

    def _produce(self, item: RowChanges, start: int, stop: int) -> int:
        """Write the events of rows ``start`` to ``stop - 1``; their number."""
        records = self.builder.records(item, start, stop, self.writer, skip_up_to=self._stored_last)
        if records:
            if self.cfg.producer.transaction_metadata:
                self._txn_begin(item, len(records))
            self.writer.produce_all(records)
            self.batch_events += len(records)
            self.app.metrics.event(item.ts_ms, len(records))
        return len(records)

    # -- transaction metadata (Debezium's BEGIN/END records on <prefix>.transaction) ------
    def _txn_write(self, status: str, txn_id: str, position: str, **extra) -> None:
        value = {"status": status, "id": txn_id, "ts_ms": int(time.time() * 1000), "event_count": None,
                 "data_collections": None, **extra}
        self.writer.produce(f"{self.prefix}.transaction", json.dumps({"id": txn_id}).encode(),
                            json.dumps(value).encode(), position)
        self.batch_events += 1

    def _txn_begin(self, item: RowChanges, n: int) -> None:
        txn_id = item.gtid or f"{item.resume_file}:{item.resume_pos}"
        if self._txn is None or self._txn["id"] != txn_id:
            self._txn = {"id": txn_id, "count": 0, "collections": {}}
            self._txn_write("BEGIN", txn_id, item.base.encode())
        self._txn["count"] += n
        name = f"{item.db}.{item.table}"
        self._txn["collections"][name] = self._txn["collections"].get(name, 0) + n

    def _txn_end(self, end: TransactionEnd) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        self._txn_write("END", txn["id"], end.position.encode(), event_count=txn["count"],
                        data_collections=[{"data_collection": k, "event_count": v}
                                          for k, v in txn["collections"].items()])

    def _due(self) -> bool:
        return self.batch_events > 0 and (self.batch_events >= self.cfg.producer.batch_size or
                                          time.monotonic() - self.batch_started >= self.cfg.producer.batch_interval_s)

    def _commit(self, resume: ResumePoint) -> None:
        snap = self.coord.state()
        if snap is None:
            self.state.extra.pop("snapshot", None)
        else:
            self.state.extra["snapshot"] = snap
        self.app.metrics.snapshot_progress = None if snap is None or snap["snapshot_id"] is None else {
            "snapshot_id": snap["snapshot_id"], "paused": snap["paused"], "tables": self.coord.progress()}
        key, value = self.app.store.record({"resume": resume.to_json(), **self.state.extra})
        self.writer.commit(key, value)
        self.app.local.save(value)  # after Kafka has it: the local copy is never ahead of Kafka
        self.batch_events = 0
        self.batch_started = time.monotonic()
        self.app.metrics.committed(resume)
        self.app.metrics.write_status(self.app.state_dir, resume)

    # -- snapshots ---------------------------------------------------------------------------
    def _signal(self, item: RowChanges) -> None:
        """Rows inserted into the signal table: user signals and the chunk window markers.
        (The DELETEs that clean up marker rows are not signals.)"""
        if item.kind != "insert":
            return
        for i in range(item.first, len(item.rows)):
            _, row, _, _ = item.images(i)
            marker, released = self.coord.on_signal(row or {}, item.base.with_row(2 * i))
            if marker is not None:
                self._write_marker(marker)
            if released is not None:
                self._write_chunk(released)
        self._write_deletions()

    def _write_marker(self, m: MarkerSeen) -> None:
        db, table = m.table.split(".", 1)
        value = {"kind": m.kind, "snapshot_id": m.snapshot_id, "chunk_id": m.chunk_id, "db": db, "table": table,
                 "key_range": m.key_range, "position": m.position.encode(), "file": m.position.file_name,
                 "pos": m.position.pos, "ts_ms": int(time.time() * 1000)}
        topic = f"{self.prefix}._markers"
        self.writer.ensure_topic(topic, partitions=1)
        self.writer.produce(topic, m.table.encode(), json.dumps(value).encode(), m.position.encode())
        self.batch_events += 1

    def _write_deletions(self) -> None:
        """DELETE_MISSING markers of the delete-missing tables read completely: after their
        chunks' rows, so a reader that sees the marker has every row of the snapshot before it."""
        for d in self.coord.take_deletions():
            db, table = d.table.split(".", 1)
            value = {"kind": "DELETE_MISSING", "snapshot_id": d.snapshot_id, "chunk_id": 0, "db": db, "table": table,
                     "key_range": None, "below": d.below.encode(), "position": d.below.encode(),
                     "file": d.below.file_name, "pos": d.below.pos, "ts_ms": int(time.time() * 1000)}
            topic = f"{self.prefix}._markers"
            self.writer.ensure_topic(topic, partitions=1)
            self.writer.produce(topic, d.table.encode(), json.dumps(value).encode(), d.below.encode())
            self.batch_events += 1
            log.info("snapshot %s: %s read completely; the sinks delete its rows below position %s that the "
                     "snapshot did not find (delete-missing)", d.snapshot_id, d.table, d.below.encode())

    def _write_chunk(self, chunk: ReleasedChunk) -> None:
        records = self.builder.chunk_records(chunk, self.writer)
        if records:
            self.writer.produce_all(records)
            self.batch_events += len(records)
            self.app.metrics.event(int(time.time() * 1000), len(records))

    def _notify(self, n: Notification) -> None:
        topic = f"{self.prefix}._notifications"
        self.writer.ensure_topic(topic, partitions=1)
        self.writer.produce(topic, n.snapshot_id.encode(), json.dumps(n.to_json(), default=str).encode())
        self.batch_events += 1
        log.info("snapshot notification %s %s %s", n.type, n.snapshot_id, json.dumps(n.data, default=str))

    def _start_initial_snapshot(self) -> None:
        """``startup.mode: initial``: every captured table, by the snapshot coordinator,
        while the stream runs."""
        conn = read_session(self.cfg.source)
        try:
            tables = [f"{d}.{t}" for d, t in list_tables(conn) if self.app.filter.captures(d, t)]
        finally:
            conn.close()
        self.state.extra["initial_snapshot"] = "started"
        delete_missing = bool(self.state.extra.pop("initial_delete_missing", False))
        if not tables:
            log.info("startup mode 'initial': no captured table exists yet")
            return
        try:
            # A table that cannot be snapshotted (no primary key) is skipped with a
            # notification; the others are snapshotted.
            self.coord.add_tables(tables, f"{'recovery' if delete_missing else 'initial'}-{int(time.time())}",
                                  skippable=set(tables), delete_missing=delete_missing)
        except BadSignal as exc:
            raise ProducerStopped(f"the initial snapshot cannot start: {exc.reason}") from None

    def _schema_change(self, item: SchemaChange) -> None:
        verb, db, table = ddl_target(item.ddl, item.db)
        if verb and db is not None:
            self.coord.on_schema_change(db, table)
        if not verb or db is None or not (self.app.filter.database_captured(db) if table is None else self.app.filter.captures(db, table)):
            return
        if verb and self.app.filter.ignored(db, table, verb):
            log.info("ignoring %s of %s.%s (source.ignore_events)", verb.upper(), db, table)
            return
        advice = sink_drift(verb, item.ddl)
        if advice and table is not None:
            log.warning("%s on %s.%s: %s", verb.upper(), db, table, advice)
        if self.schema_change_schema is None:
            self.schema_change_schema = {**schemas.load("schema_change"), "fields": [
                {"name": "source", "type": schemas.load("source")},
                *schemas.load("schema_change")["fields"][1:]]}
        source = {"version": "0.1.0", "connector": "mysql", "name": self.cfg.producer.name, "ts_ms": item.ts_ms,
                  "snapshot": "false", "db": db, "sequence": None, "table": table, "server_id": self.info.server_id,
                  "gtid": item.gtid, "file": item.file, "pos": item.pos, "row": 0, "thread": None, "query": None}
        value = {"source": source, "ts_ms": int(time.time() * 1000), "databaseName": db, "schemaName": None,
                 "ddl": item.ddl, "position": item.position.encode()}
        topic = self.prefix
        self.writer.produce(topic, json.dumps({"databaseName": db}).encode(),
                            self.writer.encode(self.schema_change_schema, value, topic, "value"), item.position.encode())
        self.batch_events += 1

    def _heartbeat(self) -> None:
        interval = self.cfg.producer.heartbeat_interval_s
        if interval and time.monotonic() - self.last_heartbeat >= interval:
            topic = f"{self.prefix}._heartbeat"
            resume = self.current_resume()
            self.writer.produce(topic, self.cfg.producer.name.encode(),
                                json.dumps({"ts_ms": int(time.time() * 1000), "file": resume.file,
                                            "pos": resume.pos}).encode())
            self.last_heartbeat = time.monotonic()
            self._commit(resume)


def run_producer(cfg: CDCConfig, *, recover: str | None = None, **kw) -> int:
    app = ProducerApp(cfg)
    app.recover = recover

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("stopping (signal %d)", signum)
        app.stop()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    return app.run(**kw)
