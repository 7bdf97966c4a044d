"""``cdc bench sinks``: the merge job against Debezium's JDBC sink connector, on the same
Debezium topics.

Debezium's MySQL connector, in a Kafka Connect worker (:mod:`cdc.bench.connect_worker`),
writes a table's changes once (JsonConverter with schemas, tombstones on); then two sinks land
them in PostgreSQL, each in a schema of its own:

* **ours**: the merge job (``kafka.input: debezium``, local[2], the PostgreSQL sink only);
* **Debezium's JDBC sink** (``debezium-connector-jdbc``, a plugin of the same worker):
  ``insert.mode=upsert``, ``primary.key.mode=record_key``, ``delete.enabled=true``, the table
  named as ours names it, ``tasks.max`` as many as the merge job's concurrent tasks.

(a) Throughput over the same backlog, ``rounds`` alternated rounds: ours from the query's
start to its last batch committed (its Spark session started before, as the worker is), the
JDBC sink from its connector's creation to its consumer group's offsets committed at the
topic's end (the worker commits every 0.5 s); each sink table then verified equal to the
source (``cdc verify``'s comparison).  (b) Latency: the source connector streaming live, a
load of ``rate`` row inserts/s for ``seconds`` s while one sink runs (the other paused),
alternated: per row, from its INSERT's ``NOW(3)`` to its insert into the sink table (a column
defaulting to ``clock_timestamp()``), p50/p99 over every row, as ``cdc bench merge`` (c).
Both sink tables verified equal to the source at the end.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from rich.console import Console

from cdc.bench import debezium as dbz
from cdc.bench import race_rounds, race_settings
from cdc.bench.connect_worker import ConnectWorker, plugin_version, require_plugins
from cdc.bench.doc_sections import section_of, with_leading_section, with_section
from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    admin,
    bench_config,
    bench_server_id,
    create_bench_table,
    drop_bench_database,
    generate_changes,
    insert_sql,
    machine_info,
    round_conditions,
    start_stack,
    topic_records,
)
from cdc.bench.merge import _SinkClock, _SteadyWriter, _pct
from cdc.bench.peers_race import check_peer_server_version
from cdc.bench.report import PEERS_HEADING, SINKS_HEADING
from cdc.bench.table_cells import figure as _fig
from cdc.errors import BenchError
from cdc.verify.run import verify
from common.kafka.clients import ensure_topics
from common.kafka.offsets import end_offsets
from contract.topics import table_topic
from producer.binlog.server import current_position
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.spark_session import build_session, stop_session

SOURCE = "source"
OURS, JDBC = "merge_job", "jdbc_sink"


def jdbc_url(dsn: str, schema: str) -> tuple[str, str, str]:
    """A libpq URL (``postgresql://user:password@host:port/db``) as PostgreSQL's JDBC URL with
    ``currentSchema``, its user and password."""
    u = urllib.parse.urlsplit(dsn)
    if u.scheme not in ("postgresql", "postgres") or not u.hostname:
        raise BenchError(f"the PostgreSQL sink's DSN is not a postgresql:// URL: {u.scheme}://...")
    db = u.path.lstrip("/") or "postgres"
    url = f"jdbc:postgresql://{u.hostname}:{u.port or 5432}/{db}?currentSchema={schema}"
    return url, urllib.parse.unquote(u.username or ""), urllib.parse.unquote(u.password or "")


def jdbc_sink_config(topic: str, dsn: str, schema: str, table: str, *, tasks: int) -> dict[str, Any]:
    """Debezium's JDBC sink into ``schema.table``: upserts by the record key, deletes applied."""
    url, user, password = jdbc_url(dsn, schema)
    return {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "topics": topic, "tasks.max": tasks,
            "connection.url": url, "connection.username": user, "connection.password": password,
            "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true",
            # schema-qualified: by its name alone it finds the same table in another schema (ours)
            "schema.evolution": "basic", "collection.name.format": f"{schema}.{table}", "use.time.zone": "UTC",
            "batch.size": 4096, "consumer.override.max.poll.records": 4096}


def group_caught_up(bootstrap: str, group: str, ends: dict[tuple[str, int], int]) -> bool:
    """Whether consumer group ``group`` has committed every partition's end offset."""
    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in ends])
    res = admin_client.list_consumer_group_offsets([req])[group].result()
    got = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
    return all(got.get(k, -1) >= end for k, end in ends.items())


