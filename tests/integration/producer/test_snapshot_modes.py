"""Debezium's ``snapshot.mode`` values on the real stack: what each start snapshots, whether
the producer streams afterwards, a start after purged binlogs (``when_needed``) and after a
lost schemas topic (``recovery``)."""

from __future__ import annotations

import threading

import pytest

from common.kafka.clients import delete_topics
from common.kafka.topic_reader import read_topic
from contract.topics import schemas_topic, table_topic
from producer.app import ProducerApp
from producer.errors import BinlogPurgedError, ProducerStopped
from spark_jobs.dblog import make_key
from tests.integration.producer.test_recovery import _rebuilt
from tests.producer_helpers import (
    ProducerThread,
    change_and_purge,
    read_events,
    run_until_caught_up,
    shop_table,
    wait_for,
)
from tests.snapshot_helpers import dblog_replay, notifications


def _source(conn_factory, db: str) -> dict:
    with conn_factory(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        return {make_key({"id": i}): {"id": i, "v": v} for i, v in cur.fetchall()}


def _started(cfg) -> list[str]:
    """The snapshot ids of the STARTED notifications so far."""
    try:
        return [n["id"] for n in notifications(cfg) if n["type"] == "STARTED"]
    except Exception:  # noqa: BLE001 - no notification topic yet: no snapshot
        return []


def _insert(stack, db: str, rows: range, tag: str) -> None:
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"{tag}{i}") for i in rows])


@pytest.fixture
def table(stack, config, test_db):
    """``test_db.t`` with 30 rows written before any producer ran; the producer captures
    only ``test_db``."""
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    _insert(stack, test_db, range(30), "before")
    config.source.include_databases = [test_db]
    return table_topic(config.kafka.topic_prefix, test_db, "t")


@pytest.mark.parametrize("mode,snapshots", [("initial", (1, 0)), ("always", (1, 1)), ("no_data", (0, 0)),
                                            ("when_needed", (1, 0)), ("recovery", (0, 0))])
def test_which_start_snapshots_the_data(stack, config, test_db, table, mode, snapshots):
    """Two starts, rows written before each: ``initial`` and ``when_needed`` snapshot on the
    first start only (no position stored then), ``always`` on both, ``no_data`` and ``recovery``
    on neither; every mode streams the changes after it starts."""
    config.snapshot.mode = mode
    run_until_caught_up(config)
    first = len(_started(config))
    _insert(stack, test_db, range(100, 105), "between the starts")
    run_until_caught_up(config)
    assert (first, len(_started(config)) - first) == snapshots
    got = dblog_replay(config, table).table
    expected = _source(stack.admin, test_db)
    if snapshots[0]:  # the rows written before the first start came by the snapshot: Debezium's initial one
        assert got == expected
        marks = [v["source"]["snapshot"] for _, _, v in read_events(config, table) if v["op"] == "r"]
        assert set(marks) == {"first", "true", "last"} and marks.count("first") == sum(snapshots)
        assert {n["aggregateType"] for n in notifications(config) if n["type"] == "STARTED"} == {"Initial Snapshot"}
    else:  # only what was written after the first start
        assert got == {k: v for k, v in expected.items() if v["id"] >= 100}
    if mode == "always":  # a process that starts its session again (a lost connection) does not snapshot again
        app = ProducerApp(config)
        app.run(idle_exit_s=1.5)
        taken = len(_started(config))
        app.run(idle_exit_s=1.5)
        assert len(_started(config)) == taken == sum(snapshots) + 1


@pytest.mark.parametrize("mode", ["initial_only", "configuration_based"])
def test_initial_only_snapshots_then_stops(stack, config, test_db, table, mode):
    """``initial_only`` (and ``configuration_based`` with ``snapshot_data`` and without
    ``start_stream``) snapshots the captured tables and the producer stops by itself; the
    changes after it are not streamed.  A second start: ``initial_only`` stops at once, while
    ``configuration_based``'s ``snapshot_data`` snapshots again (Debezium's, on every start)."""
    config.snapshot.mode = mode
    if mode == "configuration_based":
        config.snapshot.configuration_based = {"snapshot_data": True, "start_stream": False}
    runs: list[int] = []
    for start in range(2):
        app = ProducerApp(config)
        run = threading.Thread(target=lambda: runs.append(app.run()))
        run.start()
        run.join(180)  # (a hang guard: it stops by itself)
        if run.is_alive():
            app.stop()
            run.join(30)
            pytest.fail(f"{mode}: the producer did not stop after its snapshot (start {start + 1})")
        if start == 0:
            assert dblog_replay(config, table).table == _source(stack.admin, test_db)
            _insert(stack, test_db, range(100, 110), "after the snapshot")
    assert runs == [0, 0]
    replayed = dblog_replay(config, table)
    assert len(_started(config)) == (1 if mode == "initial_only" else 2)
    if mode == "initial_only":  # nothing streamed: the rows written after the snapshot are not in Kafka
        assert replayed.changes == 0 and all(k[0] < 100 for k in replayed.table)
    else:  # the second snapshot read them
        assert replayed.table == _source(stack.admin, test_db)


