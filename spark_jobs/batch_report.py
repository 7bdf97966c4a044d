"""The merge job's batch report: each micro-batch's figures aggregated from its tasks' stats,
logged, added to the job's totals, written to the merge status file (``merge-status.json``
for ``cdc status``) and served as Prometheus metrics.

A batch's figures: input records, rows/s, chunk rows dropped by the DBLog rule, copies, dead
letters, markers, latency p50/p99 from the source commit to the sink write, records lost in
Kafka (with ``spark.fail_on_data_loss: false``), rows deleted by table markers, records held
by pessimistic routes, and where the batch's time went (the driver's phases and the tasks').
With them, the progress watch's warnings in force (:mod:`spark_jobs.progress_watch`: a
partition read slower than records arrive, a batch running long, a restart on the range that
failed), fed with each batch's reads.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol, Sequence

from spark_jobs.batch_latency import percentile
from spark_jobs.data_loss import DataLoss
from spark_jobs.progress_watch import PartitionRead, ProgressWatch

log = logging.getLogger(__name__)


class _Reported(Protocol):
    source_name: str

    def samples(self) -> list[tuple[str, str, float]]: ...


def prometheus_text(jobs: Sequence[_Reported]) -> str:
    """The figures of ``jobs`` in Prometheus text format: one family per metric; with
    several jobs each sample is labelled ``source="<name>"``."""
    families: dict[str, tuple[str, list[str]]] = {}
    for job in jobs:
        label = f'{{source="{job.source_name}"}}' if len(jobs) > 1 else ""
        for name, kind, value in job.samples():
            families.setdefault(name, (kind, []))[1].append(f"{name}{label} {value}")
    lines = []
    for name, (kind, samples) in families.items():
        lines += [f"# TYPE {name} {kind}", *samples]
    return "\n".join(lines) + "\n"


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
                       "partition_turns": 0, "whole_turns": 0}
        self.last: dict = {}
        self.phase_totals: dict[str, float] = {}  # seconds per phase over every batch (see report)

    def samples(self) -> list[tuple[str, str, float]]:
        """The merge job's figures: ``(metric name, Prometheus type, value)``."""
        out = [(f"cdc_merge_{name}_total", "counter", value) for name, value in self.totals.items()]
        out += [("cdc_merge_batches_total", "counter", self.batches), ("cdc_merge_held_records", "gauge", self.held)]
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
               latest: dict[str, int] | None = None, spark_ms: dict | None = None) -> None:
        """Batch ``batch_id``'s figures from its tasks' ``stats``: aggregated, logged, added to
        the totals and written to the status file; its reads judged by the progress watch
        (``latest``: the log's end offsets by ``topic[partition]`` where known); ``spark_ms``:
        Spark's own phases of the batch before (its progress report's ``durationMs``)."""
        agg = {k: sum(s.get(k, 0) for s in stats) for k in ("input", "emitted", "dropped", "copies", "dead",
                                                            "upserted", "deleted", "held", "from_bytes",
                                                            "inserted", "fresh_refused", "partition_turns",
                                                            "whole_turns")}
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
