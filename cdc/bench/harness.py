"""What the benchmarks share: their table and its workload, the embedded stack and an admin
connection to its server, a run's configuration and database, the machine's figures and its
conditions at a race round's start, the memory of a process and of a process tree, a
topic's records counted, the MariaDB client tools, a paced writer and the results table."""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Sequence

import pymysql
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from cdc.bench.race_rounds import busy_processes
from cdc.errors import BenchError
from cdc.stack.kafka_broker import node_pids
from cdc.stack.manager import StackInfo, read_stack, stack_down, stack_up
from cdc.workload import BackgroundWriter
from common.config import load_config
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from producer.binlog.server import current_position

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


# --- machine and processes -------------------------------------------------------------------

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


def machine_caption(machine: dict[str, Any]) -> str:
    """The machine of :func:`machine_info` in one line."""
    return f"{machine['nproc']} cores ({machine['cpu']}), load average at start {machine['loadavg'][0]}"


def proc_status_kb(field: str, pid: int | str = "self") -> int:
    """A ``kB`` figure of a process (this one by default) from /proc/<pid>/status (0 where
    unavailable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _stat(pid: int | str) -> tuple[int, float] | None:
    """``(parent pid, CPU seconds: user + system, all threads)`` of a process from
    /proc/<pid>/stat, None where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time of a process so far, all its threads (0 where unavailable)."""
    stat = _stat(pid)
    return 0.0 if stat is None else stat[1]


def child_pids(pid: int | None = None) -> list[int]:
    """The children of process ``pid`` (this one by default; the producer's binlog reader
    process is one, its chunk read processes others)."""
    parent = os.getpid() if pid is None else pid
    try:  # Linux: the kernel's lists, one small read per thread (a snapshot's chunk read processes
        # are started by its reader threads)
        return [int(p) for t in os.listdir(f"/proc/{parent}/task")
                for p in Path(f"/proc/{parent}/task/{t}/children").read_text().split()]
    except (OSError, ValueError):
        pass  # no such file: scan /proc (every process's stat: costly every 0.25 s, in the measured process)
    return [p for p, (ppid, _, _) in _proc_table(commands=False).items() if ppid == parent]


def _proc_table(*, commands: bool = True) -> dict[int, tuple[int, str, float]]:
    """Every process: pid -> (parent pid, command line or "", CPU seconds: user + system)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(entry)
        if stat is None:
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") \
                if commands else ""
        except OSError:
            continue
        out[int(entry)] = (stat[0], cmd, stat[1])
    return out


class CpuMeter:
    """CPU seconds used by groups of processes between :meth:`start` and :meth:`stop`: each
    group a root process and all its descendants (``{"postgres": pid, ...}``), plus this
    process's descendants split into Spark's JVM and its Python workers, and this process
    itself.  Read from /proc (user + system time of live processes: a process that exits
    in between is not counted)."""

    def __init__(self, roots: dict[str, int | None]) -> None:
        self.roots = {name: pid for name, pid in roots.items() if pid}
        self._start: dict[int, float] = {}
        self.seconds: dict[str, float] = {}

    def _groups(self, table: dict[int, tuple[int, str, float]]) -> dict[int, str]:
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)

        def tree(pid: int) -> list[int]:
            todo, seen = [pid], []
            while todo:
                p = todo.pop()
                seen.append(p)
                todo += children.get(p, [])
            return seen
        group = {}
        for name, root in self.roots.items():
            for p in tree(root):
                group[p] = name
        me = os.getpid()
        for p in tree(me):
            if p == me:
                group[p] = "driver (Python)"
            elif "pyspark.daemon" in table[p][1] or "pyspark.worker" in table[p][1]:
                group[p] = "Spark Python workers"
            elif "java" in table[p][1].split(" ", 1)[0]:
                group[p] = "Spark JVM"
        return group

    def start(self) -> None:
        self._start = {pid: cpu for pid, (_, _, cpu) in _proc_table().items()}

    def stop(self) -> dict[str, float]:
        table = _proc_table()
        self.seconds = {}
        for pid, name in self._groups(table).items():
            used = table[pid][2] - self._start.get(pid, 0.0)
            self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, used)
        return self.seconds


