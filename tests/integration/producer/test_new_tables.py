"""Newly added tables (``snapshot.new_tables``) on the real stack, with writes running: a table
created while the producer runs is captured from its first row (no snapshot); a table with rows
that starts to match the capture lists (the lists widened, the producer restarted) is
snapshotted once by itself, incrementally or blocking, without a signal and without the other
tables read again, also when the producer is killed mid-snapshot; ``off`` names it and leaves
it; the merge job creates the new tables' sink tables and they equal the source.
"""

from __future__ import annotations

import logging

import pytest

from common.kafka.offsets import end_offsets
from producer.new_tables import CAPTURE_LISTS
from producer.offset_store import OffsetStore
from tests.producer_helpers import ProducerProcess, ProducerThread, read_events, run_until_caught_up, wait_for
from tests.snapshot_helpers import (
    KeylessLoad,
    WriteLoad,
    create_keyless,
    create_table,
    keyless_replay,
    keyless_rows,
    notifications,
    replayed_equal,
    source_rows,
)


def _topic(cfg, db: str, table: str) -> str:
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


def _notes(cfg, kind: str | None = None) -> list[dict]:
    """The notifications of the newly added tables' snapshots (of ``kind``), in order."""
    try:
        found = notifications(cfg)
    except Exception:  # noqa: BLE001 - no notification topic yet: no snapshot
        return []
    return [n for n in found if n["id"].startswith("new-tables-") and (kind is None or n["type"] == kind)]


def _any_started(cfg) -> list[dict]:
    try:
        return [n for n in notifications(cfg) if n["type"] == "STARTED"]
    except Exception:  # noqa: BLE001 - no notification topic yet: no snapshot
        return []


def _ops(cfg, db: str, table: str) -> list[str]:
    try:
        return [v["op"] for _, _, v in read_events(cfg, _topic(cfg, db, table))]
    except Exception:  # noqa: BLE001 - no topic: nothing written
        return []


def _records(cfg, topic: str) -> int:
    try:
        offsets = end_offsets(cfg.kafka.bootstrap_servers, [(topic, p) for p in range(cfg.kafka.partitions)],
                              client_config=cfg.kafka.client_settings())
    except Exception:  # noqa: BLE001 - no topic yet
        return 0
    return sum(end - low for low, end in offsets.values())


def _more_writes(*loads: WriteLoad, n: int = 150) -> None:
    """Wait until each load has made ``n`` more changes than now."""
    start = [sum(ld.ops.values()) for ld in loads]
    wait_for(lambda: all(sum(ld.ops.values()) > s + n for ld, s in zip(loads, start)), what="more writes")


@pytest.mark.servers("mariadb", "mysql")
def test_a_table_created_while_the_producer_runs_is_captured_from_its_first_row(source_stack, config, test_db):
    """CREATE TABLE of a table the lists' pattern matches, written to at once and then under a
    write load, and CREATE TABLE ... SELECT of an uncaptured table's rows (in row-based binlogs its
    rows are row events after the CREATE): every row reaches the topic as a change event; no
    snapshot is taken."""
    with source_stack.admin() as conn:
        create_table(conn, test_db, "t_old", "single", 0)
        create_table(conn, test_db, "src", "single", 700)  # not captured: its rows reach t_copy by the SELECT
    config.source.include_tables = [rf"{test_db}\.t_.*"]
    run_until_caught_up(config)  # (the position and the lists stored)
    with ProducerThread(config), \
            WriteLoad(source_stack.admin, test_db, "t_old", "single", key_space=300, seed=1) as old:
        _more_writes(old, n=50)
        with source_stack.admin() as conn:
            keys = create_table(conn, test_db, "t_new", "composite", 400)
            with conn.cursor() as cur:
                cur.execute(f"CREATE TABLE `{test_db}`.`t_copy` (PRIMARY KEY (`id`)) "
                            f"SELECT * FROM `{test_db}`.`src` WHERE `id` < 600")
            conn.commit()
        with WriteLoad(source_stack.admin, test_db, "t_new", "composite", key_space=500, seed=2) as new:
            _more_writes(old, new, n=200)
    run_until_caught_up(config)
    for table, key in (("t_old", ["id"]), ("t_new", keys), ("t_copy", ["id"])):
        replayed_equal(source_stack, config, test_db, table, key)
    assert _ops(config, test_db, "t_copy") == ["c"] * 600
    assert "r" not in _ops(config, test_db, "t_new")
    assert _any_started(config) == []