class _SinkRace:
    def __init__(self, info, cfg, db: str, topic: str, worker: ConnectWorker, work: Path, tasks: int,
                 console: Console) -> None:
        self.info, self.cfg, self.db, self.topic, self.worker = info, cfg, db, topic, worker
        self.work, self.tasks, self.console = work, tasks, console
        self.bootstrap = info.kafka["bootstrap_servers"]
        self.dsn = cfg.sinks.postgres.dsn.get_secret_value()
        self.live: dict[str, Any] = {}  # each sink's last round: (config, connector), continued for the latency
        self.records = 0  # the backlog's records (tombstones included): the count both rates are of

    def _cfg(self, schema: str):
        cfg = self.cfg.model_copy(deep=True)
        cfg.sinks.postgres.schema_name = schema
        return cfg

    def _verify(self, schema: str) -> dict[str, Any]:
        report = verify(self._cfg(schema), [f"{self.db}.{TABLE}"])
        if not report.equal or not report.tables:
            raise BenchError(f"the sink table in schema {schema} differs from the source: "
                             f"{[t.error or [r.result for r in t.results] for t in report.tables]}")
        return {"equal": True}

    def catch_up(self, name: str, timeout_s: float = 600.0) -> None:
        """Until connector ``name``'s group has committed the topic's end."""
        ends = {k: end for k, (_, end) in end_offsets(self.bootstrap, [(self.topic, p) for p in
                                                                       range(self.cfg.kafka.partitions)]).items()}
        deadline = time.monotonic() + timeout_s
        while not group_caught_up(self.bootstrap, f"connect-{name}", ends):
            self.worker.check(name)
            if time.monotonic() > deadline:
                raise BenchError(f"Debezium's JDBC sink did not catch up within {timeout_s:.0f} s")
            time.sleep(0.1)

    def ours(self, tag: str) -> dict[str, Any]:
        schema = f"ours_{tag}"
        cfg = self._cfg(schema)
        cfg.spark.checkpoint_dir = str(self.work / schema / "checkpoints")
        cfg.state_dir = str(self.work / schema / "state")
        job = MergeJob(cfg)
        t0, m0 = time.perf_counter(), time.monotonic()
        job.run(available_now=True)
        s = time.perf_counter() - t0
        n = self.records
        steady = (job.last_batch_ended or m0) - (job.first_batch_started or m0)
        self.live[OURS] = cfg
        return {"events": n, "job_input": job.totals["input"], "seconds": s, "events_per_s": n / s if s else 0.0,
                "steady_events_per_s": n / steady if steady > 0 else 0.0, "batches": job.batches,
                "verify": self._verify(schema), "schema": schema}

    def jdbc(self, tag: str) -> dict[str, Any]:
        schema, name = f"jdbc_{tag}", f"jdbc_{tag}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        table = build_sinks_postgres(self._cfg(schema)).table_name(self.db, TABLE)
        ends = {k: end for k, (_, end) in end_offsets(self.bootstrap, [(self.topic, p) for p in
                                                                       range(self.cfg.kafka.partitions)]).items()}
        if self.live.get(JDBC):
            self.worker.delete(self.live[JDBC][1])  # the previous round's: its consumers leave the group
        t0 = time.perf_counter()
        self.worker.create(name, jdbc_sink_config(self.topic, self.dsn, schema, table, tasks=self.tasks))
        deadline = time.monotonic() + 3600
        while not group_caught_up(self.bootstrap, f"connect-{name}", ends):
            self.worker.check(name)
            if time.monotonic() > deadline:
                raise BenchError(f"Debezium's JDBC sink did not catch up within an hour; see {self.worker.log_path}")
            time.sleep(0.1)
        s = time.perf_counter() - t0
        n = sum(ends.values())
        self.live[JDBC] = (self._cfg(schema), name)
        return {"records": n, "seconds": s, "records_per_s": n / s if s else 0.0, "verify": self._verify(schema),
                "schema": schema}

    def latency(self, side: str, rate: int, seconds: float, first_id: int) -> dict[str, Any]:
        """``rate`` inserts/s for ``seconds`` s through the source connector and one sink."""
        if side == OURS:
            cfg = self.live[OURS]
            job = MergeJob(cfg)
            runner = threading.Thread(target=job.run, daemon=True)
            runner.start()
            stop = job.stop
        else:
            cfg, name = self.live[JDBC]
            self.worker.resume(name)
            stop = lambda: self.worker.request("PUT", f"/connectors/{name}/pause")  # noqa: E731
        try:
            with admin(self.info.mysql, self.db) as conn, conn.cursor() as cur:  # the warm-up row: caught up
                cur.execute(insert_sql(first_id, 1))
            deadline = time.monotonic() + 300
            clock = None
            while time.monotonic() < deadline:
                try:
                    clock = clock or _SinkClock(cfg, self.db)
                    if clock.has(first_id):
                        break
                except psycopg.Error:
                    pass
                time.sleep(0.2)
            else:
                raise BenchError(f"the warm-up row did not reach the {side} sink within 300 s")
            time.sleep(2.0)
            writer = _SteadyWriter(self.info.mysql, self.db, rate, first_id + 1)
            writer.start()
            time.sleep(seconds)
            writer.stop()
            last, deadline = writer.next_id, time.monotonic() + 300
            lat = clock.latencies(first_id + 1, last)
            while len(lat) < writer.count and time.monotonic() < deadline:
                time.sleep(0.5)
                lat = clock.latencies(first_id + 1, last)
        finally:
            stop()
            if side == OURS:
                runner.join(120)
        return {"rate": rate, "seconds": seconds, "writes": writer.count, "writes_per_s": writer.count / seconds,
                "rows_measured": len(lat), "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99),
                "max_ms": max(lat) if lat else None, "next_id": last}


