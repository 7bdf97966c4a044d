"""``cdc bench peers``: the race against the peers as their users deploy them.

* **Debezium in Kafka Connect**: Debezium's MySQL connector (``debezium-connector-mysql``
  3.6.1.Final, a plugin of its own) in a standalone Kafka Connect worker
  (:class:`~cdc.bench.connect_worker.ConnectWorker`, its own JVM, on the stack's broker),
  JsonConverter with schemas, against our producer writing ``debezium-json`` (the same
  record shape) on the same binlog range or table: multi-row streaming, single-row
  transactions (an OLTP application's shape), and an incremental snapshot through its
  signal table;
* **Flink CDC**: its MySQL source's incremental snapshot of the same table at each
  parallelism (:mod:`cdc.bench.flink_cdc`) against our snapshot with as many chunk readers.

Both sides of every pair are timed the same way, from outside, by their records in Kafka
(:class:`~cdc.bench.topic_clock.TopicClock`); neither side uses Kafka transactions; peak RSS
is the ``VmHWM`` of every process of a side, read from /proc (our producer and its child
processes; the peer's JVM).  ``rounds`` alternated rounds (ours first in odd rounds), each
figure the median over them with the min-max, each ratio the median of the rounds' own
(:mod:`cdc.bench.race_rounds`).  A benchmark, not a test: nothing here asserts timing; it
does check that every side wrote exactly the records expected.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from cdc.bench import debezium as dbz
from cdc.bench import flink_cdc, race_rounds, race_settings
from cdc.bench.connect_worker import ConnectWorker, plugin_version, require_plugins
from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    admin,
    bench_server_id,
    create_bench_table,
    drop_bench_database,
    generate_changes,
    machine_info,
    mean_value_bytes,
    round_conditions,
    start_stack,
    topic_records,
)
from cdc.bench.peers_ratios import CONNECT, OURS, PEERS, pair_ratios
from cdc.bench.peers_report import print_peers
from cdc.bench.snapshot import bench_producer_snapshot, load_table
from cdc.bench.stream import bench_producer
from cdc.bench.topic_clock import TopicClock, clock_figures
from cdc.errors import BenchError
from common.config import load_config
from common.kafka.clients import ensure_topics
from contract.topics import table_topic
from producer.binlog.server import current_position

CONNECTOR = "race"
#: How long one run may take before the race gives up on it.
RUN_TIMEOUT_S = 3600.0


# --- the options (unit-tested) ---------------------------------------------------------------

def parse_peers(spec: str) -> tuple[str, ...]:
    """``connect,flink`` into ``("connect", "flink")``; a clear error for anything else."""
    peers = tuple(dict.fromkeys(p.strip() for p in spec.split(",") if p.strip()))
    bad = [p for p in peers if p not in PEERS]
    if bad or not peers:
        raise BenchError(f"peers are a comma-separated list of {', '.join(PEERS)}, not {spec!r}")
    return peers


def check_peer_server_version(version: str, peers: tuple[str, ...]) -> str:
    """The server must report a MySQL 5.7 version (Debezium's MySQL connector), before 5.7.20
    with Flink CDC (its Connector/J asks for ``tx_isolation``)."""
    parts = str(version).split("-", 1)[0].split(".")
    try:
        nums = tuple(int(x) for x in parts[:3])
    except ValueError:
        nums = ()
    ok = len(nums) == 3 and nums[:2] == (5, 7) and ("flink" not in peers or nums[2] < 20)
    if not ok:
        raise BenchError(f"the bench server reports version {version!r}; the peers need a 5.7-style one (before "
                         f"5.7.20 for Flink CDC). Stop the bench stack (cdc stack down --state-dir ...) so that the "
                         f"race starts it with {dbz.SERVER_VERSION_ARG}")
    return version


def _check_records(who: str, clock: TopicClock, expected: int, topic: str, bootstrap: str) -> int:
    records = topic_records(bootstrap, topic)
    if records != expected:
        raise BenchError(f"{who} left {records} records in {topic}; {expected} were expected")
    return records


# --- the runs -----------------------------------------------------------------------------------

class _Race:
    def __init__(self, info, work: Path, heap: str, chunk_size: int, console: Console,
                 compression: str = race_settings.PEERS_COMPRESSION) -> None:
        self.info, self.work, self.heap, self.chunk_size, self.console = info, Path(work), heap, chunk_size, console
        self.compression = compression
        self.bootstrap = info.kafka["bootstrap_servers"]
        self.kafka_cfg = load_config(info.config_path).kafka

    def _drop(self, topics: list[str]) -> None:
        dbz.drop_topics(self.kafka_cfg, topics)  # each run's records: gigabytes of JSON with schemas

    # ours

    def ours_stream(self, db: str, start, end, changes: dict[str, int], tag: str) -> dict[str, Any]:
        """Ours over the range; a topic short of records stops the race (a loss is never
        averaged away or run again)."""
        prefix = f"peer_{tag}_ours"
        topic = table_topic(prefix, db, TABLE)
        expected = changes["total"] + changes["delete"]  # a tombstone after each delete, as Debezium's
        ensure_topics(self.kafka_cfg, [topic])
        clock = TopicClock(self.bootstrap, topic, expected).start()
        launch = time.monotonic()
        try:
            res = bench_producer(self.info, db, start, end, transactions=False, expected=changes["total"],
                                 fmt="debezium-json", prefix=prefix, expected_records=expected,
                                 compression=self.compression)
            clock.wait(60)
        finally:
            clock.stop()
        if res["records"] != expected:
            raise BenchError(f"our producer left {res['records']} records in {topic} (counted by "
                             f"{res['counted_by']}; its end offsets span {res['offset_span']}; {res['events']} change "
                             f"events counted by the producer); {expected} were expected")
        return {**clock_figures(clock, changes["total"], launch), "topic_records": res["records"],
                "rss_peak_mb": res["total_rss_peak_mb"], "bytes_per_record": res["bytes_per_record"],
                "own_clock": {k: res.get(k) for k in ("rows_per_s_after_warmup", "rows_per_s_after_startup",
                                                      "rows_per_s", "startup_s")}}

    def ours_snapshot(self, db: str, rows: int, parallelism: int, tag: str) -> dict[str, Any]:
        prefix = f"peer_{tag}_ours_p{parallelism}"
        topic = table_topic(prefix, db, TABLE)
        ensure_topics(self.kafka_cfg, [topic])
        clock = TopicClock(self.bootstrap, topic, rows).start()
        launch = time.monotonic()
        try:
            res = bench_producer_snapshot(self.info, db, rows, chunk_size=self.chunk_size, parallelism=parallelism,
                                          writes_per_s=0, console=self.console, fmt="debezium-json",
                                          transactions=False, prefix=prefix, compression=self.compression)
            clock.wait(60)
        finally:
            clock.stop()
        figs = clock_figures(clock, rows, launch, signal=res["signal_mono"])
        return {**figs, "parallelism": parallelism, "topic_records": res["topic_records"],
                "rss_peak_mb": res["rss_peak_mb"], "bytes_per_record": res["bytes_per_record"]}

    # Debezium in Kafka Connect

    def _source_config(self, db: str, prefix: str, state: Path, **more: Any) -> dict[str, str]:
        props = dbz.connector_properties(self.info.mysql, db, prefix=prefix, state=state, fmt="json",
                                         server_id=bench_server_id(), **more)
        for engine_only in ("name", "offset.storage", "offset.storage.file.filename", "converter.schemas.enable"):
            props.pop(engine_only, None)
        props["tombstones.on.delete"] = "true"  # Debezium's default, as ours with debezium-json
        props["database.ssl.mode"] = "disabled"  # (Maven Central's MariaDB driver refuses 'preferred')
        props["tasks.max"] = "1"
        return props

    def _worker(self, name: str) -> ConnectWorker:
        work = self.work / name
        shutil.rmtree(work, ignore_errors=True)
        return ConnectWorker(work, self.bootstrap, heap=self.heap,
                             settings=race_settings.connect_worker_settings(self.compression))

    def connect_stream(self, db: str, start, changes: dict[str, int], tag: str) -> dict[str, Any]:
        prefix = f"peer_{tag}_dbz"
        topic = table_topic(prefix, db, TABLE)
        expected = changes["total"] + changes["delete"]
        ensure_topics(self.kafka_cfg, [topic, prefix])
        worker = self._worker(prefix)
        config = self._source_config(db, prefix, worker.work / "state", **{
            "snapshot.mode": "recovery", "table.include.list": f"{db}.{TABLE}"})
        clock = TopicClock(self.bootstrap, topic, expected).start()
        try:
            worker.start()
            worker.create(CONNECTOR, config, stopped=True)
            worker.set_offsets(CONNECTOR, [{"partition": {"server": prefix},
                                            "offset": {"file": start[0], "pos": int(start[1])}}])
            worker.resume(CONNECTOR)
            if not clock.wait(RUN_TIMEOUT_S, check=lambda: worker.check(CONNECTOR)):
                raise BenchError(f"Debezium in Kafka Connect wrote {clock.count} of {expected} records; see "
                                 f"{worker.log_path}")
        finally:
            clock.stop()
            rss = worker.stop()
        out = {**clock_figures(clock, changes["total"], worker.launch_mono), "rss_peak_mb": rss,
               "topic_records": _check_records("Debezium in Kafka Connect", clock, expected, topic, self.bootstrap),
               "bytes_per_record": mean_value_bytes(self.bootstrap, topic)}
        self._drop([topic, prefix])
        shutil.rmtree(worker.work, ignore_errors=True)  # kept only when a run fails
        return out

    def connect_snapshot(self, db: str, rows: int, tag: str) -> dict[str, Any]:
        prefix = f"peer_{tag}_dbzsnap"
        topic = table_topic(prefix, db, TABLE)
        signal_topic = table_topic(prefix, db, dbz.SIGNAL_TABLE)
        ensure_topics(self.kafka_cfg, [topic, prefix, signal_topic])
        worker = self._worker(prefix)
        config = self._source_config(db, prefix, worker.work / "state", **{
            "snapshot.mode": "no_data", "signal.data.collection": f"{db}.{dbz.SIGNAL_TABLE}",
            "table.include.list": f"{db}.{TABLE},{db}.{dbz.SIGNAL_TABLE}",
            "incremental.snapshot.chunk.size": self.chunk_size})
        clock = TopicClock(self.bootstrap, topic, rows).start()
        try:
            worker.start()
            worker.create(CONNECTOR, config)
            worker.wait_state(CONNECTOR, "RUNNING")
            deadline = time.monotonic() + 120
            while not topic_records(self.bootstrap, prefix):  # its schema snapshot is written: it streams next
                if time.monotonic() > deadline:
                    raise BenchError(f"Debezium in Kafka Connect wrote no schema change to {prefix} in 120 s; see "
                                     f"{worker.log_path}")
                worker.check(CONNECTOR)
                time.sleep(0.1)
            data = json.dumps({"data-collections": [f"{db}.{TABLE}"], "type": "incremental"})
            with admin(self.info.mysql, db) as conn, conn.cursor() as cur:
                signal = time.monotonic()
                cur.execute(f"INSERT INTO `{dbz.SIGNAL_TABLE}` (id, type, data) VALUES (%s, 'execute-snapshot', %s)",
                            (prefix, data))
            if not clock.wait(RUN_TIMEOUT_S, check=lambda: worker.check(CONNECTOR)):
                raise BenchError(f"Debezium in Kafka Connect snapshotted {clock.count} of {rows} rows; see "
                                 f"{worker.log_path}")
        finally:
            clock.stop()
            rss = worker.stop()
        out = {**clock_figures(clock, rows, worker.launch_mono, signal=signal), "rss_peak_mb": rss,
               "topic_records": _check_records("Debezium in Kafka Connect", clock, rows, topic, self.bootstrap),
               "bytes_per_record": mean_value_bytes(self.bootstrap, topic), "chunk_size": self.chunk_size}
        self._drop([topic, prefix, signal_topic])
        shutil.rmtree(worker.work, ignore_errors=True)
        return out

    # Flink CDC

    def flink_snapshot(self, db: str, rows: int, parallelism: int, tag: str) -> dict[str, Any]:
        """Flink CDC's snapshot; a job that fails is run once more (a fresh topic), the failure kept
        in the result (``failed_runs``) and reported (Flink 1.20's fetcher manager can lose a race
        between an idle fetcher closing and a new split: ``NoSuchElementException`` in
        ``SingleThreadFetcherManager.getRunningFetcher``)."""
        try:
            return self._flink_snapshot(db, rows, parallelism, tag)
        except BenchError as exc:
            first = str(exc).splitlines()
            why = next((ln for ln in first if "Caused by" in ln and "JobException" not in ln), first[0])
            self.console.print(f"[yellow]Flink CDC failed ({why}): run again[/yellow]")
            again = self._flink_snapshot(db, rows, parallelism, tag + "b")
            return {**again, "failed_runs": [why.strip()]}

    def _flink_snapshot(self, db: str, rows: int, parallelism: int, tag: str) -> dict[str, Any]:
        topic = table_topic(f"peer_{tag}_flink_p{parallelism}", db, TABLE)
        ensure_topics(self.kafka_cfg, [topic])
        work = self.work / f"flink_{tag}_p{parallelism}"
        shutil.rmtree(work, ignore_errors=True)
        props = flink_cdc.runner_properties(self.info.mysql, db, TABLE, parallelism=parallelism,
                                            chunk_size=self.chunk_size, bootstrap=self.bootstrap, topic=topic,
                                            producer=race_settings.flink_producer_settings(self.compression),
                                            server_id_base=bench_server_id())
        run = flink_cdc.FlinkCdcRun(work, props, heap=self.heap, cache=self.work / "classes")
        clock = TopicClock(self.bootstrap, topic, rows).start()
        try:
            run.start()
            if not clock.wait(RUN_TIMEOUT_S, check=run.check):
                raise BenchError(f"Flink CDC wrote {clock.count} of {rows} rows; see {work / 'flink.log'}:\n"
                                 f"{run.log_tail()}")
        finally:
            clock.stop()
            rss = run.finish()
        out = {**clock_figures(clock, rows, run.launch), "rss_peak_mb": rss, "parallelism": parallelism,
               "topic_records": _check_records("Flink CDC", clock, rows, topic, self.bootstrap),
               "bytes_per_record": mean_value_bytes(self.bootstrap, topic), "chunk_size": self.chunk_size}
        self._drop([topic])
        shutil.rmtree(work, ignore_errors=True)
        return out


# --- the rounds ---------------------------------------------------------------------------------

def _in_order(order: tuple[str, ...], ours: Callable[[], None], peer: Callable[[], None]) -> None:
    for side in order:
        (ours if side == race_rounds.OURS else peer)()


def _stream_round(race: _Race, data: dict, order, tag: str) -> dict[str, Any]:
    runs: dict[str, Any] = {}

    def ours() -> None:
        with race.console.status(f"ours, {data['label']}..."):
            runs[OURS] = race.ours_stream(data["db"], data["start"], data["end"], data["changes"], tag)

    def peer() -> None:
        with race.console.status(f"Debezium in Kafka Connect, {data['label']}..."):
            runs[CONNECT] = race.connect_stream(data["db"], data["start"], data["changes"], tag)

    _in_order(order, ours, peer)
    return {"order": list(order), "runs": runs, "ratios": pair_ratios(runs[OURS], runs[CONNECT], CONNECT)}


def _snapshot_round(race: _Race, db: str, rows: int, order, tag: str, peers: tuple[str, ...],
                    parallelisms: tuple[int, ...]) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    ours_ps = sorted({1, *parallelisms}) if "flink" in peers else [1]

    def ours() -> None:
        for p in ours_ps:
            with race.console.status(f"ours, snapshot of {rows:,} rows, {p} chunk reader(s)..."):
                runs[f"ours_p{p}"] = race.ours_snapshot(db, rows, p, tag)

    def peer() -> None:
        if CONNECT in peers:
            with race.console.status(f"Debezium in Kafka Connect, incremental snapshot of {rows:,} rows..."):
                runs[CONNECT] = race.connect_snapshot(db, rows, tag)
        if "flink" in peers:
            for p in parallelisms:
                with race.console.status(f"Flink CDC, snapshot of {rows:,} rows, parallelism {p}..."):
                    runs[f"flink_p{p}"] = race.flink_snapshot(db, rows, p, tag)

    _in_order(order, ours, peer)
    ratios: dict[str, float | None] = {}
    if CONNECT in runs:
        ratios.update(pair_ratios(runs["ours_p1"], runs[CONNECT], CONNECT, "ours_p1"))
    for p in parallelisms:
        if f"flink_p{p}" in runs:
            ratios.update(pair_ratios(runs[f"ours_p{p}"], runs[f"flink_p{p}"], f"flink_p{p}", f"ours_p{p}"))
    return {"order": list(order), "runs": runs, "ratios": ratios}


def peer_versions(peers: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    if CONNECT in peers:
        out["debezium_connector_mysql"] = plugin_version("debezium-mysql", "debezium-connector-mysql")
        out["kafka_connect"] = plugin_version("../connect", "connect-runtime")
        out["mariadb_jdbc"] = plugin_version("debezium-mysql", "mariadb-java-client")
    if "flink" in peers:
        out.update({f"flink_cdc_{k}" if k != "flink_cdc" else k: v for k, v in flink_cdc.versions().items()})
    return out


def _generate_streams(info, run: str, stream_rows: int, oltp_rows: int, dbs: list[str],
                      console: Console) -> list[dict[str, Any]]:
    """The streaming workloads, each in a database of its own (added to ``dbs``) and a binlog
    range of its own: ``stream_rows`` changes in multi-row statements, ``oltp_rows`` single-row
    transactions (0: none); each one's key, label, database, range and changes."""
    streams = []
    for label, rows, single in (("multi-row streaming", stream_rows, False),
                                ("single-row transactions", oltp_rows, True)):
        if rows <= 0:
            continue
        db = f"peers_{run}_{'oltp' if single else 'stream'}"
        dbs.append(db)
        with admin(info.mysql) as conn, conn.cursor() as cur:
            create_bench_table(cur, db)
            cur.execute("FLUSH BINARY LOGS")
            start = current_position(conn)
            with console.status(f"generating {rows:,} row changes ({label})..."):
                changes = generate_changes(conn, rows, single_row=single)
            end = current_position(conn)
        streams.append({"key": "single_row" if single else "streaming", "label": label, "db": db,
                        "start": list(start), "end": list(end), "changes": changes})
    return streams


def _load_snapshot_table(info, db: str, rows: int, console: Console) -> None:
    """The snapshot workload: the bench table in ``db`` loaded with ``rows`` rows (analyzed),
    and Debezium's signal table beside it."""
    with admin(info.mysql) as conn, conn.cursor() as cur:
        create_bench_table(cur, db)
        cur.execute(dbz.SIGNAL_TABLE_DDL)
        with console.status(f"loading {rows:,} rows..."):
            load_table(conn, rows)
        cur.execute(f"ANALYZE TABLE `{TABLE}`")
        cur.fetchall()


def bench_peers(state_dir: Path = DEFAULT_STATE_DIR, *, stream_rows: int = 1_000_000, oltp_rows: int = 100_000,
                snapshot_rows: int = 1_000_000, chunk_size: int = 8192, rounds: int = race_rounds.DEFAULT_ROUNDS,
                peers: tuple[str, ...] = PEERS, parallelisms: tuple[int, ...] = (1, 2),
                heap: str = race_settings.DEFAULT_HEAP, keep_running: bool = False,
                compression: str = race_settings.PEERS_COMPRESSION, console: Console | None = None) -> dict[str, Any]:
    """The race against the peers (``peers``: ``connect``, ``flink``): ``stream_rows`` changes
    in multi-row statements and ``oltp_rows`` single-row transactions (0: none) streamed by
    ours and by Debezium in Kafka Connect; a ``snapshot_rows``-row table snapshotted by ours,
    by Debezium in Kafka Connect and by Flink CDC at each of ``parallelisms`` (ours with as
    many chunk readers); ``rounds`` alternated rounds; ``compression``: every side's record
    batch compression.  Returns the results (medians, min-max, the rounds)."""
    console = console or Console()
    for p in parallelisms:
        if p < 1:
            raise BenchError(f"a parallelism is at least 1, not {p}")
    if CONNECT in peers:
        require_plugins("debezium-mysql")
    work = Path(state_dir).resolve() / "bench-peers"
    info = start_stack(Path(state_dir), console, (dbz.SERVER_VERSION_ARG,))
    run = uuid.uuid4().hex[:6]
    dbs: list[str] = []
    result: dict[str, Any] = {"machine": machine_info(), "peers": list(peers), "heap": heap, "chunk_size": chunk_size,
                              "parallelisms": list(parallelisms), "versions": peer_versions(peers),
                              "compression": compression}
    race = _Race(info, work, heap, chunk_size, console, compression)
    try:
        with admin(info.mysql) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                result["server_version"] = check_peer_server_version(cur.fetchone()[0], peers)
        streams = _generate_streams(info, run, stream_rows, oltp_rows, dbs, console) if CONNECT in peers else []
        snap_db = f"peers_{run}_snap"
        dbs.append(snap_db)
        _load_snapshot_table(info, snap_db, snapshot_rows, console)
        per_round: dict[str, list] = {s["key"]: [] for s in streams}
        per_round["snapshot"] = []
        for i, order in enumerate(race_rounds.round_orders(rounds)):
            for s in streams:  # a tag per workload: each run's producer state and offsets its own (the
                # multi-row run's producer stored a position past the single-row range, read from there)
                conditions = round_conditions(info)
                tag = f"{run}{'o' if s['key'] == 'single_row' else ''}r{i + 1}"
                per_round[s["key"]].append({**conditions, **_stream_round(race, s, order, tag)})
            conditions = round_conditions(info)
            per_round["snapshot"].append({**conditions, **_snapshot_round(race, snap_db, snapshot_rows, order,
                                                                          f"{run}r{i + 1}", peers, parallelisms)})
        for s in streams:
            part = {"rows": s["changes"]["total"], "changes": s["changes"], "label": s["label"]}
            race_rounds.combine_rounds(part, per_round[s["key"]])
            result[s["key"]] = part
        snap = {"rows": snapshot_rows}
        race_rounds.combine_rounds(snap, per_round["snapshot"])
        result["snapshot"] = snap
    finally:
        for db in dbs[:-1]:
            drop_bench_database(info, db, Path(state_dir), True, console)
        drop_bench_database(info, dbs[-1] if dbs else "none", Path(state_dir), keep_running, console,
                            purge_binlogs=True)
    print_peers(result, console)
    return result
