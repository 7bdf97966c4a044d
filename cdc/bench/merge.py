"""``cdc bench merge``: how fast the Spark merge job applies change events to PostgreSQL.

One run on the embedded stack (its own state dir, default ``.cdc/bench``):

1. ``events`` row changes (the stream benchmark's workload: 60% inserts, 30% updates,
   10% deletes on a six-column table) are made, then streamed by the producer into Kafka
   (the producer's rate over that backlog is reported: the merge stage must keep pace);
2. (a) reference: one Python process reads the same topic with confluent-kafka and
   decodes every record with fastavro (what any Python consumer pays before doing
   anything; the issue's reference), and (a') the same with the project's compiled Avro
   decoder, the one the merge job's tasks use (a stricter reference, printed beside);
3. (b) the merge job (``local[2]``, the ``cdc-kafka`` source, DBLog rule, PostgreSQL sink
   only) processes the backlog (``Trigger.AvailableNow``): events/s from the query's start
   to the last batch committed, and the steady rate from the first batch's start (the
   query's start, reported apart, is paid once per job start); where the time went, per
   phase; the sink table is checked against the source;
4. (c) latency: a steady load of ``rate`` row inserts/s for ``seconds`` seconds, producer
   and merge job running with the trigger interval the configuration ships.  Each row's
   ``updated_at`` is its INSERT statement's time (``NOW(3)``, UTC), and the sink table gets
   a column defaulting to PostgreSQL's ``clock_timestamp()`` at the row's insert: latency
   is their difference, per row, in milliseconds (the binlog's whole-second event times
   are not used); p50 and p99 over every row;
5. (d) idle change: with nothing else written, one row at a time (five times, 2 s apart),
   the same measure; the median and the worst are reported;
6. (e) scale-out: (b) again against a Spark standalone master with two workers of one core
   each, the job given one core (``spark.cores.max``: one executor, as one worker would
   give it), then both (all on this machine, so the ratio shows what the job does
   with a second executor, not a second machine); the driver's serial share (planning and
   state, per batch) is reported: what would stop the job scaling on real nodes.

Prints a table with ratios to (a), or with ``--json`` one object with every figure
(``reference_events_per_s``, ``merge_events_per_s``, ``ratio``, ``producer_events_per_s``,
``latency_p50_ms``, ``latency_p99_ms``, ``idle_change_ms``, ...).  A benchmark, not a test.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import psycopg
from rich.console import Console

from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    CpuMeter,
    PacedWriter,
    admin,
    bench_config,
    drop_bench_database,
    make_backlog,
    insert_sql,
    machine_info,
    results_table,
    start_stack,
)
from cdc.bench.lake import LAKE_RUNS, LATENCY_INTERVAL_S, delta_latency, lake_runs
from cdc.errors import BenchError
from cdc.bench.kafka_sources import kafka_source_rounds
from cdc.stack.kafka_broker import kafka_pids
from cdc.stack.spark_cluster import standalone_cluster
from common.config import dump_config
from common.kafka.topic_reader import read_topic
from contract.codecs.serde import SINGLE_OBJECT_MAGIC, RecordDecoder
from contract.schema_store import SchemaStore
from contract.topics import table_topic
from producer.app import ProducerApp
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks, lake_conf
from spark_jobs.spark_session import stop_session


def _reference_decode(cfg, topic: str) -> dict[str, Any]:
    """(a) as the issue defines it: confluent-kafka consume + fastavro decode of key and value
    (each writer schema parsed once), what a Python consumer pays with the usual library."""
    store = SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix, cfg.kafka.client_settings())
    parsed: dict[bytes, Any] = {}

    def decode(data: bytes) -> Any:
        if data[:2] != SINGLE_OBJECT_MAGIC:
            raise BenchError(f"a record of {topic} is not in Avro's single-object framing")
        writer = parsed.get(data[2:10])
        if writer is None:
            schema = store.get(data[2:10].hex())
            if schema is None:
                raise BenchError(f"no writer schema {data[2:10].hex()} in the schemas topic")
            writer = parsed[data[2:10]] = fastavro.parse_schema(schema)
        return fastavro.schemaless_reader(io.BytesIO(memoryview(data)[10:]), writer, None)

    return _timed_decode(cfg, topic, decode)


def _compiled_decode(cfg, topic: str) -> dict[str, Any]:
    """(a') the same consumer with this project's compiled Avro decoder (what the merge job's
    tasks decode with): a stricter reference than (a)."""
    dec = RecordDecoder.resolving(SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix,
                                              cfg.kafka.client_settings()))
    return _timed_decode(cfg, topic, dec.decode)


def _timed_decode(cfg, topic: str, decode) -> dict[str, Any]:
    t0 = time.perf_counter()
    n = 0
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, timeout=300, client_config=cfg.kafka.client_settings()):
        decode(m.key())
        decode(m.value())
        n += 1
    s = time.perf_counter() - t0
    return {"events": n, "seconds": s, "events_per_s": n / s if s else 0.0}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def _pg_count(cfg, db: str) -> int:
    sink = dict(build_sinks(cfg.sinks))["postgres"]
    with psycopg.connect(sink.dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {sink.qualified_name(db, TABLE)}")
        return int(cur.fetchone()[0])


_ARRIVED = "bench_arrived_at"


class _SinkClock:
    """The PostgreSQL sink table with a column stamped when a row is inserted
    (``clock_timestamp()``), and the latency of the rows inserted from the source with a
    ``NOW(3)`` ``updated_at``: ``arrived - updated_at`` in ms."""

    def __init__(self, cfg, db: str) -> None:
        sink = dict(build_sinks(cfg.sinks))["postgres"]
        self.dsn, self.table = sink.dsn, sink.qualified_name(db, TABLE)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS {_ARRIVED} timestamptz "
                         "DEFAULT clock_timestamp()")

    def latencies(self, first_id: int, last_id: int | None = None) -> list[float]:
        sql = (f"SELECT EXTRACT(EPOCH FROM ({_ARRIVED} - (updated_at AT TIME ZONE 'UTC'))) * 1000 FROM {self.table} "
               f"WHERE id >= %s AND id < %s AND {_ARRIVED} IS NOT NULL")
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            cur.execute(sql, (first_id, last_id if last_id is not None else 2 ** 31 - 1))
            return [float(r[0]) for r in cur.fetchall()]

    def has(self, row_id: int) -> bool:
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {self.table} WHERE id = %s", (row_id,))
            return cur.fetchone() is not None


class _SteadyWriter(PacedWriter):
    """About ``rate`` row inserts per second (multi-row INSERTs, ``updated_at`` = NOW(3) UTC)."""

    def __init__(self, mysql: dict, db: str, rate: int, first_id: int) -> None:
        super().__init__(mysql, db, rate)
        self.first_id = self.next_id = first_id
        self.per_tick = max(1, rate // 20)
        self._utc = False

    def write(self, cur) -> int:
        if not self._utc:
            cur.execute("SET time_zone = '+00:00'")
            self._utc = True
        cur.execute(insert_sql(self.next_id, self.per_tick, stamped=True))
        self.next_id += self.per_tick
        return self.per_tick


def _throughput_run(cfg, work: Path, name: str, master: str, db: str, conf: dict | None = None,
                    cpu_roots: dict[str, int | None] | None = None, count_sink: bool = True) -> dict[str, Any]:
    """(b)/(e): the merge job over the whole backlog (``Trigger.AvailableNow``), on
    ``master``, with a checkpoint and a PostgreSQL schema of its own; the CPU time each
    process group used meanwhile (``cpu_roots``: the stack's processes, :class:`CpuMeter`)."""
    from spark_jobs.spark_session import build_session, running_session
    cfg = cfg.model_copy(deep=True)
    cfg.spark.master = master
    cfg.state_dir = str(work / name / "state")
    cfg.spark.checkpoint_dir = str(work / name / "checkpoints")
    cfg.sinks.postgres.schema_name = f"{cfg.sinks.postgres.schema_name}_{name}"
    active = running_session()
    if active is not None and active.sparkContext.master != master:
        active.stop()
    t0 = time.perf_counter()
    build_session(master, conf=conf, kafka_source=cfg.spark.kafka_source)  # the JVM's start, measured apart
    startup = time.perf_counter() - t0
    job = MergeJob(cfg)
    meter = CpuMeter(cpu_roots or {})
    meter.start()
    t0, m0 = time.perf_counter(), time.monotonic()
    job.run(available_now=True)
    s = time.perf_counter() - t0
    cpu = meter.stop()
    n = job.totals["input"]
    # (until the lakes' last commit: a job stopping commits what its lakes hold staged)
    steady_s = max(job.last_batch_ended or m0, job.lakes_committed or m0) - (job.first_batch_started or m0)
    phases = {k: round(v, 2) for k, v in job.phase_totals.items()}
    serial = phases.get("plan_s", 0.0) + phases.get("finish_s", 0.0)
    return {"master": master, "events": n, "seconds": s, "events_per_s": n / s if s else 0.0,
            "session_start_s": startup, "query_start_s": (job.first_batch_started or m0) - m0,
            "steady_seconds": steady_s, "steady_events_per_s": n / steady_s if steady_s > 0 else 0.0,
            "batches": job.batches, "phases": phases, "driver_serial_share": serial / steady_s if steady_s else 0.0,
            "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
            "cpu_us_per_event": {k: round(v * 1e6 / n, 1) for k, v in cpu.items()} if n else {},
            "sink_rows": _pg_count(cfg, db) if count_sink else None, "cfg": cfg}


def start_producer_process(cfg, state_dir: Path) -> subprocess.Popen:
    """``cdc produce`` of ``cfg`` with state directory ``state_dir`` (where a backlog's run left
    its position, or a new one), in a process of its own as it runs in production (in this
    process its Python work would hold the GIL against the merge job's driver); its log beside."""
    pcfg = cfg.model_copy(deep=True)
    pcfg.state_dir = str(state_dir)
    config_path = Path(state_dir).parent / "latency-producer.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.touch(mode=0o600)
    config_path.write_text(dump_config(pcfg))
    return subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(config_path), "produce"],
                            stdout=subprocess.DEVNULL, stderr=open(config_path.with_suffix(".log"), "wb"))


