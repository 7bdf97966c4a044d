"""``cdc bench stream``: how fast the binlog producer is, against two references.

One run on the embedded stack (its own state dir, default ``.cdc/bench``):

1. a fresh database with one table of six mixed columns (INT PK, VARCHAR, DECIMAL,
   DATETIME(3), INT, TEXT) gets at least ``rows`` row changes -- 60% inserts, 30%
   updates, 10% deletes, in multi-row statements -- between two recorded binlog
   positions;
2. (a) python-mysql-replication decodes that binlog range with no output (the
   reference: the library the producer reads the binlog with);
3. (b) the producer (:class:`producer.app.ProducerApp`) streams the same range into
   Kafka, with and without Kafka transactions; the clock stops when an offset commit
   covers the end position, i.e. when the broker has acknowledged every event.  Each
   run happens in a child process so its peak RSS (``VmHWM``) is its own, and that of
   the producer's binlog reader process is sampled too; the number of records in the
   table topic (true end offsets) is checked against the changes made;
4. (c) ``mariadb-binlog``/``mysqlbinlog`` decodes the same range from the datadir files
   (``-v --base64-output=decode-rows`` to /dev/null): the native reference;
5. (d) with ``--debezium``, the race: Debezium 3.6.3 embedded (:mod:`cdc.bench.debezium`)
   streams the same range, with a count-only handler and/or to the same broker through
   Kafka's Java producer, JSON or Avro converter; its start-up, its rates from its first
   record and after a 10% warm-up, and its peak RSS, against ours (whose rate after the
   same warm-up is reported too).

The figures are printed as a table and returned as a dict.  This is a benchmark, not a
test: nothing here asserts timing.  ``python -m cdc.bench.stream`` is the child entry point
(a JSON spec on stdin), not a user command.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from rich.console import Console
from rich.table import Table

from cdc.bench import debezium as dbz
from cdc.bench import race_rounds, race_settings
from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    ProcessTreePeak,
    admin,
    bench_config,
    bench_server_id,
    child_pids,
    client_tool,
    count_topic_records,
    cpu_seconds,
    create_bench_table,
    drop_bench_database,
    generate_changes,
    machine_info,
    mean_value_bytes,
    proc_status_kb,
    results_table,
    round_conditions,
    rss_at,
    start_stack,
    timed_to_devnull,
    topic_records,
)
from cdc.cli_common import bench_console
from cdc.errors import BenchError
from common.config import load_config, write_config
from common.kafka.clients import ensure_topics
from contract.topics import table_topic
from producer.app import ProducerApp
from producer.binlog.server import current_position


def _file_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def _pos_key(file: str, pos: int) -> tuple[int, int]:
    return _file_index(file), int(pos)


# --- (a) python-mysql-replication ----------------------------------------------------------------

def bench_reference(mysql: dict, db: str, start: tuple[str, int], end: tuple[str, int]) -> dict[str, Any]:
    """python-mysql-replication decoding the range, touching every row, no output."""
    settings = {"host": mysql["host"], "port": mysql["port"], "user": mysql["cdc_user"],
                "password": mysql["cdc_password"], "charset": "utf8mb4"}
    end_key = _pos_key(*end)
    t0 = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=bench_server_id(), blocking=False,
        log_file=start[0], log_pos=start[1], resume_stream=True, only_schemas=[db],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], enable_logging=False)
    n = 0
    touched = 0
    file = start[0]
    try:
        for ev in stream:
            for row in ev.rows:
                values = row.get("values") or row.get("after_values")
                touched += len(values)
                n += 1
            file = stream.log_file or file
            if _pos_key(file, ev.packet.log_pos) >= end_key:
                break
    finally:
        stream.close()
    seconds = time.perf_counter() - t0
    return {"rows": n, "seconds": seconds, "rows_per_s": n / seconds if seconds else 0.0, "values": touched}


# --- (c) mariadb-binlog ----------------------------------------------------------------------

def bench_native(datadir: Path, files: list[str], start_pos: int, end_pos: int, rows: int) -> dict[str, Any]:
    """``mariadb-binlog -v --base64-output=decode-rows`` over the range, to /dev/null."""
    tool = client_tool("mariadb-binlog", "mysqlbinlog")
    argv = [tool, "--no-defaults", "-v", "--base64-output=decode-rows", f"--start-position={start_pos}",
            f"--stop-position={end_pos}", *[str(datadir / f) for f in files]]
    seconds, res = timed_to_devnull(argv)
    if res.returncode != 0:
        raise BenchError(f"{Path(tool).name} failed ({res.returncode}): {res.stderr.decode(errors='replace')[-2000:]}")
    return {"tool": Path(tool).name, "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds if seconds else 0.0}


# --- (b) the producer, in a child process ---------------------------------------------------------

def _mark_run(app: ProducerApp, warm_at: int, end_key) -> dict[str, float]:
    """Wrap the producer's metrics hooks to mark its run: the first event, the warm-up's end
    (``warm_at`` events) and the offset commit that covers ``end_key``, which stops it.

    Marks on the monotonic clock (CLOCK_MONOTONIC, as the parent's launch stamp and
    Debezium's runner): the parent times the run from this process's launch."""
    marks: dict[str, float] = {}
    metrics = app.metrics
    orig_event, orig_committed = metrics.event, metrics.committed

    def event(ts_ms: int, n: int = 1, seen=None) -> None:
        if "first_event" not in marks:
            marks["first_event"] = time.monotonic()
        orig_event(ts_ms, n, seen)
        if "warm" not in marks and metrics.events_total >= warm_at:
            marks["warm"] = time.monotonic()
            marks["warm_events"] = metrics.events_total

    def committed(resume, seconds=None) -> None:
        orig_committed(resume, seconds)
        if "done" not in marks and resume.file and _pos_key(resume.file, resume.pos) >= end_key:
            marks["done"] = time.monotonic()
            app.stop()

    metrics.event, metrics.committed = event, committed  # type: ignore[method-assign]
    return marks


class _TreeSampler:
    """(events, RSS of this process + its children) every 0.25 s, in a thread; the children's
    peaks and CPU time."""

    def __init__(self, metrics) -> None:
        self.metrics = metrics
        self.samples: list[tuple[int, float]] = []
        self.child_hwm_kb: dict[int, int] = {}
        self.child_cpu_s: dict[int, float] = {}  # the last reading of each child's CPU time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="rss-sampler")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1)

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            rss = proc_status_kb("VmRSS")
            for pid in child_pids():
                rss += proc_status_kb("VmRSS", pid)
                self.child_hwm_kb[pid] = max(self.child_hwm_kb.get(pid, 0), proc_status_kb("VmHWM", pid))
                self.child_cpu_s[pid] = max(self.child_cpu_s.get(pid, 0.0), cpu_seconds(pid))
            self.samples.append((self.metrics.events_total, rss / 1024))


def _child_main() -> int:
    """Run the producer over a range and report (``python -m cdc.bench.stream`` with a JSON spec on
    stdin)."""
    spec = json.loads(sys.stdin.read())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    cfg = load_config(spec["config_path"])
    app = ProducerApp(cfg)
    metrics = app.metrics
    warm_at = max(1, int(spec.get("expected") or 0) // 10)  # rates after a 10% warm-up, as Debezium's
    marks = _mark_run(app, warm_at, _pos_key(*spec["end"]))
    sampler = _TreeSampler(metrics)

    cpu_base = cpu_seconds()
    rss_base = proc_status_kb("VmRSS") / 1024
    hwm_base = proc_status_kb("VmHWM") / 1024
    profiler = None
    if spec.get("profile"):
        profiler = cProfile.Profile()
    sampler.start()
    t0 = time.monotonic()
    try:
        if profiler is not None:
            profiler.enable()
        app.run(idle_exit_s=spec.get("idle_exit_s", 30.0))
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(spec["profile"])
        sampler.stop()
    t_exit = time.monotonic()
    cpu_s = cpu_seconds() - cpu_base
    done = marks.get("done")
    first = marks.get("first_event", t0)
    result = {
        "events": metrics.events_total, "commits": metrics.commits_total, "reached_end": done is not None,
        "seconds": (done or t_exit) - t0, "startup_s": first - t0, "exit_s": t_exit - t0,
        "run_mono_s": t0, "first_mono_s": marks.get("first_event"), "done_mono_s": done,
        "after_warmup_s": (done - marks["warm"]) if done and "warm" in marks else None,
        "warmup_events": marks.get("warm_events"),
        "rss_base_mb": round(rss_base, 1), "rss_peak_mb": round(proc_status_kb("VmHWM") / 1024, 1),
        "reader_rss_peak_mb": round(max(sampler.child_hwm_kb.values(), default=0) / 1024, 1),
        "hwm_before_run_mb": round(hwm_base, 1), "rss_samples": sampler.samples,
        # CPU seconds of the run (start-up included): this process (all its threads, the
        # Kafka client's too) and its binlog reader process (sampled every 0.25 s)
        "cpu_s": round(cpu_s, 2), "reader_cpu_s": round(sum(sampler.child_cpu_s.values()), 2),
    }
    Path(spec["result_path"]).write_text(json.dumps(result))
    return 0


def bench_producer(info, db: str, start: tuple[str, int], end: tuple[str, int], *, transactions: bool,
                   expected: int, profile: Path | None = None, tag: str = "", fmt: str = "avro",
                   prefix: str | None = None, expected_records: int | None = None,
                   compression: str | None = None) -> dict[str, Any]:
    """The producer from ``start`` until an offset commit covers ``end``; in a child process
    launched as Debezium's JVM is, timed from that launch, its processes' peak RSS read from
    outside (:class:`~cdc.bench.harness.ProcessTreePeak`); its table topic counted.  ``fmt``:
    ``producer.format``; ``prefix``: its topic prefix (default from ``tag``);
    ``expected_records``: the records its table topic should hold (default ``expected``; more
    where the format writes tombstones after deletes); ``compression``: ``kafka.compression``
    (default: the stack's)."""
    run = tag or uuid.uuid4().hex[:8]
    prefix = prefix or f"bench_{run}_{'tx' if transactions else 'notx'}"
    cfg = bench_config(info, prefix, db)
    cfg.kafka.transactions = transactions
    cfg.producer.format = fmt
    if compression is not None:
        cfg.kafka.compression = compression
    cfg.producer.startup.mode = "position"
    cfg.producer.startup.file, cfg.producer.startup.pos = start[0], int(start[1])
    cfg.state_dir = str(info.state_dir / "producer" / prefix)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=info.state_dir))
    try:
        cfg_path = work / "cdc.yaml"
        write_config(cfg, cfg_path)
        result_path = work / "result.json"
        spec = {"config_path": str(cfg_path), "end": list(end), "result_path": str(result_path),
                "profile": str(profile) if profile else None, "idle_exit_s": 30.0, "expected": expected}
        launch = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "cdc.bench.stream"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        peak = ProcessTreePeak(proc.pid).start()
        try:
            _, stderr = proc.communicate(json.dumps(spec).encode(), timeout=3600)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise BenchError("the producer run did not finish within an hour") from exc
        finally:
            tree_peak_mb = peak.stop()
        if proc.returncode != 0 or not result_path.exists():
            raise BenchError(f"the producer run failed (exit {proc.returncode}):\n"
                             f"{stderr.decode(errors='replace')[-4000:]}")
        res = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not res["reached_end"]:
        raise BenchError(f"the producer stopped after {res['events']} events without committing the end "
                         f"position {end[0]}:{end[1]}")
    # From the launch, as Debezium's: start-up to the first event, the run to the end acknowledged.
    res["run_startup_s"], res["run_seconds"] = res["startup_s"], res["seconds"]
    if res.get("first_mono_s") is not None and res.get("done_mono_s") is not None:
        res["startup_s"] = res["first_mono_s"] - launch
        res["seconds"] = res["done_mono_s"] - launch
    res["clock"] = "process launch"
    topic = table_topic(prefix, db, TABLE)
    bootstrap = info.kafka["bootstrap_servers"]
    span = topic_records(bootstrap, topic)
    records, counted_by = count_topic_records(bootstrap, topic, expected_records or expected)
    res["bytes_per_record"] = mean_value_bytes(bootstrap, topic)
    dbz.drop_topics(load_config(info.config_path).kafka, [topic])  # the embedded broker keeps it in memory
    samples = res.pop("rss_samples")
    events = res["events"]
    steady = res["seconds"] - res["startup_s"]
    res["sampled_rss_peak_mb"] = round(res["rss_peak_mb"] + res["reader_rss_peak_mb"], 1)
    res["total_rss_peak_mb"] = tree_peak_mb or res["sampled_rss_peak_mb"]
    if res.get("cpu_s") is not None and expected:  # CPU per row change, microseconds
        res["cpu_us_per_row"] = round(res["cpu_s"] / expected * 1e6, 1)
        res["reader_cpu_us_per_row"] = round(res["reader_cpu_s"] / expected * 1e6, 1)
    return {**res, "transactions": transactions, "topic": topic, "records": records, "counted_by": counted_by,
            "offset_span": span,
            "rows_per_s": expected / res["seconds"] if res["seconds"] else 0.0,
            "rows_per_s_after_startup": expected / steady if steady > 0 else 0.0,
            "rows_per_s_after_warmup": ((expected - res["warmup_events"]) / res["after_warmup_s"]
                                        if res.get("after_warmup_s") else 0.0),
            "rss_half_mb": rss_at(samples, 0.5, events), "rss_end_mb": rss_at(samples, 1.0, events)}


