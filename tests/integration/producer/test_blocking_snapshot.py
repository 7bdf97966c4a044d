"""Blocking snapshots (Debezium's ``execute-snapshot`` with ``"type": "blocking"``) on the real
stack: the stream pauses at one point, the tables are read whole, their rows land there, the
stream goes on; under writes the topic replayed equals the table, nothing lost or repeated.
"""

from __future__ import annotations

from collections import Counter

import pytest

from contract.position import event_of
from tests.producer_helpers import ProducerProcess, ProducerThread, read_events, run_until_caught_up, wait_for
from tests.snapshot_helpers import (
    KeylessLoad,
    WriteLoad,
    create_keyless,
    create_table,
    dblog_replay,
    has_notification,
    kafka_signal,
    keyless_replay,
    keyless_rows,
    markers,
    notifications,
    replayed_equal,
    signal,
    source_rows,
)


def _topic(cfg, db, table):
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


def _prepare(stack, config, test_db, tables: dict[str, int], kind: str = "single", chunk_size: int = 100):
    with stack.admin() as conn:
        keys = {t: create_table(conn, test_db, t, kind, rows) for t, rows in tables.items()}
    config.source.include_databases = [test_db]
    config.snapshot.chunk_size = chunk_size
    run_until_caught_up(config)  # (latest: the rows loaded before are not streamed; the position is stored)
    return keys


def _blocking(tables: list[str], **extra) -> dict:
    return {"data-collections": tables, "type": "blocking", **extra}


def _rows(config, db, table) -> list[dict]:
    return [v for _, _, v in read_events(config, _topic(config, db, table)) if v["op"] == "r"]


