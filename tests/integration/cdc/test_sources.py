"""Several sources (issue 15): a producer per source server with its own topic prefix,
snapshots per source, ``cdc status`` per source, and ``cdc verify`` of a merged target."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka.admin import AdminClient

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
