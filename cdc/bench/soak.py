"""``cdc bench soak``: the pipeline for hours under a steady mixed load (``make soak``).

One run against a stack (the embedded one by default, its own database and topics):

1. a table like the endurance issue's (BIGINT key, VARCHAR, DECIMAL, TEXT, and the write's
   time ``src_at``) with ``rows`` rows loaded before the producer starts;
2. ``cdc produce`` and ``cdc merge`` as processes (PostgreSQL sink and clean changelog,
   ``partitions`` partitions per table topic, Kafka transactions on: the defaults), an
   incremental snapshot signalled at the start;
3. a load of ``rate`` row changes a second for ``minutes`` minutes: 35% inserts, 50% updates
   (four in five of them on the newest thousand rows: a hot range), 12% deletes, 3% primary
   key changes, each row written with ``src_at = NOW(6)``; ``rate`` 0 with ``writers``
   connections: the source's peak, each change a transaction of its own written as fast as
   the server takes it (its own section, "End to end at the source's peak");
4. every ``sample_s`` seconds a sample: the producer's seconds behind the source, the
   merge latency p50/p99 of the rows the sink wrote since the last sample (the sink table
   gets a trigger column stamped with ``clock_timestamp()`` on every insert and update:
   latency = that stamp - ``src_at``), the records merged a second, the resident memory of
   each process tree (producer, merge job with its JVM and Python workers, broker, MariaDB,
   PostgreSQL), the checkpoint's files, the sink's bookkeeping rows (tombstones), the merge
   job's pace warnings, and whether ``cdc status`` would report lost Kafka history (it
   must not: nothing is lost);
5. the load stops; the running merge job must bring the sink equal to the source
   (``cdc verify``, tried every 10 s for ``drain_s`` seconds); the time that took is reported.

``deep_batches`` (a test's short form): before the producer starts, each partition of the
table topic gets that many one-record batches of tombstones (a key, no value: not a change,
skipped by every reader), so that the partitions are as deep as hours of load leave them on
the embedded broker, whose fetches list every batch of a partition (docs/operations.md).

The verdict (:func:`verdict`, the goals of issue 53): no stall (equal within
:data:`EQUAL_WITHIN_S` of the load's end, no pace warning in force), the latency p99 at most
:data:`P99_LIMIT_MS` in every sample after the warm-up and that of the last ten minutes within
:data:`TREND_LIMIT` times that of the first ten, the private memory (``RssAnon``) of the
pipeline's processes (the producer, the merge job with its JVM and Python workers) and of
the Kafka nodes in the last sample within 1.25 times that after the warm-up (MariaDB and
PostgreSQL are reported, not judged: their buffer pool and caches fill for the first tens of
minutes; :data:`JUDGED_MEMORY`; resident memory is reported too), and no false alarm of
lost history.
:func:`render` writes the series as a table, :func:`plot` as a PNG.  A benchmark, not a test.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psycopg
from confluent_kafka import Producer
from rich.console import Console

from cdc.bench.doc_sections import with_section
from cdc.bench.harness import PacedWriter, admin, bench_config, child_pids, proc_status_kb, start_stack
from cdc.errors import BenchError
from cdc.pipeline_run import pipeline_processes, run_config
from cdc.stack.kafka_broker import kafka_pids
from cdc.stack.manager import stack_down
from cdc.verify import verify
from common.config import CDCConfig
from common.kafka.clients import ensure_topics
from contract.signals import execute_snapshot_data, send_signal
from contract.topics import table_topic
from producer.binlog.server import start_at_current
from producer.metrics import status_file
from producer.offset_store import check_history
from spark_jobs.sinks.configured import build_sinks

TABLE = "soak"
_ARRIVED = "soak_arrived_at"
#: Seconds of the run before its figures count (the snapshot, Spark's first batches).
WARM_UP_S = 120.0
#: Minutes at each end of the run whose latency p99 is compared (the issue's ten).
TREND_MIN = 10.0
#: The process trees whose private memory must stay flat: the pipeline's own and Kafka's
#: nodes (``broker``, ``broker-2``, ...).  MariaDB and PostgreSQL are reported, not judged:
#: their buffer pool and caches fill for the first tens of minutes.
JUDGED_MEMORY = ("producer", "merge", "broker")
#: The goals: every sample's p99 after the warm-up, the last ten minutes against the first
#: ten, and how soon after the load the sinks must be equal.
P99_LIMIT_MS = 2000.0
TREND_LIMIT = 1.2
EQUAL_WITHIN_S = 60.0
#: With the lakes on: each lake table's disk at the end (MB, at the run's retention), and each
#: committer's staging-to-commit p99 against the commit interval plus this.
LAKE_DISK_LIMIT_MB = 1000.0
LAKE_FRESH_SLACK_S = 10.0


def create_table(mysql: dict, db: str, rows: int) -> None:
    with admin(mysql) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE `{db}`.`{TABLE}` (id BIGINT PRIMARY KEY, name VARCHAR(64), amount DECIMAL(12,2), "
                    "note TEXT, src_at DATETIME(6))")
        cur.execute("SET time_zone = '+00:00'")
        for start in range(0, rows, 5000):
            values = ",".join(f"({i},'n{i}',{i % 100000}.25,'{'x' * (i % 200)}',NOW(6))"
                              for i in range(start, min(rows, start + 5000)))
            cur.execute(f"INSERT INTO `{db}`.`{TABLE}` VALUES {values}")


@dataclass(frozen=True)
class LakeSoak:
    """A soak's lake sinks (``--lake``): both on, on ``engine``, removing versions older than
    ``retention_hours``, committed every ``interval_s`` (None: the sinks' default)."""

    engine: str = "driver"
    retention_hours: int | None = 1
    interval_s: float | None = None


class MixedLoad(PacedWriter):
    """About ``rate`` row changes a second: 35% inserts, 50% updates (80% of them on the
    newest thousand rows), 12% deletes, 3% primary key changes; ``ops`` counts them.  ``rate``
    0: as fast as the server takes them, each change a transaction of its own.  Writer
    ``writer`` of ``writers`` side by side owns the ids congruent to it (the rows loaded and
    those it inserts), so that none touches another's rows."""

    MIX = (("insert", 35), ("update", 50), ("delete", 12), ("key_change", 3))

    def __init__(self, mysql: dict, db: str, rate: int, rows: int, seed: int = 1, *, writer: int = 0,
                 writers: int = 1) -> None:
        super().__init__(mysql, db, rate)
        self.rnd = random.Random(seed * 1000 + writer)
        self.live = list(range(writer, rows, writers))  # ids in the table (a random one: swap and pop)
        self.next_id, self.step = rows + writer, writers
        self.single_row = not rate
        self.per_tick = 1 if self.single_row else max(1, rate // 20)
        self.ops: dict[str, int] = {k: 0 for k, _ in self.MIX}
        self._kinds = [k for k, w in self.MIX for _ in range(w)]
        self._utc = False

    def _pick(self, hot: bool) -> int:
        n = len(self.live)
        i = self.rnd.randrange(max(0, n - 1000), n) if hot else self.rnd.randrange(n)
        return i

    def _take(self, i: int) -> int:
        self.live[i], self.live[-1] = self.live[-1], self.live[i]
        return self.live.pop()

    def write(self, cur) -> int:
        if not self._utc:
            cur.execute("SET time_zone = '+00:00'")
            self._utc = True
        t = f"`{TABLE}`"
        if self.single_row:  # (autocommit)
            self._tick(cur, t)
            return 1
        # A tick's changes in one transaction: a commit per statement (each a binlog flush)
        # held a single connection to about 400 changes/s on a busy 2-core machine.
        cur.execute("BEGIN")
        try:
            self._tick(cur, t)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return self.per_tick

    def _tick(self, cur, t: str) -> None:
        for _ in range(self.per_tick):
            kind = self.rnd.choice(self._kinds) if len(self.live) > 2000 else "insert"
            if kind == "insert":
                i, self.next_id = self.next_id, self.next_id + self.step
                cur.execute(f"INSERT INTO {t} VALUES (%s, %s, %s, %s, NOW(6))",
                            (i, f"n{i}", f"{self.rnd.randrange(10**7) / 100:.2f}", "y" * self.rnd.randrange(300)))
                self.live.append(i)
            elif kind == "update":
                i = self.live[self._pick(self.rnd.random() < 0.8)]
                cur.execute(f"UPDATE {t} SET amount = %s, name = %s, src_at = NOW(6) WHERE id = %s",
                            (f"{self.rnd.randrange(10**7) / 100:.2f}", f"u{self.rnd.randrange(10**6)}", i))
            elif kind == "delete":
                cur.execute(f"DELETE FROM {t} WHERE id = %s", (self._take(self._pick(False)),))
            else:
                old, new = self._take(self._pick(False)), self.next_id
                self.next_id += self.step
                cur.execute(f"UPDATE {t} SET id = %s, src_at = NOW(6) WHERE id = %s", (new, old))
                self.live.append(new)
            self.ops[kind] += 1


class MixedLoads:
    """``writers`` :class:`MixedLoad` side by side on one table, read as one: ``rate`` shared
    among them (0: each as fast as the server takes it)."""

    def __init__(self, mysql: dict, db: str, rate: int, rows: int, writers: int = 1, seed: int = 1) -> None:
        if writers < 1:
            raise BenchError(f"writers is at least 1, not {writers}")
        self.loads = [MixedLoad(mysql, db, -(-rate // writers) if rate else 0, rows, seed, writer=k, writers=writers)
                      for k in range(writers)]

    def start(self) -> "MixedLoads":
        for load in self.loads:
            load.start()
        return self

    @property
    def count(self) -> int:
        return sum(load.count for load in self.loads)

    @property
    def ops(self) -> dict[str, int]:
        return {k: sum(load.ops[k] for load in self.loads) for k, _ in MixedLoad.MIX}

    @property
    def error(self) -> BaseException | None:
        return next((load.error for load in self.loads if load.error is not None), None)

    def halt(self) -> None:
        for load in self.loads:
            load.halt()

    def stop(self) -> None:
        self.halt()
        for load in self.loads:
            load.stop()


def tree_rss_mb(pid: int | None, field: str = "VmRSS") -> float:
    """Resident memory of a process and all its descendants, in MB (0: no such process);
    ``field``: ``VmRSS`` (all of it) or ``RssAnon`` (its private memory, without the file and
    shared pages it touched: PostgreSQL's shared buffers count in every backend's RSS as they
    are read, and grow it for a long while without anything leaking)."""
    if not pid:
        return 0.0
    todo, kb = [pid], 0
    while todo:
        p = todo.pop()
        kb += proc_status_kb(field, p)
        todo += child_pids(p)
    return round(kb / 1024, 1)


def deepen_partitions(bootstrap: str, topic: str, partitions: int, batches: int, client: dict | None = None) -> None:
    """Each partition of ``topic`` gets ``batches`` one-record batches of a tombstone."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                         "queue.buffering.max.messages": 1_000_000, **(client or {})})
    for p in range(partitions):
        for i in range(batches):
            while True:
                try:
                    producer.produce(topic, key=b"soak-filler", value=None, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
    if producer.flush(300) > 0:
        raise BenchError(f"the filler records of {topic} were not all acknowledged")


class SinkClock:
    """The PostgreSQL sink table's rows stamped with ``clock_timestamp()`` on every insert
    and update (a trigger), and the latency of those written in a time span."""

    def __init__(self, cfg: CDCConfig, db: str) -> None:
        sink = dict(build_sinks(cfg.sinks))["postgres"]
        self.dsn, self.table = sink.dsn, sink.qualified_name(db, TABLE)
        self.ready = False

    def install(self) -> bool:
        """Add the column and trigger once the merge job made the table; whether in place."""
        if self.ready:
            return True
        fn = f"{self.table.rsplit('.', 1)[0]}.soak_stamp"
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS {_ARRIVED} timestamptz")
                conn.execute(f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS "
                             f"$$ BEGIN NEW.{_ARRIVED} := clock_timestamp(); RETURN NEW; END $$")
                conn.execute(f"CREATE OR REPLACE TRIGGER soak_stamp BEFORE INSERT OR UPDATE ON {self.table} "
                             f"FOR EACH ROW EXECUTE FUNCTION {fn}()")
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return False
        self.ready = True
        return True

    def latency_ms(self, since: float, until: float) -> tuple[float | None, float | None, int]:
        """p50, p99 and count of the latencies of rows stamped in ``(since, until]`` (epoch s)."""
        if not self.ready:
            return None, None, 0
        sql = (f"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP "
               f"(ORDER BY l), count(*) FROM (SELECT EXTRACT(EPOCH FROM ({_ARRIVED} - (src_at AT TIME ZONE 'UTC')))"
               f" * 1000 AS l FROM {self.table} WHERE {_ARRIVED} > to_timestamp(%s) AND {_ARRIVED} <= to_timestamp(%s)"
               f" AND src_at IS NOT NULL) x")
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            cur.execute(sql, (since, until))
            p50, p99, n = cur.fetchone()
        return (None if p50 is None else round(float(p50), 1), None if p99 is None else round(float(p99), 1),
                int(n))

    def tombstones(self) -> int:
        schema = self.table.rsplit(".", 1)[0]
        try:
            with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {schema}.__cdc_tombstones")
                return int(cur.fetchone()[0])
        except psycopg.Error:
            return 0


def _files(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _lake_dirs(cfg: CDCConfig, db: str) -> dict[str, Path]:
    """The soak table's lake tables' directories (local paths), when the lake sinks are on."""
    out = {}
    if cfg.sinks.delta.enabled:
        out["delta"] = Path(cfg.sinks.delta.path.removeprefix("file://")) / db / TABLE
    if cfg.sinks.iceberg.enabled:
        out["iceberg"] = Path(cfg.sinks.iceberg.warehouse.removeprefix("file://")) / db / TABLE
    return out


def _lake_sample(dirs: dict[str, Path]) -> dict[str, dict[str, float]]:
    """Each lake table's files and MB on disk (a file the job's upkeep removes meanwhile is
    passed over)."""
    out = {}
    for name, path in dirs.items():
        sizes = []
        for p in path.rglob("*") if path.exists() else []:
            with contextlib.suppress(FileNotFoundError):
                if p.is_file():
                    sizes.append(p.stat().st_size)
        out[name] = {"files": len(sizes), "mb": round(sum(sizes) / 1e6, 1)}
    return out


def _lake_commits(cfg: CDCConfig) -> dict[str, dict[str, float]]:
    """Per lake sink, from the merge job's lake status: its commits so far, the freshness of its
    stalest table (seconds since its oldest uncommitted change was staged) and the committer's
    staging-to-commit p99."""
    try:
        sinks = json.loads((Path(cfg.state_dir) / "lake-status.json").read_text()).get("sinks") or {}
    except (OSError, ValueError):
        return {}
    return {name: {"commits": s.get("commits", 0),
                   "freshness_s": max((t.get("freshness_s") or 0.0 for t in (s.get("tables") or {}).values()),
                                      default=0.0),
                   "commit_delay_p99_s": s.get("commit_delay_p99_s")} for name, s in sinks.items()}


def _merge_status(cfg: CDCConfig) -> dict:
    try:
        return json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())
    except (OSError, ValueError):
        return {}


def _producer_lag(cfg: CDCConfig) -> float | None:
    try:
        return float(json.loads(status_file(cfg).read_text()).get("seconds_behind_source"))
    except (OSError, ValueError, TypeError):
        return None


def false_loss_alarm(cfg: CDCConfig) -> str | None:
    """What ``cdc status`` says of lost Kafka history now (None: nothing lost)."""
    return check_history(cfg.kafka, cfg.producer.name, cfg.state_dir)[2]


def _soak_config(cfg: CDCConfig, run: str, work_dir: Path, partitions: int, lake: LakeSoak | None) -> CDCConfig:
    """The run's configuration: its own topics and sinks, PostgreSQL and the changelog on, the
    lakes as asked."""
    cfg = run_config(cfg, run, work_dir, partitions=partitions)
    cfg.sinks.postgres.enabled = cfg.sinks.changelog.enabled = True
    cfg.sinks.mysql.enabled = False
    for section in (cfg.sinks.delta, cfg.sinks.iceberg):
        section.enabled = lake is not None
        if lake is not None:
            section.retention_hours, section.engine = lake.retention_hours, lake.engine
            if lake.interval_s is not None:
                section.commit_interval_s = lake.interval_s
    cfg.sinks.postgres.schema_name = run
    return cfg


def _check_running(*processes) -> None:
    """A run's process that exited stops the soak, naming its log."""
    for p in processes:
        if not p.alive():
            raise BenchError(f"the {p.name} exited ({p.proc.returncode if p.proc else '?'}); see {p.log}")


def _sample(cfg: CDCConfig, clock, load, ms: dict, span: tuple[float, float], counts: tuple[int, int, int],
            pids: dict[str, int | None], t0: float, lake_dirs: dict[str, Path]) -> dict[str, Any]:
    """One sample's figures over ``span`` (the last sample's time, now): latency, rates from
    ``counts`` (changes written and merged at the last sample, merged now), memory of the
    ``pids``' process trees, checkpoint files, tombstones, pace warnings, and the lakes'."""
    (last_t, now), (last_written, last_input, merged) = span, counts
    p50, p99, n = clock.latency_ms(last_t, now)
    sample = {"t_s": round(now - t0, 1), "source_lag_s": _producer_lag(cfg), "latency_p50_ms": p50,
              "latency_p99_ms": p99, "rows_measured": n, "changes_written": load.count,
              "written_per_s": round((load.count - last_written) / (now - last_t), 1) if now > last_t else None,
              "merged_per_s": round((merged - last_input) / (now - last_t), 1) if now > last_t else None,
              "rss_mb": {k: tree_rss_mb(v) for k, v in pids.items()},
              "private_mb": {k: tree_rss_mb(v, "RssAnon") for k, v in pids.items()},
              "checkpoint_files": _files(Path(cfg.spark.checkpoint_dir)),
              "tombstones": clock.tombstones(), "pace_warnings": [w.get("message") for w in ms.get("warnings") or []]}
    if lake_dirs:
        sample["lake"] = _lake_sample(lake_dirs)
        sample["lake_commits"] = _lake_commits(cfg)
    return sample


def _deepen(cfg: CDCConfig, run: str, db: str, partitions: int, deep_batches: int, console: Console) -> None:
    """``deep_batches`` one-record batches into each partition of the soak table's topic first."""
    topic = table_topic(run, db, TABLE)
    ensure_topics(cfg.kafka, [topic], partitions=partitions)
    with console.status(f"{partitions} x {deep_batches:,} one-record batches into {topic}..."):
        deepen_partitions(cfg.kafka.bootstrap_servers, topic, partitions, deep_batches, cfg.kafka.client_settings())


def _drain(cfg: CDCConfig, db: str, producer, job, drain_s: float, poll_s: float = 10.0) -> tuple[bool, float]:
    """After the load: ``cdc verify`` every ``poll_s`` until the sinks equal the source (at most
    ``drain_s``); whether they did, and when (to within ``poll_s``)."""
    t_stop = time.time()
    report = None
    while time.time() - t_stop < drain_s:
        time.sleep(poll_s)
        _check_running(producer, job)
        report = verify(cfg, [f"{db}.{TABLE}"])
        if report.equal:
            break
    return bool(report is not None and report.equal), round(time.time() - t_stop, 1)


def run_soak(cfg: CDCConfig, *, mysql: dict, work_dir: Path, minutes: float = 60.0, rate: int = 1000,
             rows: int = 50_000, partitions: int = 2, sample_s: float = 30.0, deep_batches: int = 0,
             drain_s: float = 180.0, drain_poll_s: float = 10.0, stack_pids: dict[str, int | None] | None = None,
             loss_checks: int = 1, lake: LakeSoak | None = None, writers: int = 1, console: Console | None = None,
             on_sample: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """One soak run (see the module docstring) against the stack ``cfg`` and ``mysql`` (its
    admin connection details) point at; ``stack_pids``: the broker's, MariaDB's and
    PostgreSQL's processes, for their memory; ``loss_checks``: how many times each sample
    asks what ``cdc status`` says of lost history; ``drain_poll_s``: how often the sinks are
    compared with the source after the load (``drain_s`` at most); ``lake``: the Delta and
    Iceberg sinks on too (as `cdc stack up` has them, as :class:`LakeSoak` says), their
    tables' files and MB sampled; ``writers``: connections writing side by side (``rate`` 0:
    each as fast as the source takes single-row transactions, the source's peak).  Returns
    the samples and the verdict's figures."""
    console = console or Console()
    work_dir.mkdir(parents=True, exist_ok=True)
    run = f"soak_{uuid.uuid4().hex[:8]}"
    db = run
    cfg = _soak_config(cfg, run, work_dir, partitions, lake)
    lake_dirs = _lake_dirs(cfg, db)
    create_table(mysql, db, rows)
    if deep_batches:
        _deepen(cfg, run, db, partitions, deep_batches, console)
    start_at_current(cfg)
    producer, job = pipeline_processes(cfg, work_dir, "soak")
    clock = SinkClock(cfg, db)
    load = MixedLoads(mysql, db, rate, rows, writers)
    samples: list[dict] = []
    alarms: list[str] = []
    pids = dict(stack_pids or {})
    seconds = minutes * 60.0
    console.print(f"soak {run}: {load_words(rate, writers)} for {minutes:g} min, {rows:,} rows, {partitions} partitions"
                  + (f", {deep_batches:,} filler batches per partition" if deep_batches else ""))
    t0 = time.time()
    result: dict[str, Any] = {"run": run, "rate": rate, "writers": writers, "minutes": minutes, "rows": rows,
                              "partitions": partitions,
                              "deep_batches": deep_batches, "sample_s": sample_s, "samples": samples,
                              "lake": lake is not None,
                              "lake_retention_hours": lake.retention_hours if lake else None,
                              "lake_engine": lake.engine if lake else None,
                              "lake_interval_s": cfg.sinks.delta.commit_interval_s if lake else None}
    try:
        producer.start()
        job.start()
        with admin(mysql) as conn:
            send_signal(conn, cfg.source.signal_table, "execute-snapshot", execute_snapshot_data([f"{db}.{TABLE}"]))
        load.start()
        last_t, last_input, last_written = time.time(), 0, 0
        while time.time() - t0 < seconds:
            time.sleep(max(0.0, min(sample_s, seconds - (time.time() - t0))))
            if load.error is not None:
                raise BenchError(f"the write load failed: {load.error}")
            _check_running(producer, job)
            now = time.time()
            clock.install()
            ms = _merge_status(cfg)
            merged = int(ms.get("totals", {}).get("input", 0))
            alarm = _loss_alarms(cfg, loss_checks, alarms)
            result["loss_checks"] = result.get("loss_checks", 0) + loss_checks
            sample = _sample(cfg, clock, load, ms, (last_t, now), (last_written, last_input, merged),
                             {"producer": producer.proc.pid, "merge": job.proc.pid, **pids}, t0, lake_dirs)
            sample["lost_history_alarm"] = alarm
            samples.append(sample)
            last_t, last_input, last_written = now, merged, load.count
            if on_sample is not None:
                on_sample(sample)
            console.print(_sample_line(sample))
        load.stop()
        result["ops"] = dict(load.ops)
        result["equal"], result["drain_s"] = _drain(cfg, db, producer, job, drain_s, drain_poll_s)
        result["final_warnings"] = [w.get("message") for w in _merge_status(cfg).get("warnings") or []]
    finally:
        load.halt()
        producer.stop()
        job.stop()
    result["lost_history_alarms"] = alarms
    result["verdict"] = verdict(result)
    return result


def _loss_alarms(cfg: CDCConfig, checks: int, alarms: list[str]) -> str | None:
    """What ``cdc status`` says of lost history, asked ``checks`` times while the producer
    commits: each false alarm added to ``alarms``; the last one (None: none)."""
    alarm = None
    for _ in range(checks):
        alarm = false_loss_alarm(cfg) or alarm
        if alarm:
            alarms.append(alarm)
    return alarm


def _sample_line(s: dict) -> str:
    private = s.get("private_mb", {})
    rss = ", ".join(f"{k} {v:,.0f}/{private.get(k, 0):,.0f}" for k, v in s["rss_mb"].items())
    return (f"  {s['t_s']:7.0f}s  lag {_f(s['source_lag_s'], '.1f')} s  latency p50 {_f(s['latency_p50_ms'])} "
            f"p99 {_f(s['latency_p99_ms'])} ms  written {_f(s['written_per_s'])}/s  merged {_f(s['merged_per_s'])}/s  "
            f"RSS/private MB: {rss}  "
            f"ckpt files {s['checkpoint_files']}  tombstones {s['tombstones']}"
            + "".join(f"  {k} {v['files']} files {v['mb']:,.1f} MB" for k, v in (s.get("lake") or {}).items())
            + (f"  WARNINGS: {len(s['pace_warnings'])}" if s["pace_warnings"] else ""))


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _window(samples: list[dict], lo: float, hi: float) -> list[dict]:
    return [s for s in samples if lo <= s["t_s"] <= hi]


def verdict(result: dict) -> dict[str, Any]:
    """The run's figures against the endurance goals (see the module docstring)."""
    samples = result["samples"]
    end = samples[-1]["t_s"] if samples else 0.0
    span = min(TREND_MIN * 60, max(0.0, (end - WARM_UP_S) / 2))
    first = _window(samples, WARM_UP_S, WARM_UP_S + span)
    last = _window(samples, end - span, end)
    p99 = lambda xs: [s["latency_p99_ms"] for s in xs if s["latency_p99_ms"] is not None]  # noqa: E731
    first_p99 = statistics.median(p99(first)) if p99(first) else None
    last_p99 = statistics.median(p99(last)) if p99(last) else None
    rss_growth = {}
    if first and last:
        field = "private_mb" if "private_mb" in last[-1] else "rss_mb"  # (older results: RSS)
        for k in last[-1][field]:
            a, b = first[0][field].get(k) or 0.0, last[-1][field].get(k) or 0.0
            rss_growth[k] = round(b / a, 2) if a else None
    judged_rss = {k: v for k, v in rss_growth.items()
                  if v is not None and (k in JUDGED_MEMORY or k.startswith("broker-"))}
    all_p99 = [v for v in p99(samples)]
    warm = _window(samples, WARM_UP_S, end)
    warm_p99 = p99(warm)
    written, merged, lag = ([s[key] for s in warm if s.get(key) is not None]
                            for key in ("written_per_s", "merged_per_s", "source_lag_s"))
    drained = result.get("drain_s")
    out = {
        "equal": result.get("equal", False),
        "no_stall": bool(result.get("equal")) and not result.get("final_warnings")
        and (drained is None or drained <= EQUAL_WITHIN_S),
        "latency_p99_first_ms": first_p99, "latency_p99_last_ms": last_p99,
        "latency_p99_ratio": round(last_p99 / first_p99, 2) if first_p99 and last_p99 else None,
        "latency_p99_max_ms": max(all_p99) if all_p99 else None,
        "latency_p99_max_after_warm_up_ms": max(warm_p99) if warm_p99 else None,
        "rss_growth": rss_growth,
        "false_loss_alarms": len(result.get("lost_history_alarms") or []),
        "lake_end": lake_end(result),
        # what the load and the pipeline sustained after the warm-up (the source's peak: the rate it took)
        "written_per_s_median": statistics.median(written) if written else None,
        "merged_per_s_median": statistics.median(merged) if merged else None,
        "source_lag_median_s": statistics.median(lag) if lag else None,
        "source_lag_max_s": max(lag, default=None),
    }
    out["latency_flat"] = out["latency_p99_ratio"] is not None and out["latency_p99_ratio"] <= TREND_LIMIT
    out["latency_bounded"] = bool(warm_p99) and max(warm_p99) <= P99_LIMIT_MS
    out["rss_flat"] = bool(judged_rss) and all(v <= 1.25 for v in judged_rss.values())
    ends = out["lake_end"].values()
    out["lake_disk_bounded"] = all(e["mb"] <= LAKE_DISK_LIMIT_MB for e in ends)
    out["lake_fresh"] = all(e.get("fresh", True) for e in ends)
    out["passed"] = out["no_stall"] and out["latency_flat"] and out["latency_bounded"] and out["rss_flat"] \
        and out["false_loss_alarms"] == 0 and out["lake_disk_bounded"] and out["lake_fresh"]
    return out


def _lake_rows(result: dict) -> list[str]:
    """The verdict's rows of the lakes' disk, freshness and commits (none without lakes)."""
    v, interval = result["verdict"], result.get("lake_interval_s")
    ends = v.get("lake_end") or {}
    if not ends:
        return []
    disk = ", ".join(f"{k} {e['mb']:,.1f} / {e['files']:,}" for k, e in ends.items())
    rows = [f"| each lake table's disk at the end <= {LAKE_DISK_LIMIT_MB / 1000:g} GB (retention "
            f"{result.get('lake_retention_hours')} h): MB / files | {disk} | "
            f"{'yes' if v['lake_disk_bounded'] else 'no'} |"]
    if interval is not None:
        fresh = ", ".join(f"{k} {_f(e.get('commit_delay_p99_s'), '.1f')} s" for k, e in ends.items())
        rows.append(f"| lake freshness: each committer's staging-to-commit p99 <= the interval + "
                    f"{LAKE_FRESH_SLACK_S:g} s (interval {interval:g} s) | {fresh} | "
                    f"{'yes' if v['lake_fresh'] else 'no'} |")
    per_h = ", ".join(f"{k} {e.get('commits_per_h', '-')}" for k, e in ends.items())
    rows.append(f"| lake commits per table per hour | {per_h} | shown |")
    return rows


def lake_end(result: dict) -> dict[str, dict[str, Any]]:
    """Per lake sink at the last sample: its table's MB and files on disk, its commits (and per
    hour), its committer's staging-to-commit p99 and, when the run's interval is known, whether
    that p99 is within the interval plus :data:`LAKE_FRESH_SLACK_S`."""
    samples = result["samples"]
    if not samples or not samples[-1].get("lake"):
        return {}
    last, interval = samples[-1], result.get("lake_interval_s")
    out = {}
    for k, disk in last["lake"].items():
        commits = (last.get("lake_commits") or {}).get(k) or {}
        e = {"mb": disk["mb"], "files": disk["files"], "commits": commits.get("commits"),
             "commit_delay_p99_s": commits.get("commit_delay_p99_s")}
        if e["commits"] is not None and last["t_s"]:
            e["commits_per_h"] = round(e["commits"] * 3600.0 / last["t_s"])
        if interval is not None and e["commit_delay_p99_s"] is not None:
            e["fresh"] = e["commit_delay_p99_s"] <= interval + LAKE_FRESH_SLACK_S
        out[k] = e
    return out


def plot(result: dict, path: Path) -> Path:
    """The series as a PNG: latency p50/p99, source lag, records merged a second, memory."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    t = [x["t_s"] / 60 for x in s]
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax = axes[0]
    ax.plot(t, [x["latency_p50_ms"] for x in s], label="merge latency p50 (ms)")
    ax.plot(t, [x["latency_p99_ms"] for x in s], label="merge latency p99 (ms)")
    ax.plot(t, [(x["source_lag_s"] or 0) * 1000 for x in s], label="producer behind source (ms)", alpha=0.6)
    ax.set_ylabel("ms")
    ax.legend(loc="upper left")
    load = (f"{result['rate']:,} mixed changes/s" if result["rate"]
            else f"the source's peak, {result.get('writers') or 1} single-row writers")
    ax.set_title(f"soak: {load} for {result['minutes']:g} min, "
                 f"{result['partitions']} partitions, embedded stack")
    ax = axes[1]
    ax.plot(t, [x["merged_per_s"] for x in s], label="records merged/s")
    ax.set_ylabel("records/s")
    ax.legend(loc="upper left")
    ax = axes[2]
    for i, k in enumerate(s[0]["rss_mb"] if s else []):
        color = f"C{i}"
        ax.plot(t, [x["rss_mb"].get(k) for x in s], color=color, label=f"{k} RSS")
        ax.plot(t, [x.get("private_mb", {}).get(k) for x in s], color=color, linestyle="--", label=f"{k} private")
    ax.set_ylabel("MB (RSS solid, private dashed)")
    ax.set_xlabel("minutes")
    ax.legend(loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


SECTION = "## Soak"
#: A soak with the lake sinks on (``--lake``) has a section of its own (one per engine), as has
#: one at the source's peak (``--rate 0``).
LAKE_SECTION = "## Soak with the lake sinks"
PEAK_SECTION = "## End to end at the source's peak"


def section_heading(result: dict) -> str:
    if result.get("lake"):
        engine = result.get("lake_engine") or "driver"
        return LAKE_SECTION if engine == "driver" else f"{LAKE_SECTION}, {engine} engine"
    return SECTION if result.get("rate") else PEAK_SECTION


def load_words(rate: int, writers: int = 1) -> str:
    """The load, in words: a rate of mixed changes, or the source's peak."""
    if not rate:
        return (f"the source's fastest single-row load ({writers} connection{'s' if writers > 1 else ''} writing "
                "mixed row changes, each its own transaction, as fast as the server takes them)")
    return f"{rate:,} mixed row changes a second" + (f" from {writers} connections" if writers > 1 else "")


def render(result: dict, *, when: str, png: str | None = None) -> str:
    """The docs/benchmarks.md section: the verdict, then the series (every sample, or every
    other one past 40)."""
    v = result["verdict"]
    lines = [section_heading(result), "",
             f"`cdc bench soak --minutes {result['minutes']:g} --rate {result['rate']}"
             f"{' --writers ' + str(result.get('writers')) if (result.get('writers') or 1) > 1 else ''}"
             f"{' --lake --lake-retention-hours ' + str(result.get('lake_retention_hours')) if result.get('lake') else ''}"
             f"{' --lake-engine ' + result['lake_engine'] if result.get('lake') and result.get('lake_engine') else ''}"
             f"{' --lake-interval ' + format(result['lake_interval_s'], 'g') if result.get('lake') and result.get('lake_interval_s') is not None else ''}"
             f"` ({when}): the producer and the "
             f"merge job (`local[2]`, PostgreSQL sink and clean changelog"
             f"{', Delta and Iceberg tables' if result.get('lake') else ''}) under "
             f"{load_words(result['rate'], result.get('writers') or 1)} "
             f"(35% inserts, 50% updates, 12% deletes, 3% key changes) on a table of {result['rows']:,} rows, "
             f"{result['partitions']} partitions, an incremental snapshot at the start; a sample every "
             f"{result['sample_s']:g} s.", "",
             "| goal | figure | met |", "| --- | --- | --- |",
             f"| no stall: equal within {EQUAL_WITHIN_S:g} s of the load's end, no pace warning | equal after "
             f"{result.get('drain_s', '-')} s, {len(result.get('final_warnings') or [])} warnings | "
             f"{'yes' if v['no_stall'] else 'no'} |",
             f"| latency p99, last {TREND_MIN:g} min <= {TREND_LIMIT:g} x first {TREND_MIN:g} after warm-up | "
             f"{_f(v['latency_p99_last_ms'])} / {_f(v['latency_p99_first_ms'])} ms = {v['latency_p99_ratio']} | "
             f"{'yes' if v['latency_flat'] else 'no'} |",
             f"| latency p99 <= {P99_LIMIT_MS / 1000:g} s in every sample after warm-up (worst) | "
             f"{_f(v.get('latency_p99_max_after_warm_up_ms'))} ms (with the warm-up {_f(v['latency_p99_max_ms'])} ms) | "
             f"{'yes' if v.get('latency_bounded') else 'no'} |",
             f"| private memory flat (RssAnon, last / first after warm-up; producer, merge job and Kafka judged, "
             f"MariaDB and PostgreSQL shown) | "
             f"{', '.join(f'{k} {g}' for k, g in v['rss_growth'].items())} | {'yes' if v['rss_flat'] else 'no'} |",
             f"| no false alarm of lost Kafka history | {v['false_loss_alarms']} | "
             f"{'yes' if v['false_loss_alarms'] == 0 else 'no'} |",
             f"| sustained after warm-up (medians): written to the source / merged | "
             f"{_f(v.get('written_per_s_median'))} / {_f(v.get('merged_per_s_median'))} changes/s | shown |",
             f"| producer behind the source after warm-up, median / worst sample | "
             f"{_f(v.get('source_lag_median_s'), '.1f')} / {_f(v.get('source_lag_max_s'), '.1f')} s | shown |"]
    lines += _lake_rows(result)
    lines.append("")
    if png:
        lines += [f"![soak series]({png})", ""]
    s = result["samples"]
    step = 1 if len(s) <= 40 else 2
    keys = list(s[0]["rss_mb"]) if s else []
    lakes = list(s[0].get("lake") or {}) if s else []
    lines += ["| min | behind source s | latency p50 ms | p99 ms | written/s | merged/s | "
              + " | ".join(f"{k} MB RSS / private" for k in keys)
              + " | ckpt files | tombstones | warnings |" + "".join(f" {k} files / MB |" for k in lakes),
              "| " + " | ".join(["---"] * (9 + len(keys) + len(lakes))) + " |"]
    for x in s[::step]:
        lines.append(f"| {x['t_s'] / 60:.1f} | {_f(x['source_lag_s'], '.1f')} | {_f(x['latency_p50_ms'])} | "
                     f"{_f(x['latency_p99_ms'])} | {_f(x.get('written_per_s'))} | {_f(x['merged_per_s'])} | "
                     + " | ".join(f"{_f(x['rss_mb'].get(k))} / {_f(x.get('private_mb', {}).get(k))}" for k in keys)
                     + f" | {x['checkpoint_files']} | {x['tombstones']} | {len(x['pace_warnings'])} |"
                     + "".join(f" {x['lake'][k]['files']} / {x['lake'][k]['mb']:,.1f} |" for k in lakes))
    return "\n".join(lines) + "\n"


def bench_soak(state_dir: Path, *, minutes: float = 60.0, rate: int = 1000, rows: int = 50_000, partitions: int = 2,
               sample_s: float = 30.0, out: Path | None = None, png: Path | None = None, keep_running: bool = False,
               lake: LakeSoak | None = None, writers: int = 1, console: Console | None = None) -> dict[str, Any]:
    """``cdc bench soak`` on the embedded stack of ``state_dir``: :func:`run_soak`, then the
    verdict printed and, with ``out``, its section in that file (docs/benchmarks.md) with the
    plot at ``png``."""
    console = console or Console()
    info = start_stack(state_dir, console)
    cfg = bench_config(info, "soak", "soak")
    pids = {**kafka_pids(info.kafka), "mariadb": info.mysql.get("pid"), "postgres": info.postgres.get("pid")}
    work_dir = Path(state_dir) / f"soak-{int(time.time())}"
    try:
        result = run_soak(cfg, mysql=info.mysql, work_dir=work_dir, minutes=minutes, rate=rate, rows=rows,
                          partitions=partitions, sample_s=sample_s, stack_pids=pids, lake=lake, writers=writers,
                          console=console)
    finally:
        if keep_running:
            console.print(f"stack left running: stop it with 'cdc stack down --state-dir {info.state_dir}'")
        else:
            stack_down(info.state_dir)
    (work_dir / "result.json").write_text(json.dumps(result, indent=1, default=str))  # the whole series
    v = result["verdict"]
    console.print(f"soak {'PASSED' if v['passed'] else 'FAILED'}: equal {v['equal']} (after {result.get('drain_s')} s), "
                  f"latency p99 first {v['latency_p99_first_ms']} / last {v['latency_p99_last_ms']} ms "
                  f"(ratio {v['latency_p99_ratio']}), RSS growth {v['rss_growth']}, "
                  f"false loss alarms {v['false_loss_alarms']}")
    if out is not None:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        rel = None
        if png is not None:
            plot(result, png)
            rel = str(png.relative_to(out.parent)) if png.is_relative_to(out.parent) else str(png)
        text = out.read_text() if out.exists() else "# Benchmarks\n"
        out.write_text(with_section(text, section_heading(result), render(result, when=when, png=rel)))
        console.print(f"wrote the soak section of {out}" + (f" and {png}" if png else ""))
    return result
