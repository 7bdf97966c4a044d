"""Producer figures: events, rate, position, lag behind the source, snapshot progress, health.

Exposed three ways: structured log lines, a status file ``<state_dir>/producer-status.json``
(``producer-status-<source>.json`` for the producer of a ``sources`` entry, :func:`status_file`)
read by ``cdc status``, and Prometheus metrics with health probes on ``producer.metrics_port``
(:func:`common.metrics_http.serve_metrics`; every metric is listed in docs/operations.md,
"Metrics").

The figures are plain numbers the stream loop adds to (a dictionary update per binlog
event, nothing more); :class:`ProducerCollector` turns them into metric families when
Prometheus scrapes. Debezium's MySQL connector's streaming and snapshot MBeans are
exposed under the names Debezium's JMX exporter rules give them (``debezium_metrics_<Attribute>``
with labels ``plugin``, ``name``, ``context``), so a dashboard or alert written for
Debezium reads ours; the rest are ``cdc_producer_*`` and ``cdc_snapshot_*``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics_http import process_registry, serve_metrics

log = logging.getLogger(__name__)

#: Seconds buckets of the producer's histograms (a binlog's commit times come in whole seconds).
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: A binlog row event's kind -> Debezium's op code (``r``: a snapshot's chunk rows).
OPS = {"insert": "c", "update": "u", "delete": "d", "read": "r"}


class SnapshotFigures:
    """The running (or last) snapshot as Debezium's snapshot MBean shows it, from the
    snapshot notifications and the coordinator's progress at each commit."""

    def __init__(self) -> None:
        self.snapshot_id: str | None = None
        self.running = self.paused = self.completed = self.aborted = False
        self.started: float | None = None  # time.time() the snapshot started (was seen)
        self.ended: float | None = None
        self.tables: set[str] = set()  # every table of the snapshot
        self.done: set[str] = set()  # ... read completely, skipped or aborted
        self.rows: dict[str, int] = {}  # rows scanned by table (kept after the snapshot ends)
        self.aborted_tables = 0  # over every snapshot since the producer started

    def _begin(self, snapshot_id: str) -> None:
        if snapshot_id != self.snapshot_id:
            self.snapshot_id, self.started, self.ended = snapshot_id, time.time(), None
            self.completed = self.aborted = False
            self.tables, self.done, self.rows = set(), set(), {}
        self.running = True

    def notification(self, kind: str, snapshot_id: str, data: dict) -> None:
        """A snapshot notification (Debezium's types: STARTED, PAUSED, RESUMED, IN_PROGRESS,
        TABLE_SCAN_COMPLETED, ABORTED, COMPLETED, ...)."""
        if snapshot_id == self.snapshot_id and data.get("table") and isinstance(data.get("rows"), int):
            self.rows[str(data["table"])] = data["rows"]  # (IN_PROGRESS, TABLE_SCAN_COMPLETED)
        if kind == "STARTED":
            self._begin(snapshot_id)
            self.tables.update(str(t) for t in data.get("tables") or [])
        elif kind in ("PAUSED", "RESUMED"):
            self.paused = kind == "PAUSED"
        elif kind == "TABLE_SCAN_COMPLETED" and data.get("table"):
            self.done.add(str(data["table"]))
        elif kind == "ABORTED":
            tables = [str(t) for t in data.get("tables") or []]
            self.aborted, self.aborted_tables = True, self.aborted_tables + len(tables)
            self.done.update(tables)
        elif kind == "COMPLETED" and snapshot_id == self.snapshot_id:
            self.running, self.paused, self.completed, self.ended = False, False, True, time.time()

    def progress(self, progress: dict | None) -> None:
        """The coordinator's state at a commit (``snapshot_progress``: None when no snapshot runs)."""
        if progress is None:
            if self.running:  # stopped without COMPLETED (every table dropped or aborted)
                self.running, self.paused, self.ended = False, False, time.time()
            return
        self._begin(str(progress["snapshot_id"]))
        self.paused = bool(progress.get("paused"))
        for t in progress.get("tables") or []:
            self.tables.add(t["table"])
            self.rows[t["table"]] = int(t["rows"])

    def duration_s(self) -> float:
        if self.started is None:
            return 0.0
        return max(0.0, (self.ended or time.time()) - self.started)


