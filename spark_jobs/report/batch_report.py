"""The merge job's batch report: each micro-batch's figures aggregated from its tasks' stats,
logged, added to the job's totals, written to the merge status file (``merge-status.json``
for ``cdc status``) and served as Prometheus metrics (:class:`MergeCollector`; every metric is
listed in docs/operations.md, "Metrics").

A batch's figures: input records, rows/s, chunk rows dropped by the DBLog rule, copies, dead
letters, markers, latency p50/p99 from the source commit to the sink write, records lost in
Kafka (with ``spark.fail_on_data_loss: false``), rows deleted by table markers, records held
by pessimistic routes, and where the batch's time went (the driver's phases and the tasks').
With them, the progress watch's warnings in force (:mod:`spark_jobs.report.progress_watch`: a
partition read slower than records arrive, a batch running long, a restart on the range that
failed), fed with each batch's reads; and for the metrics: histograms of the batches'
durations and of the records' latencies, the rows each sink applied per table, the Kafka lag
per partition after the batch, and the DBLog windows open with the keys they hold.
"""

from __future__ import annotations

import bisect
import collections
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from spark_jobs.report.batch_latency import percentile
from spark_jobs.input.data_loss import DataLoss
from spark_jobs.report.progress_watch import PartitionRead, ProgressWatch

log = logging.getLogger(__name__)

#: Seconds buckets of the merge job's histograms (batch durations, source-to-sink latencies).
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

#: Batches whose timelines the report keeps (:attr:`BatchReport.recent`): a few minutes' worth.
RECENT_BATCHES = 500

#: HELP of the merge job's scalar metrics (:meth:`BatchReport.samples`).
HELP = {
    "cdc_merge_input_total": "Records read from the table topics",
    "cdc_merge_emitted_total": "Records kept by the DBLog rule (changes and chunk rows not superseded)",
    "cdc_merge_dropped_total": "Chunk rows dropped by the DBLog rule (a change of their key in their window)",
    "cdc_merge_copies_total": "Records dropped as copies (at or below the partition's highest position)",
    "cdc_merge_dead_total": "Records sent to the dead-letter topic",
    "cdc_merge_lost_partitions_total": "Partitions where Kafka lost records the job had not read",
    "cdc_merge_lost_records_total": "Records Kafka lost before the job read them (known count)",
    "cdc_merge_deleted_missing_total": "Sink rows deleted by DELETE_MISSING and TRUNCATE table markers",
    "cdc_merge_from_bytes_total": "Records a sink applied straight from their Avro bytes",
    "cdc_merge_inserted_total": "Rows of keys new in their batch written by plain INSERTs",
    "cdc_merge_fresh_refused_total": "Plain-INSERT statements that met a row of their key (then upserted)",
    "cdc_merge_partition_turns_total": "Sink writes made under the partition's own turn",
    "cdc_merge_whole_turns_total": "Sink writes made under the table's whole turn",
    "cdc_merge_batches_total": "Micro-batches run",
    "cdc_merge_held_records": "Records pessimistic routes hold until every shard ran the same DDL",
    "cdc_merge_open_windows": "DBLog chunk windows open (OPEN seen, CLOSE not yet) after the last batch",
    "cdc_merge_window_keys": "Keys changed inside the open windows, held to drop their chunk rows",
    "cdc_merge_query_running": "1 while the merge query runs",
    "cdc_merge_last_batch_rows_per_second": "Records per second of the last batch",
    "cdc_merge_last_batch_latency_p50_ms": "Median latency from source commit to sink write in the last batch",
    "cdc_merge_last_batch_latency_p99_ms": "99th percentile latency from source commit to sink write in the last batch",
    "cdc_merge_last_batch_seconds": "Duration of the last batch",
    "cdc_merge_pace_warnings": "Pace warnings in force (docs/operations.md, \"Is the job keeping pace?\")",
    "cdc_merge_partitions_falling_behind": "Partitions read slower than records arrive",
    "cdc_merge_sink_rows_total": "Rows each table sink applied (upserts and deletes), by table",
    "cdc_merge_kafka_lag": "Records in the partition's log past the last batch's read (the log's end as the batch "
                           "saw it)",
    "cdc_lake_commits_total": "Commits the lake committer made to the sink's tables (docs/lake.md, \"Commit cadence\")",
    "cdc_lake_commit_failures_total": "Lake commits that failed (tried again; the batches stay staged)",
    "cdc_lake_staged_rows": "Changes staged in the sink's tables and not yet committed",
    "cdc_lake_holding_stream": "1 while the lake holds the stream back (max_staged_rows reached)",
    "cdc_lake_commit_seconds_total": "Seconds the lake committer spent committing",
    "cdc_lake_freshness_seconds": "Seconds since the oldest change staged for the table and not yet committed was "
                                  "staged (0: the table holds everything staged)",
    "cdc_lake_table_commits_total": "Commits to the table since the merge job started",
    "cdc_lake_table_staged_rows": "Changes staged for the table and not yet committed",
}