@pytest.mark.parametrize("kind", ["single", "composite"])
def test_blocking_snapshot_under_writes_equals_the_table(stack, config, test_db, kind):
    keys = _prepare(stack, config, test_db, {"t": 1200}, kind)["t"]
    with ProducerThread(config), WriteLoad(stack.admin, test_db, "t", kind, key_space=1400, seed=5) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = signal(config, "execute-snapshot", _blocking([f"{test_db}.t"]))
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="blocking snapshot done")
        wait_for(lambda: sum(load.ops.values()) > 400, what="writes after the snapshot")
        load.stop()
    run_until_caught_up(config)

    events, result = replayed_equal(stack, config, test_db, "t", keys)  # (positions rise: nothing written twice)
    assert result.chunk_rows_dropped == 0  # every window is empty of changes: no row loses to one
    rows = [v for _, _, v in events if v["op"] == "r"]
    assert 1000 < len(rows) < 1400
    assert len({event_of(v["position"]) for v in rows}) == 1  # all at the one pause point
    pause = event_of(rows[0]["position"])
    changes = [v for _, _, v in events if v["op"] != "r"]
    assert any(event_of(v["position"]) < pause for v in changes) and any(event_of(v["position"]) > pause
                                                                          for v in changes)
    # Debezium's source.snapshot marks: the first and last row of the snapshot, "true" between.
    marks = [v["source"]["snapshot"] for v in sorted(rows, key=lambda v: v["position"])]
    assert marks[0] == "first" and marks[-1] == "last" and set(marks[1:-1]) == {"true"}
    assert all(v["source"]["snapshot"] == "false" for v in changes)
    # Markers: an OPEN and a CLOSE per window, marked blocking, at the rows' window.
    windows = {(m["snapshot_id"], m["chunk_id"]): m for m in markers(config) if m.get("blocking")}
    assert {(w.snapshot_id, w.chunk_id) for w in result.windows} <= set(windows)
    found = [n for n in notifications(config) if n["id"] == sid]
    assert [n["type"] for n in found] == ["STARTED", "IN_PROGRESS", "TABLE_SCAN_COMPLETED", "COMPLETED"]
    assert {n["aggregateType"] for n in found} == {"Initial Snapshot"}
    scanned = found[2]["additionalData"]
    assert scanned["scanned_collection"] == f"{test_db}.t" and scanned["status"] == "SUCCEEDED"
    assert scanned["total_rows_scanned"] == str(len(rows)) and scanned["connector_name"] == config.producer.name


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_blocking_snapshot_over_kafka_with_whole_select_conditions(stack, config, test_db, read_only):
    """Through the Kafka signal channel, two tables, one with Debezium's blocking
    ``additional-conditions`` (a whole SELECT): that table's rows are the SELECT's, the other's
    all of them; the first/last marks span the snapshot, the per-table ones each table.  In
    read-only mode the same, with nothing written to the source."""
    config.snapshot.read_only = read_only
    with stack.admin(test_db) as conn, conn.cursor() as cur:  # keyless, matched by the regex: read whole
        cur.execute("CREATE TABLE nokey (x INT)")
        cur.execute("INSERT INTO nokey VALUES (1), (1), (2)")
    _prepare(stack, config, test_db, {"a": 300, "b": 120})
    with ProducerThread(config):
        sid = kafka_signal(config, "execute-snapshot", _blocking(
            [f"{test_db}.a", f"{test_db}\\.(b|nokey)"], **{"additional-conditions": [
                {"data-collection": f"{test_db}.a", "filter": f"SELECT * FROM `{test_db}`.`a` WHERE id >= 200"}]}))
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="blocking snapshot done")
    a, b, nokey = (sorted(_rows(config, test_db, t), key=lambda v: v["position"]) for t in ("a", "b", "nokey"))
    assert [v["after"]["id"] for v in a] == list(range(200, 300)) and len(b) == 120
    assert (a[0]["source"]["snapshot"], a[-1]["source"]["snapshot"]) == ("first", "last_in_data_collection")
    assert (b[0]["source"]["snapshot"], b[-1]["source"]["snapshot"]) == ("first_in_data_collection",
                                                                        "last_in_data_collection")
    assert [(v["after"]["x"], v["source"]["snapshot"]) for v in nokey] == \
        [(1, "first_in_data_collection"), (1, "true"), (2, "last")]
    assert a[-1]["position"] < b[0]["position"] < b[-1]["position"] < nokey[0]["position"]
    assert not [n for n in notifications(config) if n["id"] == sid and n["type"] == "SKIPPED"]


@pytest.mark.servers("mariadb", "mysql")
def test_a_keyless_table_is_read_whole_under_writes_and_replays_to_the_table(source_stack, config, test_db):
    """A table without a key (duplicate rows in it), more rows than ``snapshot.chunk_size``,
    written to (inserts of duplicates, updates, deletes) while a blocking snapshot reads it with
    a keyed table: its rows are read whole (Debezium's full SELECT), null-keyed as its streamed
    changes, all at the pause point, marked as Debezium marks them; replayed as a multiset, the
    rows and then every change after them equal the table (nothing lost, nothing counted twice:
    the read holds no transaction after the pause point)."""
    stack, db = source_stack, test_db
    with stack.admin() as conn:
        create_keyless(conn, db, "nokey", 1000)
    _prepare(stack, config, db, {"t": 150}, chunk_size=100)
    with ProducerThread(config), KeylessLoad(lambda: stack.admin(db), db, "nokey", seed=11) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = signal(config, "execute-snapshot", _blocking([f"{db}.t", f"{db}.nokey"]))
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="blocking snapshot done")
        at_completion = sum(load.ops.values())
        wait_for(lambda: sum(load.ops.values()) > at_completion + 300, what="writes after the snapshot")
        load.stop()
    run_until_caught_up(config)

    replay = keyless_replay(config, db, "nokey")
    rows = replay.rows
    assert {key for _, key, _ in replay.events} == {None}  # keyed as its streamed changes: no key
    assert 900 < len(rows) < 1300 and replay.changes_before > 10 and replay.changes_after > 100
    with stack.admin() as conn:
        source = keyless_rows(conn, db, "nokey")
    assert replay.table == source and max(source.values()) > 1  # (duplicates: a multiset)
    # source.snapshot: Debezium's order (by name: nokey, then t), first/last of the snapshot and of each table
    marks = [v["source"]["snapshot"] for v in rows]
    assert marks[0] == "first" and marks[-1] == "last_in_data_collection" and set(marks[1:-1]) == {"true"}
    t_rows = sorted(_rows(config, db, "t"), key=lambda v: v["position"])
    assert (t_rows[0]["source"]["snapshot"], t_rows[-1]["source"]["snapshot"], len(t_rows)) == \
        ("first_in_data_collection", "last", 150)
    assert rows[-1]["position"] < t_rows[0]["position"]
    windows = [m for m in markers(config) if m.get("blocking") and (m["db"], m["table"]) == (db, "nokey")]
    assert windows and all(m["key_range"] is None for m in windows)
    scanned = next(n["additionalData"] for n in notifications(config)
                   if n["id"] == sid and n["type"] == "TABLE_SCAN_COMPLETED" and n["additionalData"]["table"] ==
                   f"{db}.nokey")
    assert scanned["total_rows_scanned"] == str(len(rows))


