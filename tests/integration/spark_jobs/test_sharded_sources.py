"""Issue 15 end to end: four shards of one table on two MariaDB servers (two on the session
server, two on a server of the test's own), the same ids in every shard, under a write load
on every shard, a snapshot of every shard, and ``ADD COLUMN`` run shard by shard over time,
merged by the running merge job (one query per source) into one target; in both sharding DDL
modes the PostgreSQL and MySQL targets and the merged clean changelog end equal to the
union of the shards, and ``cdc verify --changelog`` says so shard by shard.

Pessimistic mode across sources: the rows a shard writes after its DDL wait (held) while a
shard of the other server has not run it, and the target has no new column until the last
shard ran it.  Optimistic mode: the target takes the column at the first shard's DDL."""

from __future__ import annotations

import io
import re
import threading
import time

import psycopg
import pytest
from rich.console import Console

from cdc.status import show_status
from contract.topics import clean_topic
from spark_jobs.merge_job import MergeJob, run_jobs
from spark_jobs.sharding.route_settings import RouteConfig
from tests.producer_helpers import ProducerThread, run_until_caught_up, start_at_current, wait_for
from tests.sink_helpers import apply_merged_clean, difference, mysql_sink_rows, pg_sink_rows
from tests.snapshot_helpers import WriteLoad, create_table, has_notification, snapshot, source_rows

KEY = ["__source", "__db", "__table", "id"]


def _target_columns(cfg, db: str, table: str) -> set[str]:
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (cfg.sinks.postgres.schema_name, f"{db}__{table}"))
        return {r[0] for r in cur.fetchall()}


def pg_rows_or_empty(cfg, db: str) -> dict:
    try:
        return pg_sink_rows(cfg, db, "orders", KEY)
    except psycopg.Error:  # not created yet
        return {}


@pytest.mark.parametrize("ddl,lakes,own_mysql", [("pessimistic", False, "mariadb"), ("optimistic", False, "mariadb"),
                                                  ("optimistic", True, "mariadb"), ("pessimistic", False, "mysql")],
                         ids=["pessimistic", "optimistic", "optimistic-lakes", "pessimistic-mysql"],
                         indirect=["own_mysql"])
