"""Table routing in the merge job (issue 15, docs/sharding.md) on the real stack: four shard
databases of the session MariaDB server (the same ids in every shard) routed into one
target; the merged PostgreSQL and MySQL targets must equal the union of the shards, each
row with its origin values; an incompatible route is refused at start and a conflicting
DDL stops the job."""

from __future__ import annotations

import re
import threading
import time

import pytest

from contract.topics import clean_topic
from spark_jobs.errors import IncompatibleShards
from spark_jobs.merge_job import MergeJob
from spark_jobs.sharding.route_settings import RouteConfig
from tests.producer_helpers import (
    ProducerThread,
    run_until_caught_up,
    start_at_current,
    wait_for,
)
from tests.sink_helpers import apply_merged_clean, mysql_sink_rows, pg_sink_rows
from tests.snapshot_helpers import WriteLoad, create_table, has_notification, snapshot, source_rows

ORIGIN = ["__source", "__db", "__table"]
KEY = [*ORIGIN, "id"]


@pytest.fixture
def shards(stack, test_db):
    """Four shard databases ``<test_db>_01`` .. ``_04``, dropped afterwards."""
    names = [f"{test_db}_0{i}" for i in range(1, 5)]
    with stack.admin() as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield names
    with stack.admin() as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _route(cfg, test_db, shards, ddl="optimistic"):
    cfg.source.include_databases = list(shards)
    cfg.routes = [RouteConfig(schema=re.escape(test_db) + "_0[1-4]", table="orders", target=f"{test_db}.orders",
                              ddl=ddl)]


def _union(stack, cfg, shards) -> dict:
    """The shards' rows, each with its origin values, by the target's key."""
    expected = {}
    for db in shards:
        with stack.admin() as conn:
            rows = source_rows(conn, db, "orders", ["id"])
        for (i,), row in rows.items():
            expected[(cfg.producer.name, db, "orders", i)] = {"__source": cfg.producer.name, "__db": db,
                                                              "__table": "orders", **row}
    return expected


def _small_shards(stack, cfg, test_db, dbs, values: str, ddl: str = "optimistic") -> None:
    """``orders (id INT PRIMARY KEY, qty INT)`` in each of ``dbs`` with ``values``, routed
    into ``<test_db>.orders``, captured from the binlog (no snapshot)."""
    _route(cfg, test_db, dbs, ddl=ddl)
    start_at_current(cfg)
    with stack.admin() as conn, conn.cursor() as cur:
        for db in dbs:
            cur.execute(f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, qty INT)")
            cur.execute(f"INSERT INTO `{db}`.orders VALUES {values}")
        conn.commit()
    run_until_caught_up(cfg)


def _assert_merged(stack, cfg, test_db, expected: dict) -> None:
    """Both sinks' target and the merged clean changelog equal ``expected``."""
    assert pg_sink_rows(cfg, test_db, "orders", KEY) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "orders", KEY) == expected
    assert apply_merged_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, "orders"), KEY) == expected


def _run_sql_and_merge(stack, cfg, *statements: str, refused: type[Exception] | None = None):
    """Run ``statements`` on the source, stream them, run the merge job over what is there;
    ``refused``: the error the job must stop with (its ``pytest.raises`` info returned)."""
    with stack.admin() as conn, conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt)
        conn.commit()
    run_until_caught_up(cfg)
    if refused is None:
        assert MergeJob(cfg).run(available_now=True) == 0
        return None
    with pytest.raises(refused) as err:
        MergeJob(cfg).run(available_now=True)
    return err


