"""``cdc bench latency``: where a row's time goes, from its INSERT on the source to its row in
PostgreSQL, at a steady load (issue 70's measurement; docs/merge-performance.md, "The latency
floor").

One run on the embedded stack: the producer in a process of its own, the merge job
(``local[2]``, the PostgreSQL sink only, the configured trigger) in this one, ``rate`` row
inserts/s for ``seconds`` s.  For every row three clocks are read afterwards, all on this
machine's wall clock:

* ``src``: its ``updated_at``, the INSERT statement's ``NOW(3)`` (UTC);
* ``kafka``: its record's timestamp in the table topic (the producer's hand-over to its Kafka
  client: librdkafka stamps ``CreateTime`` when a record is produced);
* ``arrived``: the sink row's column defaulting to PostgreSQL's ``clock_timestamp()``, the
  moment the merge job's statement inserted it (what ``cdc bench merge`` (c) and the race
  against the JDBC sink measure).

and for every micro-batch two timelines: Spark's progress report (the trigger's start and
``durationMs``: the source's ``latestOffset``, the offset log, planning, ``addBatch``, the
commit log) and the batch report's (:attr:`spark_jobs.report.batch_report.BatchReport.recent`: the
``foreachBatch`` call's start and end, the driver's plan, the tasks, the finish).  A row is
placed in the batch whose ``foreachBatch`` call was running when it arrived, and its latency
split (:func:`row_parts`) into

* ``producer``: ``kafka - src`` (the binlog read, decoding and encoding, the hand-over);
* ``to_trigger``: the trigger's start ``- kafka`` (the producer's transaction commit, the wait
  for the trigger, or for the batch before to end);
* ``spark_before``: the ``foreachBatch`` start ``-`` the trigger's start (Spark's
  ``latestOffset`` through the source's Python runner, the offset log, the query's planning);
* ``driver_plan``: the batch's plan on the driver (markers, schemas, the partitions' states);
* ``to_range``: the start of the row's Kafka range in its task ``-`` the plan's end (Spark's
  job submission and scheduling, the task's start in a Python worker, and the ranges its task
  merged before this one: a task merges its ranges one after the other);
* ``in_range``: ``arrived -`` the range's start (its read, decode and DBLog rule, the sinks'
  statements up to the row's INSERT).

The parts add up to the row's latency exactly.  What comes after a row's insert (the sink's
commit, the finish, Spark's commit log) delays the next batch, so it is reported per batch.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Sequence

import psycopg
from rich.console import Console
from rich.table import Table

from cdc.bench import debezium as dbz
from cdc.bench import race_settings
from cdc.bench.connect_worker import ConnectWorker, require_plugins
from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    _proc_table,
    admin,
    bench_config,
    create_bench_table,
    drop_bench_database,
    insert_sql,
    machine_info,
    start_stack,
)
from cdc.bench.merge import _ARRIVED, _SinkClock, _SteadyWriter, start_producer_process
from cdc.bench.sink_race import start_debezium_source
from cdc.errors import BenchError
from common.kafka.clients import ensure_topics
from common.kafka.topic_reader import read_topic
from contract.codecs.serde import RecordDecoder
from contract.schema_store import SchemaStore
from contract.topics import table_topic
from producer.binlog.server import current_position
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.spark_session import build_session, stop_session

#: A row's latency parts, in order (:func:`row_parts`).
PARTS = ("producer", "to_trigger", "spark_before", "driver_plan", "to_range", "in_range")

#: Single changes after the idle time (:func:`_idle`).
IDLE_CHANGES = 5

#: Spark's progress phases reported per batch (``durationMs``; absent ones left out).
SPARK_PHASES = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets",
                "triggerExecution")


# -- the pure part: lining up the clocks ----------------------------------------------------------
def iso_ms(stamp: str) -> float:
    """Spark's progress timestamp (``2026-11-28T20:01:02.345Z``) in ms since the epoch."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000.0


