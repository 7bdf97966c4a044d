"""``cdc demo --shards`` (``make demo-shards``): sharded sources merged into one table.

1. the stack starts with two source servers (``cdc stack up --sources 2``: ``east`` and
   ``west``); four shards of one table, ``shop_01.orders`` and ``shop_02.orders`` on east,
   ``shop_03.orders`` and ``shop_04.orders`` on west, hold the same ids (rows that exist
   before the producers start, so only a snapshot brings them);
2. a producer per source streams its server's binlog, and the Spark merge job (one query
   per source) routes the four shards into one target ``shop.orders`` with the origin
   columns ``__source, __db, __table`` in its key, and a column mapping (TiDB DM's
   extract-source / extract-schema): ``region`` is the source's name, ``shard`` the digits of
   the shard's database (``shop_(.*)``); DDL coordination ``--ddl`` (pessimistic, TiDB DM's
   default, or optimistic);
3. a write load runs on every shard, a snapshot of each source's shards is triggered by a
   signal row on each server, and ``ALTER TABLE ... ADD COLUMN coupon`` runs shard by shard,
   a few seconds apart: pessimistic, the rows of the shards that ran it wait until the last
   shard runs it (the target has no ``coupon`` until then); optimistic, the target takes it
   at the first shard's DDL;
4. the writes stop, everything drains, and ``cdc verify`` compares the merged PostgreSQL and
   MySQL targets with the union of the shards, shard by shard, each shard's rows found by
   its origin and mapped values (shown: ``column mapping: east/shop_01.orders -> shop.orders:
   region='east', shard='01'``).  Exit code 0 only when equal.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rich.console import Console

from cdc.demo import admin_connection, leave_stack, start_producer, stop_producer
from cdc.progress import NotificationFollower
from cdc.stack.manager import stack_sources_config, stack_up
from cdc.verify import print_report, verify
from cdc.workload import WriteLoad, create_table
from spark_jobs.merge_job import MergeJob, run_jobs
from spark_jobs.sharding.route_settings import RouteConfig

console = Console()

#: Rows per shard (ids 0 .. ROWS-1 in every shard: the keys overlap).
ROWS = 20_000

#: The shard databases of ``shop.orders`` on each source server (the compose profile
#: ``shards`` creates the same: docker/mysql/shards/, checked by tests/test_compose.py).
SHARDS = {"east": ["shop_01", "shop_02"], "west": ["shop_03", "shop_04"]}


def shards_route(ddl: str = "pessimistic") -> RouteConfig:
    """The demo's route: the four shards into ``shop.orders``, origin columns on, and a column
    mapping: ``region`` is the source's name, ``shard`` the digits of the database name."""
    return RouteConfig(source="east|west", schema="shop_0[1-4]", table="orders", target="shop.orders", ddl=ddl,
                       extract_source={"regexp": "(.*)", "column": "region"},
                       extract_schema={"regexp": "shop_(.*)", "column": "shard"})


def _target_columns(cfg) -> list[str]:
    import psycopg
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                    "ORDER BY ordinal_position", (cfg.sinks.postgres.schema_name, "shop__orders"))
        return [r[0] for r in cur.fetchall()]


