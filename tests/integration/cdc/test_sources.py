"""Several sources (issue 15): a producer per source server with its own topic prefix,
snapshots per source, ``cdc status`` per source, and ``cdc verify`` of a merged target."""

from __future__ import annotations

import io
import subprocess
import sys

import psycopg
import pymysql
import pytest
from confluent_kafka.admin import AdminClient
from rich.console import Console

from cdc.stack.manager import read_stack, stack_down, stack_status, stack_up
from cdc.stack.process import pid_alive
from cdc.verify import print_report, verify
from common.config import CDCConfig, load_config
from contract.topics import table_topic
from producer.offset_store import OffsetStore
from tests.producer_helpers import ROOT, ProducerProcess, read_events, wait_for


def _cli(path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _shard(conn, db: str, rows: list[tuple[int, int]]) -> None:
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, amount INT)")
        cur.executemany(f"INSERT INTO `{db}`.orders VALUES (%s, %s)", rows)


def _insert(conn, db: str, rows: list[tuple[int, int]]) -> None:
    with conn, conn.cursor() as cur:
        cur.executemany(f"INSERT INTO `{db}`.orders VALUES (%s, %s)", rows)


def _ops(view, db: str) -> dict[int, str]:
    """id -> the op of its last record on ``db.orders``'s topic of the source ``view``."""
    return {value["after"]["id"]: value["op"]
            for _, _, value in read_events(view, table_topic(view.kafka.topic_prefix, db, "orders"))}