def _latency_run(cfg, info, db: str, rate: int, seconds: float, first_id: int, producer_state: str,
                 console: Console, *, clock: Any = None, idle_changes: int = 5,
                 idle_gap_s: float = 2.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(c) and (d): producer and merge job running; returns (latency, idle change).  ``clock``:
    where a row's arrival is read (default: the PostgreSQL sink table's insert time);
    ``idle_gap_s``: the quiet time before each idle change."""
    clock = clock or _SinkClock(cfg, db)
    producer = start_producer_process(cfg, Path(producer_state))
    job = MergeJob(cfg)
    jt = threading.Thread(target=job.run, daemon=True)
    jt.start()
    writer = _SteadyWriter(info.mysql, db, rate, first_id)  # (replaced after the warm-up)
    idle: list[float] = []
    try:
        with console.status(f"(c) {rate:,} events/s for {seconds:.0f} s, producer and merge job running..."):
            # Warm up: a row through the whole pipeline, so the job's Python workers have
            # started (once per job start) before the measured load begins.
            with admin(info.mysql, db) as conn, conn.cursor() as cur:
                cur.execute(insert_sql(first_id, 1))
            deadline = time.monotonic() + 120
            while not clock.has(first_id) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(2.0)
            first_id += 1
            writer = _SteadyWriter(info.mysql, db, rate, first_id)
            writer.start()
            time.sleep(seconds)
            writer.stop()
            last = writer.next_id
            deadline = time.monotonic() + 120
            lat = clock.latencies(first_id, last)
            while len(lat) < writer.count and time.monotonic() < deadline:  # every row in the sink
                time.sleep(0.5)
                lat = clock.latencies(first_id, last)
        with console.status("(d) single changes on the idle pipeline..."), \
                admin(info.mysql, db) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            row = last
            for _ in range(idle_changes):
                time.sleep(idle_gap_s)
                cur.execute(insert_sql(row, 1, stamped=True))
                deadline = time.monotonic() + 30
                while not clock.has(row) and time.monotonic() < deadline:
                    time.sleep(0.01)
                idle += clock.latencies(row, row + 1)
                row += 1
    finally:
        writer.stop()
        job.stop()
        jt.join(120)
        producer.terminate()
        try:
            producer.wait(60)
        except subprocess.TimeoutExpired:
            producer.kill()
    latency = {"rate": rate, "seconds": seconds, "writes": writer.count, "writes_per_s": writer.count / seconds,
               "rows_measured": len(lat), "trigger_interval_s": cfg.spark.trigger_interval_s,
               "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99), "max_ms": max(lat) if lat else None}
    idle_change = {"changes": len(idle), "median_ms": _pct(idle, 0.5), "worst_ms": max(idle) if idle else None}
    return latency, idle_change


def _lake_part(cfg, info, work: Path, db: str, live_rows: int, max_id: int, rate: int, seconds: float,
               lake_engines: tuple[str, ...], console: Console, cpu_roots: dict,
               latency_interval_s: float = LATENCY_INTERVAL_S) -> tuple[dict[str, Any], int]:
    """(f) and (g): the lake runs, then the latency with the last engine's Delta table; the lake
    figures and the source's rows after them (the latency run adds rows)."""
    out = lake_runs(cfg, work, db, live_rows, _throughput_run, console, cpu_roots, engines=lake_engines)
    if rate and seconds:  # (the last engine's Delta run)
        out["delta_latency"] = delta_latency(cfg, work, info, db, rate, seconds, max_id + 1, str(work / "producer"),
                                             _latency_run, console, name=out["names"][-2],
                                             interval_s=latency_interval_s)
        with admin(info.mysql, db) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{TABLE}`")
            live_rows = cur.fetchone()[0]
    return out, live_rows


def bench_merge(state_dir: Path = DEFAULT_STATE_DIR, events: int = 1_000_000, *, rate: int = 5000, partitions: int = 4,
                seconds: float = 30.0, scale_out: bool = True, lake: bool = True, keep_running: bool = False,
                kafka_sources: int = 0, lake_engines: tuple[str, ...] = ("driver",),
                idle_gap_s: float = 2.0, lake_latency_interval_s: float = LATENCY_INTERVAL_S,
                console: Console | None = None) -> dict[str, Any]:
    """The merge benchmark (the module docstring).  ``idle_gap_s``: the quiet time before each
    of (d)'s idle changes; ``lake_latency_interval_s``: the lakes' commit interval in (g)'s
    latency run (the smoke test shortens both: its figures are not judged)."""

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
    work = Path(info.state_dir) / "bench-merge" / run
    cpu_roots = {"PostgreSQL": info.postgres.get("pid"), **kafka_pids(info.kafka, "Kafka")}
    idle_exit_s = 3.0
    try:
        changes, live_rows, max_id = make_backlog(info, cfg, db, events, console)
        result["changes"] = changes
        with console.status("the producer streams them into Kafka..."):
            cfg.state_dir = str(work / "producer")
            t0 = time.perf_counter()
            ProducerApp(cfg).run(idle_exit_s=idle_exit_s)
            produce_s = time.perf_counter() - t0 - idle_exit_s
        result["producer"] = {"events": changes["total"], "seconds": produce_s,
                              "events_per_s": changes["total"] / produce_s if produce_s > 0 else 0.0}
        result["reference"], result["reference_compiled"] = _references(cfg, db, changes["total"], cpu_roots,
                                                                         console)
        with console.status("(b) the merge job into PostgreSQL (local[2])..."):
            b = _throughput_run(cfg, work, "local", "local[2]", db, cpu_roots=cpu_roots)
        if b["sink_rows"] != live_rows:
            raise BenchError(f"the sink table has {b['sink_rows']} rows, the source {live_rows}")
        merged_cfg = b.pop("cfg")
        result["merge"] = b
        if kafka_sources:  # (cdc.bench.kafka_sources: Spark's own Kafka source against cdc-kafka)
            result["kafka_sources"] = kafka_source_rounds(cfg, work, db, live_rows, kafka_sources, _throughput_run,
                                                          console, cpu_roots)
        if rate and seconds:
            result["latency"], result["idle_change"] = _latency_run(merged_cfg, info, db, rate, seconds, max_id + 1,
                                                                    str(work / "producer"), console,
                                                                    idle_gap_s=idle_gap_s)
        with admin(info.mysql, db) as conn, conn.cursor() as cur:  # the latency run added rows
            cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM `{TABLE}`")
            live_rows, max_id = cur.fetchone()
        if lake:
            result["lake"], live_rows = _lake_part(cfg, info, work, db, live_rows, max_id, rate, seconds,
                                                   lake_engines, console, cpu_roots, lake_latency_interval_s)
        if scale_out:
            result["scale_out"] = _scale_out(cfg, work, db, live_rows, console, cpu_roots)
            if lake and "spark" in lake_engines:  # (more workers with both lakes on: the lake section's)
                result["lake"]["scale_out"] = _scale_out(cfg, work, db, live_rows, console, cpu_roots,
                                                         lake_engine="spark")
        a = result["reference"]["events_per_s"]
        result["ratios"] = {"b/a": b["events_per_s"] / a if a else 0.0,
                            "b steady/a": b["steady_events_per_s"] / a if a else 0.0}
    finally:
        try:  # (before the stack: its Python workers' Kafka clients would say the broker went)
            stop_session()
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort, the run's own error goes on
            console.print(f"[yellow]cleanup:[/yellow] stopping the Spark session: {exc}")
        drop_bench_database(info, db, Path(state_dir), keep_running, console)
    result["summary"] = summary(result)
    print_report(result, console)
    return result


def _references(cfg, db: str, events: int, cpu_roots: dict, console: Console) -> tuple[dict, dict]:
    """(a) and (a'): the table topic read and decoded by confluent-kafka and fastavro, then by
    the project's compiled decoder; each checked to have read the ``events`` made."""
    topic = table_topic(cfg.kafka.topic_prefix, db, TABLE)
    with console.status("(a) confluent-kafka + fastavro decoding..."):
        meter = CpuMeter(cpu_roots)
        meter.start()
        reference = _reference_decode(cfg, topic)
        n = reference["events"]
        reference["cpu_us_per_event"] = {k: round(v * 1e6 / n, 1) for k, v in meter.stop().items() if n and v}
    with console.status("(a') the same with the project's compiled decoder..."):
        compiled = _compiled_decode(cfg, topic)
    for ref in (reference, compiled):
        if ref["events"] != events:
            raise BenchError(f"{ref['events']} events in {topic}, {events} changes made")
    return reference, compiled


def _scale_out(cfg, work: Path, db: str, live_rows: int, console: Console,
               cpu_roots: dict[str, int | None] | None = None, lake_engine: str | None = None) -> dict[str, Any]:
    """(e): the same backlog on a standalone master with one, then two one-core workers; with
    ``lake_engine`` the Delta and Iceberg sinks on beside PostgreSQL, merged by that engine (each
    run its own tables: ``spark``'s file work is the executors', so it is what more workers share)."""
    out: dict[str, Any] = {"lake_engine": lake_engine}
    tag = f"-lakes-{lake_engine}" if lake_engine else ""
    # One cluster of two one-core workers for both runs: ``spark.cores.max`` gives the first
    # run one executor of one core (what a cluster of one worker gives it), the second two;
    # the cluster's JVMs are started once, not once a run.
    with standalone_cluster(work / f"spark{tag}", workers=2, cores=1) as master:
        _scale_out_runs(cfg, work, db, live_rows, console, cpu_roots, lake_engine, tag, master, out)
    one, two = out["workers_1"]["steady_events_per_s"], out["workers_2"]["steady_events_per_s"]
    out["ratio_2_to_1"] = two / one if one else 0.0
    return out


def _scale_out_runs(cfg, work: Path, db: str, live_rows: int, console: Console, cpu_roots: dict[str, int | None] | None,
                    lake_engine: str | None, tag: str, master: str, out: dict[str, Any]) -> None:
    for workers in (1, 2):
        run_cfg, conf = cfg, {"spark.cores.max": str(workers), "spark.executor.cores": "1",
                              "spark.executor.memory": "1g"}
        if lake_engine:
            run_cfg = cfg.model_copy(deep=True)
            run_cfg.sinks.delta.enabled = run_cfg.sinks.iceberg.enabled = True
            run_cfg.sinks.delta.engine = run_cfg.sinks.iceberg.engine = lake_engine
            run_cfg.sinks.delta.path = str(work / f"standalone{workers}{tag}" / "delta")
            run_cfg.sinks.iceberg.warehouse = str(work / f"standalone{workers}{tag}" / "iceberg")
            run_cfg.sinks.iceberg.catalog_name = f"{cfg.kafka.topic_prefix}_standalone{workers}_lakes"
            conf.update(lake_conf(run_cfg.sinks))
        with console.status(f"(e) standalone master, {workers} worker(s) of 1 core"
                            f"{', Delta and Iceberg on ' + lake_engine if lake_engine else ''}..."):
            r = _throughput_run(run_cfg, work, f"standalone{workers}{tag}", master, db, conf=conf,
                                cpu_roots=cpu_roots)
            r.pop("cfg")
            if r["sink_rows"] != live_rows:
                raise BenchError(f"standalone, {workers} worker(s): the sink table has {r['sink_rows']} rows, "
                                 f"the source {live_rows}")
            out[f"workers_{workers}"] = r
            stop_session()


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures ``--json`` promises, flat."""
    a = result["reference"]["events_per_s"]
    b = result["merge"]
    lt, idle, so = result.get("latency", {}), result.get("idle_change", {}), result.get("scale_out", {})
    compiled = (result.get("reference_compiled") or {}).get("events_per_s")
    return {
        "events": result["changes"]["total"], "partitions": result.get("partitions"),
        "reference_events_per_s": round(a), "merge_events_per_s": round(b["events_per_s"]),
        "ratio": round(b["events_per_s"] / a, 3) if a else None,
        "merge_steady_events_per_s": round(b["steady_events_per_s"]),
        "steady_ratio": round(b["steady_events_per_s"] / a, 3) if a else None,
        "merge_query_start_s": round(b["query_start_s"], 2), "spark_session_start_s": round(b["session_start_s"], 2),
        "producer_events_per_s": round(result["producer"]["events_per_s"]),
        "merge_to_producer": round(b["events_per_s"] / result["producer"]["events_per_s"], 3)
        if result["producer"]["events_per_s"] else None,
        "phases_s": b["phases"], "driver_serial_share": round(b["driver_serial_share"], 3),
        "cpu_us_per_event": b.get("cpu_us_per_event"),
        "reference_cpu_us_per_event": result["reference"].get("cpu_us_per_event"),
        "reference_compiled_events_per_s": round(compiled) if compiled else None,
        "steady_ratio_to_compiled": round(b["steady_events_per_s"] / compiled, 3) if compiled else None,
        "latency_rate": lt.get("writes_per_s"), "latency_trigger_s": lt.get("trigger_interval_s"),
        "latency_p50_ms": lt.get("p50_ms"), "latency_p99_ms": lt.get("p99_ms"), "latency_max_ms": lt.get("max_ms"),
        "idle_change_ms": idle.get("median_ms"), "idle_change_worst_ms": idle.get("worst_ms"),
        "standalone_1_worker_events_per_s": round(so["workers_1"]["steady_events_per_s"]) if so else None,
        "standalone_2_workers_events_per_s": round(so["workers_2"]["steady_events_per_s"]) if so else None,
        "scale_out_ratio": round(so["ratio_2_to_1"], 3) if so else None,
        **_lake_summary(result.get("lake") or {}),
    }


def _lake_summary(lake: dict[str, Any]) -> dict[str, Any]:
    """(f) and (g), flat: each lake run's steady rate and ratio to the changelog's, files."""
    if not lake:
        return {}
    out: dict[str, Any] = {}
    for name in lake.get("names") or LAKE_RUNS:
        r = lake.get(name) or {}
        key = name.replace("-", "_")
        out[f"lake_{key}_steady_events_per_s"] = round(r.get("steady_events_per_s") or 0)
        if name != "changelog":
            out[f"lake_{key}_to_changelog"] = round(lake["ratios"].get(f"{name}/changelog", 0.0), 3)
            out[f"lake_{key}_files_after_run"] = r.get("files_after_run")
            out[f"lake_{key}_files_after_optimize"] = r.get("files_after_optimize")
            out[f"lake_{key}_commit_s"] = (r.get("phases") or {}).get("lake_commit_s")
    so = lake.get("scale_out") or {}
    if so:
        out.update({"lake_standalone_1_worker_events_per_s": round(so["workers_1"]["steady_events_per_s"]),
                    "lake_standalone_2_workers_events_per_s": round(so["workers_2"]["steady_events_per_s"]),
                    "lake_scale_out_ratio": round(so["ratio_2_to_1"], 3), "lake_scale_out_engine": so["lake_engine"]})
    lt = lake.get("delta_latency") or {}
    out.update({"lake_delta_latency_rate": lt.get("writes_per_s"), "lake_delta_latency_p50_ms": lt.get("p50_ms"),
                "lake_delta_latency_p99_ms": lt.get("p99_ms"), "lake_delta_latency_max_ms": lt.get("max_ms")})
    return out


def print_report(result: dict[str, Any], console: Console) -> None:
    table = results_table(f"cdc bench merge: {result['changes']['total']:,} change events into PostgreSQL, "
                          f"topic of {result.get('partitions', '?')} partitions",
                          ("measure", "seconds", "events/s", "vs (a)"), result["machine"])
    a = result["reference"]["events_per_s"]
    p = result["producer"]
    table.add_row("the producer over the same backlog (binlog to Kafka)", f"{p['seconds']:.2f}",
                  f"{p['events_per_s']:,.0f}", f"{p['events_per_s'] / a:.2f}" if a else "-")
    table.add_row("(a) confluent-kafka consume + fastavro decode, one process", f"{result['reference']['seconds']:.2f}",
                  f"{a:,.0f}", "1.00")
    c = result.get("reference_compiled")
    if c:
        table.add_row("(a') the same with the project's compiled Avro decoder", f"{c['seconds']:.2f}",
                      f"{c['events_per_s']:,.0f}", f"{c['events_per_s'] / a:.2f}" if a else "-")
    b = result["merge"]
    table.add_row(f"(b) merge job local[2] into PostgreSQL ({b['batches']} batches), query start included",
                  f"{b['seconds']:.2f}", f"{b['events_per_s']:,.0f}", f"{b['events_per_s'] / a:.2f}" if a else "-")
    table.add_row("(b) the same from its first batch (steady)", f"{b['steady_seconds']:.2f}",
                  f"{b['steady_events_per_s']:,.0f}", f"{b['steady_events_per_s'] / a:.2f}" if a else "-")
    so = result.get("scale_out")
    if so:
        for workers in (1, 2):
            r = so[f"workers_{workers}"]
            table.add_row(f"(e) standalone, {workers} worker(s) of 1 core (steady)", f"{r['steady_seconds']:.2f}",
                          f"{r['steady_events_per_s']:,.0f}", f"{r['steady_events_per_s'] / a:.2f}" if a else "-")
    console.print(table)
    console.print(f"(b) Spark session start {b['session_start_s']:.1f} s and query start {b['query_start_s']:.1f} s "
                  "(once per job start); where the time went (s; driver phases wall clock, task phases summed "
                  "over tasks): " + ", ".join(f"{k[:-2]} {v:.1f}" for k, v in b.get("phases", {}).items())
                  + f"; driver serial share {b['driver_serial_share']:.1%}")
    if b.get("cpu_us_per_event"):
        ref = result["reference"].get("cpu_us_per_event") or {}
        console.print("(b) CPU time per event, by process (µs; read from /proc over the run): "
                      + ", ".join(f"{k} {v:,.1f}" for k, v in sorted(b["cpu_us_per_event"].items(), key=lambda kv: -kv[1]))
                      + f"; total {sum(b['cpu_us_per_event'].values()):,.1f}.  (a)'s: "
                      + ", ".join(f"{k} {v:,.1f}" for k, v in ref.items()))
    if "latency" in result:
        lt, idle = result["latency"], result["idle_change"]
        console.print(f"(c) latency at {lt['writes_per_s']:,.0f} events/s over {lt['seconds']:.0f} s, trigger "
                      f"{lt['trigger_interval_s']:g} s, {lt['rows_measured']:,} rows: p50 {_ms(lt['p50_ms'])}, "
                      f"p99 {_ms(lt['p99_ms'])}, max {_ms(lt['max_ms'])} (INSERT statement time NOW(3) to the "
                      "sink row's insert, clock_timestamp())")
        console.print(f"(d) a single change on the idle pipeline: median {_ms(idle['median_ms'])}, worst "
                      f"{_ms(idle['worst_ms'])} over {idle['changes']} changes")
    lake = result.get("lake")
    if lake:
        for name in lake.get("names") or LAKE_RUNS:
            r = lake[name]
            files = (f"; files {r['files_after_run']} after the run, {r['files_after_optimize']} after optimize "
                     f"({r['optimize_s']:.1f} s)" if "files_after_run" in r else "")
            ratio = lake["ratios"].get(f"{name}/changelog")
            console.print(f"(f) the merge job into {name} only: steady {r['steady_events_per_s']:,.0f} events/s"
                          + (f" = {ratio:.2f} of the changelog's" if ratio is not None else "")
                          + f" ({r['batches']} batches, lake commits {r['phases'].get('lake_commit_s', 0):.1f} s)"
                          + files)
        lt = lake.get("delta_latency")
        if lt:
            console.print(f"(g) latency with the {' and '.join(lt.get('lakes') or ['delta'])} sink(s) at "
                          f"{lt['writes_per_s']:,.0f} events/s, trigger "
                          f"{lt['trigger_interval_s']:g} s, {lt['rows_measured']:,} rows: p50 {_ms(lt['p50_ms'])}, "
                          f"p99 {_ms(lt['p99_ms'])}, max {_ms(lt['max_ms'])} (INSERT time to the Delta commit "
                          "that first held the row: its change data feed)")
    if so:
        console.print(f"(e) scale-out: 2 workers / 1 worker = {so['ratio_2_to_1']:.2f} (one machine of 2 cores: "
                      "driver, broker and PostgreSQL share them)")
    so = (lake or {}).get("scale_out")
    if so:
        console.print(f"(e') with Delta and Iceberg on ({so['lake_engine']} engine): 1 worker "
                      f"{so['workers_1']['steady_events_per_s']:,.0f} events/s, 2 workers "
                      f"{so['workers_2']['steady_events_per_s']:,.0f} = {so['ratio_2_to_1']:.2f}")