def batch_timelines(recent: Iterable[dict], progress: Iterable[dict]) -> list[dict]:
    """Each batch of the batch report's ``recent`` that Spark's ``progress`` reports too, with
    both timelines in ms since the epoch, in batch order: ``trigger`` (Spark's trigger start),
    ``start``/``end`` (the ``foreachBatch`` call), ``plan_end``, ``input`` and the phases."""
    by_id = {int(p["batchId"]): p for p in progress if p.get("timestamp") is not None}
    out = []
    for b in sorted(recent, key=lambda b: b["batch_id"]):
        p = by_id.get(int(b["batch_id"]))
        if p is None:
            continue
        start = b["started_at"] * 1000.0
        ph = b.get("phases") or {}
        out.append({"batch_id": int(b["batch_id"]), "trigger": iso_ms(p["timestamp"]), "start": start,
                    "end": b["ended_at"] * 1000.0, "plan_end": start + ph.get("plan_s", 0.0) * 1000.0,
                    "input": b.get("input", 0), "phases": ph,
                    "ranges": {int(span[1]): span[2] * 1000.0 for span in b.get("spans") or []},
                    "spark_ms": {k: v for k, v in (p.get("durationMs") or {}).items() if k in SPARK_PHASES}})
    return out


def row_parts(rows: Iterable[tuple[int, int, float, float, float]], batches: Sequence[dict]) -> list[dict]:
    """Each row ``(id, partition, src_ms, kafka_ms, arrived_ms)`` split into :data:`PARTS` by
    the batch whose ``foreachBatch`` call holds its arrival (:func:`batch_timelines`' order)
    and its partition's range in it; rows that arrived outside every batch known, or whose
    range the batch does not name, are left out.  The parts sum to ``arrived - src``."""
    starts = [b["start"] for b in batches]
    out = []
    for row_id, partition, src, kafka, arrived in rows:
        i = bisect.bisect_right(starts, arrived) - 1
        if i < 0 or arrived > batches[i]["end"] or partition not in batches[i]["ranges"]:
            continue
        b = batches[i]
        began = b["ranges"][partition]
        out.append({"id": row_id, "batch_id": b["batch_id"], "total": arrived - src,
                    "producer": kafka - src, "to_trigger": b["trigger"] - kafka,
                    "spark_before": b["start"] - b["trigger"], "driver_plan": b["plan_end"] - b["start"],
                    "to_range": began - b["plan_end"], "in_range": arrived - began})
    return out


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def breakdown(parts: Sequence[dict]) -> dict[str, Any]:
    """Per part: mean, p50 and p99 over every row, and its mean over the slowest 1% of rows
    (what the p99 is made of); with the total's."""
    if not parts:
        return {"rows": 0}
    cut = quantile([p["total"] for p in parts], 0.99)
    tail = [p for p in parts if p["total"] >= cut]
    out: dict[str, Any] = {"rows": len(parts)}
    for name in ("total", *PARTS):
        vals = [p[name] for p in parts]
        out[name] = {"mean": statistics.fmean(vals), "p50": quantile(vals, 0.5), "p99": quantile(vals, 0.99),
                     "tail_mean": statistics.fmean(p[name] for p in tail)}
    return out


def batch_summary(batches: Sequence[dict]) -> dict[str, Any]:
    """Medians over the batches: the gap between triggers, Spark's phases, the driver's and
    the tasks' (ms), and the records a batch."""
    if not batches:
        return {"batches": 0}
    gaps = [b["trigger"] - a["trigger"] for a, b in zip(batches, batches[1:])]
    spark = {k: statistics.median(b["spark_ms"][k] for b in batches if k in b["spark_ms"])
             for k in SPARK_PHASES if any(k in b["spark_ms"] for b in batches)}
    ours = {k: statistics.median(b["phases"].get(k, 0.0) * 1000.0 for b in batches)
            for k in ("plan_s", "tasks_s", "finish_s", "read_s", "decide_s", "sinks_s")}
    return {"batches": len(batches), "records_median": statistics.median(b["input"] for b in batches),
            "trigger_gap_ms_median": statistics.median(gaps) if gaps else None,
            "spark_ms_median": spark, "ours_ms_median": ours}