def _tables(stack, db: str) -> dict[str, list[str]]:
    """``a`` (captured from the first start, empty then), ``b`` with 1500 rows and a keyless
    ``nokey`` with 20, not captured at first; their key columns."""
    with stack.admin() as conn:
        keys = {"a": create_table(conn, db, "a", "single", 0), "b": create_table(conn, db, "b", "composite", 1500)}
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{db}`.`nokey` (x INT)")
            cur.executemany(f"INSERT INTO `{db}`.`nokey` VALUES (%s)", [(i,) for i in range(20)])
        conn.commit()
    return keys


@pytest.mark.servers("mariadb", "mysql")
@pytest.mark.parametrize("mode", ["incremental", "blocking", "read_only"])
def test_a_table_that_starts_to_match_is_snapshotted_once_under_writes(source_stack, config, test_db, mode):
    """(``read_only``: incremental, with ``snapshot.read_only``: windows bounded by GTID sets, no
    marker rows written to the source.)"""
    keys = _tables(source_stack, test_db)
    config.snapshot.read_only = mode == "read_only"
    config.snapshot.new_tables = "incremental" if mode == "read_only" else mode
    config.snapshot.chunk_size = 200
    config.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(config)
    assert OffsetStore(config.kafka, config.producer.name).load()[CAPTURE_LISTS]["include_tables"] == \
        [rf"{test_db}\.a"]
    config.source.include_tables = [rf"{test_db}\.(a|b|nokey)"]  # widened: b and nokey newly match
    with WriteLoad(source_stack.admin, test_db, "a", "single", key_space=400, seed=3) as la, \
            WriteLoad(source_stack.admin, test_db, "b", "composite", key_space=1800, seed=4) as lb:
        _more_writes(la, lb, n=30)
        with ProducerThread(config) as producer:
            wait_for(lambda: _notes(config, "COMPLETED"), timeout=120, what="the new tables' snapshot",
                     state=producer.state)
            _more_writes(la, lb)
    run_until_caught_up(config)  # a start with the same lists again: nothing new
    run_until_caught_up(config)

    for table in ("a", "b"):
        replayed_equal(source_stack, config, test_db, table, keys[table])
    assert "r" not in _ops(config, test_db, "a"), "a table captured before was snapshotted again"
    assert _ops(config, test_db, "b").count("r") >= 1000
    [started] = _notes(config, "STARTED")  # once, for the new tables alone, with no signal sent
    assert started["aggregateType"] == ("Initial Snapshot" if mode == "blocking" else "Incremental Snapshot")
    assert len(_notes(config, "COMPLETED")) == 1
    assert len(_any_started(config)) == 1
    if mode == "blocking":  # the keyless table read whole, as Debezium's blocking snapshot reads one
        assert started["additionalData"]["tables"] == [f"{test_db}.b", f"{test_db}.nokey"]
        nokey = [(k, v["after"]["x"]) for _, k, v in read_events(config, _topic(config, test_db, "nokey"))]
        assert sorted(nokey) == [(None, x) for x in range(20)] and not _notes(config, "SKIPPED")
        return
    assert started["additionalData"]["tables"] == [f"{test_db}.b"]
    [skipped] = _notes(config, "SKIPPED")  # the keyless table: named, with the reason, not lost in silence
    assert skipped["additionalData"]["table"] == f"{test_db}.nokey"
    assert "no primary key" in skipped["additionalData"]["reason"]


@pytest.mark.parametrize("mode", ["incremental", "blocking"])
def test_a_producer_killed_mid_snapshot_of_a_new_table_finishes_it_once(stack, config, test_db, tmp_path, mode):
    """SIGKILL while the newly matching table's rows are being written: the restarted producer
    finishes that snapshot (resumed from its stored state, or taken again from its pause point)
    and starts no other; the topic replayed equals the table; a later start snapshots nothing."""
    rows = 40000
    with stack.admin() as conn:
        create_table(conn, test_db, "a", "single", 0)
        keys = create_table(conn, test_db, "b", "single", rows)
    config.snapshot.new_tables = mode
    config.snapshot.chunk_size = 200
    config.producer.batch_size = 400  # (commits while the rows are written: the snapshot's state is stored)
    config.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(config)
    config.source.include_tables = [rf"{test_db}\.[ab]"]
    topic = _topic(config, test_db, "b")
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    with WriteLoad(stack.admin, test_db, "b", "single", key_space=rows + 500, seed=5) as load:
        wait_for(lambda: _records(config, topic) > 3000, timeout=120, what="snapshot rows written")
        done_before = bool(_notes(config, "COMPLETED"))
        proc.kill9()
        proc.start()
        wait_for(lambda: _notes(config, "COMPLETED"), timeout=240, what="the new table's snapshot done")
        _more_writes(load, n=100)
    assert proc.stop() == 0
    run_until_caught_up(config)
    assert not done_before, "the snapshot ended before the kill"
    replayed_equal(stack, config, test_db, "b", keys)
    assert len({n["id"] for n in _notes(config, "STARTED")}) == 1  # the stored snapshot finished, no second one
    assert len(_notes(config, "COMPLETED")) == 1
    assert "r" not in _ops(config, test_db, "a")


def test_off_names_the_new_tables_and_leaves_them_to_a_signal(stack, config, test_db, caplog):
    keys = _tables(stack, test_db)
    config.snapshot.new_tables = "off"
    config.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(config)
    config.source.include_tables = [rf"{test_db}\.(a|b)"]
    with caplog.at_level(logging.WARNING, logger="producer.session_new_tables"):
        run_until_caught_up(config)
    [warned] = [r.getMessage() for r in caplog.records if "snapshot.new_tables: off" in r.getMessage()]
    assert f"{test_db}.b" in warned and f"cdc snapshot {test_db}.b" in warned and f"{test_db}.a" not in warned
    assert _any_started(config) == [] and _ops(config, test_db, "b") == []
    config.snapshot.new_tables = "incremental"  # the lists were stored: a later start has nothing new
    run_until_caught_up(config)
    assert _any_started(config) == []
    with stack.admin() as conn:
        assert len(source_rows(conn, test_db, "b", keys["b"])) == 1500


def _widened_under_writes(stack, cfg, test_db: str, keys: dict, seed: int, then=lambda: None) -> None:
    """The lists widened to ``b`` and ``c_*`` and a producer started while ``b`` is written;
    ``c_new`` created and written; once the new tables' snapshot completed, more writes to
    both; ``then`` with the producer still running."""
    cfg.source.include_tables = [rf"{test_db}\.(a|b|c_.*)"]
    with WriteLoad(stack.admin, test_db, "b", "composite", key_space=1800, seed=seed) as lb, ProducerThread(cfg):
        with stack.admin() as conn:
            keys["c_new"] = create_table(conn, test_db, "c_new", "string", 300)
        with WriteLoad(stack.admin, test_db, "c_new", "string", key_space=400, seed=seed + 1) as lc:
            wait_for(lambda: _notes(cfg, "COMPLETED"), timeout=120, what="the new table's snapshot")
            _more_writes(lb, lc)
            lb.stop()
        then()


def _a_captured_with_rows(stack, cfg, test_db: str) -> dict:
    """The test's tables made, ``a`` alone captured (chunks of 300) and given 50 rows, the
    producer caught up; the tables' keys."""
    keys = _tables(stack, test_db)
    cfg.snapshot.chunk_size = 300
    cfg.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(cfg)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.executemany(f"INSERT INTO `{test_db}`.`a` VALUES (%s, %s, %s)", [(i, f"v{i}", i) for i in range(50)])
    run_until_caught_up(cfg)
    return keys


def test_merge_job_creates_the_sink_tables_of_new_tables_and_they_equal_the_source(stack, lake_config, test_db):
    """A table that starts to match (snapshotted by itself) and a table created while the
    producer runs, both under writes, after the merge job's first run: the job's next run
    creates their PostgreSQL, MySQL, Delta and Iceberg tables and clean changelogs, and each
    equals its source table (``cdc verify`` for every sink)."""
    from cdc.verify import verify
    from contract.topics import clean_topic
    from spark_jobs.merge_job import MergeJob
    from tests.sink_helpers import apply_clean, mysql_sink_rows, pg_sink_rows

    cfg = lake_config
    keys = _a_captured_with_rows(stack, cfg, test_db)
    assert MergeJob(cfg).run(available_now=True) == 0  # (the job's first run: a's topic alone exists)
    _widened_under_writes(stack, cfg, test_db, keys, seed=6)
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    for table in ("a", "b", "c_new"):
        with stack.admin() as conn:
            expected = source_rows(conn, test_db, table, keys[table])
        assert len(expected) >= 50
        assert pg_sink_rows(cfg, test_db, table, keys[table]) == expected, f"postgres {table}"
        assert mysql_sink_rows(stack, cfg, test_db, table, keys[table]) == expected, f"mysql {table}"
        assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, table)) == expected, f"clean {table}"
    report = verify(cfg, [f"{test_db}.{t}" for t in ("a", "b", "c_new")])
    assert report.equal, report.to_dict()
    assert {r.sink for t in report.tables for r in t.results} >= {"postgres", "mysql", "delta", "iceberg"}


def test_a_keyless_table_alone_newly_matching_is_skipped_named_and_starts_no_snapshot(stack, config, test_db):
    """``incremental``: the only newly matching table has no primary key: a SKIPPED notification
    names it with the reason; no snapshot is started (none left in the stored state), the
    producer does not stop, and the table's changes stream."""
    _tables(stack, test_db)
    config.snapshot.new_tables = "incremental"
    config.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(config)
    config.source.include_tables = [rf"{test_db}\.(a|nokey)"]
    with ProducerThread(config) as producer:
        wait_for(lambda: _notes(config, "SKIPPED"), what="the keyless table skipped", state=producer.state)
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{test_db}`.`nokey` VALUES (100)")
        wait_for(lambda: _ops(config, test_db, "nokey") == ["c"], what="the keyless table's change streamed")
    [skipped] = _notes(config, "SKIPPED")
    assert skipped["additionalData"]["table"] == f"{test_db}.nokey"
    assert "no primary key" in skipped["additionalData"]["reason"]
    assert _any_started(config) == []
    stored = OffsetStore(config.kafka, config.producer.name).load()
    assert "snapshot" not in stored and "blocking" not in stored and stored[CAPTURE_LISTS]["include_tables"] == [rf"{test_db}\.(a|nokey)"]