# --- (d) Debezium over the same range ----------------------------------------------------------

def bench_debezium(info, db: str, start: tuple[str, int], total: int, mode: str, fmt: str, *,
                   tag: str, tuning: str = race_settings.TUNED,
                   heap: str = race_settings.DEFAULT_HEAP) -> dict[str, Any]:
    """Debezium embedded from ``start`` until it handled ``total`` records of the table (its
    JVM of its own, :mod:`cdc.bench.debezium`, tuned as ``tuning`` says); to the broker in
    ``kafka`` mode, where the table topic's records are counted afterwards."""
    prefix = f"dbz_{tag}_{mode}_{fmt}_{tuning}"
    work = Path(info.state_dir) / "bench-debezium" / prefix
    shutil.rmtree(work, ignore_errors=True)
    props = dbz.connector_properties(info.mysql, db, prefix=prefix, state=work / "state", fmt=fmt,
                                     server_id=bench_server_id(), tuning=tuning,
                                     **{"snapshot.mode": "recovery", "table.include.list": f"{db}.{TABLE}"})
    topic = table_topic(prefix, db, TABLE)
    cfg = load_config(info.config_path)
    bootstrap = info.kafka["bootstrap_servers"]
    if mode == "kafka":  # the topics as ours: the producer creates its own with kafka.partitions
        ensure_topics(cfg.kafka, [topic, prefix])
    res = dbz.run_debezium(props, work=work, mode=mode, fmt=fmt, topic=topic, records=total,
                           bootstrap=bootstrap if mode == "kafka" else None, start=start, tuning=tuning, heap=heap)
    res["topic"] = topic
    if mode == "kafka":
        res["topic_records"] = topic_records(bootstrap, topic)
        if res["topic_records"] != total:
            raise BenchError(f"Debezium left {res['topic_records']} records in {topic}; {total} changes were made")
        dbz.drop_topics(cfg.kafka, [topic, prefix])  # the embedded broker keeps them in memory
    return res


