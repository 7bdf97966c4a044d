"""The chaos run: the whole pipeline under a random write load, processes killed with
SIGKILL at random moments, the source restarted; at the end the sinks and the clean
changelog must equal the source.

One scenario (``make chaos`` runs a long one, the test suite a moderate one):

* three tables with single, composite and string primary keys, filled before the
  producer starts (so only the snapshots bring their rows);
* a random write load on each: inserts, updates, deletes, primary-key changes, delete and
  re-insert of the same key in one transaction;
* the producer (``cdc produce``, Kafka transactions on) and the merge job (``cdc merge``)
  as processes;
* a snapshot of each table triggered by a signal row while the load runs; the snapshot
  is paused and resumed once;
* the producer killed with SIGKILL ``producer_kills`` times and the merge job
  ``job_kills`` times at moments drawn from the seed, each restarted; the source
  database restarted once;
* with ``brokers`` (a Kafka cluster of three nodes, ``cdc.broker_chaos``): the node leading
  the busiest partition of the run's table topics killed with SIGKILL while a snapshot runs
  (one is started if none is) and again while only the stream does, each started again
  some seconds later, and a node stopped with Kafka's controlled shutdown (SIGTERM) and
  started again; after the run, the topics show that each stopped node led its partition
  and that a snapshot was running at the first kill;
* with ``read_only``: the producer runs as a CDC user that may not write at all
  (REPLICATION SLAVE, REPLICATION CLIENT, SELECT) with ``snapshot.read_only`` (windows
  bounded by GTID sets); the signals are rows another user inserts;
* then the load stops, everything drains, and ``cdc verify`` (sinks and clean changelog)
  must pass.  It prints what it did and counted: kills, restarts, rows, changes, copies
  in the raw topics and duplicates in the clean changelog (zero expected).

The same seed gives the same plan (moments, table data, write sequences); the timing of
the machine does the rest.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from cdc.broker_chaos import BROKER_DOWN_S, BrokerChaos, leader_epochs, leader_moved, snapshot_running
from cdc.errors import ChaosError
from cdc.pipeline_run import CdcProcess, pipeline_processes, run_config
from cdc.verify import print_report, verify
from cdc.workload import WriteLoad, create_table
from common.config import CDCConfig
from common.kafka.topic_reader import read_topic
from common.sql.sessions import connect
from contract.notifications import Notification
from contract.signals import execute_snapshot_data, send_signal
from contract.topics import clean_topic, notifications_topic
from producer.binlog.server import current_position, start_at_current
from producer.offset_store import OffsetStore
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.lake_sink import LakeSink

KINDS = ("single", "composite", "string")

@dataclass
class ChaosPlan:
    seed: int
    actions: list[tuple[float, str]] = field(default_factory=list)  # (seconds from start, action)

    @classmethod
    def make(cls, seed: int, *, duration: float, producer_kills: int, job_kills: int,
             broker_kills: bool = False) -> "ChaosPlan":
        rnd = random.Random(seed)
        acts: list[tuple[float, str]] = [(1.0, "snapshot:single"), (3.0, "snapshot:composite"),
                                         (5.0, "snapshot:string")]
        t_pause = rnd.uniform(6.0, duration * 0.4)
        acts += [(t_pause, "pause"), (t_pause + rnd.uniform(2.0, 4.0), "resume")]
        # Producer kills at least 2 s apart, job kills at least 12 s apart (a Spark start).
        acts += [(t, "kill:producer") for t in _spread(rnd, producer_kills, 4.0, duration, 2.0)]
        # the merge job's kills go round: a plain one; one right after a lake table's commit (the
        # committer's other tables not yet committed, its journal not yet cleared); one right
        # after a batch was staged for a lake table (staged, not committed); one during a lake
        # commit (its intent written, the table not yet committed)
        job_times = _spread(rnd, job_kills, 12.0, duration + job_kills * 4.0, 12.0)
        kinds = ("kill:job", "kill:job-commit", "kill:job-staged", "kill:job-intent")
        acts += [(t, kinds[i % len(kinds)]) for i, t in enumerate(job_times)]
        acts.append((rnd.uniform(duration * 0.3, duration * 0.7), "restart:source"))
        if broker_kills:  # a node down for BROKER_DOWN_S each time: killed during a snapshot and
            # while only the stream runs, then shut down
            for at, how in ((rnd.uniform(5.5, 7.0), "kill:broker:snapshot"),
                            (rnd.uniform(duration * 0.5, duration * 0.6), "kill:broker"),
                            (rnd.uniform(duration * 0.75, duration * 0.85), "shutdown:broker")):
                acts += [(at, how), (at + BROKER_DOWN_S, "start:broker")]
        return cls(seed, sorted(acts))


def _spread(rnd: random.Random, n: int, start: float, end: float, gap: float) -> list[float]:
    """``n`` moments in [start, end], at least ``gap`` apart, drawn from ``rnd``."""
    span = max(end - start - gap * (n - 1), 0.0)
    offsets = sorted(rnd.uniform(0, span) for _ in range(n))
    return [start + o + i * gap for i, o in enumerate(offsets)]


def _chaos_config(cfg: CDCConfig, run: str, work_dir: Path, brokers: BrokerChaos | None) -> CDCConfig:
    """The run's configuration: its own topics, database and sinks, Kafka transactions, small
    chunks, every sink on, short trigger and lake commit intervals."""
    cfg = run_config(cfg, run, work_dir, partitions=2)
    cfg.kafka.transactions = True
    cfg.snapshot.chunk_size, cfg.snapshot.parallelism = 100, 2
    cfg.sinks.changelog.enabled = cfg.sinks.postgres.enabled = cfg.sinks.mysql.enabled = True
    cfg.sinks.postgres.schema_name = run
    cfg.sinks.mysql.database = f"sink_{run}"
    cfg.spark.trigger_interval_s = 1.0
    cfg.sinks.delta.commit_interval_s = cfg.sinks.iceberg.commit_interval_s = 3.0  # (several commits a minute)
    if brokers is not None:  # every topic on every node, a write acknowledged by two
        cfg.kafka.replication_factor = min(3, len(brokers.info["nodes"]))
    return cfg


def _prepare_source(cfg: CDCConfig, admin: Callable[[], Any], run: str, rows: int, read_only: bool) -> None:
    """The run's database and tables of ``rows`` rows; with ``read_only`` a CDC user without
    any write privilege (set in ``cfg``) and read-only snapshots."""
    db = run
    with admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
        if read_only:
            user, password = f"ro_{run}"[:32], uuid.uuid4().hex
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
            cur.execute(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO `{user}`@'%'")
            cfg.source.user, cfg.source.password = user, password
            cfg.snapshot.read_only = True
    with admin() as conn:
        for kind in KINDS:
            create_table(conn, db, f"t_{kind}", kind, rows)


@dataclass
class _ChaosRun:
    """What one run's actions work on: its configuration and database, its processes and Kafka
    nodes, its counts."""

    cfg: CDCConfig
    db: str
    admin: Callable[[], Any]
    restart_source: Callable[[], None]
    producer: CdcProcess
    job: CdcProcess
    brokers: BrokerChaos | None
    counts: dict[str, Any]

    def signal_row(self, kind: str, data: dict | None) -> str:
        """Insert a signal row (the source may be restarting: tried for a minute)."""
        for _ in range(60):
            try:  # (a read-only CDC user may not insert)
                c = self.admin() if self.cfg.snapshot.read_only else connect(self.cfg.source)
            except Exception:  # noqa: BLE001 - retried
                time.sleep(1.0)
                continue
            try:
                self.counts["signals"] += 1
                return send_signal(c, self.cfg.source.signal_table, kind, data)
            finally:
                c.close()
        raise ChaosError(f"could not insert the {kind} signal: the source stays away")

    def ensure_snapshot(self, timeout: float = 60.0) -> None:
        """A snapshot of the run's tables running now: one started (of ``t_single``) if none is."""
        if snapshot_running(self.cfg, self.db, int(time.time() * 1000)):
            return
        self.signal_row("execute-snapshot", execute_snapshot_data([f"{self.db}.t_single"]))
        _wait(lambda: snapshot_running(self.cfg, self.db, int(time.time() * 1000)), timeout,
              "the snapshot started for a broker kill", lambda: _check_alive(self.producer))

    def broker_action(self, what: str, arg: str, action: str) -> str | None:
        """Start the stopped Kafka nodes, or stop the one leading the busiest partition (with
        ``arg`` ``broker:snapshot``, while a snapshot runs); what to print."""
        if self.brokers is None:
            return None
        if what == "start":
            self.counts["broker_starts"] += len(self.brokers.start_stopped())
            return action
        self.brokers.wait_in_sync(self.cfg, 60.0)
        topics = [f"{self.db}.{self.db}.t_{k}" for k in KINDS]
        # (early in the run, on a busy machine, the producer may not have written a record yet)
        _wait(lambda: self.brokers.busiest_partition(self.cfg, topics) is not None, 120.0,
              "a record in the run's topics (a partition whose leader to stop)", lambda: _check_alive(self.producer))
        during = arg.endswith(":snapshot")
        if during:
            self.ensure_snapshot()
        stop = self.brokers.stop_busiest_leader(self.cfg, topics, kill=what == "kill", during_snapshot=during)
        self.counts["broker_kills" if what == "kill" else "broker_shutdowns"] += 1
        return f"{action} (node {stop.node}, leading {stop.topic}[{stop.partition}], end offset {stop.end_offset:,})"

    def act(self, action: str) -> str | None:
        """Carry out one planned action; what to print (None: nothing done)."""
        what, _, arg = action.partition(":")
        counts = self.counts
        if arg.startswith("broker"):
            return self.broker_action(what, arg, action)
        if what == "snapshot":
            self.signal_row("execute-snapshot", execute_snapshot_data([f"{self.db}.t_{arg}"]))
        elif what in ("pause", "resume"):
            self.signal_row(f"{what}-snapshot", {"type": "incremental"})
        elif what == "kill":
            p = self.producer if arg == "producer" else self.job
            if arg in LAKE_MOMENTS:  # (the merge job, at a lake commit's moment)
                counts[f"job_kills_at_{arg[4:]}"] += _kill_on_new(self.job, LAKE_MOMENTS[arg](self.cfg, self.db))
            else:
                p.kill9()
            counts["producer_kills" if arg == "producer" else "job_kills"] += 1
            p.start()
        elif what == "restart":
            self.restart_source()
            counts["source_restarts"] += 1
        return action