def test_four_shards_merge_into_one_target_under_load_with_add_column_shard_by_shard(stack, merge_config, test_db,
                                                                                     shards):
    cfg = merge_config
    _route(cfg, test_db, shards)
    with stack.admin() as conn:
        for db in shards:
            create_table(conn, db, "orders", "single", 150)  # ids 0..149 in every shard
    cfg.snapshot.chunk_size = 80
    start_at_current(cfg)
    loads = [WriteLoad(stack.admin, db, "orders", "single", key_space=200, seed=i, pause_s=0.02)
             for i, db in enumerate(shards)]
    with ProducerThread(cfg):
        for load in loads:
            load.start()
        try:
            wait_for(lambda: all(sum(ld.ops.values()) > 20 for ld in loads), what="writes running")
            sid = snapshot(cfg, [f"{db}.orders" for db in shards])
            # ADD COLUMN shard by shard while the writes and the snapshot run; the last shard
            # never gets it (its rows write NULL into the target's column).
            for i, db in enumerate(shards[:3]):
                with stack.admin() as conn, conn.cursor() as cur:
                    cur.execute(f"ALTER TABLE `{db}`.orders ADD COLUMN coupon VARCHAR(20) NULL")
                    cur.execute(f"UPDATE `{db}`.orders SET coupon = %s WHERE id %% 5 = 0", [f"c{i}"])
                    conn.commit()
                time.sleep(1.0)
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=300, what="snapshot completed")
        finally:
            for load in loads:
                load.stop()
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0

    expected = _union(stack, cfg, shards)
    assert {k[1] for k in expected} == set(shards) and len(expected) > 4 * 100
    assert all(expected[k].get("coupon") is None for k in expected if k[1] == shards[3])
    for v in (v for k, v in expected.items() if k[1] == shards[3]):
        v["coupon"] = None  # the target has the column; that shard writes NULL
    assert any(v["coupon"] == "c0" for v in expected.values())
    # both sinks, and the merged clean changelog: one topic, keyed by the target's key, no copy per shard
    _assert_merged(stack, cfg, test_db, expected)
    # a second run changes nothing (the checkpoint holds, nothing is written twice)
    assert MergeJob(cfg).run(available_now=True) == 0
    assert apply_merged_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, "orders"), KEY) == expected
    # TRUNCATE of one shard: its rows leave the target (by their origin values), the others stay
    _run_sql_and_merge(
        stack, cfg,
        f"TRUNCATE TABLE `{shards[1]}`.orders",
        f"INSERT INTO `{shards[1]}`.orders (id, v, n) VALUES (1, 'after truncate', 1)",
    )
    expected = {k: v for k, v in expected.items() if k[1] != shards[1]}
    expected[(cfg.producer.name, shards[1], "orders", 1)] = {
        "__source": cfg.producer.name, "__db": shards[1], "__table": "orders", "id": 1, "v": "after truncate",
        "n": 1, "coupon": None}
    assert pg_sink_rows(cfg, test_db, "orders", KEY) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "orders", KEY) == expected
    # the shards' own sink tables and clean topics are not made
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.client}).list_topics(
        timeout=15).topics
    assert clean_topic(cfg.kafka.topic_prefix, test_db, "orders") in topics
    assert clean_topic(cfg.kafka.topic_prefix, shards[0], "orders") not in topics
    with pytest.raises(Exception):
        pg_sink_rows(cfg, shards[0], "orders", ["id"])


def test_incompatible_route_is_refused_at_start_naming_both_tables(stack, merge_config, test_db, shards):
    cfg = merge_config
    _route(cfg, test_db, shards[:2])
    start_at_current(cfg)
    err = _run_sql_and_merge(
        stack, cfg,
        f"CREATE TABLE `{shards[0]}`.orders (id INT PRIMARY KEY, qty INT)",
        f"CREATE TABLE `{shards[1]}`.orders (id INT PRIMARY KEY, qty VARCHAR(10))",
        f"INSERT INTO `{shards[0]}`.orders VALUES (1, 5)",
        f"INSERT INTO `{shards[1]}`.orders VALUES (1, 'five')",
        refused=IncompatibleShards)
    text = str(err.value)
    assert f"{shards[0]}.orders" in text and f"{shards[1]}.orders" in text and test_db + ".orders" in text