# -- the run ----------------------------------------------------------------------------------
def _row_times(cfg, db: str, first_id: int, last_id: int) -> dict[int, tuple[float, float]]:
    """``{id: (src_ms, arrived_ms)}`` of the sink's rows in ``[first_id, last_id)``."""
    sink = dict(build_sinks(cfg.sinks))["postgres"]
    sql = (f"SELECT id, EXTRACT(EPOCH FROM (updated_at AT TIME ZONE 'UTC')) * 1000, "
           f"EXTRACT(EPOCH FROM {_ARRIVED}) * 1000 FROM {sink.qualified_name(db, TABLE)} "
           f"WHERE id >= %s AND id < %s AND {_ARRIVED} IS NOT NULL")
    with psycopg.connect(sink.dsn) as conn, conn.cursor() as cur:
        cur.execute(sql, (first_id, last_id))
        return {int(i): (float(s), float(a)) for i, s, a in cur.fetchall()}


def debezium_key(raw: bytes) -> dict | None:
    """A Debezium JSON record key's fields: the ``payload`` of a key written with its schema,
    the object itself without; None for anything else."""
    doc = json.loads(raw)
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        doc = doc["payload"]
    return doc if isinstance(doc, dict) else None


def _kafka_times(cfg, topic: str, first_id: int, last_id: int) -> dict[int, tuple[int, float]]:
    """``{id: (partition, record timestamp ms)}`` of the table topic's records of ids in
    ``[first_id, last_id)`` (our producer's Avro keys, or Debezium's JSON ones)."""
    if cfg.kafka.input == "debezium":
        key_of = debezium_key
    else:
        key_of = RecordDecoder.resolving(SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix,
                                                     cfg.kafka.client_settings())).decode
    out: dict[int, tuple[int, float]] = {}
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, timeout=120, client_config=cfg.kafka.client_settings()):
        key = key_of(m.key()) if m.key() else None
        row_id = key.get("id") if isinstance(key, dict) else None
        if row_id is not None and first_id <= row_id < last_id:
            out[int(row_id)] = (m.partition(), float(m.timestamp()[1]))
    return out


class _Source:
    """What writes the table topic: our producer (``cdc produce`` in a process of its own) or,
    with ``input`` ``debezium``, Debezium's MySQL connector in a Kafka Connect worker (the
    topics ``cdc bench sinks`` races the JDBC sink on); both from the binlog position ``start``."""

    def __init__(self, kind: str, cfg, info, db: str, work: Path, start: tuple) -> None:
        self.kind, self.worker, self.producer = kind, None, None
        if kind == "debezium":
            ensure_topics(cfg.kafka, [table_topic(cfg.kafka.topic_prefix, db, TABLE), cfg.kafka.topic_prefix])
            self.worker = ConnectWorker(work / "connect", info.kafka["bootstrap_servers"],
                                        heap=race_settings.DEFAULT_HEAP,
                                        settings={**race_settings.connect_worker_settings(),
                                                  "offset.flush.interval.ms": 500}).start()
            start_debezium_source(self.worker, info, db, cfg.kafka.topic_prefix, work, start)
            self.pid = self.worker.proc.pid
        else:
            cfg.producer.startup.mode = "position"
            cfg.producer.startup.file, cfg.producer.startup.pos = start
            self.producer = start_producer_process(cfg, work / "producer")
            self.pid = self.producer.pid

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.producer is not None:
            self.producer.terminate()
            self.producer.wait(60)