class ProcessTreePeak:
    """The peak memory of a process and all its descendants, measured the same way for every
    side of a race: each process's ``VmHWM`` (the kernel's own peak RSS) read from /proc every
    ``interval`` s from outside until :meth:`stop`, summed over the processes.  A process's
    last reading stands for its peak (one that exits between readings loses at most its
    last ``interval``)."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.hwm_kb: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"hwm-{pid}")

    def _tree(self) -> list[int]:
        todo, seen = [self.pid], []
        while todo:
            p = todo.pop()
            seen.append(p)
            todo += child_pids(p)
        return seen

    def read(self) -> None:
        for pid in self._tree():
            kb = proc_status_kb("VmHWM", pid)
            if kb:
                self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), kb)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.read()

    def start(self) -> "ProcessTreePeak":
        self.read()
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stops reading; the peak in MB (the sum of every process's own peak)."""
        self._stop.set()
        self._thread.join(2)
        return round(sum(self.hwm_kb.values()) / 1024, 1)


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """Every process now: pid -> (command line, CPU seconds so far)."""
    return {pid: (cmd, cpu) for pid, (_, cmd, cpu) in _proc_table().items()}


def race_process_ids(stack_pids: Iterable[int | None] = ()) -> set[int]:
    """The processes that belong to the race: this one and its descendants, and the embedded
    stack's servers (``stack_pids``, e.g. its MariaDB and broker) with theirs."""
    table = _proc_table(commands=False)
    mine = {os.getpid(), *(p for p in stack_pids if p)}
    changed = True
    while changed:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in mine} - mine
        mine |= more
        changed = bool(more)
    return mine


def stack_pids(info: StackInfo) -> list[int | None]:
    """The embedded stack's server processes (MariaDB, the Kafka nodes, PostgreSQL where running)."""
    return [(info.data.get("mysql") or {}).get("pid"), *node_pids(info.data.get("kafka") or {}),
            (info.data.get("postgres") or {}).get("pid")]


def round_conditions(info: StackInfo, sample_s: float = 1.0) -> dict[str, Any]:
    """The machine at a race round's start: the UTC time, the load average, the threads ready
    to run (the median of ten readings over ``sample_s``, while the race is idle), and the processes
    outside the race (this process's tree and ``info``'s servers) that used more than
    :data:`~cdc.bench.race_rounds.BUSY_CPU_SHARE` of a core over ``sample_s`` seconds
    (:func:`~cdc.bench.race_rounds.busy_processes` decides)."""
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    loadavg = [round(x, 2) for x in os.getloadavg()]
    before = cpu_by_process()
    runnable = []
    for _ in range(10):  # threads running or ready now, this sampler's own left out
        runnable.append(_running_threads() - 1)
        time.sleep(sample_s / 10)
    after = cpu_by_process()
    return {"started": started, "loadavg": loadavg, "runnable": statistics.median(runnable),
            "busy": busy_processes(before, after, sample_s, race_process_ids(stack_pids(info)))}