def race_ratios(result: dict[str, Any]) -> dict[str, float | None]:
    """Ours over Debezium's, for every pair of runs in ``result``: rows/s from the first
    record (``<ours>/<debezium>``), after the warm-up (``..._after_warmup``), including the
    start-up (``..._total``); and Debezium's peak RSS over ours (``rss <debezium>/<ours>``)."""
    out: dict[str, float | None] = {}
    ours = [k for k in ("producer_tx", "producer_no_tx") if k in result]
    for d in dbz.run_keys(result):
        r = result[d]
        for o in ours:
            b = result[o]
            out[f"{o}/{d}"] = dbz.ratio(b["rows_per_s_after_startup"], r["rows_per_s_from_first"])
            out[f"{o}/{d}_after_warmup"] = dbz.ratio(b.get("rows_per_s_after_warmup"), r["rows_per_s_after_warmup"])
            out[f"{o}/{d}_total"] = dbz.ratio(b["rows_per_s"], r["rows_per_s_total"])
            out[f"rss {d}/{o}"] = dbz.ratio(r["rss_peak_mb"], b["total_rss_peak_mb"])
    return out


# --- the whole benchmark ---------------------------------------------------------------------

def _stream_round(info, db: str, start: tuple[str, int], end: tuple[str, int], total: int, *, order: tuple[str, ...],
                  transactions: tuple[bool, ...], runs: list[tuple], tag: str, heap: str, profile_dir: Path | None,
                  console: Console) -> dict[str, Any]:
    """One round of the race over the range: ours (each transactions setting) and Debezium's
    runs, the sides in ``order`` (:func:`cdc.bench.race_rounds.round_orders`)."""
    out: dict[str, Any] = {}

    def ours() -> None:
        for tx in transactions:
            key = "producer_tx" if tx else "producer_no_tx"
            label = "with" if tx else "without"
            profile = Path(profile_dir).resolve() / f"{key}.prof" if profile_dir else None
            if profile:
                profile.parent.mkdir(parents=True, exist_ok=True)
            with console.status(f"(b) producer {label} Kafka transactions..."):
                out[key] = bench_producer(info, db, start, end, transactions=tx, expected=total,
                                          profile=profile, tag=tag)
            if out[key]["records"] != total:
                raise BenchError(f"the producer ({label} transactions) left {out[key]['records']} records in "
                                 f"{out[key]['topic']}; {total} changes were made")

    def debezium() -> None:
        for mode, fmt, tuning in runs:
            with console.status(f"(d) Debezium ({tuning}), {mode} handler, {fmt} converter..."):
                out[dbz.run_key(mode, fmt, tuning=tuning)] = bench_debezium(info, db, start, total, mode, fmt,
                                                                            tag=tag, tuning=tuning, heap=heap)

    for side in order:
        (ours if side == race_rounds.OURS else debezium)()
    return out