def test_four_shards_on_two_servers_merge_into_one_target(stack, own_mysql, two_sources, unique, tmp_path, ddl, lakes):
    """With ``lakes`` the Delta and Iceberg sinks too: both sources' queries hand their batches to
    one committer per lake table, so no query fails or retries on the other's commits.  With
    ``own_mysql`` ``mysql`` the second server is MySQL 9.7: two shards on MariaDB and two on MySQL,
    the pessimistic DDL held across the two kinds of server."""
    cfg = two_sources
    with own_mysql.admin() as conn, conn.cursor() as cur:  # (the second server is the one asked for)
        cur.execute("SELECT @@version")
        assert ("MariaDB" in cur.fetchone()[0]) == (own_mysql.flavor == "mariadb")
    if lakes:
        cfg.sinks.delta.path = str(tmp_path / "lake" / "delta")
        cfg.sinks.iceberg.warehouse = str(tmp_path / "lake" / "iceberg")
        cfg.sinks.iceberg.catalog_name = unique("cat")
        cfg.sinks.delta.enabled = cfg.sinks.iceberg.enabled = True
        cfg.sinks.delta.commit_interval_s = cfg.sinks.iceberg.commit_interval_s = 2.0
    cfg.sinks.postgres.schema_name = unique("sinkpg")
    cfg.sinks.mysql.database = unique("sink")
    cfg.spark.master = "local[2]"
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    cfg.spark.trigger_interval_s = 0.5
    cfg.snapshot.chunk_size = 50
    east, west = cfg.sources
    base = unique("shop")
    shards = {east.name: [f"{base}_01", f"{base}_02"], west.name: [f"{base}_03", f"{base}_04"]}
    server = {east.name: stack.admin, west.name: own_mysql.admin}
    for name, dbs in shards.items():
        with server[name]() as conn:
            for db in dbs:
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
                create_table(conn, db, "orders", "single", 120)  # ids 0..119 in every shard
    east.include_databases, west.include_databases = shards[east.name], shards[west.name]
    cfg.routes = [RouteConfig(source=f"{re.escape(east.name)}|{re.escape(west.name)}",
                              schema=re.escape(base) + "_0[1-4]", table="orders", target=f"{base}.orders", ddl=ddl)]
    views = {name: cfg.for_source(name) for name in shards}
    for view in views.values():
        start_at_current(view)
    jobs = [MergeJob(cfg, c) for c in cfg.captured_sources()]
    outcome: dict = {}

    def merge() -> None:
        try:
            outcome["rc"] = run_jobs(jobs, max_restarts=0 if lakes else 3)  # (with the lakes: no restart at all)
        except BaseException as exc:  # noqa: BLE001 - what the test reports
            outcome["error"] = exc
    merger = threading.Thread(target=merge, daemon=True, name="merge")
    loads = [WriteLoad(server[name], db, "orders", "single", key_space=160, seed=i, pause_s=0.03)
             for i, (name, db) in enumerate((n, d) for n, dbs in shards.items() for d in dbs)]
    # The DDL shard by shard, alternating servers; the last shard's comes once the others' rows were seen.
    order = [(east.name, shards[east.name][0]), (west.name, shards[west.name][0]), (east.name, shards[east.name][1]),
             (west.name, shards[west.name][1])]
    try:
        with ProducerThread(views[east.name]), ProducerThread(views[west.name]):
            merger.start()
            for load in loads:
                load.start()
            try:
                wait_for(lambda: all(sum(ld.ops.values()) > 10 for ld in loads), what="writes running")
                sids = {name: snapshot(view, [f"{db}.orders" for db in shards[name]]) for name, view in views.items()}
                for i, (name, db) in enumerate(order):
                    if i == len(order) - 1:
                        # Every shard but this one ran the DDL and its rows reached the job.
                        if ddl == "pessimistic":
                            wait_for(lambda: any(j.held for j in jobs), timeout=180,
                                     what=f"rows held by the pessimistic route ({outcome})")
                            assert "coupon" not in _target_columns(cfg, base, "orders")
                        else:
                            wait_for(lambda: "coupon" in _target_columns(cfg, base, "orders"), timeout=180,
                                     what=f"the optimistic target taking the column at once ({outcome})")
                    with server[name]() as conn, conn.cursor() as cur:
                        cur.execute(f"ALTER TABLE `{db}`.orders ADD COLUMN coupon VARCHAR(20) NULL")
                        cur.execute(f"UPDATE `{db}`.orders SET coupon = %s WHERE MOD(id, 5) = 0", [f"c{i}"])
                        conn.commit()
                    time.sleep(1.0)
                for name, view in views.items():
                    wait_for(lambda v=view, n=name: has_notification(v, "COMPLETED", id=sids[n]), timeout=300,
                             what=f"the snapshot of {name} completed")
            finally:
                for load in loads:
                    load.stop()
        for view in views.values():
            run_until_caught_up(view)

        expected = {}
        for name, dbs in shards.items():
            for db in dbs:
                with server[name]() as conn:
                    rows = source_rows(conn, db, "orders", ["id"])
                for (i,), row in rows.items():
                    expected[(name, db, "orders", i)] = {"__source": name, "__db": db, "__table": "orders", **row}
        every = {d for dbs in shards.values() for d in dbs}
        assert len(expected) > 4 * 80 and {k[1] for k in expected} == every
        assert {k[1] for k, v in expected.items() if v["coupon"]} == every  # each shard's DDL and its values
        wait_for(lambda: "error" not in outcome and pg_rows_or_empty(cfg, base) == expected, timeout=300,
                 what=f"the PostgreSQL target equal to the union of the shards ({outcome})")
        wait_for(lambda: mysql_sink_rows(stack, cfg, base, "orders", KEY) == expected, timeout=120,
                 what="the MySQL target equal to the union of the shards")
        merged = clean_topic(cfg.kafka.topic_prefix, base, "orders")
        wait_for(lambda: apply_merged_clean(cfg, merged, KEY) == expected, timeout=120,
                 what="the merged clean changelog equal to the union of the shards",
                 state=lambda: difference(apply_merged_clean(cfg, merged, KEY), expected))
        assert all(j.held == 0 for j in jobs)
        if ddl == "pessimistic":
            assert max(j.held_peak for j in jobs) > 0

        # cdc verify --changelog: the merged targets and the merged clean changelog against the
        # union of the shards, shard by shard.
        from cdc.verify import verify
        report = verify(cfg, changelog=True)
        assert report.equal, report.to_dict()
        by = {t.table: t for t in report.tables}
        for name, dbs in shards.items():
            for db in dbs:
                tr = by[f"{name}/{db}.orders"]
                assert tr.target == f"{base}.orders"
                assert [r.sink for r in tr.results] == ["postgres", "mysql", *(["delta", "iceberg"] if lakes else []),
                                                        "changelog"]
                assert tr.source_rows == sum(1 for k in expected if k[1] == db)
    finally:
        for job in jobs:
            job.stop()
        merger.join(120)
        for name, dbs in shards.items():
            with server[name]() as conn, conn.cursor() as cur:
                for db in dbs:
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    assert outcome.get("rc") == 0, outcome
    if lakes:  # one committer per table: no lost race, no failed commit (and no query restarted: max_restarts 0)
        committers = jobs[0].lakes.committers
        assert all(j.lakes is jobs[0].lakes for j in jobs) and len(committers) == 2
        assert [(c.sink.lost_races, c.figures["failures"]) for c in committers] == [(0, 0), (0, 0)]
        for c in committers:  # the one committer committed both sources' batches, none twice
            marks = [pair for batches in c.sink.commit_marks(base, "orders") for pair in batches]
            assert {app.split("/")[1] for app, _ in marks} == set(shards) and len(marks) == len(set(marks)), marks