class Buckets:
    """A histogram's cumulative state: counts per upper bound, their sum and count (for
    :class:`~prometheus_client.core.HistogramMetricFamily`)."""

    def __init__(self, bounds: Sequence[float] = SECONDS_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def add(self, value: float, count: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.sum += value * count

    def family(self, name: str, help_: str, labels: dict[str, str], into: HistogramMetricFamily | None = None
               ) -> HistogramMetricFamily:
        fam = into or HistogramMetricFamily(name, help_, labels=list(labels))
        cumulative, running = [], 0
        for bound, n in zip([*(str(b) for b in self.bounds), "+Inf"], self.counts):
            running += n
            cumulative.append((bound, running))
        fam.add_metric(list(labels.values()), cumulative, self.sum)
        return fam


class KafkaLag:
    """Each partition's lag: the records in its log past where the job's last read of it
    ended, the log's end looked up (``end_offsets``: ``{(topic, partition): (low, end)}`` of
    the partitions given) when the metrics are read, at most every :attr:`INTERVAL_S` (and at
    once for a partition read for the first time)."""

    INTERVAL_S = 10.0

    def __init__(self, end_offsets: Callable[[list[tuple[str, int]]], dict[tuple[str, int], tuple[int, int]]]
                 ) -> None:
        self.end_offsets = end_offsets
        self._at = -self.INTERVAL_S
        self._lag: dict[str, int] = {}

    def read(self, consumed: dict[str, int]) -> dict[str, int]:
        """The lag by ``topic[partition]`` of the partitions ``consumed`` (read up to there)."""
        now = time.monotonic()
        if now - self._at < self.INTERVAL_S and set(consumed) <= set(self._lag):  # (new partitions: at once)
            return self._lag
        self._at = now
        parts = {}
        for key in list(consumed):
            topic, _, part = key.rpartition("[")
            parts[(topic, int(part.rstrip("]")))] = key
        try:
            ends = self.end_offsets(list(parts))
        except Exception as exc:  # noqa: BLE001 - Kafka away: the last figures stay
            log.debug("the Kafka lag could not be looked up: %s", exc)
            return self._lag
        self._lag = {parts[tp]: max(0, end - consumed[parts[tp]]) for tp, (_, end) in ends.items() if tp in parts}
        return self._lag


class MergeCollector(Collector):
    """The figures of the ``jobs`` (``(source name, report)`` pairs, as the first source's
    job serves every job's: :func:`spark_jobs.merge_job.run_jobs`) as metric families; with
    several jobs each sample is labelled ``source="<name>"``."""

    def __init__(self, jobs, lakes=None) -> None:
        self.jobs = jobs  # a callable giving the pairs now
        self.lakes = lakes  # the process's lake committers (spark_jobs.commit.lake_committer.LakeCommitters)

    def collect(self) -> Iterator[Metric]:
        jobs = list(self.jobs())
        several = len(jobs) > 1
        families: dict[str, Metric] = {}

        def family(name: str, kind: str, labels: list[str]) -> Metric:
            if name not in families:
                cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
                families[name] = cls(name.removesuffix("_total") if kind == "counter" else name, HELP.get(name, name),
                                     labels=labels)
            return families[name]
        for source, report in jobs:
            base = {"source": source} if several else {}
            for name, kind, value in report.samples():
                family(name, kind, list(base)).add_metric(list(base.values()), value)
            for (sink, table), n in sorted(report.sink_rows.items()):
                family("cdc_merge_sink_rows_total", "counter", [*base, "sink", "table"]).add_metric(
                    [*base.values(), sink, table], n)
            for key, lag in sorted((report.kafka_lag.read(report.consumed) if report.kafka_lag else {}).items()):
                topic, _, part = key.rpartition("[")
                family("cdc_merge_kafka_lag", "gauge", [*base, "topic", "partition"]).add_metric(
                    [*base.values(), topic, part.rstrip("]")], lag)
        for name, kind, labels, value in (self.lakes.samples() if self.lakes is not None else []):
            family(name, kind, list(labels)).add_metric(list(labels.values()), value)
        for name in ("cdc_merge_sink_rows_total", "cdc_merge_kafka_lag"):
            if name not in families:
                family(name, "counter" if name.endswith("_total") else "gauge", [])
        yield from families.values()
        for name, attr, help_ in (
                ("cdc_merge_batch_seconds", "batch_seconds", "Duration of the micro-batches"),
                ("cdc_merge_latency_seconds", "latency", "Seconds from a record's source commit to its write by "
                 "the merge job (records kept by the DBLog rule)")):
            fam = HistogramMetricFamily(name, help_, labels=["source"] if several else [])
            for source, report in jobs:
                getattr(report, attr).family(name, help_, {"source": source} if several else {}, into=fam)
            yield fam


class BatchReport:
    """The figures of one source's merge job (its status file ``status_path``): the last
    batch's, and totals over every batch since the job started."""

    def __init__(self, status_path: Path, watch: ProgressWatch | None = None) -> None:
        self.status_path = status_path
        #: Whether the job keeps pace with its partitions (warnings in the status and metrics)
        self.watch = watch if watch is not None else ProgressWatch()
        self._status: dict | None = None  # the last batch's, rewritten with new warnings
        self.batches = 0
        #: Records pessimistic routes hold now (after the last batch), and the most held at once.
        self.held = self.held_peak = 0
        self.totals = {"input": 0, "emitted": 0, "dropped": 0, "copies": 0, "dead": 0, "lost_partitions": 0,
                       "lost_records": 0, "deleted_missing": 0,
                       "from_bytes": 0,  # records a sink applied from their Avro bytes (apply_encoded)
                       # of them, rows of keys new in the batch written by plain INSERTs, and the
                       # statements of such rows that met a row of their key (then upserted)
                       "inserted": 0, "fresh_refused": 0,
                       # a task's writes to a sink under its partition's turn / the table's whole turn
                       "partition_turns": 0, "whole_turns": 0,
                       # clean partition writes that read the partition's tail (the rest knew it
                       # from the partition's state: spark_jobs.clean_changelog)
                       "clean_tails_read": 0, "clean_writes": 0}
        self.last: dict = {}
        #: The last batches' timelines (``RECENT_BATCHES``): id, wall-clock start and end
        #: (``time.time()``), records, phases and each range's span in the tasks (``[topic,
        #: partition, began, ended, pid]``; the driver's pid for a batch merged inline): what
        #: ``cdc bench latency`` lines up with each row's times and Spark's progress reports.
        self.recent: collections.deque[dict] = collections.deque(maxlen=RECENT_BATCHES)
        self.phase_totals: dict[str, float] = {}  # seconds per phase over every batch (see report)
        #: For the metrics: the batches' durations and the records' latencies (seconds), rows
        #: applied by ``(sink, db.table)``, the Kafka lag by ``topic[partition]`` after the last
        #: batch, the DBLog windows open and the keys they hold, and whether the query runs.
        self.batch_seconds, self.latency = Buckets(), Buckets()
        self.sink_rows: dict[tuple[str, str], int] = {}
        self.consumed: dict[str, int] = {}  # the end of the last read by ``topic[partition]``
        self.kafka_lag: KafkaLag | None = None  # (set by the job: the lag needs Kafka's end offsets)
        self.open_windows = self.window_keys = 0
        self.query_running = False
        self.not_running = "not started yet"  # (why not, for /readyz)

    def samples(self) -> list[tuple[str, str, float]]:
        """The merge job's figures: ``(metric name, Prometheus type, value)``."""
        out = [(f"cdc_merge_{name}_total", "counter", value) for name, value in self.totals.items()]
        out += [("cdc_merge_batches_total", "counter", self.batches), ("cdc_merge_held_records", "gauge", self.held),
                ("cdc_merge_open_windows", "gauge", self.open_windows),
                ("cdc_merge_window_keys", "gauge", self.window_keys),
                ("cdc_merge_query_running", "gauge", 1 if self.query_running else 0)]
        for name in ("rows_per_second", "latency_p50_ms", "latency_p99_ms", "seconds"):
            v = self.last.get(name)
            if v is not None:
                out.append((f"cdc_merge_last_batch_{name}", "gauge", v))
        pace = self.watch.current()
        out += [("cdc_merge_pace_warnings", "gauge", len(pace)),
                ("cdc_merge_partitions_falling_behind", "gauge", sum(w.kind == "falling_behind" for w in pace))]
        return out

    def report(self, batch_id: int, stats: list[dict], markers: int, seconds: float, *,
               lost: Sequence[DataLoss] = (), deleted_missing: int = 0, phases: dict | None = None,
               latest: dict[str, int] | None = None, spark_ms: dict | None = None,
               ranges: dict[str, tuple[int, int]] | None = None, states: dict | None = None,
               started_at: float | None = None) -> None:
        """Batch ``batch_id``'s figures from its tasks' ``stats``: aggregated, logged, added to
        the totals and written to the status file; its reads judged by the progress watch
        (``latest``: the log's end offsets by ``topic[partition]`` where known); ``spark_ms``:
        Spark's own phases of the batch before (its progress report's ``durationMs``);
        ``ranges``: the batch's ranges by ``topic[partition]``, ``states``: the partitions'
        states after it (for the metrics: :meth:`_measure`); ``started_at``: the batch's start
        (``time.time()``), for :attr:`recent`."""
        agg = {k: sum(s.get(k, 0) for s in stats) for k in ("input", "emitted", "dropped", "copies", "dead",
                                                            "upserted", "deleted", "held", "from_bytes",
                                                            "inserted", "fresh_refused", "partition_turns",
                                                            "whole_turns", "clean_tails_read", "clean_writes")}
        # Where the batch's time went: the driver's phases (wall clock) and the tasks' own,
        # summed over the tasks (which run side by side): wall clock (``*_s``) and the task
        # thread's CPU time (``*_cpu_s``: what a phase costs, whatever else the machine does);
        # ``sinks_turn_s``: of ``sinks_s``, the wait for the tables' turns (other tasks' writes).
        phases = {**(phases or {}), **{k: sum(s.get(k, 0.0) for s in stats)
                                       for k in ("read_s", "decide_s", "changelog_s", "sinks_s", "sinks_turn_s",
                                                 "read_cpu_s", "decide_cpu_s", "changelog_cpu_s", "sinks_cpu_s")}}
        phases = {k: round(v, 3) for k, v in phases.items()}
        for k, v in phases.items():
            self.phase_totals[k] = self.phase_totals.get(k, 0.0) + v
        agg["lost_partitions"] = len(lost)
        agg["lost_records"] = sum(x.skipped or 0 for x in lost)
        agg["deleted_missing"] = deleted_missing
        if lost:
            log.warning("batch %d: Kafka lost records the job had not read (spark.fail_on_data_loss is false, the "
                        "job carries on from what Kafka holds): %d partition(s), %s records known skipped: %s",
                        batch_id, len(lost), f"{agg['lost_records']:,}",
                        "; ".join(x.describe() for x in lost))
        lat = [pair for s in stats for pair in s.get("latencies_ms", [])]  # ([latency, count], batch_latency)
        p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        self._measure(stats, seconds, lat, ranges or {}, states)
        self.batches += 1
        if agg["held"] != self.held:  # (logged when it changes, not every batch while rows wait)
            log.info("batch %d: %d record(s) held by pessimistic routes until every shard ran the same DDL",
                     batch_id, agg["held"])
        self.held, self.held_peak = agg["held"], max(self.held_peak, agg["held"])
        for k in self.totals:
            self.totals[k] += agg.get(k, 0)
        rate = agg["input"] / seconds if seconds > 0 else 0.0
        if agg["input"] or markers:
            log.info("batch %d: %d records (%.0f/s), %d emitted, %d chunk rows dropped by the DBLog rule, %d copies, "
                     "%d dead letters, %d markers, latency p50 %s ms p99 %s ms", batch_id, agg["input"], rate,
                     agg["emitted"], agg["dropped"], agg["copies"], agg["dead"], markers,
                     f"{p50:.0f}" if p50 is not None else "-", f"{p99:.0f}" if p99 is not None else "-")
            log.debug("batch %d phases: %s", batch_id, phases)
        self.last = {**agg, "markers": markers, "seconds": seconds, "rows_per_second": rate,
                     "latency_p50_ms": p50, "latency_p99_ms": p99}
        start = started_at if started_at is not None else time.time() - seconds
        self.recent.append({"batch_id": batch_id, "started_at": start, "ended_at": start + seconds,
                            "input": agg["input"], "phases": phases,
                            "spans": [s["span"] for s in stats if "span" in s]})
        reads = [r for r in (PartitionRead.from_stats(s) for s in stats) if r is not None]
        for w in self.watch.batch_done(time.monotonic(), seconds, reads, latest):
            log.warning("batch %d: %s", batch_id, w.message)
        self._status = {"pid": os.getpid(), "updated_at": time.time(), "batch_id": batch_id, "batches": self.batches,
                        "last_batch": {**agg, "markers": markers, "seconds": round(seconds, 3),
                                       "rows_per_second": round(rate, 1), "latency_p50_ms": p50,
                                       "latency_p99_ms": p99, "phases": phases,
                                       "lost": [x.to_json() for x in lost]},
                        "totals": self.totals, "spark_ms": spark_ms or {}}
        self.rewrite()

    def _measure(self, stats: list[dict], seconds: float, latencies: list,
                 ranges: dict[str, tuple[int, int]], states: dict | None) -> None:
        """The batch's figures for the metrics alone: its duration and its records'
        latencies into the histograms, the rows each sink applied per table (the tasks'
        ``sink_rows``), where the batch's read of each partition ended, and the open windows."""
        self.batch_seconds.add(seconds)
        for ms, count in latencies:
            self.latency.add(ms / 1000, int(count))
        for s in stats:
            for key, n in (s.get("sink_rows") or {}).items():
                sink, _, table = key.partition("|")
                self.sink_rows[(sink, table)] = self.sink_rows.get((sink, table), 0) + int(n)
        for key, (_, end) in ranges.items():
            self.consumed[key] = max(int(end), self.consumed.get(key, 0))
        if states is not None:
            windows = [w for st in states.values() for w in ((st or {}).get("buffer") or {}).get("windows", [])]
            self.open_windows, self.window_keys = len(windows), sum(len(w[4]) for w in windows)

    def rewrite(self) -> None:
        """The status file again with the warnings in force now (the watcher thread's, while
        a batch runs long)."""
        status = {**(self._status or {"pid": os.getpid(), "updated_at": 0, "batch_id": None, "batches": 0,
                                      "last_batch": {}, "totals": self.totals}),
                  "warnings": [w.to_json() for w in self.watch.current()], "watched_at": time.time()}
        self._write_status(status)

    def _write_status(self, status: dict) -> None:
        """The merge status file, replaced whole (best effort: ``cdc status`` reads it)."""
        try:
            self.status_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.status_path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_text(json.dumps(status))
            os.replace(tmp, self.status_path)
        except OSError as exc:  # best effort
            log.debug("cannot write the merge status file: %s", exc)