def test_column_mapping_fills_the_targets_columns_from_the_shards_names(stack, merge_config, test_db, shards):
    """Column mapping (TiDB DM's extract-source / extract-schema): with the origin columns
    off, ``region`` (the source's name) and ``shard`` (from the database name) lead the
    target's key and keep the shards' equal ids apart, in both sinks and the merged clean
    changelog; a TRUNCATE of one shard deletes its rows by those values; ``cdc verify``
    compares each shard by them and shows them."""
    from cdc.verify import verify
    cfg = merge_config
    dbs = shards[:3]
    _small_shards(stack, cfg, test_db, dbs, "(1, 10), (2, 20)")
    cfg.routes = [RouteConfig(schema=re.escape(test_db) + "_0[1-4]", table="orders", target=f"{test_db}.orders",
                              ddl="optimistic", origin={"enabled": False},
                              extract_source={"regexp": "(.*)", "column": "region"},
                              extract_schema={"regexp": re.escape(test_db) + "_(0[1-4])", "column": "shard"})]
    key = ["region", "shard", "id"]
    _run_sql_and_merge(stack, cfg, f"UPDATE `{dbs[0]}`.orders SET qty = 11 WHERE id = 1",
                       f"DELETE FROM `{dbs[2]}`.orders WHERE id = 2")
    name = cfg.producer.name

    def expected_of(rows: dict) -> dict:
        return {(name, db[-2:], i): {"region": name, "shard": db[-2:], "id": i, "qty": qty}
                for (db, i), qty in rows.items()}
    rows = {(db, i): i * 10 for db in dbs for i in (1, 2)}
    rows[(dbs[0], 1)] = 11
    del rows[(dbs[2], 2)]
    expected = expected_of(rows)
    assert pg_sink_rows(cfg, test_db, "orders", key) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "orders", key) == expected
    topic = clean_topic(cfg.kafka.topic_prefix, test_db, "orders")
    assert apply_merged_clean(cfg, topic, key, origin=False) == expected
    # a shard's TRUNCATE: its rows leave the target, found by their extracted values
    _run_sql_and_merge(stack, cfg, f"TRUNCATE TABLE `{dbs[1]}`.orders", f"INSERT INTO `{dbs[1]}`.orders VALUES (7, 70)")
    rows = {k: v for k, v in rows.items() if k[0] != dbs[1]}
    rows[(dbs[1], 7)] = 70
    expected = expected_of(rows)
    assert pg_sink_rows(cfg, test_db, "orders", key) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "orders", key) == expected
    report = verify(cfg, [f"{test_db}.orders"], changelog=True)
    shard_reports = [t for t in report.tables if t.table.startswith(f"{name}/")]
    assert sorted(t.mapped["shard"] for t in shard_reports) == ["01", "02", "03"]
    assert all(t.mapped["region"] == name for t in shard_reports)
    assert report.equal and all(r.equal for t in shard_reports for r in t.results), report.to_dict()
    assert {r.sink for t in shard_reports for r in t.results} == {"postgres", "mysql", "changelog"}


def test_a_shard_the_column_mapping_does_not_match_is_refused_at_start(stack, merge_config, test_db, shards):
    """A routed shard whose database the column mapping's regexp does not match has no
    value for the column: the job refuses to start, naming the shard, the rule and the
    column; nothing reaches the target."""
    from spark_jobs.errors import ColumnMappingMismatch
    cfg = merge_config
    dbs = shards[:3]
    _route(cfg, test_db, dbs)
    cfg.routes[0].extract_schema = {"regexp": re.escape(test_db) + "_(0[12])", "column": "shard"}
    start_at_current(cfg)
    err = _run_sql_and_merge(stack, cfg, *[f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, qty INT)" for db in dbs],
                             *[f"INSERT INTO `{db}`.orders VALUES (1, 1)" for db in dbs], refused=ColumnMappingMismatch)
    text = str(err.value)
    assert f"{dbs[2]}.orders" in text and "routes[0].extract_schema" in text and "'shard'" in text, text
    assert "does not match the schema" in text
    assert pg_rows_or_empty(cfg, test_db) == {}


