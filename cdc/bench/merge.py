"""``cdc bench merge``: how fast the Spark merge job applies change events to PostgreSQL.

One run on the embedded stack (its own state dir, default ``.cdc/bench``):

1. ``events`` row changes (the stream benchmark's workload: 60% inserts, 30% updates,
   10% deletes on a six-column table) are made and streamed by the producer into Kafka;
2. (a) reference: one Python process reads the same topic with confluent-kafka and
   decodes every record with fastavro (what any Python consumer pays before doing
   anything);
3. (b) the merge job (``local[2]``, the ``cdc-kafka`` source, DBLog rule, PostgreSQL sink
   only) processes the backlog (``Trigger.AvailableNow``); events/s from start to the
   last batch committed; the sink table is checked against the source;
4. (c) latency: with a steady load of ``rate`` events/s written to the source for
   ``seconds`` seconds, producer and merge job running (1 s trigger), the job's per
   batch p50/p99 latency from the source commit (binlog event time, whole seconds) to
   the sink write.

Prints a table with ratios to (a) and returns the figures.  A benchmark, not a test.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console

from cdc.bench.common import (
    DEFAULT_STATE_DIR,
    TABLE,
    PacedWriter,
    admin,
    bench_config,
    create_bench_table,
    drop_bench_database,
    generate_changes,
    insert_sql,
    machine_info,
    results_table,
    start_stack,
)
from cdc.errors import BenchError
from common.kafka.topic_reader import read_topic
from contract.schema_store import SchemaStore
from contract.serde import RecordDecoder
from contract.topics import table_topic
from producer.app import ProducerApp
from producer.binlog.server import current_position
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks


def _reference_decode(cfg, topic: str) -> dict[str, Any]:
    dec = RecordDecoder.resolving(SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix))
    t0 = time.perf_counter()
    n = 0
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, timeout=300):
        dec.decode(m.key())
        dec.decode(m.value())
        n += 1
    s = time.perf_counter() - t0
    return {"events": n, "seconds": s, "events_per_s": n / s if s else 0.0}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _pg_count(cfg, db: str) -> int:
    sink = dict(build_sinks(cfg.sinks))["postgres"]
    with psycopg.connect(sink.dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {sink.qualified_name(db, TABLE)}")
        return int(cur.fetchone()[0])


class _SteadyWriter(PacedWriter):
    """About ``rate`` row changes per second (multi-row inserts and updates)."""

    def __init__(self, mysql: dict, db: str, rate: int, first_id: int) -> None:
        super().__init__(mysql, db, rate)
        self.next_id = first_id
        self.per_tick = max(1, rate // 20)

    def write(self, cur) -> int:
        cur.execute(insert_sql(self.next_id, self.per_tick))
        self.next_id += self.per_tick
        return self.per_tick


def bench_merge(state_dir: Path = DEFAULT_STATE_DIR, events: int = 1_000_000, *, rate: int = 5000, partitions: int = 4,
                seconds: float = 30.0, keep_running: bool = False, console: Console | None = None) -> dict[str, Any]:

    console = console or Console()
    result: dict[str, Any] = {"machine": machine_info(), "requested_events": events, "partitions": partitions}
    info = start_stack(state_dir, console)
    run = uuid.uuid4().hex[:8]
    db = f"benchmerge_{run}"
    cfg = bench_config(info, f"benchmerge_{run}", db)
    cfg.kafka.partitions = partitions  # one Spark task per partition
    cfg.sinks.changelog.enabled = False
    cfg.sinks.mysql.enabled = False
    cfg.sinks.postgres.schema_name = f"benchmerge_{run}"
    cfg.spark.master = "local[2]"
    cfg.spark.trigger_interval_s = 1.0
    work = Path(info.state_dir) / "bench-merge" / run
    cfg.state_dir = str(work / "state")
    cfg.spark.checkpoint_dir = str(work / "checkpoints")
    try:
        with admin(info.mysql) as conn, conn.cursor() as cur:
            create_bench_table(cur, db)
            cfg.producer.startup.mode = "position"
            cfg.producer.startup.file, cfg.producer.startup.pos = current_position(conn)
            with console.status(f"making {events:,} row changes..."):
                changes = generate_changes(conn, events)
            cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM `{TABLE}`")
            live_rows, max_id = cur.fetchone()
        result["changes"] = changes
        with console.status("the producer streams them into Kafka..."):
            t0 = time.perf_counter()
            ProducerApp(cfg).run(idle_exit_s=3.0)
            result["produce_s"] = time.perf_counter() - t0
        topic = table_topic(cfg.kafka.topic_prefix, db, TABLE)
        with console.status("(a) confluent-kafka + fastavro decoding..."):
            result["reference"] = _reference_decode(cfg, topic)
        if result["reference"]["events"] != changes["total"]:
            raise BenchError(f"{result['reference']['events']} events in {topic}, {changes['total']} changes made")
        with console.status("(b) the merge job into PostgreSQL (local[2])..."):
            from spark_jobs.spark_session import build_session
            t0 = time.perf_counter()
            build_session(cfg.spark.master)  # the JVM's start, measured apart
            result["spark_startup_s"] = time.perf_counter() - t0
            job = MergeJob(cfg)
            t0 = time.perf_counter()
            job.run(available_now=True)
            s = time.perf_counter() - t0
        n = job.totals["input"]
        result["merge"] = {"events": n, "seconds": s, "events_per_s": n / s if s else 0.0, "batches": job.batches}
        sink_rows = _pg_count(cfg, db)
        if sink_rows != live_rows:
            raise BenchError(f"the sink table has {sink_rows} rows, the source {live_rows}")

        if rate and seconds:
            producer = ProducerApp(cfg)
            pt = threading.Thread(target=producer.run, daemon=True)
            pt.start()
            job2 = MergeJob(cfg)
            lat: list[tuple[float, float]] = []
            jt = threading.Thread(target=job2.run, daemon=True)
            jt.start()
            status_path = Path(cfg.state_dir) / "merge-status.json"
            writer = _SteadyWriter(info.mysql, db, rate, max_id + 1)
            with console.status(f"(c) {rate:,} events/s for {seconds:.0f} s, producer and merge job running..."):
                time.sleep(5.0)  # the job is up
                writer.start()
                t_end = time.monotonic() + seconds
                # The status file still shows the throughput run's last batch: only later
                # batches are the latency run's.
                last_batch = job.batches - 1
                while time.monotonic() < t_end:
                    time.sleep(0.5)
                    try:
                        st = json.loads(status_path.read_text())
                    except (OSError, ValueError):
                        continue
                    lb = st.get("last_batch", {})
                    if st.get("batch_id") != last_batch and lb.get("latency_p99_ms") is not None:
                        last_batch = st["batch_id"]
                        lat.append((lb["latency_p50_ms"], lb["latency_p99_ms"]))
                writer.stop()
            job2.stop()
            jt.join(120)
            producer.stop()
            pt.join(60)
            p50s = sorted(p for p, _ in lat)
            p99s = sorted(p for _, p in lat)
            result["latency"] = {
                "rate": rate, "seconds": seconds, "writes": writer.count, "writes_per_s": writer.count / seconds,
                "batches": len(lat),
                "p50_ms_median": p50s[len(p50s) // 2] if p50s else None,
                "p99_ms_worst": p99s[-1] if p99s else None,
                "p99_ms_median": p99s[len(p99s) // 2] if p99s else None}
        a = result["reference"]["events_per_s"]
        result["ratios"] = {"b/a": result["merge"]["events_per_s"] / a if a else 0.0}
    finally:
        drop_bench_database(info, db, Path(state_dir), keep_running, console)
    print_report(result, console)
    return result


def print_report(result: dict[str, Any], console: Console) -> None:
    table = results_table(f"cdc bench merge: {result['changes']['total']:,} change events into PostgreSQL, "
                          f"topic of {result.get('partitions', '?')} partitions",
                          ("measure", "seconds", "events/s", "vs (a)"), result["machine"])
    a = result["reference"]["events_per_s"]
    table.add_row("(a) confluent-kafka consume + fastavro decode, one process", f"{result['reference']['seconds']:.2f}",
                  f"{a:,.0f}", "1.00")
    b = result["merge"]
    table.add_row(f"(b) merge job local[2] into PostgreSQL ({b['batches']} batches)", f"{b['seconds']:.2f}",
                  f"{b['events_per_s']:,.0f}", f"{b['events_per_s'] / a:.2f}" if a else "-")
    console.print(table)
    console.print(f"(b) excludes the Spark session's start ({result.get('spark_startup_s', 0):.1f} s)")
    if "latency" in result:
        lt = result["latency"]
        console.print(f"(c) latency at {lt['writes_per_s']:,.0f} events/s over {lt['seconds']:.0f} s, 1 s trigger, "
                      f"{lt['batches']} batches: p50 {_ms(lt['p50_ms_median'])} (median batch), "
                      f"p99 {_ms(lt['p99_ms_median'])} (median batch), {_ms(lt['p99_ms_worst'])} (worst batch); "
                      "source commit time = binlog event time (whole seconds)")