def bench_stream(state_dir: Path = DEFAULT_STATE_DIR, rows: int = 500_000, *, keep_running: bool = False,
                 transactions: tuple[bool, ...] = (True, False), profile_dir: Path | None = None,
                 debezium: str | None = None, reference: bool = True, rounds: int = 1,
                 debezium_defaults: bool = False, heap: str = race_settings.DEFAULT_HEAP,
                 native: bool | None = None, single_row: bool = False,
                 console: Console | None = None) -> dict[str, Any]:
    """Generate ``rows`` changes (``single_row``: each its own autocommit statement, as
    OLTP makes them, instead of multi-row statements) and measure (a) python-mysql-replication, (b) the producer
    (with and without Kafka transactions), (c) ``mariadb-binlog`` over the same binlog range;
    ``debezium`` (``MODE:FORMAT,...``, e.g. ``count:json,kafka:avro``): (d) Debezium's runs
    over the same range too (the server then reports a 5.7-style version), tuned like ours
    (``heap``: its JVM's ``-Xmx``), and with ``debezium_defaults`` Kafka/Avro at Debezium's
    defaults as an extra run.  ``rounds``: (b) and (d) that many times, ours first in odd
    rounds, Debezium first in even ones; each figure is then the median over the rounds
    (``spread``: min-max), each ratio the median of the rounds' own ratios, each round's
    start and load in ``rounds``.  ``reference``: False skips (a) and (c); ``native`` (default:
    as ``reference``) runs (c) anyway, the physical limit beside a race without (a): then as
    many times as ``rounds`` (at least 3), its figure the median run."""

    console = console or Console()
    state_dir = Path(state_dir)
    runs = [(*r, race_settings.TUNED) for r in dbz.parse_runs(debezium)] if debezium else []
    if debezium_defaults:
        runs.append(("kafka", "avro", race_settings.DEFAULTS))
    result: dict[str, Any] = {"machine": machine_info(), "requested_rows": rows, "single_row": single_row,
                              "debezium_runs": debezium,
                              "debezium_defaults": debezium_defaults, "heap": heap}
    info = start_stack(state_dir, console, (dbz.SERVER_VERSION_ARG,) if runs else ())
    mysql = info.mysql
    run = uuid.uuid4().hex[:8]
    db = f"bench_{run}"
    try:
        start, end, files = _generate_range(mysql, db, rows, result, single_row=single_row,
                                            check_version=bool(runs), console=console)
        total = result["rows"]
        if reference:
            with console.status("(a) python-mysql-replication decoding..."):
                result["reference"] = bench_reference(mysql, db, start, end)
        if reference and result["reference"]["rows"] != total:
            raise BenchError(f"python-mysql-replication decoded {result['reference']['rows']} rows, "
                             f"{total} changes were made")
        per_round = []
        for i, order in enumerate(race_rounds.round_orders(rounds)):
            conditions = round_conditions(info) if runs else {}
            figures = _stream_round(info, db, start, end, total, order=order, transactions=transactions, runs=runs,
                                    tag=f"{run}r{i + 1}", heap=heap, profile_dir=profile_dir, console=console)
            per_round.append({**conditions, "order": list(order), "runs": figures,
                              "ratios": race_ratios(figures)})
        race_rounds.combine_rounds(result, per_round)
        if reference if native is None else native:
            with console.status("(c) native binlog decoding..."):
                times = 1 if reference and native is None else max(3, rounds)
                natives = [bench_native(Path(mysql["datadir"]), files, start[1], end[1], total) for _ in range(times)]
                result["native"] = sorted(natives, key=lambda r: r["seconds"])[len(natives) // 2]
                result["native"]["runs"] = times
        result["ratios"] = {**_decoding_ratios(result, reference), **result["ratios"]}
    finally:
        drop_bench_database(info, db, state_dir, keep_running, console, purge_binlogs=True)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print_report(result, console)
    return result


def _generate_range(mysql: dict, db: str, rows: int, result: dict[str, Any], *, single_row: bool,
                    check_version: bool, console: Console) -> tuple[tuple[str, int], tuple[str, int], list[str]]:
    """Create the bench table in ``db`` and make ``rows`` changes in a binlog range of their
    own (recorded in ``result``: rows, changes, range, generation rate, binlog bytes; with
    ``check_version``, the server's version for Debezium); the range's start, end and files."""
    with admin(mysql) as conn, conn.cursor() as cur:
        if check_version:
            result["server_version"] = dbz.check_server_version(conn)
        create_bench_table(cur, db)
        cur.execute("FLUSH BINARY LOGS")  # this run's range starts in a file of its own
        start = current_position(conn)
        with console.status(f"generating {rows:,} row changes..."):
            t0 = time.perf_counter()
            changes = generate_changes(conn, rows, single_row=single_row)
            gen_s = time.perf_counter() - t0
        end = current_position(conn)
        cur.execute("SHOW BINARY LOGS")
        logs = [(r[0], int(r[1])) for r in cur.fetchall()]
    files = [f for f, _ in logs if _file_index(start[0]) <= _file_index(f) <= _file_index(end[0])]
    total = changes["total"]
    result.update(rows=total, changes=changes, database=db, start=list(start), end=list(end),
                  generate={"seconds": gen_s, "rows_per_s": total / gen_s if gen_s else 0.0},
                  binlog_bytes=sum(size for f, size in logs if f in files))
    return start, end, files


def _decoding_ratios(result: dict[str, Any], reference: bool) -> dict[str, float | None]:
    """Ours over the native decoding (each clock), and with ``reference`` the native decoding
    and ours over python-mysql-replication's (``c/a``, ``b_tx/a``, ``b_no_tx/a``)."""
    ratios: dict[str, float | None] = {}
    if "native" in result:
        for key in ("producer_no_tx", "producer_tx"):
            if key in result and result["native"]["rows_per_s"]:
                for clock in ("rows_per_s_after_startup", "rows_per_s_after_warmup"):
                    if result[key].get(clock):
                        ratios[f"{key}_{clock.removeprefix('rows_per_s_')}/native"] = (
                            result[key][clock] / result["native"]["rows_per_s"])
    if reference:
        a = result["reference"]["rows_per_s"]
        ratios["c/a"] = result["native"]["rows_per_s"] / a
        for key, name in (("producer_tx", "b_tx/a"), ("producer_no_tx", "b_no_tx/a")):
            if key in result:
                ratios[name] = result[key]["rows_per_s"] / a
    return ratios


def print_report(result: dict[str, Any], console: Console) -> None:
    m = result["machine"]
    ch = result.get("changes", {})
    title = (f"cdc bench stream: {result.get('rows', 0):,} row changes ({ch.get('insert', 0):,} inserts, "
             f"{ch.get('update', 0):,} updates, {ch.get('delete', 0):,} deletes), "
             f"{result.get('binlog_bytes', 0) / 1e6:.0f} MB of binlog")
    table = results_table(title, ("measure", "seconds", "rows/s", "vs (a)"), m)
    a = (result.get("reference") or {}).get("rows_per_s") or 0.0
    runs = [(key, label) for key, label in (("producer_tx", "(b) producer, Kafka transactions"),
                                            ("producer_no_tx", "(b) producer, no transactions")) if key in result]
    if "generate" in result:
        g = result["generate"]
        shape = "single-row autocommit statements" if result.get("single_row") else "multi-row statements"
        table.add_row(f"workload (MariaDB {shape})", f"{g['seconds']:.2f}", f"{g['rows_per_s']:,.0f}", "")
    if "reference" in result:
        r = result["reference"]
        table.add_row("(a) python-mysql-replication, no output", f"{r['seconds']:.2f}", f"{r['rows_per_s']:,.0f}",
                      "1.00")
    for key, label in runs:
        b = result[key]
        table.add_row(label, f"{b['seconds']:.2f}", f"{b['rows_per_s']:,.0f}",
                      f"{b['rows_per_s'] / a:.2f}" if a else "-")
    if "native" in result:
        c = result["native"]
        table.add_row(f"(c) {c['tool']} -v, decode-rows", f"{c['seconds']:.2f}", f"{c['rows_per_s']:,.0f}",
                      f"{c['rows_per_s'] / a:.2f}" if a else "-")
    console.print(table)
    if runs:
        detail = Table(title="producer runs (b): acknowledged records and memory (MB; RSS 50%/end: "
                             "producer + reader process)")
        for col in ("run", "records", "startup s", "rows/s excl. startup", "RSS start", "RSS 50%",
                    "RSS end", "RSS peak", "reader peak", "total peak"):
            detail.add_column(col, justify="left" if col == "run" else "right")
        for key, label in runs:
            b = result[key]
            detail.add_row("tx" if b["transactions"] else "no tx", f"{b['records']:,}",
                           f"{b['startup_s']:.2f}", f"{b['rows_per_s_after_startup']:,.0f}",
                           f"{b['rss_base_mb']:.0f}", str(b["rss_half_mb"]), str(b["rss_end_mb"]),
                           f"{b['rss_peak_mb']:.0f}", f"{b['reader_rss_peak_mb']:.0f}",
                           f"{b['total_rss_peak_mb']:.0f}")
        console.print(detail)
    print_race(result, console)


def print_race(result: dict[str, Any], console: Console) -> None:
    """The race: ours and Debezium's runs over the same range, rates three ways and memory."""
    keys = dbz.run_keys(result)
    if not keys:
        return
    table = Table(title=f"the race: {result.get('rows', 0):,} binlog row events, ours vs Debezium embedded "
                        "(rows/s; start-up s apart; peak RSS MB)")
    for col in ("run", "format", "start-up s", "incl. start-up", "from 1st record", "after 10% warm-up",
                "bytes/record", "peak RSS"):
        table.add_column(col, justify="left" if col in ("run", "format") else "right")
    for key, label in (("producer_tx", "ours, Kafka transactions"), ("producer_no_tx", "ours, no transactions")):
        if key in result:
            b = result[key]
            table.add_row(label, "Avro", f"{b['startup_s']:.2f}", f"{b['rows_per_s']:,.0f}",
                          f"{b['rows_per_s_after_startup']:,.0f}", f"{b.get('rows_per_s_after_warmup', 0):,.0f}",
                          "", f"{b['total_rss_peak_mb']:.0f}")
    for key in keys:
        r = result[key]
        table.add_row(("Debezium, count only" if r["mode"] == "count" else "Debezium, Kafka producer"),
                      "JSON+schemas" if r["format"] == "json" else "Avro (mock registry)",
                      f"{r['first_record_s']:.2f}", f"{r['rows_per_s_total']:,.0f}",
                      f"{r['rows_per_s_from_first']:,.0f}", f"{r['rows_per_s_after_warmup']:,.0f}",
                      f"{r['bytes_per_record']:,.0f}", f"{r['rss_peak_mb']:.0f}")
    console.print(table)
    ratios = {k: v for k, v in result.get("ratios", {}).items() if "debezium_" in k and v is not None}
    if ratios:
        console.print("ratios (ours / Debezium rows/s; rss: Debezium / ours): " +
                      ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


def _cmd_bench_stream(args: argparse.Namespace) -> int:
    tx = {"both": (True, False), "on": (True,), "off": (False,)}[args.transactions]
    result = bench_stream(Path(args.state_dir), rows=args.rows, keep_running=args.keep_running,
                          profile_dir=Path(args.profile) if args.profile else None, transactions=tx,
                          debezium=args.debezium, reference=not args.no_reference, single_row=args.single_row,
                          console=bench_console(args))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def add_parser(bench_sub) -> None:
    """``cdc bench stream``: its arguments and handler, under ``cdc bench``'s ``bench_sub``."""
    bench_stream_p = bench_sub.add_parser(
        "stream", help="binlog -> Kafka: python-mysql-replication vs the producer vs mariadb-binlog")
    bench_stream_p.add_argument("--rows", type=int, default=500_000, help="row changes to generate (default 500000)")
    bench_stream_p.add_argument("--state-dir", default=".cdc/bench", help="the benchmark's own stack (default .cdc/bench)")
    bench_stream_p.add_argument("--keep-running", action="store_true", help="leave the stack running at the end")
    bench_stream_p.add_argument("--profile", metavar="DIR", help="write a cProfile of each producer run into DIR")
    bench_stream_p.add_argument("--transactions", choices=("both", "on", "off"), default="both",
                                help="the producer runs: with and without Kafka transactions (default both)")
    bench_stream_p.add_argument("--debezium", nargs="?", const="count:json,count:avro,kafka:json,kafka:avro",
                                metavar="MODE:FORMAT,...",
                                help="race Debezium embedded over the same binlog range (make debezium): a count-only "
                                     "handler (count) and/or Kafka's Java producer (kafka), with its JSON or Avro "
                                     "converter (default: all four)")
    bench_stream_p.add_argument("--no-reference", action="store_true",
                                help="skip python-mysql-replication and mariadb-binlog (a) and (c)")
    bench_stream_p.add_argument("--single-row", action="store_true",
                                help="each change its own autocommit statement (OLTP-shaped) instead of multi-row "
                                     "statements")
    bench_stream_p.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    bench_stream_p.set_defaults(func=_cmd_bench_stream)


if __name__ == "__main__":
    sys.exit(_child_main())