def run_shards_demo(state_dir: Path, ddl: str = "pessimistic", keep_running: bool = False, rows: int = ROWS) -> int:
    console.rule(f"[bold]MySQL CDC demo: four shards on two servers merged into one table (ddl: {ddl})")
    t_start = time.monotonic()
    with console.status("starting the embedded stack with two source servers, Kafka and PostgreSQL..."):
        info = stack_up(state_dir, sources=2)
    console.print(f"stack up in {info.state_dir} (config: {info.sources_config_path})")
    ok = True
    try:
        run = f"shards{int(time.time())}"
        cfg = _shards_config(info, run, ddl)
        servers = {"east": info.mysql, "west": info.sources[0]}
        _create_shards(servers, rows, ddl)
        views = {name: cfg.for_source(name) for name in SHARDS}
        producers = {name: start_producer(view) for name, view in views.items()}
        for name, (_, _, (file, pos)) in producers.items():
            console.print(f"producer {name} streaming from {file}:{pos} into {views[name].kafka.topic_prefix}.*")
        with console.status("starting the Spark merge job (local[2], a query per source)..."):
            from spark_jobs.spark_session import build_session
            jobs = [MergeJob(cfg, c) for c in cfg.captured_sources()]  # (first: the Kafka secrets' references)
            build_session(cfg.spark.master)
            merger = threading.Thread(target=run_jobs, args=(jobs,), daemon=True, name="merge-job")
            merger.start()
        loads = [WriteLoad(lambda s=servers[name]: admin_connection(s), db, "orders", "single", key_space=rows + rows // 10,
                           seed=i, pause_s=0.005)
                 for i, (name, db) in enumerate((n, d) for n, dbs in SHARDS.items() for d in dbs)]
        for load in loads:
            load.start()
        console.print("write load running on every shard (inserts, updates, deletes, key changes, re-inserts)")
        followers = {name: NotificationFollower(view) for name, view in views.items()}
        sids = _signal_snapshots(views, servers, run)
        _alter_shard_by_shard(cfg, servers, jobs, merger, ddl)
        ok &= _follow_snapshots(followers, sids)
        for load in loads:
            load.stop(60)
        console.print(f"write load stopped after {sum(sum(ld.ops.values()) for ld in loads):,} statements")
        with console.status("the producers catch up..."):
            for name, (app, thread, _) in producers.items():
                snap = stop_producer(views[name], app, thread)
                console.print(f"producer {name}: {snap['events_total']:,} events written")
        _drain_merge_job(cfg, jobs, merger)
        with console.status("cdc verify: the merged targets against the union of the shards..."):
            report = verify(cfg)
        print_report(report, console)
        ok &= report.equal
        console.print(("[green]consistent[/green]: the merged targets equal the union of the four shards"
                       if report.equal else "[red]INCONSISTENT[/red]") + f" ({time.monotonic() - t_start:.0f}s)")
    finally:
        leave_stack(info, keep_running, console)
    return 0 if ok else 1


def _shards_config(info, run: str, ddl: str):
    """The stack's two-source configuration for this run: its own topics, sink schema and
    state, each source capturing its shards, and the demo's route."""
    cfg = stack_sources_config(info.data, info.state_dir)
    cfg.kafka.topic_prefix = run
    cfg.kafka.partitions = 2
    cfg.sinks.postgres.schema_name = run
    cfg.sinks.mysql.database = f"cdc_sink_{run}"
    cfg.state_dir = str(info.state_dir / run)
    cfg.spark.checkpoint_dir = str(info.state_dir / run / "checkpoints")
    cfg.spark.master = "local[2]"
    for entry in cfg.sources:
        entry.include_databases = SHARDS[entry.name]
    cfg.routes = [shards_route(ddl)]
    return cfg


def _create_shards(servers: dict, rows: int, ddl: str) -> None:
    """The four shard databases, each with ``rows`` rows of ``orders`` (the same ids in each)."""
    with console.status("four shards of shop.orders (the same ids in each)..."):
        for name, dbs in SHARDS.items():
            with admin_connection(servers[name]) as conn:
                for db in dbs:
                    with conn.cursor() as cur:
                        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
                    create_table(conn, db, "orders", "single", rows)
    console.print(f"shards: {', '.join(f'{n}/{db}.orders' for n, dbs in SHARDS.items() for db in dbs)}, "
                  f"{rows:,} rows each (ids 0..{rows - 1})")
    console.print("route: [bold]east|west / shop_0[1-4] / orders -> shop.orders[/bold] (origin columns "
                  f"__source, __db, __table in the key; ddl: {ddl}); column mapping: region from the source "
                  "name '(.*)', shard from the database 'shop_(.*)'")