@pytest.mark.parametrize("own_mysql", ["mariadb", "mysql"], indirect=True)  # (mysql: MariaDB east, MySQL west)
def test_a_producer_per_source_with_its_own_topics_snapshots_and_status(stack, own_mysql, two_sources, unique,
                                                                          tmp_path):
    cfg = two_sources
    east, west = (s.name for s in cfg.sources)
    db_e, db_w = unique("shop"), unique("shop")
    _shard(stack.admin(), db_e, [(1, 10), (2, 20)])
    _shard(own_mysql.admin(), db_w, [(1, 11), (7, 70)])  # the same key as east's: other topics
    cfg.sources[0].include_databases = [db_e]
    cfg.sources[1].include_databases = [db_w]
    cfg.producer.heartbeat_interval_s = 0.3  # an idle producer commits: we know when it streams
    views = {name: cfg.for_source(name) for name in (east, west)}
    assert views[east].kafka.topic_prefix != views[west].kafka.topic_prefix

    (tmp_path / east).mkdir()
    (tmp_path / west).mkdir()
    procs = [ProducerProcess(cfg, tmp_path / name, source=name) for name in (east, west)]
    unnamed = _cli(procs[0].path, "produce")
    assert unnamed.returncode == 1 and f"several sources are configured ({east}, {west})" in unnamed.stderr
    for p in procs:
        p.start()
    try:
        for name, view in views.items():
            wait_for(lambda v=view: OffsetStore(v.kafka, v.producer.name).load() is not None, 90,
                     what=f"the producer of {name} streaming")
        _insert(stack.admin(), db_e, [(3, 30)])
        _insert(own_mysql.admin(), db_w, [(8, 80)])
        wait_for(lambda: _ops(views[east], db_e).get(3) == "c", 60, what="east's streamed row")
        wait_for(lambda: _ops(views[west], db_w).get(8) == "c", 60, what="west's streamed row")

        # A snapshot per source: east's through its signal table, west's through its Kafka channel.
        out = _cli(procs[0].path, "snapshot", "--source", east, f"{db_e}.orders", "--follow", "--timeout", "90")
        assert out.returncode == 0, out.stdout + out.stderr
        out = _cli(procs[0].path, "snapshot", "--source", west, "--channel", "kafka", f"{db_w}.orders",
                   "--follow", "--timeout", "90")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"{views[west].kafka.topic_prefix}._signals (key {west})" in out.stdout
        wait_for(lambda: _ops(views[east], db_e) == {1: "r", 2: "r", 3: "r"}, 60, what="east's snapshot rows")
        wait_for(lambda: _ops(views[west], db_w) == {1: "r", 7: "r", 8: "r"}, 60, what="west's snapshot rows")

        # Each producer wrote under its own prefix only, and keeps its own state.
        topics = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers}).list_topics(timeout=30).topics
        for name, other_db in ((east, db_w), (west, db_e)):
            prefix = views[name].kafka.topic_prefix
            assert not [t for t in topics if t.startswith(prefix + ".") and other_db in t]
            assert (tmp_path / "state" / "offsets" / f"{name}.json").exists()
            assert (tmp_path / "state" / f"producer-status-{name}.json").exists()
        status = _cli(procs[0].path, "status")
        assert status.returncode == 0, status.stderr
        assert all(name in status.stdout for name in (east, west)), status.stdout
        assert status.stdout.count("stored position") == 2 and "not committed yet" not in status.stdout
    finally:
        for p in procs:
            if p.alive():
                assert p.stop() == 0
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db_e}`")


def test_verify_compares_a_merged_target_with_the_union_of_its_shards(stack, own_mysql, two_sources, unique):
    """The merge job's routing is not wired in this branch: the target tables are filled here
    from the shards with SQL, as the route would fill them (origin columns leading the key)."""
    cfg = two_sources
    east, west = (s.name for s in cfg.sources)
    db1, db2, db3, tdb = unique("shop"), unique("shop"), unique("shop"), unique("shop")
    rows = {db1: [(1, 10, "a"), (7, 70, "b")], db2: [(7, 71, "c"), (9, 90, None)], db3: [(7, 72, "d")]}
    for conn, db in ((stack.admin(), db1), (stack.admin(), db2), (own_mysql.admin(), db3)):
        with conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, amount INT, note VARCHAR(20))")
            cur.executemany(f"INSERT INTO `{db}`.orders VALUES (%s, %s, %s)", rows[db])
    cfg.sources[0].include_databases = [db1, db2]
    cfg.sources[1].include_databases = [db3]
    cfg.sinks.postgres.schema_name = pg_schema = unique("sinkpg")
    cfg.sinks.mysql.database = my_db = unique("sink")
    cfg = CDCConfig.model_validate({**cfg.model_dump(), "routes": [
        {"source": f"{east}|{west}", "schema": f"{db1}|{db2}|{db3}", "table": "orders", "target": f"{tdb}.orders"}]})
    union = [(src, db, "orders", *r) for src, dbs in ((east, (db1, db2)), (west, (db3,))) for db in dbs
             for r in rows[db]]
    columns = "__source VARCHAR(64), __db VARCHAR(64), __table VARCHAR(64), id INT, amount INT, note VARCHAR(20)"
    key = "PRIMARY KEY (__source, __db, __table, id)"
    with psycopg.connect(stack.pg_dsn, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{pg_schema}"')
        pg.execute(f'CREATE TABLE "{pg_schema}"."{tdb}__orders" ({columns}, {key})')
        with pg.cursor() as cur:
            cur.executemany(f'INSERT INTO "{pg_schema}"."{tdb}__orders" VALUES (%s, %s, %s, %s, %s, %s)', union)
    with stack.admin() as my, my.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{my_db}`")
        cur.execute(f"CREATE TABLE `{my_db}`.`{tdb}__orders` ({columns}, {key})")
        for src, db in ((east, db1), (east, db2)):  # the east shards are on this server: INSERT ... SELECT
            cur.execute(f"INSERT INTO `{my_db}`.`{tdb}__orders` SELECT %s, %s, 'orders', id, amount, note "
                        f"FROM `{db}`.orders", (src, db))
        cur.executemany(f"INSERT INTO `{my_db}`.`{tdb}__orders` VALUES (%s, %s, %s, %s, %s, %s)",
                        [r for r in union if r[0] == west])
    try:
        report = verify(cfg)
        assert report.equal, report.to_dict()
        by = {t.table: t for t in report.tables}
        assert set(by) == {f"{east}/{db1}.orders", f"{east}/{db2}.orders", f"{west}/{db3}.orders",
                           f"{tdb}.orders: rows of no shard"}
        shard = by[f"{west}/{db3}.orders"]
        assert shard.target == f"{tdb}.orders" and shard.source_rows == 1
        assert [(r.sink, r.source_rows, r.sink_rows) for r in shard.results] == [("postgres", 1, 1), ("mysql", 1, 1)]
        assert shard.checksum and all(r.checksum == shard.checksum for r in shard.results)  # per shard

        # One row changed (PostgreSQL), one missing (MySQL), one of no shard (PostgreSQL).
        with psycopg.connect(stack.pg_dsn, autocommit=True) as pg:
            pg.execute(f'UPDATE "{pg_schema}"."{tdb}__orders" SET amount = 0 WHERE __db = %s AND id = 7', (db1,))
            pg.execute(f'INSERT INTO "{pg_schema}"."{tdb}__orders" VALUES (%s, %s, %s, 1, 1, NULL)',
                       (west, "shop_zz", "orders"))
        with stack.admin() as my, my.cursor() as cur:
            cur.execute(f"DELETE FROM `{my_db}`.`{tdb}__orders` WHERE __source = %s AND id = 7", (west,))
        report = verify(cfg, [f"{tdb}.orders"])
        assert not report.equal
        by = {t.table: {r.sink: r for r in t.results} for t in report.tables}
        changed = by[f"{east}/{db1}.orders"]["postgres"]
        assert (changed.differing, changed.missing, changed.extra) == (1, 0, 0)
        assert changed.checksum != by[f"{east}/{db1}.orders"]["mysql"].checksum
        assert changed.samples[0].key == {"id": 7} and changed.samples[0].columns == ["amount"]
        assert by[f"{east}/{db1}.orders"]["mysql"].equal and by[f"{east}/{db2}.orders"]["postgres"].equal
        gone = by[f"{west}/{db3}.orders"]["mysql"]
        assert (gone.missing, gone.sink_rows) == (1, 0) and gone.samples[0].key == {"id": 7}
        stray = by[f"{tdb}.orders: rows of no shard"]
        assert stray["postgres"].extra == 1 and f"{west}/shop_zz.orders" in stray["postgres"].notes[0]
        assert stray["mysql"].equal
        out = io.StringIO()
        print_report(report, Console(file=out, width=250))
        text = out.getvalue()
        assert f"values differ:   {east}/{db1}.orders id=7: amount: source 70 sink 0" in text
        assert f"missing in sink: {west}/{db3}.orders id=7" in text
    finally:
        with psycopg.connect(stack.pg_dsn, autocommit=True) as pg:
            pg.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}" CASCADE')
        with stack.admin() as my, my.cursor() as cur:
            for db in (my_db, db1, db2):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_stack_up_with_two_source_servers(stack, tmp_path_factory, flavor):
    """``cdc stack up --sources 2`` (Kafka and PostgreSQL of the session stack): a second
    server of its own (of the first one's flavor), recorded in stack.json, both in
    cdc-sources.yaml as ``sources``; ``status`` reports it, ``up`` again keeps it,
    ``--sources 1`` and ``down`` stop it."""
    state = tmp_path_factory.mktemp("stack-src")
    out = stack.stack_up_beside(state, "--sources", "2", "--flavor", flavor)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "mysql2" in out.stdout and "cdc-sources.yaml" in out.stdout
        data = read_stack(state)
        [second] = data["sources"]
        assert data["mysql"]["flavor"] == second["flavor"] == flavor
        assert pid_alive(second["pid"]) and second["port"] != data["mysql"]["port"] and second["role"] == "primary"
        cfg = load_config(state / "cdc-sources.yaml")
        east, west = cfg.captured_sources()
        assert (east.name, east.config.port, west.name, west.config.port) == (
            "east", data["mysql"]["port"], "west", second["port"])
        assert load_config(state / "cdc.yaml").sources == []  # cdc.yaml keeps the one-server configuration
        view = cfg.for_source("west")
        with pymysql.connect(host=view.source.host, port=view.source.port, user=view.source.user,
                             password=view.source.password.get_secret_value()) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {view.source.signal_table}")  # its own signal table
        assert stack_status(state)["mysql2"][0]
        again = stack_up(state, kafka_bootstrap=stack.bootstrap, postgres_dsn=stack.pg_dsn)  # as recorded
        assert [s["pid"] for s in again.sources] == [second["pid"]]
        one = stack_up(state, kafka_bootstrap=stack.bootstrap, postgres_dsn=stack.pg_dsn, sources=1)
        assert one.sources == [] and not (state / "cdc-sources.yaml").exists() and not pid_alive(second["pid"])
        stack_up(state, kafka_bootstrap=stack.bootstrap, postgres_dsn=stack.pg_dsn, sources=2)
    finally:
        stopped = stack_down(state)
    assert sorted(stopped) == ["mysql", "mysql2"]