def test_when_needed_snapshots_again_after_purged_binlogs(own_mysql, config):
    """``snapshot.mode: when_needed``: the first start snapshots (no position stored); rows
    inserted, updated and deleted while the producer is down and their binlogs purged: the
    next start streams from the current position and snapshots again with delete-missing, so
    the topic rebuilds the table.  ``initial`` instead stops, naming ``when_needed``."""
    source = own_mysql
    shop_table(source, config)
    config.snapshot.mode = "when_needed"
    run_until_caught_up(config)
    assert len(_rebuilt(config, "shop", "t")[0]) == 40
    oldest, _ = change_and_purge(source, (5, 85), (6, 7, 86))

    config.snapshot.mode = "initial"
    with pytest.raises(BinlogPurgedError) as err:
        ProducerApp(config).run(idle_exit_s=1)
    assert oldest in str(err.value) and "snapshot.mode: when_needed" in str(err.value)

    config.snapshot.mode = "when_needed"
    with ProducerThread(config):
        wait_for(lambda: _rebuilt(config, "shop", "t")[1], 90, what="the table snapshotted again (DELETE_MISSING)")
        with source.admin(database="shop") as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1000, 'after the restart')")
        wait_for(lambda: make_key({"id": 1000}) in _rebuilt(config, "shop", "t")[0], 60, what="streaming")
    with source.admin(database="shop") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        expected = {make_key({"id": i}): {"id": i, "v": v} for i, v in cur.fetchall()}
    table, found = _rebuilt(config, "shop", "t")
    assert table == expected and make_key({"id": 6}) not in table
    assert len(found) == 1


def test_recovery_rebuilds_a_lost_schemas_topic(stack, config, test_db, table):
    """Avro records streamed, then the schemas topic deleted while the producer is down: the
    next start stops, naming ``snapshot.mode: recovery``; with it, the producer publishes every
    captured table's writer schemas again and streams on from its stored position, and every
    record of the table topic, before and after, decodes."""
    assert config.producer.format == "avro" and config.kafka.schema_registry_url is None
    with stack.admin(test_db) as conn, conn.cursor() as cur:  # a table no change comes to after the loss
        cur.execute("CREATE TABLE quiet (id INT PRIMARY KEY, d DECIMAL(8, 2))")
    run_until_caught_up(config)  # (latest: no snapshot)
    _insert(stack, test_db, range(100, 120), "streamed")
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO quiet VALUES (%s, %s)", [(i, i / 4) for i in range(7)])
    run_until_caught_up(config)
    assert len(read_events(config, table)) == 20
    delete_topics(config.kafka, [schemas_topic(config.kafka.topic_prefix)])
    _insert(stack, test_db, range(200, 205), "while the topic was gone")

    with pytest.raises(ProducerStopped) as err:
        ProducerApp(config).run(idle_exit_s=1)
    assert f"the schemas topic {schemas_topic(config.kafka.topic_prefix)} is empty" in str(err.value)
    assert "snapshot.mode: recovery" in str(err.value)

    config.snapshot.mode = "recovery"
    run_until_caught_up(config)
    schemas = list(read_topic(config.kafka.bootstrap_servers, schemas_topic(config.kafka.topic_prefix),
                              client_config=config.kafka.client))
    assert schemas  # published again, before any record of the table needed them
    quiet = table_topic(config.kafka.topic_prefix, test_db, "quiet")
    assert sorted(v["after"]["id"] for _, _, v in read_events(config, quiet)) == list(range(7))  # (decoded)
    got = dblog_replay(config, table)  # (decodes every record: a missing schema raises)
    assert got.changes == 25 and got.table == {k: v for k, v in _source(stack.admin, test_db).items()
                                               if v["id"] >= 100}