@pytest.mark.parametrize("how", ["signal", "snapshot.mode"])
def test_a_blocking_snapshot_killed_midway_is_taken_again(stack, config, test_db, tmp_path, how):
    """SIGKILL while the rows are being written: the restarted producer takes the snapshot
    again from the stored pause point (the request is stored with it), once, and the topic
    replayed equals the table.  A signal's, or the one ``snapshot.mode: always`` takes at a
    start (the restart does not add a second)."""
    rows = 60000
    keys = _prepare(stack, config, test_db, {"t": rows}, chunk_size=200)["t"]
    config.producer.batch_size = 400  # (commits while the rows are written: some are in Kafka at the kill)
    config.snapshot.mode = "always" if how == "snapshot.mode" else None
    topic = _topic(config, test_db, "t")
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    with WriteLoad(stack.admin, test_db, "t", "single", key_space=rows + 500, seed=3) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        if how == "signal":
            sid = signal(config, "execute-snapshot", _blocking([f"{test_db}.t"]))
        else:
            wait_for(lambda: any(n["type"] == "STARTED" for n in _notifications(config)), what="the start's snapshot")
            sid = next(n["id"] for n in _notifications(config) if n["type"] == "STARTED")
        # (the topic holds the load's changes too: wait for the snapshot's own rows, committed)
        wait_for(lambda: _snapshot_rows(config, topic) > 2000, timeout=120, interval=0.5, what="rows written")
        done_before = has_notification(config, "COMPLETED", id=sid)
        proc.kill9()
        proc.start()
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=240, what="blocking snapshot done")
        load.stop()
    assert proc.stop() == 0
    run_until_caught_up(config)
    assert not done_before, "the snapshot ended before the kill"
    result = dblog_replay(config, topic)
    with stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    started = [n for n in notifications(config) if n["type"] == "STARTED" and n["id"] == sid]
    assert len(started) == 2  # taken again after the kill


