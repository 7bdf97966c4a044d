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
   reader) is sampled as the snapshot progresses;
4. (c) ``mariadb-dump``/``mysqldump`` of the table to /dev/null (the native reference).

Figures are printed as a table with ratios to (a), and returned as a dict.  A benchmark,
not a test: nothing asserts timing.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cdc.bench import (DEFAULT_STATE_DIR, TABLE, TABLE_DDL, _admin, _insert_sql, _proc_status_kb, drop_bench_database,
                       machine_info)
from cdc.errors import BenchError
from cdc.progress import NotificationFollower
from cdc.stack.manager import stack_up
from common.config import load_config, write_config
from common.sql.sessions import connect
from contract.signals import execute_snapshot_data, send_signal
from producer.binlog_source import start_at_current


def load_table(conn, rows: int) -> None:
    with conn.cursor() as cur:
        for first in range(1, rows + 1, 5000):
            cur.execute(_insert_sql(first, min(5000, rows + 1 - first)))


def bench_keyset_scan(mysql: dict, db: str, chunk_size: int) -> dict[str, Any]:
    """(a) ``SELECT ... WHERE id > ? ORDER BY id LIMIT n`` until the end, rows fetched into Python."""
    import pymysql
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
    tool = shutil.which("mariadb-dump") or shutil.which("mysqldump")
    if tool is None:
        raise BenchError("neither mariadb-dump nor mysqldump is installed (package mariadb-client)")
    env = {**os.environ, "MYSQL_PWD": mysql["admin_password"]}
    argv = [tool, "--no-defaults", "-h", mysql["host"], "-P", str(mysql["port"]), "-u", mysql["admin_user"],
            "--single-transaction", "--quick", db, TABLE]
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        res = subprocess.run(argv, stdout=devnull, stderr=subprocess.PIPE, env=env)
    s = time.perf_counter() - t0
    if res.returncode != 0:
        raise BenchError(f"{Path(tool).name} failed: {res.stderr.decode(errors='replace')[-2000:]}")
    return {"tool": Path(tool).name, "rows": rows, "seconds": s, "rows_per_s": rows / s if s else 0.0}


class _Writer:
    """About ``rate`` single-row writes per second (updates and inserts) against the table."""

    def __init__(self, mysql: dict, db: str, rows: int, rate: int) -> None:
        self.mysql, self.db, self.rows, self.rate = mysql, db, rows, rate
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "_Writer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        rnd = random.Random(3)
        next_id = self.rows + 1
        t0 = time.perf_counter()
        with _admin(self.mysql, self.db) as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                if rnd.random() < 0.8:
                    cur.execute(f"UPDATE `{TABLE}` SET qty = qty + 1 WHERE id = %s", (rnd.randrange(1, self.rows),))
                else:
                    cur.execute(_insert_sql(next_id, 1))
                    next_id += 1
                self.count += 1
                ahead = self.count / self.rate - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)