def test_a_keyless_table_newly_matching_is_read_whole_under_writes_with_blocking(stack, config, test_db):
    """``blocking``: a newly matching table without a key, more rows than ``snapshot.chunk_size``,
    written to while the start snapshots it: read whole at the start position, null-keyed; the
    topic replayed as a multiset (the rows, then every change after them) equals the table."""
    with stack.admin() as conn:
        create_table(conn, test_db, "a", "single", 0)
        create_keyless(conn, test_db, "legacy", 1000)
    config.snapshot.new_tables = "blocking"
    config.snapshot.chunk_size = 200
    config.source.include_tables = [rf"{test_db}\.a"]
    run_until_caught_up(config)
    config.source.include_tables = [rf"{test_db}\.(a|legacy)"]
    with KeylessLoad(lambda: stack.admin(test_db), test_db, "legacy", seed=9) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        with ProducerThread(config) as producer:
            wait_for(lambda: _notes(config, "COMPLETED"), timeout=120, what="the new table's snapshot",
                     state=producer.state)
            done = sum(load.ops.values())
            wait_for(lambda: sum(load.ops.values()) > done + 300, what="writes after the snapshot")
            load.stop()
    run_until_caught_up(config)
    replay = keyless_replay(config, test_db, "legacy")
    with stack.admin() as conn:
        assert replay.table == keyless_rows(conn, test_db, "legacy")
    assert {k for _, k, _ in replay.events} == {None} and 900 < len(replay.rows) < 1300
    assert replay.changes_after > 100 and not _notes(config, "SKIPPED")
    [started] = _notes(config, "STARTED")
    assert started["additionalData"]["tables"] == [f"{test_db}.legacy"]
    assert [v["source"]["snapshot"] for v in replay.rows[::len(replay.rows) - 1]] == ["first", "last"]


