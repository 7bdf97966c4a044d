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
   (``-v --base64-output=decode-rows`` to /dev/null): the native reference.

The figures are printed as a table and returned as a dict.  This is a benchmark, not a
test: nothing here asserts timing.  ``python -m cdc.bench`` is the child entry point
(a JSON spec on stdin), not a user command.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from cdc.errors import BenchError
from cdc.stack.manager import stack_down, stack_up
from common.config import load_config, write_config
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from contract.topics import table_topic
from producer.app import ProducerApp
from producer.binlog_source import current_position

DEFAULT_STATE_DIR = Path(".cdc/bench")
TABLE = "items"
# One round of generated changes: 60% inserts, 30% updates, 10% deletes.
ROUND_INSERTS, ROUND_UPDATES, ROUND_DELETES = 1800, 900, 300
ROUND = ROUND_INSERTS + ROUND_UPDATES + ROUND_DELETES

TABLE_DDL = f"""CREATE TABLE `{TABLE}` (
  `id` INT NOT NULL PRIMARY KEY,
  `name` VARCHAR(64) NOT NULL,
  `price` DECIMAL(12,2) NOT NULL,
  `updated_at` DATETIME(3) NOT NULL,
  `qty` INT NOT NULL,
  `note` TEXT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""

_NOTES = [
    "'" + ("lorem ipsum dolor sit amet " * (1 + i % 4)).strip() + f" #{i}'" for i in range(16)
] + ["NULL", "'\u00e9t\u00e9 \u2713 ok'"]


# --- machine ---------------------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        nproc = os.cpu_count() or 0
    return {"nproc": nproc, "cpu": cpu, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _proc_status_kb(field: str, pid: int | str = "self") -> int:
    """A ``kB`` figure of a process (this one by default) from /proc/<pid>/status (0 where
    unavailable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _child_pids() -> list[int]:
    """This process's children (the producer's binlog reader process)."""
    me, out = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                    out.append(int(entry))
            except (OSError, IndexError):
                pass
    return out


def _file_index(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def _pos_key(file: str, pos: int) -> tuple[int, int]:
    return _file_index(file), int(pos)


# --- workload ----------------------------------------------------------------------------------

def _insert_sql(first_id: int, n: int) -> str:
    parts = []
    for i in range(first_id, first_id + n):
        s = i % 86400
        parts.append(f"({i},'item-{i:09d}',{i % 100000}.{i % 100:02d},"
                     f"'2024-01-{1 + i % 28:02d} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{i % 1000:03d}',"
                     f"{i % 1000},{_NOTES[i % len(_NOTES)]})")
    return f"INSERT INTO `{TABLE}` (id, name, price, updated_at, qty, note) VALUES " + ",".join(parts)


def generate_changes(conn, rows: int, seed: int = 7) -> dict[str, int]:
    """At least ``rows`` row changes on ``TABLE`` (in the connection's database).

    Ids are inserted in rising order and deleted from the low end, so the live ids are
    always one contiguous range and every UPDATE/DELETE touches exactly the rows it
    names; every UPDATE changes ``qty``, so each touched row is one binlog row image.
    """
    rnd = random.Random(seed)
    counts = {"insert": 0, "update": 0, "delete": 0}
    lo = hi = 1  # live ids: [lo, hi)
    rounds = max(1, -(-rows // ROUND))
    with conn.cursor() as cur:
        for _ in range(rounds):
            cur.execute(_insert_sql(hi, ROUND_INSERTS))
            counts["insert"] += cur.rowcount
            hi += ROUND_INSERTS
            start = rnd.randrange(lo, hi - ROUND_UPDATES + 1)
            cur.execute(f"UPDATE `{TABLE}` SET qty = qty + 1, price = price + 0.25, updated_at = NOW(3), "
                        f"name = CONCAT('upd-', id) WHERE id >= {start} AND id < {start + ROUND_UPDATES}")
            counts["update"] += cur.rowcount
            cur.execute(f"DELETE FROM `{TABLE}` WHERE id >= {lo} AND id < {lo + ROUND_DELETES}")
            counts["delete"] += cur.rowcount
            lo += ROUND_DELETES
    counts["total"] = counts["insert"] + counts["update"] + counts["delete"]
    return counts


# --- (a) python-mysql-replication ----------------------------------------------------------------

def bench_reference(mysql: dict, db: str, start: tuple[str, int], end: tuple[str, int]) -> dict[str, Any]:
    """python-mysql-replication decoding the range, touching every row, no output."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    settings = {"host": mysql["host"], "port": mysql["port"], "user": mysql["cdc_user"],
                "password": mysql["cdc_password"], "charset": "utf8mb4"}
    end_key = _pos_key(*end)
    t0 = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=7000 + uuid.uuid4().int % 1000, blocking=False,
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

def binlog_tool() -> str:
    for name in ("mariadb-binlog", "mysqlbinlog"):
        path = shutil.which(name)
        if path:
            return path
    raise BenchError("neither mariadb-binlog nor mysqlbinlog is installed (package mariadb-client)")


def bench_native(datadir: Path, files: list[str], start_pos: int, end_pos: int, rows: int) -> dict[str, Any]:
    """``mariadb-binlog -v --base64-output=decode-rows`` over the range, to /dev/null."""
    tool = binlog_tool()
    argv = [tool, "--no-defaults", "-v", "--base64-output=decode-rows", f"--start-position={start_pos}",
            f"--stop-position={end_pos}", *[str(datadir / f) for f in files]]
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        res = subprocess.run(argv, stdout=devnull, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise BenchError(f"{Path(tool).name} failed ({res.returncode}): {res.stderr.decode(errors='replace')[-2000:]}")
    return {"tool": Path(tool).name, "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds if seconds else 0.0}


# --- (b) the producer, in a child process ---------------------------------------------------------

def _child_main() -> int:
    """Run the producer over a range and report (``python -m cdc.bench`` with a JSON spec on stdin)."""
    import logging

    spec = json.loads(sys.stdin.read())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    cfg = load_config(spec["config_path"])
    end_key = _pos_key(*spec["end"])
    app = ProducerApp(cfg)
    marks: dict[str, float] = {}
    metrics = app.metrics
    orig_event, orig_committed = metrics.event, metrics.committed

    def event(ts_ms: int, n: int = 1) -> None:
        if "first_event" not in marks:
            marks["first_event"] = time.perf_counter()
        orig_event(ts_ms, n)

    def committed(resume) -> None:
        orig_committed(resume)
        if "done" not in marks and resume.file and _pos_key(resume.file, resume.pos) >= end_key:
            marks["done"] = time.perf_counter()
            app.stop()

    metrics.event, metrics.committed = event, committed  # type: ignore[method-assign]

    # (events, RSS of this process + its children) every 0.25 s; the children's peaks.
    samples: list[tuple[int, float]] = []
    child_hwm_kb: dict[int, int] = {}
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.25):
            rss = _proc_status_kb("VmRSS")
            for pid in _child_pids():
                rss += _proc_status_kb("VmRSS", pid)
                child_hwm_kb[pid] = max(child_hwm_kb.get(pid, 0), _proc_status_kb("VmHWM", pid))
            samples.append((metrics.events_total, rss / 1024))
    sampler = threading.Thread(target=sample, daemon=True, name="rss-sampler")

    rss_base = _proc_status_kb("VmRSS") / 1024
    hwm_base = _proc_status_kb("VmHWM") / 1024
    profiler = None
    if spec.get("profile"):
        import cProfile
        profiler = cProfile.Profile()
    sampler.start()
    t0 = time.perf_counter()
    try:
        if profiler is not None:
            profiler.enable()
        app.run(idle_exit_s=spec.get("idle_exit_s", 30.0))
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(spec["profile"])
        stop_sampling.set()
        sampler.join(1)
    t_exit = time.perf_counter()
    done = marks.get("done")
    first = marks.get("first_event", t0)
    result = {
        "events": metrics.events_total, "commits": metrics.commits_total, "reached_end": done is not None,
        "seconds": (done or t_exit) - t0, "startup_s": first - t0, "exit_s": t_exit - t0,
        "rss_base_mb": round(rss_base, 1), "rss_peak_mb": round(_proc_status_kb("VmHWM") / 1024, 1),
        "reader_rss_peak_mb": round(max(child_hwm_kb.values(), default=0) / 1024, 1),
        "hwm_before_run_mb": round(hwm_base, 1), "rss_samples": samples,
    }
    Path(spec["result_path"]).write_text(json.dumps(result))
    return 0


def _rss_at(samples: list[tuple[int, float]], fraction: float, total: int) -> float | None:
    """RSS (MB) of the first sample taken once ``fraction`` of the events were out."""
    for events, rss in samples:
        if events >= fraction * total:
            return round(rss, 1)
    return round(samples[-1][1], 1) if samples else None


def _topic_records(bootstrap: str, topic: str) -> int:
    """Offsets used in ``topic`` (all partitions), from the true end offsets: the number
    of records, unless transaction commit markers took offsets too (they do on Kafka and
    on Tansu), in which case the caller counts with a read_committed consumer."""
    from confluent_kafka.admin import AdminClient


    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        return 0
    ends = end_offsets(bootstrap, [(topic, p) for p in sorted(tmd.partitions)])
    return sum(end - low for low, end in ends.values())


def _count_by_reading(bootstrap: str, topic: str) -> int:
    return sum(1 for _ in read_topic(bootstrap, topic, timeout=120))


def bench_producer(info, db: str, start: tuple[str, int], end: tuple[str, int], *, transactions: bool,
                   expected: int, profile: Path | None = None, tag: str = "") -> dict[str, Any]:
    """The producer from ``start`` until an offset commit covers ``end``; in a child process."""

    cfg = load_config(info.config_path)
    run = tag or uuid.uuid4().hex[:8]
    prefix = f"bench_{run}_{'tx' if transactions else 'notx'}"
    cfg.kafka.topic_prefix = prefix
    cfg.kafka.transactions = transactions
    cfg.producer.name = prefix
    cfg.producer.startup.mode = "position"
    cfg.producer.startup.file, cfg.producer.startup.pos = start[0], int(start[1])
    cfg.source.include_databases = [db]
    cfg.source.server_id = 7000 + uuid.uuid4().int % 1000
    cfg.state_dir = str(info.state_dir / "producer" / prefix)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=info.state_dir))
    try:
        cfg_path = work / "cdc.yaml"
        write_config(cfg, cfg_path)
        result_path = work / "result.json"
        spec = {"config_path": str(cfg_path), "end": list(end), "result_path": str(result_path),
                "profile": str(profile) if profile else None, "idle_exit_s": 30.0}
        proc = subprocess.run([sys.executable, "-m", "cdc.bench"], input=json.dumps(spec).encode(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
        if proc.returncode != 0 or not result_path.exists():
            raise BenchError(f"the producer run failed (exit {proc.returncode}):\n"
                             f"{proc.stderr.decode(errors='replace')[-4000:]}")
        res = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not res["reached_end"]:
        raise BenchError(f"the producer stopped after {res['events']} events without committing the end "
                         f"position {end[0]}:{end[1]}")
    topic = table_topic(prefix, db, TABLE)
    bootstrap = info.kafka["bootstrap_servers"]
    records = span = _topic_records(bootstrap, topic)
    counted_by = "end offsets"
    if records != expected:
        # Transaction commit markers take offsets on real Kafka: count what a consumer sees.
        records, counted_by = _count_by_reading(bootstrap, topic), "read_committed consumer"
    samples = res.pop("rss_samples")
    events = res["events"]
    steady = res["seconds"] - res["startup_s"]
    res["total_rss_peak_mb"] = round(res["rss_peak_mb"] + res["reader_rss_peak_mb"], 1)
    return {**res, "transactions": transactions, "topic": topic, "records": records, "counted_by": counted_by,
            "offset_span": span,
            "rows_per_s": expected / res["seconds"] if res["seconds"] else 0.0,
            "rows_per_s_after_startup": expected / steady if steady > 0 else 0.0,
            "rss_half_mb": _rss_at(samples, 0.5, events), "rss_end_mb": _rss_at(samples, 1.0, events)}


# --- the whole benchmark ---------------------------------------------------------------------

def _admin(mysql: dict, database: str | None = None):
    import pymysql
    return pymysql.connect(host=mysql["host"], port=mysql["port"], user=mysql["admin_user"],
                           password=mysql["admin_password"], database=database, autocommit=True,
                           charset="utf8mb4")


def drop_bench_database(info, db: str, state_dir: Path, keep_running: bool, console: Console) -> None:
    """The end of a benchmark: its database dropped (best effort), the stack stopped unless kept."""
    try:
        with _admin(info.mysql) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        console.print(f"[yellow]cleanup:[/yellow] {exc}")
    if not keep_running:
        stack_down(Path(state_dir))


def bench_stream(state_dir: Path = DEFAULT_STATE_DIR, rows: int = 500_000, *, keep_running: bool = False,
                 transactions: tuple[bool, ...] = (True, False), profile_dir: Path | None = None,
                 console: Console | None = None) -> dict[str, Any]:
    """Generate ``rows`` changes and measure (a) python-mysql-replication, (b) the producer
    (with and without Kafka transactions), (c) ``mariadb-binlog`` over the same binlog range."""

    console = console or Console()
    state_dir = Path(state_dir)
    result: dict[str, Any] = {"machine": machine_info(), "requested_rows": rows}
    with console.status("starting the embedded stack..."):
        info = stack_up(state_dir)
    mysql = info.mysql
    run = uuid.uuid4().hex[:8]
    db = f"bench_{run}"
    try:
        with _admin(mysql) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{db}`")
            cur.execute(TABLE_DDL)
            cur.execute("FLUSH BINARY LOGS")  # this run's range starts in a file of its own
            start = current_position(conn)
            with console.status(f"generating {rows:,} row changes..."):
                t0 = time.perf_counter()
                changes = generate_changes(conn, rows)
                gen_s = time.perf_counter() - t0
            end = current_position(conn)
            cur.execute("SHOW BINARY LOGS")
            logs = [(r[0], int(r[1])) for r in cur.fetchall()]
        files = [f for f, _ in logs if _file_index(start[0]) <= _file_index(f) <= _file_index(end[0])]
        total = changes["total"]
        result.update(rows=total, changes=changes, database=db, start=list(start), end=list(end),
                      generate={"seconds": gen_s, "rows_per_s": total / gen_s if gen_s else 0.0},
                      binlog_bytes=sum(size for f, size in logs if f in files))

        with console.status("(a) python-mysql-replication decoding..."):
            result["reference"] = bench_reference(mysql, db, start, end)
        if result["reference"]["rows"] != total:
            raise BenchError(f"python-mysql-replication decoded {result['reference']['rows']} rows, "
                             f"{total} changes were made")
        for tx in transactions:
            key = "producer_tx" if tx else "producer_no_tx"
            label = "with" if tx else "without"
            profile = Path(profile_dir).resolve() / f"{key}.prof" if profile_dir else None
            if profile:
                profile.parent.mkdir(parents=True, exist_ok=True)
            with console.status(f"(b) producer {label} Kafka transactions..."):
                result[key] = bench_producer(info, db, start, end, transactions=tx, expected=total,
                                             profile=profile, tag=run)
            if result[key]["records"] != total:
                raise BenchError(f"the producer ({label} transactions) left {result[key]['records']} records in "
                                 f"{result[key]['topic']}; {total} changes were made")
        with console.status("(c) native binlog decoding..."):
            result["native"] = bench_native(Path(mysql["datadir"]), files, start[1], end[1], total)

        a = result["reference"]["rows_per_s"]
        ratios = {"c/a": result["native"]["rows_per_s"] / a}
        for key, name in (("producer_tx", "b_tx/a"), ("producer_no_tx", "b_no_tx/a")):
            if key in result:
                ratios[name] = result[key]["rows_per_s"] / a
        result["ratios"] = ratios
    finally:
        try:
            with _admin(mysql) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                if not keep_running:
                    # Keep the bench datadir bounded: this run's binlog files go too.
                    cur.execute("FLUSH BINARY LOGS")
                    current = current_position(conn)[0]
                    cur.execute("PURGE BINARY LOGS TO %s", (current,))
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            console.print(f"[yellow]cleanup:[/yellow] {exc}")
        if not keep_running:
            stack_down(state_dir)
    print_report(result, console)
    return result


def print_report(result: dict[str, Any], console: Console) -> None:
    m = result["machine"]
    ch = result.get("changes", {})
    title = (f"cdc bench stream: {result.get('rows', 0):,} row changes ({ch.get('insert', 0):,} inserts, "
             f"{ch.get('update', 0):,} updates, {ch.get('delete', 0):,} deletes), "
             f"{result.get('binlog_bytes', 0) / 1e6:.0f} MB of binlog")
    table = Table(title=title, caption=f"{m['nproc']} cores ({m['cpu']}), load average at start {m['loadavg'][0]}")
    for col in ("measure", "seconds", "rows/s", "vs (a)"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    a = result.get("reference", {}).get("rows_per_s") or 0.0
    runs = [(key, label) for key, label in (("producer_tx", "(b) producer, Kafka transactions"),
                                            ("producer_no_tx", "(b) producer, no transactions")) if key in result]
    if "generate" in result:
        g = result["generate"]
        table.add_row("workload (MariaDB multi-row statements)", f"{g['seconds']:.2f}", f"{g['rows_per_s']:,.0f}", "")
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


if __name__ == "__main__":
    sys.exit(_child_main())