def build_sinks_postgres(cfg):
    return dict(build_sinks(cfg.sinks))["postgres"]


def bench_sinks(state_dir: Path = DEFAULT_STATE_DIR, *, events: int = 1_000_000, rate: int = 5000,
                seconds: float = 30.0, rounds: int = race_rounds.DEFAULT_ROUNDS, partitions: int = 4,
                tasks: int = 2, heap: str = race_settings.DEFAULT_HEAP, keep_running: bool = False,
                console: Console | None = None) -> dict[str, Any]:
    """The merge job against Debezium's JDBC sink (see the module's docstring); returns the
    rounds' medians (min-max) and both latencies."""
    console = console or Console()
    require_plugins("debezium-mysql", "debezium-jdbc")
    info = start_stack(Path(state_dir), console, (dbz.SERVER_VERSION_ARG,))
    run = uuid.uuid4().hex[:6]
    db, prefix = f"sinks_{run}", f"sinks_{run}"
    cfg = bench_config(info, prefix, db)
    cfg.kafka.input = "debezium"
    cfg.kafka.partitions = partitions
    cfg.sinks.changelog.enabled = cfg.sinks.mysql.enabled = False
    cfg.sinks.postgres.enabled = True
    topic = table_topic(prefix, db, TABLE)
    work = Path(state_dir).resolve() / "bench-sinks" / run
    result: dict[str, Any] = {"machine": machine_info(), "events_requested": events, "partitions": partitions,
                              "tasks": tasks, "rate": rate, "seconds": seconds, "heap": heap,
                              "versions": {"debezium_connector_mysql": plugin_version("debezium-mysql",
                                                                                      "debezium-connector-mysql"),
                                           "debezium_connector_jdbc": plugin_version("debezium-jdbc",
                                                                                     "debezium-connector-jdbc")}}
    worker = ConnectWorker(work / "connect", info.kafka["bootstrap_servers"], heap=heap,
                           settings={**race_settings.connect_worker_settings(), "offset.flush.interval.ms": 500,
                                     "connector.client.config.override.policy": "All"})
    try:
        with admin(info.mysql) as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            result["server_version"] = check_peer_server_version(cur.fetchone()[0], ("connect",))
            create_bench_table(cur, db)
            cur.execute("FLUSH BINARY LOGS")
            start = current_position(conn)
            with console.status(f"making {events:,} row changes..."):
                changes = generate_changes(conn, events)
            cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM `{TABLE}`")
            max_id = cur.fetchone()[0]
        result["changes"] = changes
        ensure_topics(cfg.kafka, [topic, prefix])
        expected = changes["total"] + changes["delete"]
        worker.start()
        _debezium_backlog(worker, info, db, prefix, work, start, topic, expected, console)
        result["records"] = topic_records(info.kafka["bootstrap_servers"], topic)
        build_session("local[2]", kafka_source=cfg.spark.kafka_source)  # started once, as the worker is
        race = _SinkRace(info, cfg, db, topic, worker, work, tasks, console)
        race.records = result["records"]
        race_rounds.combine_rounds(result, _throughput_rounds(race, info, rounds, run, console))
        if rate and seconds:
            result["latency"] = _latency_rounds(race, rate, seconds, rounds, max_id + 1, console)
            time.sleep(5.0)  # the source connector has streamed the last load
            worker.resume(race.live[JDBC][1])  # both sinks catch up, then both are verified
            race.catch_up(race.live[JDBC][1])
            MergeJob(race.live[OURS]).run(available_now=True)
            result["final_verify"] = {k: race._verify(live.sinks.postgres.schema_name) for k, live in
                                      ((OURS, race.live[OURS]), (JDBC, race.live[JDBC][0]))}
    finally:
        worker.stop()
        try:
            stop_session()
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            console.print(f"[yellow]cleanup:[/yellow] {exc}")
        drop_bench_database(info, db, Path(state_dir), keep_running, console, purge_binlogs=True)
    return result




