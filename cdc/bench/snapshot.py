"""``cdc bench snapshot``: how fast an incremental snapshot is, against two references.

One run on the embedded stack (its own state dir, default ``.cdc/bench``):

1. a table of ``rows`` rows (the stream benchmark's six mixed columns) is loaded;
2. (a) a plain pymysql keyset scan of it in ``chunk_size`` chunks, fetch only (the
   reference: what reading the table costs in Python before anything is done with it);
3. (b) the producer (``cdc produce`` in a child process) snapshots the table: the clock
   runs from the signal row's INSERT to the COMPLETED notification, which the producer
   commits to Kafka together with the last chunk (so every chunk row is acknowledged);
   once with the table quiet and once with about ``writes_per_s`` writes per second
   against the same table.  The producer's memory (RSS of the process and its binlog
   reader) is sampled as the snapshot progresses, and its peak (``VmHWM`` of each of its
   processes, read from outside as Debezium's) kept; with the table quiet, the records in
   its table topic are counted and must equal the table's rows, as Debezium's are;
4. (c) ``mariadb-dump``/``mysqldump`` of the table to /dev/null (the native reference);
5. (d) with ``--debezium``, the race: Debezium 3.6.3's incremental snapshot of the same
   table (its signal table; chunks of 8,192 as ours and 1,024, its default), count-only
   handler and/or Kafka's Java producer to the same broker, clock from the signal row's
   INSERT to the table's last row, against ours with the table quiet; tuned like ours
   (:mod:`cdc.bench.race_settings`), and with ``debezium_defaults`` at its own defaults too.
   With ``rounds``, (b) quiet and (d) run that many times, alternated
   (:mod:`cdc.bench.race_rounds`).

Figures are printed as a table with ratios to (a), and returned as a dict.  A benchmark,
not a test: nothing asserts timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql
from rich.console import Console
from rich.table import Table

from cdc.bench import debezium as dbz
from cdc.bench import race_rounds, race_settings
from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    PacedWriter,
    ProcessTreePeak,
    admin,
    bench_config,
    bench_server_id,
    child_pids,
    client_tool,
    count_topic_records,
    create_bench_table,
    drop_bench_database,
    insert_sql,
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
from cdc.progress import NotificationFollower
from common.config import load_config, write_config
from common.kafka.clients import ensure_topics
from common.sql.sessions import connect
from contract.signals import execute_snapshot_data, send_signal
from contract.topics import table_topic
from producer.binlog.server import current_position, start_at_current


def load_table(conn, rows: int) -> None:
    with conn.cursor() as cur:
        for first in range(1, rows + 1, 5000):
            cur.execute(insert_sql(first, min(5000, rows + 1 - first)))


def bench_keyset_scan(mysql: dict, db: str, chunk_size: int) -> dict[str, Any]:
    """(a) ``SELECT ... WHERE id > ? ORDER BY id LIMIT n`` until the end, rows fetched into Python."""
    conn = pymysql.connect(host=mysql["host"], port=mysql["port"], user=mysql["cdc_user"],
                           password=mysql["cdc_password"], database=db, charset="utf8mb4", autocommit=True)
    n, last = 0, 0
    t0 = time.perf_counter()
    try:
        with conn.cursor() as cur:
            while True:
                cur.execute(f"SELECT * FROM `{TABLE}` WHERE id > %s ORDER BY id LIMIT {int(chunk_size)}", (last,))
                rows = cur.fetchall()
                if not rows:
                    break
                n += len(rows)
                last = rows[-1][0]
    finally:
        conn.close()
    s = time.perf_counter() - t0
    return {"rows": n, "seconds": s, "rows_per_s": n / s if s else 0.0}


def bench_dump(mysql: dict, db: str, rows: int) -> dict[str, Any]:
    """(c) ``mariadb-dump`` of the table to /dev/null."""
    tool = client_tool("mariadb-dump", "mysqldump")
    env = {**os.environ, "MYSQL_PWD": mysql["admin_password"]}
    argv = [tool, "--no-defaults", "-h", mysql["host"], "-P", str(mysql["port"]), "-u", mysql["admin_user"],
            "--single-transaction", "--quick", db, TABLE]
    s, res = timed_to_devnull(argv, env)
    if res.returncode != 0:
        raise BenchError(f"{Path(tool).name} failed: {res.stderr.decode(errors='replace')[-2000:]}")
    return {"tool": Path(tool).name, "rows": rows, "seconds": s, "rows_per_s": rows / s if s else 0.0}


class _Writer(PacedWriter):
    """About ``rate`` single-row writes per second (updates and inserts) against the table."""

    def __init__(self, mysql: dict, db: str, rows: int, rate: int) -> None:
        super().__init__(mysql, db, rate)
        self.rows = rows
        self.rnd = random.Random(3)
        self.next_id = rows + 1

    def write(self, cur) -> int:
        if self.rnd.random() < 0.8:
            cur.execute(f"UPDATE `{TABLE}` SET qty = qty + 1 WHERE id = %s", (self.rnd.randrange(1, self.rows),))
        else:
            cur.execute(insert_sql(self.next_id, 1))
            self.next_id += 1
        return 1


def _rss_mb(pid: int) -> float:
    return (proc_status_kb("VmRSS", pid) + sum(proc_status_kb("VmRSS", c) for c in child_pids(pid))) / 1024


def bench_producer_snapshot(info, db: str, rows: int, *, chunk_size: int, parallelism: int, writes_per_s: int,
                            console: Console, fmt: str = "avro", transactions: bool | None = None,
                            prefix: str | None = None, compression: str | None = None) -> dict[str, Any]:
    """(b) ``cdc produce`` in a child process snapshots the table; clock from the signal to COMPLETED;
    its processes' peak RSS read from outside; with the table quiet, its table topic's
    records counted and checked equal to the table's ``rows``.  ``fmt``: ``producer.format``;
    ``transactions``: ``kafka.transactions`` (default: the stack's); ``prefix``: its topic
    prefix (default: a new one); ``compression``: ``kafka.compression`` (default: the
    stack's).  ``signal_mono``: the signal's ``time.monotonic()``."""

    prefix = prefix or f"benchsnap_{uuid.uuid4().hex[:8]}"
    cfg, work, cfg_path = _snapshot_producer_config(info, db, prefix, chunk_size=chunk_size, parallelism=parallelism,
                                                    fmt=fmt, transactions=transactions, compression=compression)
    log = open(work / "producer.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(cfg_path), "produce"], stdout=log,
                            stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
    peak = ProcessTreePeak(proc.pid).start()
    samples: list[tuple[int, float]] = []
    progress: list[tuple[int, float]] = []  # (rows, time) for the rate after the warm-up
    try:
        time.sleep(2.0)  # connected and streaming
        rss_start = _rss_mb(proc.pid)
        follower = NotificationFollower(cfg)
        writer = _Writer(info.mysql, db, rows, writes_per_s) if writes_per_s else None
        try:
            if writer:
                writer.start()
            conn = connect(cfg.source)
            try:
                t0 = time.perf_counter()
                signal_mono = time.monotonic()
                sid = send_signal(conn, cfg.source.signal_table, "execute-snapshot",
                                  execute_snapshot_data([f"{db}.{TABLE}"]))
            finally:
                conn.close()
            t_done = _wait_for_snapshot(proc, follower, sid, work, samples, progress)
        finally:
            if writer:
                writer.stop()
            follower.close()
        seconds = t_done - t0
    finally:
        rss_peak_mb = peak.stop()
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if not samples:
        raise BenchError("no progress notification was seen")
    bootstrap = info.kafka["bootstrap_servers"]
    topic = table_topic(prefix, db, TABLE)
    value_bytes = mean_value_bytes(bootstrap, topic)
    total = samples[-1][0]
    counted: dict[str, Any] = {}
    if not writes_per_s:  # quiet: the topic holds the snapshot's rows and nothing else
        counted = _count_quiet_topic(info, topic, rows)
        total = rows
    # After a 10% warm-up, as Debezium's: from the first progress notification past 10%.
    warm = next(((r, t) for r, t in progress if r >= total / 10), None)
    after_warmup = (total - warm[0]) / (t_done - warm[1]) if warm and t_done > warm[1] else 0.0
    return {"rows": total, "seconds": seconds, "rows_per_s": total / seconds if seconds else 0.0,
            "rows_per_s_after_warmup": after_warmup, "bytes_per_record": value_bytes,
            "writes": writer.count if writer else 0, "writes_per_s": (writer.count / seconds) if writer else 0.0,
            "rss_start_mb": round(rss_start, 1), "rss_25_mb": rss_at(samples, 0.25, total),
            "rss_50_mb": rss_at(samples, 0.5, total), "rss_100_mb": rss_at(samples, 1.0, total),
            "rss_max_mb": round(max(r for _, r in samples), 1), "rss_peak_mb": rss_peak_mb,
            "parallelism": parallelism, "topic": topic, "signal_mono": signal_mono, **counted}


def _snapshot_producer_config(info, db: str, prefix: str, *, chunk_size: int, parallelism: int, fmt: str,
                              transactions: bool | None, compression: str | None) -> tuple[Any, Path, Path]:
    """The benchmarked producer's configuration, written into its work directory (under the
    stack's, by ``prefix``); the configuration, the directory and the file."""
    cfg = bench_config(info, prefix, db)
    cfg.snapshot.chunk_size, cfg.snapshot.parallelism = chunk_size, parallelism
    cfg.producer.format = fmt
    if transactions is not None:
        cfg.kafka.transactions = transactions
    if compression is not None:
        cfg.kafka.compression = compression
    start_at_current(cfg)
    work = Path(info.state_dir) / "bench-snapshot" / prefix
    work.mkdir(parents=True, exist_ok=True)
    cfg.state_dir = str(work / "state")
    cfg_path = work / "cdc.yaml"
    write_config(cfg, cfg_path)
    return cfg, work, cfg_path


def _wait_for_snapshot(proc: subprocess.Popen, follower: NotificationFollower, sid: str, work: Path,
                       samples: list[tuple[int, float]], progress: list[tuple[int, float]]) -> float:
    """Follow the producer's notifications until snapshot ``sid`` completes (an hour at the
    most), sampling the producer's RSS into ``samples`` and its rows into ``progress`` at each
    progress notification; the ``perf_counter`` of its completion."""
    done_rows, t_done = 0, None
    deadline = time.monotonic() + 3600
    while t_done is None and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"the producer exited ({proc.returncode}); see {work / 'producer.log'}")
        for n in follower.poll(0.2):
            if n.type == "IN_PROGRESS":
                done_rows = int(n.data.get("rows", 0))
                samples.append((done_rows, _rss_mb(proc.pid)))
                progress.append((done_rows, time.perf_counter()))
            elif n.type == "COMPLETED" and n.snapshot_id == sid:
                t_done = time.perf_counter()
            elif n.type == "SKIPPED" and n.snapshot_id == sid:
                raise BenchError(f"the producer refused the signal: {n.data.get('reason')}")
    if t_done is None:
        raise BenchError("the snapshot did not complete within an hour")
    return t_done


def _count_quiet_topic(info, topic: str, rows: int) -> dict[str, Any]:
    """With the table quiet: the snapshot's topic holds exactly the table's ``rows`` records
    (else BenchError); then the topic is dropped (the embedded broker keeps it in memory)."""
    records, counted_by = count_topic_records(info.kafka["bootstrap_servers"], topic, rows)
    if records != rows:
        raise BenchError(f"the producer's snapshot left {records} records in {topic} (counted by {counted_by}); "
                         f"the table has {rows} rows")
    dbz.drop_topics(load_config(info.config_path).kafka, [topic])  # the embedded broker keeps it in memory
    return {"topic_records": records, "counted_by": counted_by}


def bench_debezium_snapshot(info, db: str, rows: int, mode: str, fmt: str, chunk_size: int, *,
                            tuning: str = race_settings.TUNED,
                            heap: str = race_settings.DEFAULT_HEAP) -> dict[str, Any]:
    """(d) Debezium's incremental snapshot of the table (its signal table, ``execute-snapshot``
    of type ``incremental``, chunks of ``chunk_size``): the engine starts streaming at the
    current position, the signal row is inserted once it polls, and the clock runs from that
    INSERT until ``rows`` rows of the table were handled (``kafka``: acknowledged by the
    broker, whose topic is counted afterwards); tuned as ``tuning`` says."""
    prefix = f"dbzsnap_{uuid.uuid4().hex[:6]}_{mode}_{fmt}_{chunk_size}_{tuning}"
    work = Path(info.state_dir) / "bench-debezium" / prefix
    shutil.rmtree(work, ignore_errors=True)
    props = dbz.connector_properties(info.mysql, db, prefix=prefix, state=work / "state", fmt=fmt,
                                     server_id=bench_server_id(), tuning=tuning,
                                     **{"snapshot.mode": "recovery",
                                        "signal.data.collection": f"{db}.{dbz.SIGNAL_TABLE}",
                                        "incremental.snapshot.chunk.size": chunk_size})
    topic = table_topic(prefix, db, TABLE)
    bootstrap = info.kafka["bootstrap_servers"]
    if mode == "kafka":
        ensure_topics(load_config(info.config_path).kafka,
                      [topic, prefix, table_topic(prefix, db, dbz.SIGNAL_TABLE)])
    with admin(info.mysql) as conn:
        start = current_position(conn)
    data = json.dumps({"data-collections": [f"{db}.{TABLE}"], "type": "incremental"})
    signal = (f"INSERT INTO `{dbz.SIGNAL_TABLE}` (id, type, data) VALUES "
              f"('{prefix}', 'execute-snapshot', '{data}')")
    res = dbz.run_debezium(props, work=work, mode=mode, fmt=fmt, topic=topic, records=rows,
                           bootstrap=bootstrap if mode == "kafka" else None, start=start, signal_sql=signal,
                           mysql=info.mysql, db=db, tuning=tuning, heap=heap)
    res.update(topic=topic, chunk_size=chunk_size)
    if mode == "kafka":
        res["topic_records"] = topic_records(bootstrap, topic)
        if res["topic_records"] != rows:
            raise BenchError(f"Debezium left {res['topic_records']} records in {topic}; the table has {rows} rows")
        dbz.drop_topics(load_config(info.config_path).kafka, [topic, prefix, table_topic(prefix, db, dbz.SIGNAL_TABLE)])
    return res


def race_ratios(result: dict[str, Any]) -> dict[str, float | None]:
    """Ours (table quiet) over each Debezium run: rows/s from the signal (``snapshot_quiet/<run>``)
    and after the warm-up; Debezium's peak RSS over ours (``rss <run>/snapshot_quiet``)."""
    out: dict[str, float | None] = {}
    b = result.get("snapshot_quiet")
    if not b:
        return out
    for d in dbz.run_keys(result):
        r = result[d]
        out[f"snapshot_quiet/{d}"] = dbz.ratio(b["rows_per_s"], r["rows_per_s"])
        out[f"snapshot_quiet/{d}_after_warmup"] = dbz.ratio(b.get("rows_per_s_after_warmup"),
                                                             r["rows_per_s_after_warmup"])
        out[f"rss {d}/snapshot_quiet"] = dbz.ratio(r["rss_peak_mb"], b.get("rss_peak_mb") or b["rss_max_mb"])
    return out


def _snapshot_round(info, db: str, rows: int, *, order: tuple[str, ...], chunk_size: int, parallelism: int,
                    runs: list[tuple], heap: str, console: Console) -> dict[str, Any]:
    """One round of the race on the table: ours (table quiet) and Debezium's runs, the sides
    in ``order`` (:func:`cdc.bench.race_rounds.round_orders`)."""
    out: dict[str, Any] = {}
    for side in order:
        if side == race_rounds.OURS:
            with console.status("(b) producer snapshot, table quiet..."):
                out["snapshot_quiet"] = bench_producer_snapshot(info, db, rows, chunk_size=chunk_size,
                                                                parallelism=parallelism, writes_per_s=0,
                                                                console=console)
            continue
        for mode, fmt, chunk, tuning in runs:
            with console.status(f"(d) Debezium ({tuning}) incremental snapshot, {mode} handler, {fmt} converter, "
                                f"chunks of {chunk:,}..."):
                out[dbz.run_key(mode, fmt, chunk, tuning)] = bench_debezium_snapshot(
                    info, db, rows, mode, fmt, chunk, tuning=tuning, heap=heap)
    return out


def bench_snapshot(state_dir: Path = DEFAULT_STATE_DIR, rows: int = 1_000_000, *, chunk_size: int = 8192,
                   parallelism: int = 1, writes_per_s: int = 1000, keep_running: bool = False,
                   debezium: str | None = None, debezium_chunk_sizes: tuple[int, ...] = (8192, 1024),
                   reference: bool = True, rounds: int = 1, debezium_defaults: bool = False,
                   heap: str = race_settings.DEFAULT_HEAP, console: Console | None = None) -> dict[str, Any]:
    """A table of ``rows`` rows: (a) a keyset scan, (b) the producer's incremental snapshot
    (table quiet, then under ``writes_per_s`` writes unless 0), (c) ``mariadb-dump``;
    ``debezium`` (``MODE:FORMAT,...``): (d) Debezium's incremental snapshot of the same table
    at each of ``debezium_chunk_sizes`` (the server then reports a 5.7-style version), tuned
    like ours (``heap``: its JVM's ``-Xmx``), with ``debezium_defaults`` Kafka/Avro at its
    defaults too.  ``rounds``: (b) quiet and (d) that many times, alternated, each figure
    the median over the rounds (see :func:`cdc.bench.race_rounds.combine_rounds`); the run
    under writes comes after them (its writes grow the table).  ``reference``: False skips
    (a) and (c)."""

    console = console or Console()
    runs = [(*r, race_settings.TUNED) for r in dbz.parse_runs(debezium, chunk_sizes=debezium_chunk_sizes)] \
        if debezium else []
    if debezium_defaults:
        runs += [("kafka", "avro", c, race_settings.DEFAULTS) for c in debezium_chunk_sizes]
    result: dict[str, Any] = {"machine": machine_info(), "rows": rows, "chunk_size": chunk_size,
                              "parallelism": parallelism, "debezium_runs": debezium,
                              "debezium_chunk_sizes": list(debezium_chunk_sizes) if debezium else None,
                              "debezium_defaults": debezium_defaults, "heap": heap}
    info = start_stack(state_dir, console, (dbz.SERVER_VERSION_ARG,) if runs else ())
    mysql = info.mysql
    db = f"benchsnap_{uuid.uuid4().hex[:8]}"
    try:
        with admin(mysql) as conn, conn.cursor() as cur:
            if runs:
                result["server_version"] = dbz.check_server_version(conn)
            create_bench_table(cur, db)
            if runs:
                cur.execute(dbz.SIGNAL_TABLE_DDL)
            with console.status(f"loading {rows:,} rows..."):
                t0 = time.perf_counter()
                load_table(conn, rows)
                result["load_s"] = time.perf_counter() - t0
            cur.execute(f"ANALYZE TABLE `{TABLE}`")
            cur.fetchall()
        if reference:
            with console.status("(a) pymysql keyset scan..."):
                result["keyset"] = bench_keyset_scan(mysql, db, chunk_size)
        per_round = []
        for order in race_rounds.round_orders(rounds):
            conditions = round_conditions(info) if runs else {}
            figures = _snapshot_round(info, db, rows, order=order, chunk_size=chunk_size, parallelism=parallelism,
                                      runs=runs, heap=heap, console=console)
            per_round.append({**conditions, "order": list(order), "runs": figures,
                              "ratios": race_ratios(figures)})
        race_rounds.combine_rounds(result, per_round)
        if writes_per_s:
            with console.status(f"(b) producer snapshot, {writes_per_s} writes/s..."):
                result["snapshot_writes"] = bench_producer_snapshot(
                    info, db, rows, chunk_size=chunk_size, parallelism=parallelism, writes_per_s=writes_per_s,
                    console=console)
        ratios: dict[str, float | None] = {}
        if reference:
            with console.status("(c) dump..."):
                result["dump"] = bench_dump(mysql, db, rows)
            a = result["keyset"]["rows_per_s"]
            ratios.update({f"{k}/a": result[k]["rows_per_s"] / a
                           for k in ("snapshot_quiet", "snapshot_writes", "dump") if k in result and a})
        result["ratios"] = {**ratios, **result["ratios"]}
    finally:
        drop_bench_database(info, db, Path(state_dir), keep_running, console)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print_report(result, console)
    return result


def print_report(result: dict[str, Any], console: Console) -> None:
    table = results_table(f"cdc bench snapshot: {result['rows']:,} rows, chunks of {result['chunk_size']:,}, "
                          f"{result['parallelism']} reader(s)",
                          ("measure", "seconds", "rows/s", "vs (a)", "RSS MB start/25%/50%/100%"), result["machine"])
    a = (result.get("keyset") or {}).get("rows_per_s") or 0.0
    if "keyset" in result:
        k = result["keyset"]
        table.add_row("(a) pymysql keyset scan, fetch only", f"{k['seconds']:.2f}", f"{k['rows_per_s']:,.0f}", "1.00", "")
    for key, label in (("snapshot_quiet", "(b) producer snapshot, table quiet"),
                       ("snapshot_writes", "(b) producer snapshot, under writes")):
        if key in result:
            b = result[key]
            extra = f" ({b['writes_per_s']:,.0f} writes/s)" if b["writes"] else ""
            table.add_row(label + extra, f"{b['seconds']:.2f}", f"{b['rows_per_s']:,.0f}",
                          f"{b['rows_per_s'] / a:.2f}" if a else "-",
                          f"{b['rss_start_mb']:.0f}/{b['rss_25_mb']:.0f}/{b['rss_50_mb']:.0f}/{b['rss_100_mb']:.0f}")
    if "dump" in result:
        d = result["dump"]
        table.add_row(f"(c) {d['tool']} --quick", f"{d['seconds']:.2f}", f"{d['rows_per_s']:,.0f}",
                      f"{d['rows_per_s'] / a:.2f}" if a else "-", "")
    console.print(table)
    print_race(result, console)
    console.print_json(json.dumps({k: v for k, v in result.items() if k != "machine"}, default=str))


def print_race(result: dict[str, Any], console: Console) -> None:
    keys = dbz.run_keys(result)
    if not keys or "snapshot_quiet" not in result:
        return
    table = Table(title=f"the race: incremental snapshot of {result['rows']:,} rows, table quiet (rows/s from the "
                        "signal; Debezium's start-up s apart; peak RSS MB)")
    for col in ("run", "chunk", "start-up s", "rows/s", "after 10% warm-up", "bytes/record", "peak RSS"):
        table.add_column(col, justify="left" if col == "run" else "right")
    b = result["snapshot_quiet"]
    table.add_row("ours (Avro, Kafka transactions)", f"{result['chunk_size']:,}", "", f"{b['rows_per_s']:,.0f}",
                  f"{b.get('rows_per_s_after_warmup', 0):,.0f}", f"{b.get('bytes_per_record', 0):,.0f}",
                  f"{b['rss_max_mb']:.0f}")
    for key in keys:
        r = result[key]
        table.add_row(f"Debezium, {'count only' if r['mode'] == 'count' else 'Kafka producer'}, "
                      f"{'JSON' if r['format'] == 'json' else 'Avro'}", f"{r['chunk_size']:,}",
                      f"{r['startup_s']:.2f}", f"{r['rows_per_s']:,.0f}", f"{r['rows_per_s_after_warmup']:,.0f}",
                      f"{r['bytes_per_record']:,.0f}", f"{r['rss_peak_mb']:.0f}")
    console.print(table)


def _cmd_bench_snapshot(args: argparse.Namespace) -> int:
    result = bench_snapshot(Path(args.state_dir), rows=args.rows, chunk_size=args.chunk_size,
                            parallelism=args.parallelism, writes_per_s=args.writes_per_s,
                            keep_running=args.keep_running, debezium=args.debezium,
                            debezium_chunk_sizes=tuple(int(c) for c in args.debezium_chunk_sizes.split(",") if c),
                            reference=not args.no_reference, console=bench_console(args))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def add_parser(bench_sub) -> None:
    """``cdc bench snapshot``: its arguments and handler, under ``cdc bench``'s ``bench_sub``."""
    bench_snap_p = bench_sub.add_parser(
        "snapshot", help="incremental snapshot of a table: pymysql keyset scan vs the producer vs mariadb-dump")
    bench_snap_p.add_argument("--rows", type=int, default=1_000_000, help="rows in the table (default 1000000)")
    bench_snap_p.add_argument("--chunk-size", type=int, default=8192)
    bench_snap_p.add_argument("--parallelism", type=int, default=1, help="chunk readers")
    bench_snap_p.add_argument("--writes-per-s", type=int, default=1000,
                              help="writes per second during the second run (0: skip it)")
    bench_snap_p.add_argument("--state-dir", default=".cdc/bench")
    bench_snap_p.add_argument("--keep-running", action="store_true")
    bench_snap_p.add_argument("--debezium", nargs="?", const="count:avro,kafka:avro", metavar="MODE:FORMAT,...",
                              help="race Debezium's incremental snapshot of the same table (make debezium): count-only "
                                   "handler and/or Kafka's Java producer, JSON or Avro converter (default "
                                   "count:avro,kafka:avro), at each of --debezium-chunk-sizes")
    bench_snap_p.add_argument("--debezium-chunk-sizes", default="8192,1024",
                              help="Debezium's incremental.snapshot.chunk.size values (default 8192,1024: ours and "
                                   "Debezium's default)")
    bench_snap_p.add_argument("--no-reference", action="store_true",
                              help="skip the keyset scan and mariadb-dump (a) and (c)")
    bench_snap_p.add_argument("--json", action="store_true", help="print one JSON object with every figure")
    bench_snap_p.set_defaults(func=_cmd_bench_snapshot)