def test_pessimistic_rows_wait_until_every_shard_ran_the_ddl(stack, merge_config, test_db, shards):
    """ddl: pessimistic: shop_01 adds ``coupon``; its rows under the new schema wait (held in
    the partition's state) while shop_02's go on, and the target has no ``coupon``; once
    shop_02 adds it too the target takes the column and the held rows are applied (shop_01
    has no new record then: its partition gets a task of its own)."""
    cfg = merge_config
    a, b = shards[:2]
    _small_shards(stack, cfg, test_db, [a, b], "(1, 1), (2, 2), (3, 3)", ddl="pessimistic")
    assert MergeJob(cfg).run(available_now=True) == 0
    assert len(pg_rows_or_empty(cfg, test_db)) == 6
    _run_sql_and_merge(
        stack, cfg,
        f"ALTER TABLE `{a}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
        f"INSERT INTO `{a}`.orders VALUES (4, 4, 'a4')",
        f"UPDATE `{a}`.orders SET qty = 9 WHERE id = 1",
        f"INSERT INTO `{b}`.orders VALUES (4, 4)",
    )
    name = cfg.producer.name
    for rows in (pg_rows_or_empty(cfg, test_db), mysql_sink_rows(stack, cfg, test_db, "orders", KEY)):
        assert (name, b, "orders", 4) in rows and (name, a, "orders", 4) not in rows  # a's rows wait
        assert rows[(name, a, "orders", 1)]["qty"] == 1 and all("coupon" not in r for r in rows.values())
    _run_sql_and_merge(
        stack, cfg,
        f"ALTER TABLE `{b}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
        f"INSERT INTO `{b}`.orders VALUES (5, 5, 'b5')",
    )
    expected = _union(stack, cfg, [a, b])
    assert expected[(name, a, "orders", 4)]["coupon"] == "a4" and expected[(name, a, "orders", 1)]["qty"] == 9
    _assert_merged(stack, cfg, test_db, expected)


@pytest.mark.parametrize("action", ["force", "skip"])
def test_route_reset_ends_the_wait_for_a_shard_that_never_runs_the_ddl(stack, merge_config, test_db, shards,
                                                                       tmp_path, capsys, action):
    """ddl: pessimistic: shop_01 adds ``coupon`` and writes; shop_02 never will.  ``cdc route
    status`` shows the waiting version, what it adds, the held records and the shard they
    wait for; ``cdc route force`` makes the target take ``coupon`` (shop_02's rows NULL
    there), ``cdc route skip`` applies shop_01's rows without it; either way the held rows
    land once (both sinks and the merged clean changelog equal the shards, no copy in the
    changelog), and a second run changes nothing."""
    from cdc.cli import main
    from common.config import dump_config
    cfg = merge_config
    a, b = shards[:2]
    _small_shards(stack, cfg, test_db, [a, b], "(1, 1), (2, 2), (3, 3)", ddl="pessimistic")
    assert MergeJob(cfg).run(available_now=True) == 0
    _run_sql_and_merge(stack, cfg, f"ALTER TABLE `{a}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
                       f"INSERT INTO `{a}`.orders VALUES (4, 4, 'a4')", f"UPDATE `{a}`.orders SET qty = 9 WHERE id = 1",
                       f"INSERT INTO `{b}`.orders VALUES (4, 4)")
    name, target = cfg.producer.name, f"{test_db}.orders"
    assert (name, a, "orders", 4) not in pg_rows_or_empty(cfg, test_db)  # a's rows wait
    path = tmp_path / "cdc.yaml"
    path.write_text(dump_config(cfg))
    assert main(["-c", str(path), "route", "status", "--json"]) == 0
    import json
    [st] = json.loads(capsys.readouterr().out)
    [w] = st["waiting"]
    assert (st["route"], w["shard"], w["missing"], st["awaited"]) == (target, f"{name}/{a}.orders", ["coupon string"],
                                                                      [f"{name}/{b}.orders"])
    assert w["held"] == 2 and st["decisions"] == []  # the insert and the update of shard a
    assert main(["-c", str(path), "route", action, target, "--shard", f"{name}/{a}.orders"]) == 0
    assert f"{action}: {name}/{a}.orders schema {w['version']}" in " ".join(capsys.readouterr().out.split())
    assert MergeJob(cfg).run(available_now=True) == 0  # (the decision woke the query: a batch runs)

    expected = _union(stack, cfg, [a, b])
    for k, v in expected.items():
        if action == "force":
            v.setdefault("coupon", None)  # the target has it; shard b writes NULL
        else:
            v.pop("coupon", None)  # the target does not take it
    assert expected[(name, a, "orders", 1)]["qty"] == 9 and (name, a, "orders", 4) in expected
    _assert_merged(stack, cfg, test_db, expected)
    assert main(["-c", str(path), "route", "status", "--json"]) == 0
    [st] = json.loads(capsys.readouterr().out)
    assert st["waiting"] == [] and st["decisions"] == [{"shard": f"{name}/{a}.orders", "version": w["version"],
                                                         "action": action}]
    # nothing to decide any more; a second run applies nothing again
    assert main(["-c", str(path), "route", action, target]) == 1
    assert "no waiting schema version" in capsys.readouterr().err
    assert MergeJob(cfg).run(available_now=True) == 0
    _assert_merged(stack, cfg, test_db, expected)


