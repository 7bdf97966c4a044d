"""``cdc demo`` (``make demo``): the pipeline on demo data on the embedded stack.

1. the stack starts and the demo schema is loaded: 220k rows over three tables (single,
   composite and string primary keys) that exist *before* the producer starts, so only
   a snapshot can bring them;
2. the producer streams from the current binlog position, the Spark merge job runs,
   and a write load (updates, deletes, re-inserts) runs against all three tables;
3. a snapshot of the three tables is triggered by inserting a signal row, with a
   progress bar per table;
4. the writes stop, the producer and the merge job drain, and ``cdc verify`` compares
   each source table with its PostgreSQL sink, its MySQL sink and its clean changelog
   topic (row counts and checksums per key chunk, then row by row where they differ).
   Exit code 0 only when all are equal.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from importlib.resources import files
from pathlib import Path

from rich.console import Console

from cdc.pipeline_run import lake_of_run
from cdc.progress import NotificationFollower
from cdc.stack.manager import StackInfo, grant_topic_prefix, stack_down, stack_up
from cdc.stack.mysql_server import server_connect
from cdc.verify import print_report, verify
from cdc.workload import BackgroundWriter
from common.config import load_config
from common.sql.sessions import connect
from producer.app import ProducerApp
from producer.binlog.server import current_position
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import lake_conf

console = Console()

DEMO_ROWS = {"customers": 80_000, "order_lines": 80_000, "products": 60_000}


def _admin(info: StackInfo, database: str | None = None):
    return admin_connection(info.mysql, database)


def admin_connection(server: dict, database: str | None = None):
    """An admin connection (autocommit) to a source server of the stack (its stack.json record;
    over TLS on a secure stack)."""
    return server_connect(server, database=database, autocommit=True, charset="utf8mb4")


def start_producer(cfg) -> tuple[ProducerApp, threading.Thread, tuple[str, int]]:
    """A producer of ``cfg`` (one source) streaming from its server's current binlog end, in a thread."""
    conn = connect(cfg.source)
    file, pos = current_position(conn)
    conn.close()
    cfg.producer.startup.mode, cfg.producer.startup.file, cfg.producer.startup.pos = "position", file, pos
    app = ProducerApp(cfg)
    thread = threading.Thread(target=app.run, daemon=True, name=f"producer-{cfg.producer.name}")
    thread.start()
    return app, thread, (file, pos)


def stop_producer(cfg, app: ProducerApp, thread: threading.Thread, timeout: float = 300) -> dict:
    """Let the producer catch up with its server's binlog end, stop it; its figures."""
    conn = connect(cfg.source)
    end = current_position(conn)
    conn.close()
    deadline = time.monotonic() + timeout
    while (app.metrics.last_commit_file, app.metrics.last_commit_pos) < end \
            and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.5)
    snap = app.metrics.snapshot()
    app.stop()
    thread.join(60)
    return snap


def load_demo_data(info: StackInfo, rows: dict[str, int] = DEMO_ROWS, seed: int = 7) -> dict[str, int]:
    """Create the demo schema and fill it (idempotent: tables are emptied first)."""
    rnd = random.Random(seed)
    with _admin(info) as conn, conn.cursor() as cur:
        for stmt in files("cdc").joinpath("demo_schema.sql").read_text().split(";"):
            if "CREATE" in stmt:
                cur.execute(stmt)
        for table in rows:
            cur.execute(f"TRUNCATE TABLE shop.{table}")
        batch = 5000
        for start in range(0, rows["customers"], batch):
            vals = [(i + 1, f"user{i + 1}@example.com", f"User {i + 1}", rnd.choice(["DE", "FR", "US", "JP", "BR"]),
                     round(rnd.uniform(0, 5000), 2)) for i in range(start, min(start + batch, rows["customers"]))]
            cur.executemany("INSERT INTO shop.customers (id, email, name, country, balance) VALUES (%s,%s,%s,%s,%s)", vals)
        n_orders = rows["order_lines"] // 4
        lines = [(o, ln) for o in range(1, n_orders + 1) for ln in range(1, 5)][: rows["order_lines"]]
        for start in range(0, len(lines), batch):
            vals = [(o, ln, f"SKU-{rnd.randrange(rows['products']):06d}", rnd.randint(1, 9),
                     round(rnd.uniform(1, 300), 2)) for o, ln in lines[start:start + batch]]
            cur.executemany("INSERT INTO shop.order_lines VALUES (%s,%s,%s,%s,%s)", vals)
        for start in range(0, rows["products"], batch):
            vals = [(f"SKU-{i:06d}", f"Product {i} \N{SPARKLES}", f'["tag{i % 7}"]', rnd.randint(0, 500))
                    for i in range(start, min(start + batch, rows["products"]))]
            cur.executemany("INSERT INTO shop.products (sku, title, tags, stock) VALUES (%s,%s,%s,%s)", vals)
        counts = {}
        for table in rows:
            cur.execute(f"SELECT COUNT(*) FROM shop.{table}")
            counts[table] = cur.fetchone()[0]
    return counts


