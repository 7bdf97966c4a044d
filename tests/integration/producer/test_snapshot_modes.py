"""Debezium's ``snapshot.mode`` values on the real stack: what each start snapshots, whether
the producer streams afterwards, a start after purged binlogs (``when_needed``) and after a
lost schemas topic (``recovery``); a keyless table in the start's snapshot (``initial``,
``always``) under writes."""

from __future__ import annotations

import threading

import pytest

from common.kafka.clients import delete_topics
from common.kafka.topic_reader import read_topic
from contract.topics import schemas_topic, table_topic
from producer.app import ProducerApp
from producer.errors import BinlogPurgedError, ProducerStopped
from spark_jobs.task.dblog import make_key
from tests.integration.producer.test_recovery import _rebuilt
from tests.producer_helpers import (
    ProducerThread,
    change_and_purge,
    read_events,
    run_until_caught_up,
    shop_table,
    wait_caught_up,
    wait_for,
)
from tests.snapshot_helpers import (
    KeylessLoad,
    create_keyless,
    dblog_replay,
    has_notification,
    keyless_replay,
    keyless_rows,
    notifications,
)


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


def _keyless(stack, config, db: str, mode: str) -> None:
    """``db.nokey``, a table without a key of 1,000 rows (duplicates among them), the only
    table the producer captures, under ``snapshot.mode: mode``."""
    with stack.admin() as conn:
        create_keyless(conn, db, "nokey", 1000)
    config.source.include_databases = [db]
    config.snapshot.mode = mode
    config.snapshot.chunk_size = 100


def _start(stack, config, snapshots: int, load: KeylessLoad | None = None) -> None:
    """A start of the producer (while ``load`` writes, if given): its snapshot (the
    ``snapshots``-th) completed, writes after it, then the load stopped and everything
    streamed; the producer stopped."""
    with ProducerThread(config) as producer:
        wait_for(lambda: len(_started(config)) == snapshots and has_notification(
            config, "COMPLETED", id=_started(config)[-1]), timeout=120, what="the start's snapshot done",
            state=producer.state)
        if load is not None:
            done = sum(load.ops.values())
            wait_for(lambda: sum(load.ops.values()) > done + 200, what="writes after the snapshot")
            load.stop()
        with stack.admin() as conn:
            wait_caught_up(config, conn)


def _replays_to_the_table(stack, config, db: str):
    """The keyless table's topic replayed (the last snapshot's rows, then every change after
    them) equals the table as a multiset; the replay."""
    replay = keyless_replay(config, db, "nokey")
    with stack.admin() as conn:
        source = keyless_rows(conn, db, "nokey")
    assert replay.table == source and max(source.values()) > 1  # (duplicates: a multiset)
    assert {key for _, key, _ in replay.events} == {None}
    return replay


@pytest.mark.servers("mariadb", "mysql")
def test_initial_with_a_keyless_table_under_writes_replays_to_the_table(source_stack, config, test_db):
    """``snapshot.mode: initial``, a keyless table written to (inserts of duplicates, updates,
    deletes) while the first start snapshots it: the read, begun after the start position,
    holds the transactions up to its own point, which becomes the pause point (the changes
    before it streamed below the rows); the rows and every change after them replay to the
    table, nothing twice, nothing missing (on MySQL the read's point is a GTID set)."""
    stack = source_stack
    _keyless(stack, config, test_db, "initial")
    with KeylessLoad(lambda: stack.admin(test_db), test_db, "nokey", seed=21) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        _start(stack, config, 1, load)
    replay = _replays_to_the_table(stack, config, test_db)
    # (the writes between the start position and the read: streamed below the rows, which are not at the start)
    assert replay.changes_before > 0 and replay.changes_after > 200
    assert [v["source"]["snapshot"] for v in replay.rows].count("first") == 1


@pytest.mark.servers("mariadb", "mysql")
def test_always_with_a_keyless_table_written_while_stopped_replays_to_the_table(source_stack, config, test_db):
    """``snapshot.mode: always``, a keyless table: the first start snapshots it; while the
    producer is stopped the table is written to (inserts of duplicates, updates, deletes), and
    the writes go on while it starts again.  The second start's snapshot, taken at the stored
    position, reads the table as it is now: its pause point moves to the read's point, the
    changes made while stopped streamed below its rows; the last snapshot's rows and every
    change after them replay to the table, nothing twice, nothing missing.  The first start,
    with no write after it: on MySQL the read's point is a GTID set, which the stream knows at
    the start position too (the server's executed set at the binlog's end)."""
    stack, db = source_stack, test_db
    _keyless(stack, config, db, "always")
    _start(stack, config, 1)  # (no write: on MySQL the start's own GTIDs are the read's point)
    with KeylessLoad(lambda: stack.admin(db), db, "nokey", seed=13) as load:
        wait_for(lambda: sum(load.ops.values()) > 300, what="writes while the producer is stopped")
        stopped = sum(load.ops.values())  # (committed before the start: each a change of one row)
        _start(stack, config, 2, load)
    replay = _replays_to_the_table(stack, config, db)
    earlier = [i for i, (_, _, v) in enumerate(replay.events) if v["op"] == "r"
               and v["source"]["snapshot"] == "last"][0]  # (the first start's last row)
    between = [v for _, _, v in replay.events[earlier:replay.changes_before] if v["op"] != "r"]  # (to the last rows)
    assert len(between) >= stopped and replay.changes_after > 200
    assert len(replay.rows) == 1000 + sum(-1 if v["op"] == "d" else v["op"] == "c" for v in between)


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