def test_a_running_merge_job_takes_up_the_new_tables_as_they_come(stack, merge_config, test_db):
    """The merge job runs on (no restart) while a table starts to match (the producer restarted
    with widened lists, snapshotting it) and another is created, both under writes: it reads
    their topics as they appear, creates their sink tables, and each ends equal to the source."""
    import threading

    from spark_jobs.merge_job import MergeJob
    from tests.sink_helpers import mysql_sink_rows, pg_sink_rows

    cfg = merge_config
    keys = _a_captured_with_rows(stack, cfg, test_db)

    def equal(table: str) -> bool:
        with stack.admin() as conn:
            expected = source_rows(conn, test_db, table, keys[table])
        try:
            return pg_sink_rows(cfg, test_db, table, keys[table]) == expected == \
                mysql_sink_rows(stack, cfg, test_db, table, keys[table])
        except Exception:  # noqa: BLE001 - no sink table yet
            return False

    job = MergeJob(cfg)
    failed: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_catching(job, failed), daemon=True)
    thread.start()
    try:
        wait_for(lambda: equal("a") or failed, timeout=180, what="the job merging a")
        _widened_under_writes(stack, cfg, test_db, keys, seed=8, then=lambda: wait_for(
            lambda: (equal("b") and equal("c_new")) or failed, timeout=240,
            what="the running job's sinks of the new tables equal to the source"))
    finally:
        job.stop()
        thread.join(120)
    assert not failed, failed
    assert all(equal(t) for t in ("a", "b", "c_new"))


def _run_catching(job, failed: list) -> None:
    try:
        job.run()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        failed.append(exc)