def test_a_keyless_table_killed_mid_read_is_read_again_whole_and_its_last_attempt_replays(stack, config, test_db,
                                                                                         tmp_path):
    """SIGKILL while a keyless table's rows are written, writes running: the restarted producer
    reads it again from its first row (no key to resume by); the killed attempt's rows stay in
    Kafka below the new ones (at least once), and the last attempt's rows (from the last
    ``first`` mark on) with the changes after them replay to the table."""
    rows = 60000
    with stack.admin() as conn:
        create_keyless(conn, test_db, "nokey", rows)
    _prepare(stack, config, test_db, {}, chunk_size=200)
    config.producer.batch_size = 400  # (commits while the rows are written: some are in Kafka at the kill)
    topic = _topic(config, test_db, "nokey")
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    with KeylessLoad(lambda: stack.admin(test_db), test_db, "nokey", seed=5) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = signal(config, "execute-snapshot", _blocking([f"{test_db}.nokey"]))
        # (the topic holds the load's changes too: wait for the snapshot's own rows, committed)
        wait_for(lambda: _snapshot_rows(config, topic) > 2000, timeout=120, interval=0.5, what="rows written")
        done_before = has_notification(config, "COMPLETED", id=sid)
        proc.kill9()
        proc.start()
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=240, what="blocking snapshot done")
        done = sum(load.ops.values())
        wait_for(lambda: sum(load.ops.values()) > done + 200, what="writes after the snapshot")
    assert proc.stop() == 0
    run_until_caught_up(config)
    assert not done_before, "the snapshot ended before the kill"
    replay = keyless_replay(config, test_db, "nokey")
    with stack.admin() as conn:
        assert replay.table == keyless_rows(conn, test_db, "nokey")
    every = [v for _, _, v in replay.events if v["op"] == "r"]
    assert len(every) > len(replay.rows) + 1000  # the killed attempt's rows, repeated
    assert [v["source"]["snapshot"] for v in every].count("first") == 2
    assert len([n for n in notifications(config) if n["type"] == "STARTED" and n["id"] == sid]) == 2


def test_a_keyless_tables_whole_read_holds_a_batch_not_the_table(stack, config, test_db):
    """The keyless table's SELECT read unbuffered: the memory it takes is a batch's
    (``snapshot.chunk_size``), not the table's: 100,000 rows read 500 at a time peak below a
    tenth of what the same SELECT read whole holds, and give the same rows."""
    import time
    import tracemalloc

    from common.sql.sessions import row_session
    from producer.snapshot.table_reader import read_table_def, read_whole

    with stack.admin() as conn:
        create_keyless(conn, test_db, "big", 100_000)
    session = row_session(config.source)
    try:
        with stack.admin() as conn:
            tdef = read_table_def(conn, test_db, "big")
        started = time.monotonic()
        untraced = sum(len(b) for b in read_whole(session, tdef, condition=None, batch=500))
        took = time.monotonic() - started
        tracemalloc.start()
        rows, batches = Counter(), 0
        for batch in read_whole(session, tdef, condition=None, batch=500):
            assert len(batch) <= 500
            rows.update((r["x"], r["v"], r["n"]) for r in batch)
            batches += 1
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        whole = session.values(f"SELECT x, v, n FROM `{test_db}`.`big`")  # (the session takes statements again)
        buffered = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        session.close()
    assert batches == 200 and rows == Counter(whole)
    print(f"peak: {streamed} B read 500 rows at a time, {buffered} B read whole; "
          f"{untraced / took:.0f} rows/s read 500 at a time (untraced)")
    assert streamed * 10 < buffered, (streamed, buffered)


def _notifications(config) -> list[dict]:
    try:
        return notifications(config)
    except Exception:  # noqa: BLE001 - no notification yet
        return []


def _snapshot_rows(config, topic) -> int:
    """The committed op ``r`` records in ``topic`` (read_committed)."""
    try:
        return sum(1 for _, _, v in read_events(config, topic) if v["op"] == "r")
    except Exception:  # noqa: BLE001 - no topic yet
        return 0