def _steady_load(job: MergeJob, clock: _SinkClock, info, db: str, rate: int, seconds: float, first_id: int,
                 producer_pid: int, console: Console) -> tuple[int, int, list[dict], list[dict], float]:
    """The warm-up row, then ``rate`` inserts/s for ``seconds`` s, until every row is in the
    sink: ``(first id, last id + 1, the job's recent batches, Spark's progress reports, CPU
    seconds)``; the CPU is this process tree's over the load (:func:`_tree_cpu_s`: the merge
    job, and the load's writer thread, the same whatever the job's settings)."""
    with admin(info.mysql, db) as conn, conn.cursor() as cur:
        cur.execute(insert_sql(first_id, 1))
    deadline = time.monotonic() + 180
    while not clock.has(first_id):
        if time.monotonic() > deadline:
            raise BenchError("the warm-up row did not reach the sink within 180 s")
        time.sleep(0.1)
    time.sleep(2.0)
    writer = _SteadyWriter(info.mysql, db, rate, first_id + 1)
    with console.status(f"{rate:,} inserts/s for {seconds:.0f} s..."):
        others = {producer_pid} | stack_pids(info.data)
        c0 = _tree_cpu_s(others)
        writer.start()
        time.sleep(seconds)
        writer.stop()
        cpu = sum(max(0.0, v - c0.get(pid, 0.0)) for pid, v in _tree_cpu_s(others).items())
        deadline = time.monotonic() + 180
        while len(clock.latencies(first_id + 1, writer.next_id)) < writer.count:
            if time.monotonic() > deadline:
                raise BenchError("the load's rows did not all reach the sink within 180 s")
            time.sleep(0.5)
    time.sleep(1.0)  # (the last batch's report)
    progress = [dict(p) if not isinstance(p, dict) else p for p in (job.query.recentProgress if job.query else [])]
    return first_id + 1, writer.next_id, list(getattr(job.report, "recent", [])), progress, cpu


def stack_pids(data: Any) -> set[int]:
    """The pids in a stack's record (``stack.json``: its MySQL servers, Kafka nodes, PostgreSQL)."""
    if isinstance(data, dict):
        return {int(v) for k, v in data.items() if k == "pid" and v} | {p for v in data.values() for p in stack_pids(v)}
    if isinstance(data, list):
        return {p for v in data for p in stack_pids(v)}
    return set()