class ProducerMetrics:
    def __init__(self, name: str = "cdc") -> None:
        self.name = name
        self.events_total = 0
        self.commits_total = 0
        self.transactions_total = 0
        self.filtered_total = 0
        self.disconnects = 0
        self.last_event_source_ms = 0
        self.last_event_at = 0.0  # time.time() of the first commit after the last event
        self._events_committed = 0
        self.last_gtid: str | None = None
        self.last_commit_file = ""
        self.last_commit_pos = 0
        self.started = time.time()
        #: events written by ``(db, table, kind)`` (kind: insert/update/delete, read for chunk rows)
        self.seen: dict[tuple[str, str, str], int] = {}
        self._window: list[tuple[float, int]] = [(time.monotonic(), 0)]
        self._idle = False
        self._last_log = time.monotonic()
        self._lock = threading.Lock()
        # Snapshot progress: {"snapshot_id", "paused", "tables": [{table, rows, estimated, chunks}]} or None.
        self.snapshot_progress: dict | None = None
        self.snapshots = SnapshotFigures()
        #: Health: when the loop last moved, whether a session is connected, and why not.
        self.alive_at = time.monotonic()
        self.connected = False
        self.not_ready = "not connected yet"
        #: The writer's queue: its length now (``len`` of the Kafka producer) and its capacity.
        self.queue_length: Callable[[], int] | None = None
        self.queue_capacity = 0
        self.registry = process_registry()
        self.commit_seconds = Histogram(
            "cdc_producer_commit_seconds", "Time to commit a batch to Kafka: the events' acknowledgements, the "
            "offset record and the transaction's commit", buckets=LATENCY_BUCKETS, registry=self.registry)
        self.commit_lag = Histogram(
            "cdc_producer_commit_lag_seconds", "At each commit, seconds from the source commit of the batch's "
            "last change to its commit in Kafka (the producer's end-to-end latency)", buckets=LATENCY_BUCKETS,
            registry=self.registry)
        self.registry.register(ProducerCollector(self))

    def event(self, source_ts_ms: int, n: int = 1, seen: tuple[str, str, str] | None = None) -> None:
        """``n`` events written, the last from a change made at ``source_ts_ms``; ``seen``:
        their ``(db, table, kind)``."""
        self.events_total += n
        self.last_event_source_ms = source_ts_ms
        self._idle = False
        if seen is not None:
            self.seen[seen] = self.seen.get(seen, 0) + n

    def filtered(self, n: int) -> None:
        """``n`` row changes of tables the capture filter leaves out (event filters)."""
        self.filtered_total += n

    def transaction(self, gtid: str | None) -> None:
        """A source transaction ended (``gtid``: its GTID, when the server has them)."""
        self.transactions_total += 1
        if gtid:
            self.last_gtid = gtid

    def idle(self) -> None:
        self._idle = True

    def tick(self) -> None:
        """The loop moved (``/healthz``)."""
        self.alive_at = time.monotonic()

    def set_connected(self) -> None:
        """A session is connected to the source and to Kafka (``/readyz``)."""
        self.connected, self.not_ready = True, ""
        self.tick()

    def disconnected(self, reason: str) -> None:
        """The session ended on ``reason`` (a lost connection, a failed Kafka write); the
        producer connects again."""
        if self.connected:
            self.disconnects += 1
        self.connected, self.not_ready = False, reason
        self.queue_length = None
        self.tick()

    def health(self, stall_s: float) -> tuple[bool, str]:
        """``/healthz``: the loop moved within ``stall_s`` seconds."""
        still = time.monotonic() - self.alive_at
        if still > stall_s:
            return False, f"the producer's loop has not moved for {still:.0f}s (more than {stall_s:g}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: connected to the source and to Kafka."""
        return (True, "ok") if self.connected else (False, self.not_ready or "not connected")

    def events_per_second(self) -> float:
        now = time.monotonic()
        with self._lock:
            self._window.append((now, self.events_total))
            while len(self._window) > 2 and now - self._window[0][0] > 10:
                self._window.pop(0)
            t0, n0 = self._window[0]
        return (self.events_total - n0) / (now - t0) if now > t0 else 0.0

    def seconds_behind_source(self) -> float:
        if self._idle or not self.last_event_source_ms:
            return 0.0
        return max(0.0, time.time() - self.last_event_source_ms / 1000)

    def committed(self, resume, seconds: float | None = None) -> None:
        """A batch was committed at ``resume`` (in ``seconds``, when measured)."""
        self.commits_total += 1
        self.last_commit_file, self.last_commit_pos = resume.file, resume.pos
        if self.events_total != self._events_committed:  # (timed here, not per event: within a batch interval)
            self.last_event_at, self._events_committed = time.time(), self.events_total
        if seconds is not None:
            self.commit_seconds.observe(seconds)
        if self.last_event_source_ms and not self._idle:
            self.commit_lag.observe(max(0.0, time.time() - self.last_event_source_ms / 1000))
        self.snapshots.progress(self.snapshot_progress)
        self.tick()
        now = time.monotonic()
        if now - self._last_log >= 10:
            self._last_log = now
            log.info("position %s:%d events=%d rate=%.0f/s behind=%.1fs", resume.file, resume.pos,
                     self.events_total, self.events_per_second(), self.seconds_behind_source())

    def snapshot(self) -> dict:
        return {"events_total": self.events_total, "commits_total": self.commits_total,
                "events_per_second": round(self.events_per_second(), 1),
                "seconds_behind_source": round(self.seconds_behind_source(), 3),
                "file": self.last_commit_file, "pos": self.last_commit_pos, "pid": os.getpid(),
                "updated_at": time.time(), "snapshot": self.snapshot_progress}

    def write_status(self, path: Path, resume) -> None:  # noqa: ARG002
        """Write the figures to ``path`` (:func:`status_file`), replacing it atomically."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(self.snapshot()))
            os.replace(tmp, path)
        except OSError as exc:  # status is best effort; never stop streaming for it
            log.debug("cannot write status file: %s", exc)

    def start_server(self, port: int | None, stall_s: float = 300.0):
        """Serve the metrics and probes on ``port`` (none when unset); the server, or None."""
        return serve_metrics(port, self.registry, health=lambda: self.health(stall_s), ready=self.ready)


def _gtid_sequence(gtid: str) -> tuple[str, int] | None:
    """``(its source, sequence number)`` of a GTID: MySQL's ``uuid:n``, MariaDB's ``domain-server-n``."""
    try:
        if ":" in gtid:
            source, seq = gtid.rsplit(":", 1)
        else:
            domain, server, seq = gtid.split("-")
            source = f"{domain}-{server}"
        return source, int(seq)
    except ValueError:
        return None


class ProducerCollector(Collector):
    """:class:`ProducerMetrics` as metric families, made when Prometheus scrapes."""

    def __init__(self, m: ProducerMetrics) -> None:
        self.m = m

    def _dbz(self, attribute: str, help_: str, value: float, context: str = "streaming",
             extra: dict[str, str] | None = None) -> GaugeMetricFamily:
        """Debezium's MBean attribute ``attribute`` as its JMX exporter rules name it."""
        labels = {"plugin": "mysql", "name": self.m.name, "context": context, **(extra or {})}
        g = GaugeMetricFamily(f"debezium_metrics_{attribute}", help_, labels=list(labels))
        g.add_metric(list(labels.values()), value)
        return g

    def collect(self) -> Iterator[Metric]:
        yield from self._streaming()
        yield from self._snapshot()
        yield from self._own()

    def _streaming(self) -> Iterator[Metric]:
        m = self.m
        by_op: dict[str, int] = {}
        for (_, _, kind), n in list(m.seen.items()):
            by_op[kind] = by_op.get(kind, 0) + n
        yield self._dbz("MilliSecondsBehindSource", "Milliseconds from the source commit of the last change to "
                        "its event's write (0 when the stream is idle)", round(m.seconds_behind_source() * 1000))
        yield self._dbz("Connected", "1 while connected to the source and to Kafka", 1 if m.connected else 0)
        yield self._dbz("NumberOfDisconnects", "Sessions ended by a lost connection or a failed Kafka write",
                        m.disconnects)
        yield self._dbz("TotalNumberOfEventsSeen", "Events written (change events and snapshot rows)",
                        m.events_total)
        for attribute, kind in (("Create", "insert"), ("Update", "update"), ("Delete", "delete")):
            yield self._dbz(f"TotalNumberOf{attribute}EventsSeen", f"Row changes of kind {kind} written",
                            by_op.get(kind, 0))
        yield self._dbz("NumberOfEventsFiltered", "Row changes left out by the capture filter", m.filtered_total)
        yield self._dbz("NumberOfCommittedTransactions", "Source transactions read", m.transactions_total)
        since = (time.time() - m.last_event_at) * 1000 if m.last_event_at else -1
        yield self._dbz("MilliSecondsSinceLastEvent", "Milliseconds since the last event was written (-1: none "
                        "yet)", round(since))
        length = m.queue_length() if m.queue_length is not None else 0
        yield self._dbz("QueueTotalCapacity", "Records the Kafka writer's queue holds at most",
                        m.queue_capacity)
        yield self._dbz("QueueRemainingCapacity", "Records the Kafka writer's queue has room for",
                        max(0, m.queue_capacity - length))
        yield self._dbz("BinlogPosition", "Binlog position of the last commit to Kafka", m.last_commit_pos)

    def _snapshot(self) -> Iterator[Metric]:
        s = self.m.snapshots
        for attribute, help_, value in (
                ("SnapshotRunning", "1 while a snapshot runs", s.running),
                ("SnapshotPaused", "1 while the running snapshot is paused", s.paused),
                ("SnapshotCompleted", "1 when the last snapshot completed", s.completed),
                ("SnapshotAborted", "1 when a table of the last snapshot was aborted or stopped", s.aborted),
                ("SnapshotDurationInSeconds", "Seconds the last snapshot ran (runs)", round(s.duration_s(), 3)),
                ("TotalTableCount", "Tables of the last snapshot", len(s.tables)),
                ("RemainingTableCount", "Tables of the last snapshot not read completely yet",
                 len(s.tables - s.done) if s.running else 0)):
            yield self._dbz(attribute, help_, float(value), context="snapshot")
        rows = GaugeMetricFamily("debezium_metrics_RowsScanned", "Rows read by the last snapshot, by table",
                                 labels=["plugin", "name", "context", "table"])
        for table, n in sorted(s.rows.items()):
            rows.add_metric(["mysql", self.m.name, "snapshot", table], n)
        yield rows
        counted = CounterMetricFamily("cdc_snapshot_rows", "Rows read by the running snapshot, by table",
                                      labels=["table"])
        for t in (self.m.snapshot_progress or {}).get("tables", []):
            counted.add_metric([t["table"]], t["rows"])
        yield counted
        aborted = CounterMetricFamily("cdc_snapshot_tables_aborted", "Tables whose snapshot was aborted or stopped")
        aborted.add_metric([], s.aborted_tables)
        yield aborted

    def _own(self) -> Iterator[Metric]:
        m = self.m
        for name, help_, value in (("cdc_producer_events", "Events written", m.events_total),
                                   ("cdc_producer_commits", "Batches committed to Kafka", m.commits_total)):
            c = CounterMetricFamily(name, help_)
            c.add_metric([], value)
            yield c
        seen = CounterMetricFamily("cdc_producer_events_seen", "Events written, by table and Debezium op "
                                   "(c, u, d; r: snapshot rows)", labels=["table", "op"])
        for (db, table, kind), n in sorted(list(m.seen.items())):
            seen.add_metric([f"{db}.{table}", OPS.get(kind, kind)], n)
        yield seen
        for name, help_, value in (
                ("cdc_producer_events_per_second", "Events written per second over the last 10 s",
                 round(m.events_per_second(), 1)),
                ("cdc_producer_seconds_behind_source", "Seconds from the source commit of the last change to its "
                 "write (0 when idle)", round(m.seconds_behind_source(), 3))):
            yield GaugeMetricFamily(name, help_, value=value)
        pos = GaugeMetricFamily("cdc_producer_binlog_position", "Binlog position of the last commit, by file",
                                labels=["file"])
        pos.add_metric([m.last_commit_file], m.last_commit_pos)
        yield pos
        gtid = GaugeMetricFamily("cdc_producer_gtid_sequence", "Sequence number of the last source transaction's "
                                 "GTID, by its source (MySQL's server UUID, MariaDB's domain-server)",
                                 labels=["gtid_source"])
        found = _gtid_sequence(m.last_gtid) if m.last_gtid else None
        if found is not None:
            gtid.add_metric([found[0]], found[1])
        yield gtid


def status_file(cfg) -> Path:
    """The producer's status file: ``<state_dir>/producer-status.json``, or
    ``producer-status-<name>.json`` for the producer of a ``sources`` entry (the view
    :meth:`common.config.CDCConfig.for_source` gives), so producers sharing a state
    directory do not overwrite each other's."""
    name = cfg.source_name
    return Path(cfg.state_dir) / ("producer-status.json" if name is None else f"producer-status-{name}.json")