def start_debezium_source(worker: ConnectWorker, info, db: str, prefix: str, work: Path, start: tuple) -> None:
    """Debezium's MySQL connector (connector ``SOURCE``) in the worker, streaming the bench
    table of ``db`` from the binlog position ``start`` into Debezium JSON topics under ``prefix``."""
    source = dbz.connector_properties(info.mysql, db, prefix=prefix, state=work / "source", fmt="json",
                                      server_id=bench_server_id(), **{
                                          "snapshot.mode": "recovery", "table.include.list": f"{db}.{TABLE}"})
    for engine_only in ("name", "offset.storage", "offset.storage.file.filename", "converter.schemas.enable"):
        source.pop(engine_only, None)
    source.update({"tombstones.on.delete": "true", "database.ssl.mode": "disabled", "tasks.max": "1"})
    worker.create(SOURCE, source, stopped=True)
    worker.set_offsets(SOURCE, [{"partition": {"server": prefix},
                                 "offset": {"file": start[0], "pos": int(start[1])}}])
    worker.resume(SOURCE)


def _debezium_backlog(worker: ConnectWorker, info, db: str, prefix: str, work: Path, start: tuple, topic: str,
                      expected: int, console: Console) -> None:
    """Debezium's MySQL connector in the worker, from the binlog position ``start``, until the
    table topic holds the ``expected`` records (the changes and their tombstones)."""
    with console.status("Debezium in Kafka Connect writes the backlog..."):
        start_debezium_source(worker, info, db, prefix, work, start)
        deadline = time.monotonic() + 3600
        while topic_records(info.kafka["bootstrap_servers"], topic) < expected:
            worker.check(SOURCE)
            if time.monotonic() > deadline:
                raise BenchError("Debezium did not write the backlog within an hour")
            time.sleep(0.5)


def _throughput_rounds(race: _SinkRace, info, rounds: int, run: str, console: Console) -> list[dict]:
    """(a): each round both sinks over the backlog, in the round's order; the rounds' runs and ratios."""
    per_round = []
    for i, order in enumerate(race_rounds.round_orders(rounds)):
        conditions = round_conditions(info)
        runs: dict[str, Any] = {}
        for side in order:
            with console.status(f"round {i + 1}: {'the merge job' if side == race_rounds.OURS else 'JDBC sink'}..."):
                if side == race_rounds.OURS:
                    runs[OURS] = race.ours(f"r{i + 1}_{run}")
                else:
                    runs[JDBC] = race.jdbc(f"r{i + 1}_{run}")
        per_round.append({**conditions, "order": list(order), "runs": runs, "ratios": {
            "merge_job/jdbc_sink": dbz.ratio(runs[OURS]["events_per_s"], runs[JDBC]["records_per_s"]),
            "merge_job steady/jdbc_sink": dbz.ratio(runs[OURS]["steady_events_per_s"],
                                                    runs[JDBC]["records_per_s"])}})
    return per_round


def _latency_rounds(race: _SinkRace, rate: int, seconds: float, rounds: int, next_id: int,
                    console: Console) -> dict[str, Any]:
    """(b): the JDBC sink paused, then each round both sides' latency runs in the round's
    order, from row id ``next_id`` on; each side's medians, spread and runs."""
    race.worker.request("PUT", f"/connectors/{race.live[JDBC][1]}/pause")
    latencies: dict[str, list] = {OURS: [], JDBC: []}
    for order in race_rounds.round_orders(rounds):
        for side in order:
            key = OURS if side == race_rounds.OURS else JDBC
            with console.status(f"latency, {rate:,} inserts/s, {key}..."):
                lat = race.latency(key, rate, seconds, next_id)
            latencies[key].append(lat)
            next_id = lat["next_id"] + 10
    return {k: race_rounds.combine_runs(v)[0] | {"spread": race_rounds.combine_runs(v)[1], "rounds": v}
            for k, v in latencies.items()}