def test_conflicting_ddl_stops_the_running_job(stack, merge_config, test_db, shards):
    cfg = merge_config
    _small_shards(stack, cfg, test_db, shards[:2], "(1, 5), (2, 6)")
    job = MergeJob(cfg)
    outcome: dict = {}

    def run():
        try:
            outcome["rc"] = job.run(max_restarts=3)
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            outcome["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(pg_rows_or_empty(cfg, test_db)) == 4, timeout=180, what="the first rows merged")
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE `{shards[0]}`.orders ADD COLUMN coupon VARCHAR(20) NULL")
            cur.execute(f"ALTER TABLE `{shards[1]}`.orders ADD COLUMN coupon BIGINT NULL")
            cur.execute(f"INSERT INTO `{shards[0]}`.orders VALUES (3, 7, 'x')")
            cur.execute(f"INSERT INTO `{shards[1]}`.orders VALUES (3, 7, 42)")
            conn.commit()
        run_until_caught_up(cfg)
        thread.join(240)
        assert not thread.is_alive(), "the job did not stop on the conflicting DDL"
    finally:
        job.stop()
        thread.join(60)
    err = outcome.get("error")
    assert isinstance(err, IncompatibleShards), outcome
    assert f"{shards[0]}.orders" in str(err) and f"{shards[1]}.orders" in str(err) and "coupon" in str(err)
    # nothing of the conflicting rows reached the target
    assert len(pg_rows_or_empty(cfg, test_db)) == 4


def pg_rows_or_empty(cfg, test_db) -> dict:
    try:
        return pg_sink_rows(cfg, test_db, "orders", KEY)
    except Exception:  # noqa: BLE001 - not created yet
        return {}


def _source_configs(cfg, groups: dict[str, list[str]]):
    """A configuration with ``sources`` (one per group of databases of the session server,
    prefix ``<kafka.topic_prefix>_<name>``), and each source's producer configuration (what
    ``cdc produce --source NAME`` runs: that source as ``source``, its prefix and name)."""
    from pathlib import Path

    from common.config import NamedSourceConfig, SourceConfig
    base = cfg.source.model_dump()
    multi = cfg.model_copy(deep=True)
    multi.source = SourceConfig()
    multi.sources = [NamedSourceConfig(**{**base, "include_databases": dbs, "server_id": base["server_id"] + 11 + i},
                                       name=name) for i, (name, dbs) in enumerate(groups.items())]
    producers = {}
    for c in multi.captured_sources():
        pc = cfg.model_copy(deep=True)
        pc.source = SourceConfig(**{k: v for k, v in c.config.model_dump().items()
                                    if k not in ("name", "topic_prefix")})
        pc.kafka.topic_prefix = c.topic_prefix
        pc.producer.name = c.producer_name
        pc.state_dir = str(Path(cfg.state_dir) / c.name)
        producers[c.name] = pc
    return multi, producers


def test_two_sources_each_with_its_shards_merge_into_one_target(stack, merge_config, test_db, shards):
    """Two sources (two producers, two topic prefixes, each with its markers and schemas) of
    two shards each, under load, snapshotted, one ADD COLUMN on each source: one query per
    source; the target holds the union with each row's source name."""
    from spark_jobs.merge_job import run_jobs
    from tests.snapshot_helpers import kafka_snapshot, stored_signal_offset
    cfg = merge_config
    _route(cfg, test_db, shards)
    cfg.snapshot.chunk_size = 60
    multi, producers = _source_configs(cfg, {"east": shards[:2], "west": shards[2:]})
    with stack.admin() as conn:
        for db in shards:
            create_table(conn, db, "orders", "single", 100)
    for pc in producers.values():
        start_at_current(pc)
    loads = [WriteLoad(stack.admin, db, "orders", "single", key_space=150, seed=i, pause_s=0.03)
             for i, db in enumerate(shards)]
    with ProducerThread(producers["east"]), ProducerThread(producers["west"]):
        for load in loads:
            load.start()
        try:
            wait_for(lambda: all(sum(ld.ops.values()) > 10 for ld in loads), what="writes running")
            # A producer acts on the signals sent once it reads its channel (a signal sent before
            # its first start is not its: test_signal_channel); its stored channel offset says so.
            for pc in producers.values():
                wait_for(lambda: stored_signal_offset(pc) is not None, timeout=60, what="the signal channel read")
            sids = {name: kafka_snapshot(pc, [f"{db}.orders" for db in pc.source.include_databases])
                    for name, pc in producers.items()}
            for db in (shards[0], shards[3]):
                with stack.admin() as conn, conn.cursor() as cur:
                    cur.execute(f"ALTER TABLE `{db}`.orders ADD COLUMN coupon VARCHAR(20) NULL")
                    cur.execute(f"UPDATE `{db}`.orders SET coupon = 'c' WHERE MOD(id, 3) = 0")
                    conn.commit()
                time.sleep(1.0)
            for name, pc in producers.items():
                wait_for(lambda: has_notification(pc, "COMPLETED", id=sids[name]), timeout=300,
                         what=f"snapshot of {name} completed")
        finally:
            for load in loads:
                load.stop()
    for pc in producers.values():
        run_until_caught_up(pc)
    assert run_jobs([MergeJob(multi, c) for c in multi.captured_sources()], available_now=True) == 0

    expected = {}
    for name, pc in producers.items():
        for db in pc.source.include_databases:
            with stack.admin() as conn:
                rows = source_rows(conn, db, "orders", ["id"])
            for (i,), row in rows.items():
                expected[(name, db, "orders", i)] = {"__source": name, "__db": db, "__table": "orders",
                                                     "coupon": None, **row}
    assert {k[0] for k in expected} == {"east", "west"} and any(v["coupon"] == "c" for v in expected.values())
    _assert_merged(stack, cfg, test_db, expected)


def test_conflict_hidden_by_a_dropped_column_stops_the_job(stack, merge_config, test_db, shards):
    """shop_01 adds ``coupon`` as text (the target takes it) and drops it; shop_02 then adds
    ``coupon`` as a number: the newest schemas merge, the shards' histories do not."""
    from spark_jobs.errors import ShardDDLConflict
    cfg = merge_config
    _small_shards(stack, cfg, test_db, shards[:2], "(1, 5)")
    _run_sql_and_merge(
        stack, cfg,
        f"ALTER TABLE `{shards[0]}`.orders ADD COLUMN coupon VARCHAR(20) NULL",
        f"INSERT INTO `{shards[0]}`.orders VALUES (2, 6, 'x')",
    )
    assert {k: v["coupon"] for k, v in pg_rows_or_empty(cfg, test_db).items()}[
        (cfg.producer.name, shards[0], "orders", 2)] == "x"
    err = _run_sql_and_merge(
        stack, cfg,
        f"ALTER TABLE `{shards[0]}`.orders DROP COLUMN coupon",
        f"INSERT INTO `{shards[0]}`.orders VALUES (3, 7)",  # (a schema is published at its first row)
        f"ALTER TABLE `{shards[1]}`.orders ADD COLUMN coupon BIGINT NULL",
        f"INSERT INTO `{shards[1]}`.orders VALUES (2, 6, 42)",
        refused=ShardDDLConflict)
    assert f"{shards[0]}.orders" in str(err.value) and f"{shards[1]}.orders" in str(err.value)
    assert len(pg_rows_or_empty(cfg, test_db)) == 3  # nothing of the batch was applied


def test_two_sources_same_unrouted_table_are_refused(stack, merge_config, test_db, shards):
    """Two sources both capturing shop_01.orders and no route: both would land in one sink
    table, keys colliding; the job refuses to start, naming both."""
    from spark_jobs.errors import RouteCollision
    from spark_jobs.merge_job import run_jobs
    cfg = merge_config
    multi, producers = _source_configs(cfg, {"east": shards[:1], "west": shards[:1]})
    with stack.admin() as conn:
        create_table(conn, shards[0], "orders", "single", 3)
    for pc in producers.values():
        start_at_current(pc)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{shards[0]}`.orders (id, v, n) VALUES (10, 'x', 1)")
        conn.commit()
    for pc in producers.values():
        run_until_caught_up(pc)
    with pytest.raises(RouteCollision) as err:
        run_jobs([MergeJob(multi, c) for c in multi.captured_sources()], available_now=True)
    assert f"east/{shards[0]}.orders" in str(err.value) and f"west/{shards[0]}.orders" in str(err.value)