def _tree_cpu_s(exclude: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) by pid of this process and its descendants (Spark's JVM,
    its Python workers and data source runners) except the subtrees of ``exclude`` (the
    producer's or Debezium's worker, and the stack's servers when this process started them:
    :func:`stack_pids`)."""
    table = _proc_table(commands=False)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid not in table:
            continue
        out[pid] = table[pid][2]
        todo += children.get(pid, [])
    return out


def _idle(clock: Any, info, db: str, row: int, idle_s: float, changes: int, producer_pid: int) -> dict[str, Any]:
    """The idle pipeline: the merge job's CPU over ``idle_s`` s with nothing written (the
    producer's excluded), then ``changes`` single-row inserts 2 s apart, each one's latency."""
    time.sleep(3.0)  # (the load's last batches and reports)
    others = {producer_pid} | stack_pids(info.data)
    c0, t0 = _tree_cpu_s(others), time.monotonic()
    time.sleep(idle_s)
    cpu = sum(max(0.0, v - c0.get(pid, 0.0)) for pid, v in _tree_cpu_s(others).items())  # (exited: not counted)
    wall = time.monotonic() - t0
    single: list[float] = []
    with admin(info.mysql, db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for i in range(changes):
            time.sleep(2.0)
            cur.execute(insert_sql(row + i, 1, stamped=True))
            deadline = time.monotonic() + 30
            while not clock.has(row + i) and time.monotonic() < deadline:
                time.sleep(0.005)
            single += clock.latencies(row + i, row + i + 1)
    return {"seconds": round(wall, 1), "cpu_s": round(cpu, 2), "cpu_s_per_hour": round(cpu * 3600 / wall, 1),
            "single_change_ms": [round(x) for x in single], "single_change_median_ms": quantile(single, 0.5)}


def bench_latency(state_dir: Path = DEFAULT_STATE_DIR, *, rate: int = 5000, seconds: float = 30.0,
                  partitions: int = 4, trigger_s: float | None = None, idle_s: float = 30.0,
                  source: str = "ours", keep_running: bool = False, console: Console | None = None) -> dict[str, Any]:
    """The run (see the module's docstring); ``source`` ``debezium``: the table topic written by
    Debezium's MySQL connector in Kafka Connect and read as ``kafka.input: debezium``."""
    console = console or Console()
    result: dict[str, Any] = {"machine": machine_info(), "rate": rate, "seconds": seconds, "partitions": partitions,
                              "source": source}
    if source == "debezium":
        require_plugins("debezium-mysql")
    info = start_stack(state_dir, console, (dbz.SERVER_VERSION_ARG,) if source == "debezium" else ())
    run = uuid.uuid4().hex[:8]
    db = f"benchlat_{run}"
    cfg = bench_config(info, db, db)
    cfg.kafka.partitions = partitions
    cfg.kafka.input = "debezium" if source == "debezium" else cfg.kafka.input
    cfg.sinks.changelog.enabled = cfg.sinks.mysql.enabled = False
    cfg.sinks.postgres.schema_name = db
    if trigger_s is not None:
        cfg.spark.trigger_interval_s = trigger_s
    result["trigger_interval_s"] = cfg.spark.trigger_interval_s
    work = Path(info.state_dir) / "bench-latency" / run
    cfg.state_dir, cfg.spark.checkpoint_dir = str(work / "job"), str(work / "checkpoints")
    writer = None
    try:
        with admin(info.mysql) as conn, conn.cursor() as cur:
            if source == "debezium":
                dbz.check_server_version(conn)
            create_bench_table(cur, db)
            start = current_position(conn)
        writer = _Source(source, cfg, info, db, work, start)
        spark = build_session(cfg.spark.master, app_name=f"cdc-merge-{cfg.kafka.topic_prefix}",
                              kafka_source=cfg.spark.kafka_source)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "5000")
        first, last, recent, progress = _run_job(cfg, info, db, rate, seconds, idle_s, writer.pid, result, console)
        _split_rows(cfg, db, first, last, recent, progress, result)
    finally:
        if writer is not None:
            writer.stop()
        try:
            stop_session()
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            console.print(f"[yellow]cleanup:[/yellow] stopping the Spark session: {exc}")
        drop_bench_database(info, db, Path(state_dir), keep_running, console)
    print_breakdown(result, console)
    return result


def _run_job(cfg, info, db: str, rate: int, seconds: float, idle_s: float, source_pid: int,
             result: dict[str, Any], console: Console) -> tuple[int, int, list[dict], list[dict]]:
    """The merge job in a thread of this process: the load, then the idle pipeline (into
    ``result``); ``(first id, last id + 1, the job's recent batches, Spark's progress reports)``."""
    job = MergeJob(cfg)
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 180
        while job.query is None:  # (the sink table is made by the first record's batch)
            if time.monotonic() > deadline or not runner.is_alive():
                raise BenchError("the merge job's query did not start within 180 s")
            time.sleep(0.2)
        with admin(info.mysql, db) as conn, conn.cursor() as cur:  # a row that makes the sink table
            cur.execute(insert_sql(1, 1))
        clock = _wait_for_table(cfg, db)
        first, last, recent, progress, cpu = _steady_load(job, clock, info, db, rate, seconds, 2, source_pid, console)
        result["load_cpu_s"] = round(cpu, 2)
        if idle_s > 0:
            with console.status(f"the idle pipeline: {idle_s:.0f} s, then single changes..."):
                result["idle"] = _idle(clock, info, db, last, idle_s, IDLE_CHANGES, source_pid)
            time.sleep(1.0)  # (the last change's batch report)
            recent = list(getattr(job.report, "recent", []))  # (the single changes' batches too)
            progress = [dict(p) if not isinstance(p, dict) else p for p in job.query.recentProgress]
    finally:
        job.stop()
        runner.join(120)
    return first, last, recent, progress