def render_sinks(result: dict[str, Any], *, when: str | None = None) -> str:
    """The sinks' section of docs/benchmarks.md from one ``cdc bench sinks`` result."""
    when = when or f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M}"
    v, ch = result.get("versions") or {}, result.get("changes") or {}
    rounds = len(result.get("rounds") or [])
    ratio = (result.get("ratios") or {}).get("merge_job/jdbc_sink")
    lines = [SINKS_HEADING, "",
             f"Written by `cdc bench sinks` on {when} UTC (`make bench-race`). Debezium "
             f"{v.get('debezium_connector_mysql', '?')}'s MySQL connector in a Kafka Connect worker wrote "
             f"{ch.get('total', 0):,} changes ({ch.get('insert', 0):,} inserts, {ch.get('update', 0):,} updates, "
             f"{ch.get('delete', 0):,} deletes; {result.get('records', 0):,} records with the tombstones) to a topic of "
             f"{result.get('partitions')} partitions, once; then each sink landed them in PostgreSQL, in a schema of "
             f"its own, {rounds} alternated round(s): the merge job (`kafka.input: debezium`, local[2], its Spark "
             f"session started beforehand) and Debezium's JDBC sink {v.get('debezium_connector_jdbc', '?')} in the same "
             f"worker (`insert.mode=upsert`, `primary.key.mode=record_key`, `delete.enabled=true`, `tasks.max` "
             f"{result.get('tasks')}, `batch.size` 4,096, 4,096 records a poll; the newest version Maven Central serves "
             "here). Every sink table was verified equal to the source (`cdc verify`'s comparison) after each round "
             "and again after the latency runs.", "",
             "| sink | events/s over the backlog | from its first batch | goal |", "| --- | --- | --- | --- |",
             f"| the merge job, from the query's start to its last batch committed | "
             f"{_fig(result, OURS, 'events_per_s')} | {_fig(result, OURS, 'steady_events_per_s')} | "
             f"{'>= 2x the JDBC sink: ' + ('met' if ratio and ratio >= 2 else 'not met') + f' ({ratio:.2f}x)' if ratio else '-'} |",
             f"| Debezium's JDBC sink, from its connector's creation to its offsets committed at the end | "
             f"{_fig(result, JDBC, 'records_per_s')} | | |", ""]
    lat = result.get("latency")
    if lat:
        p99s = (lat[OURS].get("p99_ms"), lat[JDBC].get("p99_ms"))
        met = "met" if None not in p99s and p99s[0] <= p99s[1] else "not met"
        lines += [f"Latency, {result.get('rate', 0):,} row inserts/s for {result.get('seconds', 0):.0f} s, the source "
                  "connector streaming live and one sink running at a time (alternated), per row from its INSERT's "
                  "`NOW(3)` to its insert into the sink table (`clock_timestamp()`), medians over the rounds "
                  f"(min-max); goal: the merge job's p99 no higher ({met}):", "",
                  "| sink | inserts/s written | p50 ms | p99 ms | max ms |", "| --- | --- | --- | --- | --- |"]
        for key, label in ((OURS, "the merge job (its shipped trigger interval)"), (JDBC, "Debezium's JDBC sink")):
            x = {"k": lat[key], "spread": {"k": lat[key].get("spread") or {}}}
            lines.append(f"| {label} | {_fig(x, 'k', 'writes_per_s')} | {_fig(x, 'k', 'p50_ms')} | "
                         f"{_fig(x, 'k', 'p99_ms')} | {_fig(x, 'k', 'max_ms')} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_sinks_section(out: Path, result: dict[str, Any]) -> str:
    """The sinks' section of ``out``, after the peers' section when that is there (else leading)."""
    section = render_sinks(result)
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    if section_of(text, SINKS_HEADING) is not None:
        text = with_section(text, SINKS_HEADING, section)
    elif section_of(text, PEERS_HEADING) is not None:
        peers = section_of(text, PEERS_HEADING)
        text = text.replace(peers, peers.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n\n", 1)
    else:
        text = with_leading_section(text, SINKS_HEADING, section)
    out.write_text(text)
    return section