def _rss_mb(pid: int) -> float:
    return (_proc_status_kb("VmRSS", pid) + sum(_proc_status_kb("VmRSS", c) for c in _children(pid))) / 1024


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def bench_producer_snapshot(info, db: str, rows: int, *, chunk_size: int, parallelism: int, writes_per_s: int,
                            console: Console) -> dict[str, Any]:
    """(b) ``cdc produce`` in a child process snapshots the table; clock from the signal to COMPLETED."""

    cfg = load_config(info.config_path)
    prefix = f"benchsnap_{uuid.uuid4().hex[:8]}"
    cfg.kafka.topic_prefix = cfg.producer.name = prefix
    cfg.source.include_databases = [db]
    cfg.source.server_id = 7000 + uuid.uuid4().int % 1000
    cfg.snapshot.chunk_size, cfg.snapshot.parallelism = chunk_size, parallelism
    start_at_current(cfg)
    work = Path(info.state_dir) / "bench-snapshot" / prefix
    work.mkdir(parents=True, exist_ok=True)
    cfg.state_dir = str(work / "state")
    cfg_path = work / "cdc.yaml"
    write_config(cfg, cfg_path)
    log = open(work / "producer.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(cfg_path), "produce"], stdout=log,
                            stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1])
    samples: list[tuple[int, float]] = []
    try:
        time.sleep(2.0)  # connected and streaming
        rss_start = _rss_mb(proc.pid)
        follower = NotificationFollower(cfg)
        writer = _Writer(info.mysql, db, rows, writes_per_s) if writes_per_s else None
        try:
            if writer:
                writer.__enter__()
            conn = connect(cfg.source)
            try:
                t0 = time.perf_counter()
                sid = send_signal(conn, cfg.source.signal_table, "execute-snapshot",
                                  execute_snapshot_data([f"{db}.{TABLE}"]))
            finally:
                conn.close()
            done_rows, t_done = 0, None
            deadline = time.monotonic() + 3600
            while t_done is None and time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise BenchError(f"the producer exited ({proc.returncode}); see {work / 'producer.log'}")
                for n in follower.poll(0.2):
                    if n.type == "IN_PROGRESS":
                        done_rows = int(n.data.get("rows", 0))
                        samples.append((done_rows, _rss_mb(proc.pid)))
                    elif n.type == "COMPLETED" and n.snapshot_id == sid:
                        t_done = time.perf_counter()
                    elif n.type == "SKIPPED" and n.snapshot_id == sid:
                        raise BenchError(f"the producer refused the signal: {n.data.get('reason')}")
            if t_done is None:
                raise BenchError("the snapshot did not complete within an hour")
        finally:
            if writer:
                writer.__exit__()
            follower.close()
        seconds = t_done - t0
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if not samples:
        raise BenchError("no progress notification was seen")
    total = samples[-1][0]

    def rss_at(fraction: float) -> float:
        return round(next((r for n, r in samples if n >= fraction * total), samples[-1][1]), 1)
    return {"rows": total, "seconds": seconds, "rows_per_s": total / seconds if seconds else 0.0,
            "writes": writer.count if writer else 0, "writes_per_s": (writer.count / seconds) if writer else 0.0,
            "rss_start_mb": round(rss_start, 1), "rss_25_mb": rss_at(0.25), "rss_50_mb": rss_at(0.5),
            "rss_100_mb": rss_at(1.0), "rss_max_mb": round(max(r for _, r in samples), 1), "parallelism": parallelism}


def bench_snapshot(state_dir: Path = DEFAULT_STATE_DIR, rows: int = 1_000_000, *, chunk_size: int = 8192,
                   parallelism: int = 1, writes_per_s: int = 1000, keep_running: bool = False,
                   console: Console | None = None) -> dict[str, Any]:

    console = console or Console()
    result: dict[str, Any] = {"machine": machine_info(), "rows": rows, "chunk_size": chunk_size,
                              "parallelism": parallelism}
    with console.status("starting the embedded stack..."):
        info = stack_up(Path(state_dir))
    mysql = info.mysql
    db = f"benchsnap_{uuid.uuid4().hex[:8]}"
    try:
        with _admin(mysql) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{db}`")
            cur.execute(TABLE_DDL)
            with console.status(f"loading {rows:,} rows..."):
                t0 = time.perf_counter()
                load_table(conn, rows)
                result["load_s"] = time.perf_counter() - t0
            cur.execute(f"ANALYZE TABLE `{TABLE}`")
            cur.fetchall()
        with console.status("(a) pymysql keyset scan..."):
            result["keyset"] = bench_keyset_scan(mysql, db, chunk_size)
        with console.status("(b) producer snapshot, table quiet..."):
            result["snapshot_quiet"] = bench_producer_snapshot(info, db, rows, chunk_size=chunk_size,
                                                               parallelism=parallelism, writes_per_s=0, console=console)
        if writes_per_s:
            with console.status(f"(b) producer snapshot, {writes_per_s} writes/s..."):
                result["snapshot_writes"] = bench_producer_snapshot(
                    info, db, rows, chunk_size=chunk_size, parallelism=parallelism, writes_per_s=writes_per_s,
                    console=console)
        with console.status("(c) dump..."):
            result["dump"] = bench_dump(mysql, db, rows)
        a = result["keyset"]["rows_per_s"]
        result["ratios"] = {f"{k}/a": result[k]["rows_per_s"] / a for k in ("snapshot_quiet", "snapshot_writes", "dump")
                            if k in result and a}
    finally:
        drop_bench_database(info, db, Path(state_dir), keep_running, console)
    print_report(result, console)
    return result


def print_report(result: dict[str, Any], console: Console) -> None:
    m = result["machine"]
    table = Table(title=f"cdc bench snapshot: {result['rows']:,} rows, chunks of {result['chunk_size']:,}, "
                        f"{result['parallelism']} reader(s)",
                  caption=f"{m['nproc']} cores ({m['cpu']}), load average at start {m['loadavg'][0]}")
    for col in ("measure", "seconds", "rows/s", "vs (a)", "RSS MB start/25%/50%/100%"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    a = result.get("keyset", {}).get("rows_per_s") or 0.0
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
    console.print_json(json.dumps({k: v for k, v in result.items() if k != "machine"}, default=str))