def _split_rows(cfg, db: str, first: int, last: int, recent: list[dict], progress: list[dict],
                result: dict[str, Any]) -> None:
    """Every row's clocks read and its latency split (into ``result``)."""
    kafka = _kafka_times(cfg, table_topic(cfg.kafka.topic_prefix, db, TABLE), first, last + IDLE_CHANGES)
    times = _row_times(cfg, db, first, last)
    rows = [(i, kafka[i][0], s, kafka[i][1], a) for i, (s, a) in times.items() if i in kafka]
    batches = batch_timelines(recent, progress)
    parts = row_parts(rows, batches)
    if result.get("idle"):  # each single change's split: the first after the idle time is the slow one
        singles = [(i, kafka[i][0], s, kafka[i][1], a) for i, (s, a) in
                   sorted(_row_times(cfg, db, last, last + IDLE_CHANGES).items()) if i in kafka]
        result["idle"]["single_change_parts"] = [{k: round(v) if k in PARTS or k == "total" else v
                                                  for k, v in r.items()} for r in row_parts(singles, batches)]
    load_batches = [b for b in batches if b["batch_id"] in {p["batch_id"] for p in parts}]
    totals = [a - s for s, a in times.values()]
    result["latency"] = {"rows": len(totals), "p50_ms": quantile(totals, 0.5), "p99_ms": quantile(totals, 0.99),
                         "max_ms": max(totals) if totals else None}
    result.update(rows_written=last - first, rows_placed=len(parts), breakdown=breakdown(parts),
                  batches=batch_summary(load_batches))


def _wait_for_table(cfg, db: str) -> _SinkClock:
    """The sink table's arrival clock (:class:`cdc.bench.merge._SinkClock`), once the table is there."""
    deadline = time.monotonic() + 180
    while True:
        try:
            return _SinkClock(cfg, db)
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise BenchError("the sink table was not made within 180 s") from None
            time.sleep(0.2)


def print_breakdown(result: dict[str, Any], console: Console) -> None:
    bd = result.get("breakdown") or {}
    table = Table(title=f"where a row's time goes at {result['rate']:,} inserts/s, trigger "
                        f"{result['trigger_interval_s']:g} s ({bd.get('rows', 0):,} rows)")
    for col in ("part", "mean ms", "p50 ms", "p99 ms", "mean of the slowest 1%"):
        table.add_column(col, justify="left" if col == "part" else "right")
    for name in ("total", *PARTS):
        f = bd.get(name)
        if f:
            table.add_row(name, *(f"{f[k]:,.0f}" for k in ("mean", "p50", "p99", "tail_mean")))
    console.print(table)
    lt = result.get("latency") or {}
    if lt.get("rows"):
        console.print(f"every row ({lt['rows']:,}): p50 {lt['p50_ms']:,.0f} ms, p99 {lt['p99_ms']:,.0f} ms, "
                      f"max {lt['max_ms']:,.0f} ms; CPU over the load {result.get('load_cpu_s')} s "
                      f"(the merge job and the load's writer)")
    idle = result.get("idle")
    if idle:
        console.print(f"idle: the merge job's CPU {idle['cpu_s_per_hour']:,.1f} s an hour ({idle['cpu_s']} s in "
                      f"{idle['seconds']} s); single changes {idle['single_change_ms']} ms")
        for r in idle.get("single_change_parts") or []:
            console.print(f"  a single change, {r['total']:,} ms: " + ", ".join(f"{k} {r[k]:,}" for k in PARTS))
    bs = result.get("batches") or {}
    if bs.get("batches"):
        console.print(f"{bs['batches']} batches, {bs['records_median']:,.0f} records each (median); triggers "
                      f"{bs['trigger_gap_ms_median'] or 0:,.0f} ms apart; Spark (ms, median): "
                      + ", ".join(f"{k} {v:,.0f}" for k, v in bs["spark_ms_median"].items())
                      + "; the batch (ms, median): " + ", ".join(f"{k} {v:,.0f}"
                                                                  for k, v in bs["ours_ms_median"].items()))