def run_chaos(cfg: CDCConfig, *, admin: Callable[[], Any], restart_source: Callable[[], None], seed: int = 1,
              rows: int = 3000, duration: float = 60.0, producer_kills: int = 10, job_kills: int = 5,
              work_dir: Path, console: Console | None = None, read_only: bool = False,
              brokers: BrokerChaos | None = None) -> dict[str, Any]:
    """Run one chaos scenario against the stack ``cfg`` points at (``admin``: a root
    connection factory of the source; ``restart_source``: stops and starts it;
    ``read_only``: a CDC user without any write privilege, read-only snapshots;
    ``brokers``: a Kafka cluster of several nodes whose nodes the run stops and starts)."""

    console = console or Console()
    work_dir.mkdir(parents=True, exist_ok=True)
    run = db = f"chaos{seed}_{uuid.uuid4().hex[:6]}"
    cfg = _chaos_config(cfg, run, work_dir, brokers)
    plan = ChaosPlan.make(seed, duration=duration, producer_kills=producer_kills, job_kills=job_kills,
                          broker_kills=brokers is not None)
    counts: dict[str, Any] = {"seed": seed, "rows_per_table": rows, "producer_kills": 0, "job_kills": 0,
                              "job_kills_at_commit": 0, "job_kills_at_staged": 0, "job_kills_at_intent": 0,
                              "source_restarts": 0, "signals": 0, "broker_kills": 0,
                              "broker_shutdowns": 0, "broker_starts": 0, "read_only": read_only}
    _prepare_source(cfg, admin, run, rows, read_only)
    start_at_current(cfg)
    producer, job = pipeline_processes(cfg, work_dir, "chaos")
    chaos = _ChaosRun(cfg, db, admin, restart_source, producer, job, brokers, counts)
    loads = [WriteLoad(admin, db, f"t_{k}", k, key_space=rows + rows // 10, seed=seed * 10 + i, pause_s=0.003)
             for i, k in enumerate(KINDS)]
    console.print(f"chaos run {run}: seed {seed}, {len(plan.actions)} planned actions over about {duration:.0f}s")
    t0 = time.monotonic()
    try:
        producer.start()
        job.start()
        time.sleep(3.0)
        for load in loads:
            load.__enter__()
        for at, action in plan.actions:
            delay = at - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
            done = chaos.act(action)
            if done is not None:
                console.print(f"  {time.monotonic() - t0:6.1f}s  {done}")
        report = _drain_and_verify(chaos, loads)
    finally:
        for load in loads:
            load.halt()
        producer.stop()
        job.stop()
        if brokers is not None:
            brokers.start_stopped()  # (a node left down by a failure)
    counts["seconds"] = round(time.monotonic() - t0, 1)
    counts["producer_starts"], counts["job_starts"] = producer.starts, job.starts
    _end_counts(cfg, admin, db, counts)
    if brokers is not None:
        _broker_counts(cfg, db, brokers, counts)
    counts["verify_equal"] = report.equal
    print_report(report, console)
    _print_counts(counts, console)
    counts["report"] = report
    return counts


def passed(counts: dict[str, Any], brokers: BrokerChaos | None) -> bool:
    """Whether a run's counts pass: sinks equal, no duplicate in the clean changelog, no lake
    batch committed twice; with ``brokers``, every stopped node led its partition and the kill
    planned during a snapshot came while one ran."""
    ok = counts["verify_equal"] and counts["clean_changelog_duplicates"] == 0 \
        and counts["lake_batches_committed_twice"] == 0
    if brokers is not None:
        ok = ok and counts["broker_stops_of_the_leader"] == len(brokers.stops) \
            and counts["broker_kills_during_snapshot"] == sum(s.during_snapshot for s in brokers.stops)
    return bool(ok)


def _drain_and_verify(chaos: _ChaosRun, loads: list[WriteLoad]):
    """Once every table's snapshot is done: the loads stopped, the producer caught up with the
    source, the merge job drained; ``cdc verify``'s report of the run's tables."""
    cfg, db, producer, job = chaos.cfg, chaos.db, chaos.producer, chaos.job
    _wait(lambda: _tables_done(cfg, db) >= len(KINDS), 600, "every table's snapshot to complete",
          lambda: _check_alive(producer, job))
    for load in loads:
        load.stop()
    chaos.counts["writes"] = {f"t_{k}": dict(load.ops) for k, load in zip(KINDS, loads)}
    c = connect(cfg.source)
    try:
        end = current_position(c)
    finally:
        c.close()
    store = OffsetStore(cfg.kafka, cfg.producer.name)
    _wait(lambda: _caught_up(store, end), 300, "the producer to catch up", lambda: _check_alive(producer, job))
    producer.stop()
    job.stop()
    MergeJob(cfg).run(available_now=True)
    return verify(cfg, [f"{db}.t_{k}" for k in KINDS], changelog=True)


def _end_counts(cfg: CDCConfig, admin: Callable[[], Any], db: str, counts: dict[str, Any]) -> None:
    """The counts read after the run: copies in the raw topics and the clean changelog, the
    source's rows, the lake tables' commits and batches committed twice."""
    raw_copies = clean_dups = 0
    counts["source_rows"] = {}
    for kind in KINDS:
        table = f"t_{kind}"
        raw_copies += _copies(read_topic(cfg.kafka.bootstrap_servers, f"{db}.{db}.{table}",
                                         client_config=cfg.kafka.client_settings()))
        clean_dups += _copies(read_topic(cfg.kafka.bootstrap_servers, clean_topic(db, db, table),
                                         client_config=cfg.kafka.client_settings()))
        with admin() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
            counts["source_rows"][table] = cur.fetchone()[0]
    counts["raw_topic_copies"] = raw_copies
    counts["clean_changelog_duplicates"] = clean_dups
    counts["lake_commits"], counts["lake_batches_committed_twice"] = _lake_commits(cfg, db)


def _broker_counts(cfg: CDCConfig, db: str, brokers: BrokerChaos, counts: dict[str, Any]) -> None:
    """The evidence of the Kafka nodes' stops, read from the topics (``cdc.broker_chaos``): the
    stops whose node led the partition they were made for, and the stops planned during a
    snapshot that came while one ran."""
    stops = brokers.stops
    epochs = [leader_epochs(cfg, s, until) for s, until in zip(stops, [s.at_ms for s in stops[1:]] + [None])]
    counts["broker_stop_epochs"] = [f"node {s.node} {s.topic}[{s.partition}] at {s.end_offset}: epoch {a} -> {b}"
                                    for s, (a, b) in zip(stops, epochs)]
    counts["broker_stops_of_the_leader"] = sum(map(leader_moved, epochs))
    counts["broker_kills_during_snapshot"] = sum(s.during_snapshot and snapshot_running(cfg, db, s.at_ms)
                                                 for s in stops)


def _lake_tables_log(cfg: CDCConfig, db: str) -> list[Path]:
    """The Delta logs of the run's tables (where the Delta sink is on)."""
    if not cfg.sinks.delta.enabled:
        return []
    return [Path(cfg.sinks.delta.path) / db / f"t_{k}" / "_delta_log" for k in KINDS]


def _delta_staging(cfg: CDCConfig) -> Path | None:
    d = cfg.sinks.delta
    return Path(d.staging_path or f"{d.path}/_cdc_staging") if d.enabled else None


def _commits_seen(cfg: CDCConfig, db: str) -> Callable[[], set[str]] | None:
    """The run's Delta tables' log entries (a new one: a lake commit just landed); None without
    the Delta sink."""
    logs = _lake_tables_log(cfg, db)
    return (lambda: {str(p) for d in logs if d.is_dir() for p in d.iterdir() if p.suffix == ".json"}) if logs else None


def _manifests_seen(cfg: CDCConfig, db: str) -> Callable[[], set[str]] | None:
    """The Delta sink's staged batches of the run (a new one: a batch staged, not committed)."""
    root = _delta_staging(cfg)
    return (lambda: set(map(str, root.glob(f"*/{db}__*/b*/_staged.json")))) if root else None


def _intents_seen(cfg: CDCConfig, db: str) -> Callable[[], set[str]] | None:
    """The Delta sink's commit intents of the run (a new one: a lake commit under way)."""
    root = _delta_staging(cfg)
    return (lambda: set(map(str, root.glob(f"_commits/{db}__*/c*.json")))) if root else None


#: The moments of the lake commits a merge job kill can wait for.
LAKE_MOMENTS = {"job-commit": _commits_seen, "job-staged": _manifests_seen, "job-intent": _intents_seen}


def _kill_on_new(job: CdcProcess, seen: Callable[[], set[str]] | None, timeout: float = 180.0) -> int:
    """SIGKILL the merge job as soon as ``seen`` names something it did not name before (a
    lake commit, a staged batch, a commit intent: :data:`LAKE_MOMENTS`); 1 if it landed so, 0
    if nothing new came within ``timeout`` (killed then all the same; nothing to watch, no
    lake sink in the run: at once, the plan's other actions keep their times)."""
    if seen is None:
        job.kill9()
        return 0
    before = seen()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if seen() - before:
            job.kill9()
            return 1
        time.sleep(0.002)
    job.kill9()
    return 0


def _lake_commits(cfg: CDCConfig, db: str) -> tuple[int, int]:
    """The micro-batches the merge job's commits to the run's lake tables hold (a lake commit
    holds every batch staged since the one before), and how many of them a commit held that an
    earlier commit of the same table held already (0 expected)."""
    commits = twice = 0
    for _, sink in build_sinks(cfg.sinks):
        if isinstance(sink, LakeSink):
            for k in KINDS:
                held = sink.commit_marks(db, f"t_{k}")
                marks = [pair for batches in held for pair in batches]
                commits += len(held)
                twice += len(marks) - len(set(marks))
            sink.close()
    return commits, twice


def _copies(messages) -> int:
    """Records whose position is not above the highest already seen in their partition."""
    high: dict[int, bytes] = {}
    n = 0
    for m in messages:
        pos = dict(m.headers() or []).get("cdc.position", b"")
        if m.partition() in high and pos <= high[m.partition()]:
            n += 1
        else:
            high[m.partition()] = pos
    return n


def _tables_done(cfg: CDCConfig, db: str) -> int:
    done = set()
    try:
        for m in read_topic(cfg.kafka.bootstrap_servers, notifications_topic(cfg.kafka.topic_prefix), timeout=10,
                            client_config=cfg.kafka.client_settings()):
            n = Notification.decode(m.value())
            if n.type == "TABLE_SCAN_COMPLETED":
                done.add(n.data.get("table"))
    except Exception:  # noqa: BLE001 - the topic does not exist yet
        return 0
    return len({t for t in done if t and t.startswith(f"{db}.")})


def _caught_up(store, end: tuple[str, int]) -> bool:
    stored = store.load()
    if not stored:
        return False
    r = stored["resume"]
    return (int(r["file"].rsplit(".", 1)[1]), int(r["pos"])) >= (int(end[0].rsplit(".", 1)[1]), int(end[1]))


def _check_alive(*procs: CdcProcess) -> None:
    for p in procs:
        if not p.alive():
            raise ChaosError(f"the {p.name} exited ({p.proc.returncode if p.proc else '?'}); see {p.log}")


def _wait(check: Callable[[], bool], timeout: float, what: str, health: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        health()
        time.sleep(1.0)
    raise ChaosError(f"timed out waiting for {what}")


def _print_counts(counts: dict, console: Console) -> None:
    t = Table("what", "count", title=f"chaos run, seed {counts['seed']}")
    for k in ("producer_kills", "job_kills", "job_kills_at_commit", "job_kills_at_staged", "job_kills_at_intent",
              "source_restarts", "producer_starts", "job_starts",
              "broker_kills", "broker_shutdowns", "broker_starts", "broker_stops_of_the_leader",
              "broker_kills_during_snapshot", "signals", "raw_topic_copies", "clean_changelog_duplicates", "lake_commits",
              "lake_batches_committed_twice", "seconds"):
        if k in counts:
            t.add_row(k.replace("_", " "), str(counts[k]))
    t.add_row("source rows at the end", ", ".join(f"{k} {v:,}" for k, v in counts["source_rows"].items()))
    t.add_row("writes", "; ".join(f"{k}: " + ", ".join(f"{op} {n}" for op, n in ops.items())
                                  for k, ops in counts.get("writes", {}).items()))
    if counts.get("broker_stop_epochs"):
        t.add_row("broker stops' leader epochs", "; ".join(counts["broker_stop_epochs"]))
    t.add_row("verify", "[green]equal[/green]" if counts["verify_equal"] else "[red]DIFFERS[/red]")
    console.print(t)