def test_merge_job_sinks_equal_the_source_after_a_blocking_snapshot_under_writes(stack, merge_config, test_db):
    """Tables loaded before the stream, writes running while a blocking snapshot reads them
    and after it: the PostgreSQL and MySQL sinks and the clean changelog equal the source.  A
    keyless table in the same snapshot: its rows and changes are dead letters, each once (no
    table sink can hold a table without a key), and the job goes on."""
    from common.kafka.topic_reader import read_topic
    from contract.topics import clean_topic, dlq_topic
    from spark_jobs.merge_job import MergeJob
    from tests.sink_helpers import apply_clean, mysql_sink_rows, pg_sink_rows
    from tests.snapshot_helpers import write_loads

    cfg = merge_config
    kinds = {"t_single": "single", "t_composite": "composite"}
    keys = {}
    with stack.admin() as conn:
        for table, kind in kinds.items():
            keys[table] = create_table(conn, test_db, table, kind, 800)
        create_keyless(conn, test_db, "nokey", 300)
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 150
    run_until_caught_up(cfg)
    with ProducerThread(cfg), write_loads(stack, test_db, kinds, 900, min_ops=30) as loads, \
            KeylessLoad(lambda: stack.admin(test_db), test_db, "nokey", seed=4):
        sid = signal(cfg, "execute-snapshot", _blocking([f"{test_db}.{t}" for t in [*kinds, "nokey"]]))
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="blocking snapshot done")
        wait_for(lambda: all(sum(ld.ops.values()) > 200 for ld in loads), what="writes after the snapshot")
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    nokey = len(read_events(cfg, _topic(cfg, test_db, "nokey")))
    dead = [m for m in read_topic(cfg.kafka.bootstrap_servers, dlq_topic(cfg.kafka.topic_prefix))
            if b"without a key" in dict(m.headers())["cdc.dlq.reason"]]
    assert nokey > 300 and len(dead) == nokey
    for table in kinds:
        with stack.admin() as conn:
            expected = source_rows(conn, test_db, table, keys[table])
        assert pg_sink_rows(cfg, test_db, table, keys[table]) == expected, f"postgres {table}"
        assert mysql_sink_rows(stack, cfg, test_db, table, keys[table]) == expected, f"mysql {table}"
        assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, table)) == expected, f"clean {table}"


def test_cdc_snapshot_blocking_follows_it(stack, config, config_file, test_db):
    """``cdc snapshot --blocking --where ... --follow``: the signal sent, its progress drawn
    until the table is done; the rows are the filter's, marked as a blocking snapshot's."""
    import subprocess
    import sys

    from common.config import dump_config
    from tests.producer_helpers import ROOT
    _prepare(stack, config, test_db, {"t": 400})
    config_file.write_text(dump_config(config))
    with ProducerThread(config):
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(config_file), "snapshot", f"{test_db}.t",
                              "--blocking", "--where", "id < 150", "--follow", "--timeout", "120"],
                             capture_output=True, text=True, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "execute-snapshot" in out.stdout and f"done: {test_db}.t" in out.stdout
    rows = _rows(config, test_db, "t")
    assert sorted(v["after"]["id"] for v in rows) == list(range(150))
    assert {v["source"]["snapshot"] for v in rows} == {"first", "true", "last"}


def test_a_read_the_server_refuses_aborts_the_blocking_snapshot_and_streaming_goes_on(stack, config, test_db):
    """A filter that passes the checks but that the server refuses when it runs (a regular
    expression it cannot compile): the snapshot is taken again a few times, then ABORTED with
    the server's reason; the stream goes on."""
    _prepare(stack, config, test_db, {"t": 50})
    with ProducerThread(config):
        sid = signal(config, "execute-snapshot", _blocking([f"{test_db}.t"], **{"additional-conditions": [
            {"data-collection": f"{test_db}.t", "filter": "v REGEXP '('"}]}))
        wait_for(lambda: has_notification(config, "ABORTED", id=sid), timeout=120, what="the snapshot aborted")
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1000, 'after', 1)")
        wait_for(lambda: any(v["op"] == "c" for _, _, v in read_events(config, _topic(config, test_db, "t"))),
                 what="streaming goes on")
    [aborted] = [n for n in notifications(config) if n["id"] == sid and n["type"] == "ABORTED"]
    assert "read failed 5 times" in aborted["additionalData"]["reason"]
    assert not _rows(config, test_db, "t")