def test_rows_held_on_an_idle_source_are_released_by_the_other_sources_ddl(stack, own_mysql, two_sources, unique,
                                                                          tmp_path):
    """Pessimistic, one shard per server: east's shard runs ADD COLUMN and writes, its rows
    wait; then only west writes (its DDL).  East's query has no new record, yet it runs a
    batch (it wakes on west's schemas topic) and applies the rows it held."""
    cfg = two_sources
    cfg.sinks.postgres.schema_name = unique("sinkpg")
    cfg.sinks.mysql.database = unique("sink")
    cfg.spark.master = "local[2]"
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    east, west = cfg.sources
    base = unique("shop")
    a, b = f"{base}_01", f"{base}_02"
    server = {east.name: stack.admin, west.name: own_mysql.admin}
    east.include_databases, west.include_databases = [a], [b]
    cfg.routes = [RouteConfig(schema=re.escape(base) + "_0[12]", table="orders", target=f"{base}.orders",
                              ddl="pessimistic")]
    views = {east.name: cfg.for_source(east.name), west.name: cfg.for_source(west.name)}
    for view in views.values():
        start_at_current(view)

    def run(name: str, *statements: str) -> None:
        with server[name]() as conn, conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
            conn.commit()
        run_until_caught_up(views[name])

    def merge() -> list[MergeJob]:
        jobs = [MergeJob(cfg, c) for c in cfg.captured_sources()]
        assert run_jobs(jobs, available_now=True) == 0
        return jobs
    try:
        run(east.name, f"CREATE DATABASE `{a}`", f"CREATE TABLE `{a}`.orders (id INT PRIMARY KEY, qty INT)",
            f"INSERT INTO `{a}`.orders VALUES (1, 1), (2, 2)")
        run(west.name, f"CREATE DATABASE `{b}`", f"CREATE TABLE `{b}`.orders (id INT PRIMARY KEY, qty INT)",
            f"INSERT INTO `{b}`.orders VALUES (1, 10)")
        merge()
        assert len(pg_rows_or_empty(cfg, base)) == 3
        run(east.name, f"ALTER TABLE `{a}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
            f"INSERT INTO `{a}`.orders VALUES (3, 3, 'a3')", f"UPDATE `{a}`.orders SET qty = 9 WHERE id = 1")
        jobs = merge()
        assert jobs[0].held == 2 and jobs[1].held == 0
        rows = pg_rows_or_empty(cfg, base)
        assert (east.name, a, "orders", 3) not in rows and rows[(east.name, a, "orders", 1)]["qty"] == 1
        assert "coupon" not in _target_columns(cfg, base, "orders")
        # cdc status: each source's merge query, with the records east's holds
        out = io.StringIO()
        show_status(cfg, Console(file=out, width=200))
        text = out.getvalue()
        assert f"merge job of source {east.name}" in text and f"merge job of source {west.name}" in text
        assert "2 record(s) of pessimistic routes wait" in text
        # west runs the DDL: a schema on west's schemas topic; east writes nothing more
        run(west.name, f"ALTER TABLE `{b}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
            f"INSERT INTO `{b}`.orders VALUES (2, 20, 'b2')")
        jobs = merge()
        assert jobs[0].batches >= 1 and jobs[0].held == 0
        expected = {}
        for name, db in ((east.name, a), (west.name, b)):
            with server[name]() as conn:
                for (i,), row in source_rows(conn, db, "orders", ["id"]).items():
                    expected[(name, db, "orders", i)] = {"__source": name, "__db": db, "__table": "orders", **row}
        assert expected[(east.name, a, "orders", 3)]["coupon"] == "a3"
        assert pg_rows_or_empty(cfg, base) == expected
        assert mysql_sink_rows(stack, cfg, base, "orders", KEY) == expected
        assert apply_merged_clean(cfg, clean_topic(cfg.kafka.topic_prefix, base, "orders"), KEY) == expected
    finally:
        for name, db in ((east.name, a), (west.name, b)):
            with server[name]() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