def _signal_snapshots(views: dict, servers: dict, run: str) -> dict[str, str]:
    """A snapshot of each source's shards, asked by a signal row on its server; the signals' ids."""
    sids = {}
    for name, view in views.items():
        sids[name] = f"{run}-{name}"
        tables = ", ".join(f'"{db}.orders"' for db in SHARDS[name])
        sql = (f"INSERT INTO {view.source.signal_table} (id, type, data) VALUES ('{sids[name]}', "
               f"'execute-snapshot', '{{\"data-collections\": [{tables}], \"type\": \"incremental\"}}')")
        console.print(f"[bold]signal on {name}:[/bold] {sql}")
        with admin_connection(servers[name]) as conn, conn.cursor() as cur:
            cur.execute(sql)
    return sids


def _alter_shard_by_shard(cfg, servers: dict, jobs: list, merger: threading.Thread, ddl: str) -> None:
    """Once the first rows reach the target, ``ADD COLUMN coupon`` on one shard after another,
    each after the job has seen the previous one's DDL (pessimistic: rows held; optimistic:
    the column in the target)."""
    with console.status("the merge job's first rows reach the target..."):
        deadline = time.monotonic() + 300
        while not _target_columns(cfg) and time.monotonic() < deadline and merger.is_alive():
            time.sleep(0.5)
    order = [("east", "shop_01"), ("west", "shop_03"), ("east", "shop_02"), ("west", "shop_04")]
    for i, (name, db) in enumerate(order):
        if i:  # the job has seen the DDL: pessimistic, rows held; optimistic, the column in the target
            seen = (lambda: sum(j.held for j in jobs) > 0) if ddl == "pessimistic" else \
                (lambda: "coupon" in _target_columns(cfg))
            deadline = time.monotonic() + 120
            while not seen() and time.monotonic() < deadline and merger.is_alive():
                time.sleep(0.5)
        time.sleep(2.0)
        console.print(f"target columns: {', '.join(_target_columns(cfg)) or '(not created yet)'}; records held until "
                      f"every shard ran the DDL: {sum(j.held for j in jobs)}")
        with admin_connection(servers[name]) as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE `{db}`.orders ADD COLUMN coupon VARCHAR(20) NULL")
            cur.execute(f"UPDATE `{db}`.orders SET coupon = %s WHERE MOD(id, 50) = 0", (f"c{i + 1}",))
        console.print(f"[bold]{name}/{db}:[/bold] ALTER TABLE orders ADD COLUMN coupon VARCHAR(20) NULL")


def _follow_snapshots(followers: dict, sids: dict[str, str]) -> bool:
    """Follow each source's snapshot to its end; False when one was refused or left a shard out."""
    ok = True
    for name, follower in followers.items():
        result = follower.follow(console, sids[name], timeout=600)
        follower.close()
        if result.refused or len(result.done) < len(SHARDS[name]):
            console.print(f"[red]the snapshot of {name} did not complete[/red]: {result}")
            ok = False
    return ok


def _drain_merge_job(cfg, jobs: list, merger: threading.Thread) -> None:
    """Stop the streaming merge job, run it once more to the end of the topics, and report its totals."""
    with console.status("the merge job drains what is left..."):
        for job in jobs:
            job.stop()
        merger.join(120)
        drain = [MergeJob(cfg, c) for c in cfg.captured_sources()]
        run_jobs(drain, available_now=True)
    console.print(f"merge job: {sum(j.totals['input'] for j in jobs + drain):,} records, "
                  f"{sum(j.totals['dropped'] for j in jobs + drain):,} chunk rows dropped by the DBLog rule, most "
                  f"records held at once by the pessimistic route: {max(j.held_peak for j in jobs + drain):,}")
    console.print(f"target columns: {', '.join(_target_columns(cfg))}")