class _WriteLoad(BackgroundWriter):
    """Updates, deletes and re-inserts against the demo tables, in a thread, until stopped."""

    def __init__(self, info: StackInfo, seed: int = 11) -> None:
        super().__init__()
        self.info, self.rnd, self.done = info, random.Random(seed), 0

    def _run(self) -> None:
        rnd = self.rnd
        with _admin(self.info, "shop") as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                r = rnd.random()
                cid = rnd.randint(1, DEMO_ROWS["customers"])
                if r < 0.4:
                    cur.execute("UPDATE customers SET balance = balance + 1 WHERE id = %s", (cid,))
                elif r < 0.6:
                    cur.execute("UPDATE products SET stock = stock - 1 WHERE sku = %s",
                                (f"SKU-{rnd.randrange(DEMO_ROWS['products']):06d}",))
                elif r < 0.75:
                    cur.execute("DELETE FROM order_lines WHERE order_id = %s AND line_no = %s",
                                (rnd.randint(1, DEMO_ROWS["order_lines"] // 4), rnd.randint(1, 4)))
                elif r < 0.85:
                    cur.execute("INSERT INTO order_lines VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
                                "quantity = quantity + 1", (rnd.randint(1, DEMO_ROWS["order_lines"] // 4),
                                                            rnd.randint(1, 6), "SKU-000001", 1, 9.99))
                else:
                    cur.execute("REPLACE INTO customers (id, email, name, country, balance) VALUES (%s,%s,%s,%s,%s)",
                                (cid, f"again{self.done}@example.com", f"Again {self.done}", "NL", 1))
                self.done += 1
                time.sleep(0.002)


TABLES = ["shop.customers", "shop.order_lines", "shop.products"]


def run_demo(state_dir: Path, keep_running: bool = False, secure: bool = False, lake_engine: str = "spark",
             flavor: str | None = None) -> int:
    """The demo on the embedded stack in ``state_dir``; ``flavor``: its source server,
    ``mariadb`` or ``mysql`` (``cdc stack up --flavor``; None: as the stack has it)."""
    console.rule("[bold]MySQL CDC demo" + (" (secure: TLS and passwords everywhere)" if secure else ""))
    t_start = time.monotonic()
    with console.status("starting the embedded stack (MariaDB/MySQL, Kafka broker, PostgreSQL)..."):
        info = stack_up(state_dir, secure=secure, flavor=flavor)
    m = info.mysql
    console.print(f"stack up in {info.state_dir} (config: {info.config_path}; source: {m['flavor']} {m['version']})")
    ok = True
    try:
        run = f"demo{int(time.time())}"
        cfg = _demo_config(info, run, lake_engine)
        with console.status("loading the demo schema and data (before the producer starts)..."):
            t0 = time.monotonic()
            counts = load_demo_data(info)
        console.print(f"demo data: {sum(counts.values()):,} rows in {time.monotonic() - t0:.1f}s {counts}")

        app, producer, (file, pos) = start_producer(cfg)
        console.print(f"producer streaming from {file}:{pos} into {run}.shop.*")
        with console.status("starting the Spark merge job (local[2])..."):
            from spark_jobs.spark_session import build_session
            job = MergeJob(cfg)  # (first: it gives the Spark processes the Kafka secrets' references)
            build_session(cfg.spark.master, conf=lake_conf(cfg.sinks))
            merger = threading.Thread(target=job.run, daemon=True, name="merge-job")
            merger.start()
        console.print("merge job running: DBLog dedup into PostgreSQL, MySQL, Delta Lake, Iceberg (merged by "
                      f"{'Spark' if lake_engine == 'spark' else 'the driver'}) and the clean changelog topics")
        load = _WriteLoad(info)
        load.start()
        console.print("write load running (updates, deletes, re-inserts)")

        ok &= _snapshot_demo_tables(cfg, info, run)
        load.stop(60)
        writes = load.done
        console.print(f"write load stopped after {writes:,} statements")
        with console.status("the producer catches up..."):
            snap = stop_producer(cfg, app, producer)
        console.print(f"producer: {snap['events_total']:,} events written, position {snap['file']}:{snap['pos']}")
        drain = _drain_merge_job(cfg, job, merger)
        with console.status("cdc verify: every source table against its sinks and clean changelog..."):
            report = verify(cfg, TABLES, changelog=True)
        print_report(report, console)
        consistent = report.equal
        ok &= consistent
        console.print(("[green]consistent[/green]: every sink equals its source table"
                       if consistent else "[red]INCONSISTENT[/red]") + f" ({time.monotonic() - t_start:.0f}s)")
        job.close()
        drain.close()
    finally:
        leave_stack(info, keep_running, console)
    return 0 if ok else 1


def _demo_config(info: StackInfo, run: str, lake_engine: str):
    """The stack's configuration for this run: its own topics (granted on a secure stack),
    sink schema and database, lake tables and state; the lakes merged by ``lake_engine``."""
    cfg = load_config(info.config_path)
    cfg.kafka.topic_prefix = cfg.producer.name = run
    grant_topic_prefix(info.state_dir, run)  # (a secure stack's ACLs are per topic prefix)
    cfg.kafka.partitions = 2
    cfg.source.include_databases = ["shop"]
    cfg.sinks.postgres.schema_name = run
    cfg.sinks.mysql.database = f"cdc_sink_{run}"
    lake_of_run(cfg, info.state_dir / run, run)
    cfg.sinks.delta.engine = cfg.sinks.iceberg.engine = lake_engine  # (spark: the executors merge the lake)
    cfg.state_dir = str(info.state_dir / run)
    cfg.spark.checkpoint_dir = str(info.state_dir / run / "checkpoints")
    cfg.spark.master = "local[2]"
    return cfg


def _snapshot_demo_tables(cfg, info: StackInfo, run: str) -> bool:
    """An incremental snapshot of the demo's tables, asked by a signal row and followed to its
    end; False when it was refused or left a table out."""
    follower = NotificationFollower(cfg)
    with _admin(info) as conn, conn.cursor() as cur:
        sql = ("INSERT INTO cdc_control.cdc_signal (id, type, data) VALUES "
               f"('{run}', 'execute-snapshot', '{{\"data-collections\": [\"shop.customers\", "
               f"\"shop.order_lines\", \"shop.products\"], \"type\": \"incremental\"}}')")
        console.print(f"[bold]signal:[/bold] {sql}")
        cur.execute(sql)
    result = follower.follow(console, run, timeout=600)
    follower.close()
    if result.refused or len(result.done) < len(TABLES):
        console.print(f"[red]the snapshot did not complete[/red]: {result}")
        return False
    return True


def _drain_merge_job(cfg, job: MergeJob, merger: threading.Thread) -> MergeJob:
    """Stop the streaming merge job, run one to the end of the topics, report their totals;
    returns the draining job (to close)."""
    with console.status("the merge job drains what is left..."):
        job.stop()
        merger.join(120)
        drain = MergeJob(cfg)
        drain.run(available_now=True)
    console.print(f"merge job: {job.totals['input'] + drain.totals['input']:,} records, "
                  f"{job.totals['dropped'] + drain.totals['dropped']:,} chunk rows dropped by the DBLog rule, "
                  f"{job.totals['dead'] + drain.totals['dead']} dead letters")
    return drain


def leave_stack(info: StackInfo, keep_running: bool, console: Console) -> None:
    """At a demo's end: stop the stack it started (and first the Spark session, whose workers
    keep Kafka clients), or say how to."""
    from spark_jobs.spark_session import stop_session
    if keep_running:
        console.print(f"stack left running: stop it with 'cdc stack down --state-dir {info.state_dir}'")
    else:
        stop_session()
        gc.collect()  # (clients the finished jobs held: their handles closed before the broker stops)
        stack_down(info.state_dir)
        console.print("stack stopped")