def _running_threads() -> int:
    """Threads running or ready to run this instant (/proc/loadavg's fourth field), 0 where
    unavailable."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return 0


def count_topic_records(bootstrap: str, topic: str, expected: int) -> tuple[int, str]:
    """The records in ``topic`` and how they were counted: from the true end offsets, or,
    when those differ from ``expected`` (transaction commit markers take offsets on real
    Kafka), by reading the topic with a read_committed consumer."""
    records = topic_records(bootstrap, topic)
    if records == expected:
        return records, "end offsets"
    return sum(1 for _ in read_topic(bootstrap, topic, timeout=120)), "read_committed consumer"


def rss_at(samples: list[tuple[int, float]], fraction: float, total: int) -> float | None:
    """RSS (MB) of the first ``(done, RSS)`` sample taken once ``fraction`` of ``total`` was
    done (the last sample's if none was)."""
    for done, rss in samples:
        if done >= fraction * total:
            return round(rss, 1)
    return round(samples[-1][1], 1) if samples else None


# --- workload ----------------------------------------------------------------------------------

def insert_sql(first_id: int, n: int, *, stamped: bool = False) -> str:
    """One multi-row INSERT of ``n`` rows into ``TABLE`` from id ``first_id`` on;
    ``stamped``: ``updated_at`` is the statement's time (``NOW(3)``, the session's time
    zone) instead of a made-up one."""
    parts = []
    for i in range(first_id, first_id + n):
        s = i % 86400
        at = "NOW(3)" if stamped else \
            f"'2024-01-{1 + i % 28:02d} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{i % 1000:03d}'"
        parts.append(f"({i},'item-{i:09d}',{i % 100000}.{i % 100:02d},{at},{i % 1000},{_NOTES[i % len(_NOTES)]})")
    return f"INSERT INTO `{TABLE}` (id, name, price, updated_at, qty, note) VALUES " + ",".join(parts)


def generate_changes(conn, rows: int, seed: int = 7, *, single_row: bool = False) -> dict[str, int]:
    """At least ``rows`` row changes on ``TABLE`` (in the connection's database).

    Ids are inserted in rising order and deleted from the low end, so the live ids are
    always one contiguous range and every UPDATE/DELETE touches exactly the rows it
    names; every UPDATE changes ``qty``, so each touched row is one binlog row image.
    ``single_row``: the same changes, each its own statement and (autocommit) transaction,
    as an OLTP application makes them, instead of one statement per kind and round.
    """
    rnd = random.Random(seed)
    counts = {"insert": 0, "update": 0, "delete": 0}
    lo = hi = 1  # live ids: [lo, hi)
    rounds = max(1, -(-rows // ROUND))
    update = (f"UPDATE `{TABLE}` SET qty = qty + 1, price = price + 0.25, updated_at = NOW(3), "
              "name = CONCAT('upd-', id) WHERE id >= {0} AND id < {1}")
    delete = f"DELETE FROM `{TABLE}` WHERE id >= {{0}} AND id < {{1}}"
    with conn.cursor() as cur:
        def run(kind: str, statements) -> None:
            for sql in statements:
                cur.execute(sql)
                counts[kind] += cur.rowcount

        def spans(first: int, n: int):
            return [(i, i + 1) for i in range(first, first + n)] if single_row else [(first, first + n)]

        for _ in range(rounds):
            run("insert", (insert_sql(a, b - a) for a, b in spans(hi, ROUND_INSERTS)))
            hi += ROUND_INSERTS
            start = rnd.randrange(lo, hi - ROUND_UPDATES + 1)
            run("update", (update.format(a, b) for a, b in spans(start, ROUND_UPDATES)))
            run("delete", (delete.format(a, b) for a, b in spans(lo, ROUND_DELETES)))
            lo += ROUND_DELETES
    counts["total"] = counts["insert"] + counts["update"] + counts["delete"]
    return counts


class PacedWriter(BackgroundWriter):
    """About ``rate`` row changes per second against a benchmark table, in a thread, until
    stopped (``rate`` 0: as fast as the server takes them); :meth:`write` makes one step and
    says how many rows it changed."""

    def __init__(self, mysql: dict, db: str, rate: int) -> None:
        super().__init__()
        self.mysql, self.db, self.rate = mysql, db, rate
        self.count = 0

    def write(self, cur) -> int:
        raise NotImplementedError

    def _run(self) -> None:
        t0 = time.perf_counter()
        with admin(self.mysql, self.db) as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                self.count += self.write(cur)
                ahead = self.count / self.rate - (time.perf_counter() - t0) if self.rate else 0.0
                if ahead > 0:
                    time.sleep(ahead)


# --- the stack and a run's database ------------------------------------------------------------

def start_stack(state_dir: Path, console: Console, server_args: tuple[str, ...] = ()) -> StackInfo:
    """The embedded stack of ``state_dir``, started (or found running); ``server_args``: more
    options for its server if it starts here.  Where it fails to start a stack this run began
    (a server up, the broker's jars missing), what did start is stopped: a failed run leaves
    no server behind."""
    fresh = read_stack(Path(state_dir)) is None
    with console.status("starting the embedded stack..."):
        try:
            return stack_up(Path(state_dir), server_args=server_args)
        except BaseException:
            if fresh:
                stack_down(Path(state_dir))
            raise


def admin(mysql: dict, database: str | None = None):
    """A connection to the stack's server as its admin user (autocommit)."""
    return pymysql.connect(host=mysql["host"], port=mysql["port"], user=mysql["admin_user"],
                           password=mysql["admin_password"], database=database, autocommit=True,
                           charset="utf8mb4")


def create_bench_table(cur, db: str) -> None:
    """The run's database ``db`` with ``TABLE`` in it, made the cursor's current database."""
    cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    cur.execute(f"USE `{db}`")
    cur.execute(TABLE_DDL)


def bench_server_id() -> int:
    """A replication server id for one binlog client of a run."""
    return 7000 + uuid.uuid4().int % 1000


def bench_config(info: StackInfo, prefix: str, db: str):
    """The stack's configuration for one run: topics and producer named ``prefix``, only
    ``db`` captured, a server id of its own."""
    cfg = load_config(info.config_path)
    cfg.kafka.topic_prefix = cfg.producer.name = prefix
    cfg.source.include_databases = [db]
    cfg.source.server_id = bench_server_id()
    cfg.sinks.delta.enabled = cfg.sinks.iceberg.enabled = False  # (cdc bench merge measures the lake by itself)
    return cfg


def make_backlog(info: StackInfo, cfg, db: str, events: int, console: Console) -> tuple[dict, int, int]:
    """The bench table of ``db`` made, ``cfg``'s producer set to start where it starts, and
    ``events`` row changes made on it: ``(the changes' counts, rows left, highest id)``."""
    with admin(info.mysql) as conn, conn.cursor() as cur:
        create_bench_table(cur, db)
        cfg.producer.startup.mode = "position"
        cfg.producer.startup.file, cfg.producer.startup.pos = current_position(conn)
        with console.status(f"making {events:,} row changes..."):
            changes = generate_changes(conn, events)
        cur.execute(f"SELECT COUNT(*), COALESCE(MAX(id), 0) FROM `{TABLE}`")
        live_rows, max_id = cur.fetchone()
    return changes, live_rows, max_id


def drop_bench_database(info: StackInfo, db: str, state_dir: Path, keep_running: bool, console: Console, *,
                        purge_binlogs: bool = False) -> None:
    """The end of a benchmark: its database dropped (best effort; with ``purge_binlogs``,
    unless the stack keeps running, the binlog files written so far too), the stack stopped
    unless kept."""
    try:
        with admin(info.mysql) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            if purge_binlogs and not keep_running:
                # Keep the bench datadir bounded: this run's binlog files go too.
                cur.execute("FLUSH BINARY LOGS")
                current = current_position(conn)[0]
                cur.execute("PURGE BINARY LOGS TO %s", (current,))
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        console.print(f"[yellow]cleanup:[/yellow] {exc}")
    if not keep_running:
        stack_down(Path(state_dir))


def topic_records(bootstrap: str, topic: str) -> int:
    """Offsets used in ``topic`` (all partitions), from the true end offsets: the number
    of records, unless transaction commit markers took offsets too (they do on Kafka), in
    which case the caller counts with a read_committed consumer."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        return 0
    ends = end_offsets(bootstrap, [(topic, p) for p in sorted(tmd.partitions)])
    return sum(end - low for low, end in ends.values())


def mean_value_bytes(bootstrap: str, topic: str, sample: int = 20_000) -> float:
    """The mean size of the values of the first ``sample`` records of ``topic`` (tombstones
    left out)."""
    n = size = 0
    for msg in read_topic(bootstrap, topic, timeout=60):
        value = msg.value()
        if value is not None:
            n, size = n + 1, size + len(value)
        if n >= sample:
            break
    return size / n if n else 0.0


# --- the references and the results ------------------------------------------------------------

def client_tool(mariadb: str, mysql: str) -> str:
    """The path of a client tool by its MariaDB name, else its MySQL name."""
    for name in (mariadb, mysql):
        path = shutil.which(name)
        if path:
            return path
    raise BenchError(f"neither {mariadb} nor {mysql} is installed (package mariadb-client)")


def timed_to_devnull(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``argv`` with its output thrown away: the seconds it took and the finished process
    (its stderr kept)."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        res = subprocess.run(argv, stdout=devnull, stderr=subprocess.PIPE, env=env)
    return time.perf_counter() - t0, res


def results_table(title: str, columns: Sequence[str], machine: dict[str, Any]) -> Table:
    """A results table captioned with the machine: the ``measure`` column left, the figures
    right."""
    table = Table(title=title, caption=machine_caption(machine))
    for col in columns:
        table.add_column(col, justify="left" if col == "measure" else "right")
    return table
