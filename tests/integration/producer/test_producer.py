"""The binlog producer on the real stack: events, schema changes, startup, filters, errors."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from common.errors import SourceError
from common.sql.sessions import connect
from contract.topics import heartbeat_topic, transaction_topic
from producer.app import ProducerApp
from producer.binlog.reader import BinlogReader, Idle, ResumePoint
from producer.binlog.server import current_position
from producer.errors import BinlogPurgedError, ProducerStopped
from tests.producer_helpers import (
    ProducerThread,
    apply_changelog,
    purge_binlogs,
    read_events,
    run_sql,
    run_until_caught_up,
    start_at_current,
    wait_caught_up,
)


def _topic(cfg, db, table):
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


@pytest.mark.servers("mariadb", "mysql")
def test_insert_update_delete_are_debezium_envelopes(source_stack, config, test_db):
    run_sql(source_stack, test_db, "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)")
    start_at_current(config)
    run_sql(source_stack, test_db, "INSERT INTO items VALUES (1, 'apple', 3), (2, 'pear', 5)",
          "UPDATE items SET qty = 4 WHERE id = 1", "DELETE FROM items WHERE id = 2")
    run_until_caught_up(config)
    events = read_events(config, _topic(config, test_db, "items"))
    ops = [(k, v["op"], v["before"], v["after"]) for _, k, v in events]
    assert ops == [
        ({"id": 1}, "c", None, {"id": 1, "name": "apple", "qty": 3}),
        ({"id": 2}, "c", None, {"id": 2, "name": "pear", "qty": 5}),
        ({"id": 1}, "u", {"id": 1, "name": "apple", "qty": 3}, {"id": 1, "name": "apple", "qty": 4}),
        ({"id": 2}, "d", {"id": 2, "name": "pear", "qty": 5}, None),
    ]
    src = events[0][2]["source"]
    assert set(src) >= {"version", "connector", "name", "ts_ms", "snapshot", "db", "table", "server_id", "gtid",
                        "file", "pos", "row", "thread", "query"}
    assert (src["connector"], src["db"], src["table"], src["snapshot"], src["server_id"]) == \
        ("mysql", test_db, "items", "false", 1)
    assert src["file"].startswith("mysql-bin.") and src["pos"] > 0 and src["gtid"]
    assert [v["source"]["row"] for _, _, v in events[:2]] == [0, 1]  # two rows of one event
    positions = [v["position"] for _, _, v in events]
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert all(isinstance(v["ts_ms"], int) for _, _, v in events)


def test_primary_key_change_is_delete_then_create(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
          "INSERT INTO t VALUES (1, 'x', 10)")
    start_at_current(config)
    run_sql(stack, test_db, "UPDATE t SET b = 'y', v = 11 WHERE a = 1")
    run_until_caught_up(config)
    events = read_events(config, _topic(config, test_db, "t"))
    assert [(k, v["op"], v["before"], v["after"]) for _, k, v in events] == [
        ({"a": 1, "b": "x"}, "d", {"a": 1, "b": "x", "v": 10}, None),
        ({"a": 1, "b": "y"}, "c", None, {"a": 1, "b": "y", "v": 11}),
    ]
    assert events[0][2]["position"] < events[1][2]["position"]


def test_ddl_mid_stream_gives_following_events_the_new_schema(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))")
    start_at_current(config)
    run_sql(stack, test_db,
          "INSERT INTO t VALUES (1, 'one')",
          "ALTER TABLE t ADD COLUMN b INT DEFAULT 7",
          "INSERT INTO t VALUES (2, 'two', 8)",
          "ALTER TABLE t RENAME COLUMN a TO label",
          "UPDATE t SET label = 'uno' WHERE id = 1",
          "ALTER TABLE t MODIFY COLUMN b BIGINT",
          "INSERT INTO t VALUES (3, 'three', 9000000000)",
          "ALTER TABLE t DROP COLUMN b",
          "INSERT INTO t VALUES (4, 'four')",
          "RENAME TABLE t TO t2",
          "INSERT INTO t2 VALUES (5, 'five')",
          "TRUNCATE TABLE t2",
          "CREATE TABLE t3 (k VARCHAR(5) PRIMARY KEY)",
          "INSERT INTO t3 VALUES ('k')",
          "DROP TABLE t3")
    run_until_caught_up(config)
    # (the change events; the producer also snapshots a table after DDL that changed its rows
    # without row events, tests/integration/cdc/test_schema_changes.py)
    afters = [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "t")) if v["op"] in "cud"]
    assert afters == [
        {"id": 1, "a": "one"},
        {"id": 2, "a": "two", "b": 8},
        {"id": 1, "label": "uno", "b": 7},
        {"id": 3, "label": "three", "b": 9000000000},
        {"id": 4, "label": "four"},
    ]
    t2 = read_events(config, _topic(config, test_db, "t2"))
    assert [v["after"] for _, _, v in t2 if v["op"] in "cud"] == [{"id": 5, "label": "five"}]
    assert [(k, v["before"], v["after"]) for _, k, v in t2 if v["op"] == "t"] == [(None, None, None)]
    assert [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "t3"))] == [{"k": "k"}]
    ddls = [v["ddl"] for _, _, v in read_events(config, config.kafka.topic_prefix)]
    assert [d.split()[0].upper() for d in ddls] == ["ALTER", "ALTER", "ALTER", "ALTER", "RENAME", "TRUNCATE",
                                                    "CREATE", "DROP"]
    assert all(test_db in v["databaseName"] for _, _, v in read_events(config, config.kafka.topic_prefix))


def test_restart_decodes_old_positions_with_the_schema_of_their_time(stack, config, test_db):
    """The binlog's table maps are the schema history: DDL after the stored position
    does not change how earlier events decode."""
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))")
    start_at_current(config)
    run_sql(stack, test_db, "INSERT INTO t VALUES (1, 'one')", "ALTER TABLE t DROP COLUMN a, ADD COLUMN z DATE",
          "INSERT INTO t VALUES (2, '2024-02-29')")
    run_until_caught_up(config)  # first run reads everything after the DDL already happened
    afters = [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "t"))]
    assert afters == [{"id": 1, "a": "one"}, {"id": 2, "z": 19782}]


def test_startup_modes(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY)")
    conn = connect(config.source)
    file, pos = current_position(conn)
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid_before = cur.fetchone()[0]
    conn.close()
    run_sql(stack, test_db, "INSERT INTO t VALUES (1)")
    time.sleep(1.1)
    ts_between = datetime.now(timezone.utc).isoformat()
    time.sleep(1.1)
    run_sql(stack, test_db, "INSERT INTO t VALUES (2)")
    base = config.kafka.topic_prefix

    def ids(mode: str, **startup) -> list[int]:
        cfg = config.model_copy(deep=True)
        cfg.kafka.topic_prefix = cfg.producer.name = f"{base}_{mode}"
        cfg.producer.startup.mode = mode
        cfg.source.include_databases = [test_db]  # ("earliest" reads the whole binlog: other tests' rows too)
        for k, v in startup.items():
            setattr(cfg.producer.startup, k, v)
        run_until_caught_up(cfg)
        return [v["after"]["id"] for _, _, v in read_events(cfg, _topic(cfg, test_db, "t"))]

    assert ids("position", file=file, pos=pos) == [1, 2]
    assert ids("gtid", gtid_set=gtid_before) == [1, 2]
    assert ids("timestamp", timestamp=ts_between) == [2]
    assert ids("earliest")[-2:] == [1, 2]
    assert ids("latest") == []


def test_capture_filters_and_event_filters(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE keep_a (id INT PRIMARY KEY, secret VARCHAR(10), v INT)",
          "CREATE TABLE keep_b (id INT PRIMARY KEY)", "CREATE TABLE skip_me (id INT PRIMARY KEY)",
          "CREATE TABLE log_x (id INT PRIMARY KEY)")
    config.source.include_tables = [rf"{test_db}\.keep_.*", rf"{test_db}\.log_x"]
    config.source.exclude_tables = [rf"{test_db}\.keep_b"]
    config.source.exclude_columns = {f"{test_db}.keep_a": ["secret"]}
    config.source.ignore_events = {rf"{test_db}\.log_.*": ["delete", "truncate"]}
    start_at_current(config)
    run_sql(stack, test_db, "INSERT INTO keep_a VALUES (1, 'pw', 5)", "INSERT INTO keep_b VALUES (1)",
          "INSERT INTO skip_me VALUES (1)", "INSERT INTO log_x VALUES (1), (2)", "DELETE FROM log_x WHERE id = 1",
          "TRUNCATE TABLE log_x", "ALTER TABLE keep_a ADD COLUMN w INT")
    run_until_caught_up(config)
    assert [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "keep_a"))] == [{"id": 1, "v": 5}]
    assert read_events(config, _topic(config, test_db, "keep_b")) == []
    assert read_events(config, _topic(config, test_db, "skip_me")) == []
    assert [v["op"] for _, _, v in read_events(config, _topic(config, test_db, "log_x"))] == ["c", "c"]
    ddls = [v["ddl"] for _, _, v in read_events(config, config.kafka.topic_prefix)]
    assert len(ddls) == 1 and ddls[0].startswith("ALTER TABLE keep_a")


def test_json_format(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(30,10), b VARBINARY(4))")
    config.producer.format = "json"
    start_at_current(config)
    run_sql(stack, test_db, "INSERT INTO t VALUES (18446744073709551615, 12345678901234567890.0123456789, 0x00ff)")
    run_until_caught_up(config)
    [(_, key, value)] = read_events(config, _topic(config, test_db, "t"))
    assert key == {"id": "18446744073709551615"}
    assert value["after"] == {"id": "18446744073709551615", "d": "12345678901234567890.0123456789", "b": "AP8="}


def test_misconfigured_server_is_refused_with_the_setting_and_fix(stack, config):
    run_sql(stack, None, "SET GLOBAL binlog_format = 'STATEMENT'", "SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        with pytest.raises(SourceError) as err:
            ProducerApp(config).run(idle_exit_s=1)
    finally:
        run_sql(stack, None, "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'")
    text = str(err.value)
    assert "binlog_format" in text and "SET GLOBAL binlog_format = 'ROW'" in text
    assert "binlog_row_image" in text and "FULL" in text


def test_start_in_a_purged_binlog_is_refused(stack, config, test_db):
    conn = connect(config.source)
    old_file, old_pos = current_position(conn)
    conn.close()
    with stack.admin() as admin:
        purge_binlogs(admin)
    config.producer.startup.mode = "position"
    config.producer.startup.file, config.producer.startup.pos = old_file, old_pos
    with pytest.raises(BinlogPurgedError) as err:
        ProducerApp(config).run(idle_exit_s=1)
    assert old_file in str(err.value) and "no longer on the server" in str(err.value)


def test_unknown_startup_requirements_are_reported(config):
    config.producer.startup.mode = "gtid"
    with pytest.raises(ProducerStopped, match="gtid_set"):
        ProducerApp(config).run(idle_exit_s=1)
    config.producer.startup.gtid_set = "not-a-gtid"
    with pytest.raises(SourceError, match="not a mariadb GTID set|not a mysql GTID set"):
        ProducerApp(config).run(idle_exit_s=1)


def test_changelog_applied_in_order_equals_the_table(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n DECIMAL(8,2))")
    start_at_current(config)
    import random
    rnd = random.Random(5)
    live: set[int] = set()
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        for i in range(600):
            k = rnd.randrange(80)
            action = rnd.random()
            if k not in live:
                cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (k, f"v{i}", rnd.randrange(10000) / 100))
                live.add(k)
            elif action < 0.4:
                cur.execute("DELETE FROM t WHERE id = %s", (k,))
                live.discard(k)
            elif action < 0.6 and (k + 100) not in live:
                cur.execute("UPDATE t SET id = %s WHERE id = %s", (k + 100, k))
                live.discard(k)
                live.add(k + 100)
            else:
                cur.execute("UPDATE t SET v = %s, n = n + 1 WHERE id = %s", (f"u{i}", k))
        cur.execute("SELECT id, v, n FROM t")
        expected = {(("id", r[0]),): {"id": r[0], "v": r[1], "n": Decimal(r[2])} for r in cur.fetchall()}
    run_until_caught_up(config)
    assert apply_changelog(read_events(config, _topic(config, test_db, "t"))) == expected


def test_heartbeats_on_idle_commit_the_position(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY)")
    config.producer.heartbeat_interval_s = 0.3
    start_at_current(config)
    run_until_caught_up(config, idle_s=2.0)
    import json

    from common.kafka.topic_reader import read_topic
    beats = [(m.key(), json.loads(m.value())) for m in
             read_topic(config.kafka.bootstrap_servers, heartbeat_topic(config.kafka.topic_prefix))]
    assert len(beats) >= 2
    assert all(k == config.producer.name.encode() and b["file"].startswith("mysql-bin.") and b["ts_ms"] > 0
               for k, b in beats)


def test_transaction_metadata_begin_and_end_with_counts(stack, config, test_db):
    import json

    from common.kafka.topic_reader import read_topic
    run_sql(stack, test_db, "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY)")
    config.producer.transaction_metadata = True
    start_at_current(config)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO a VALUES (1), (2), (3)")
        cur.execute("INSERT INTO b VALUES (1)")
        cur.execute("COMMIT")
        cur.execute("INSERT INTO a VALUES (4)")
    run_until_caught_up(config)
    txns = [json.loads(m.value()) for m in read_topic(config.kafka.bootstrap_servers,
                                                      transaction_topic(config.kafka.topic_prefix))]
    assert [t["status"] for t in txns] == ["BEGIN", "END", "BEGIN", "END"]
    assert txns[0]["id"] == txns[1]["id"] != txns[2]["id"]
    assert txns[1]["event_count"] == 4
    assert sorted((c["data_collection"], c["event_count"]) for c in txns[1]["data_collections"]) == \
        [(f"{test_db}.a", 3), (f"{test_db}.b", 1)]
    assert txns[3]["event_count"] == 1


def test_an_idle_binlog_moves_the_resume_point_to_its_end(stack, config):
    """A new binlog file begins with events the reader does not get (GTID list, binlog
    checkpoint); the server's heartbeats carry its binlog end, so the resume point the
    reader reports when idle reaches it (read-only windows close by it where GTIDs do not)."""
    conn = connect(config.source)
    try:
        file, pos = current_position(conn)
        reader = BinlogReader(config.source, ResumePoint(file, pos), is_mariadb=True, heartbeat_s=0.2)
        with stack.admin() as admin, admin.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        end = current_position(conn)
        seen = None
        deadline = time.monotonic() + 20
        for item in reader:
            if isinstance(item, Idle) and item.resume is not None:
                seen = (item.resume.file, item.resume.pos)
                # (MariaDB writes the new file's binlog checkpoint event a moment after the
                # FLUSH returns: the end is where the binlog ends now)
                end = current_position(conn)
                if seen == end or time.monotonic() > deadline:
                    break
        reader.close()
    finally:
        conn.close()
    assert seen == end, f"idle at {seen}, the binlog ends at {end}"


def test_an_idle_stream_commits_a_resume_point_past_events_that_produced_nothing(stack, config, test_db):
    """Events after the last record produced that produce nothing themselves (a table not
    captured; the snapshot's marker rows deleted) still move the stored resume point once
    the stream is idle: it reaches the binlog's end, so ``cdc status`` shows no lag and a
    restart does not read them again.  (It stayed at the last record's transaction.)"""
    run_sql(stack, test_db, "CREATE TABLE kept (id INT PRIMARY KEY)", "CREATE TABLE other (id INT PRIMARY KEY)")
    config.source.include_tables = [rf"{test_db}\.kept"]
    start_at_current(config)
    with ProducerThread(config), stack.admin(test_db) as conn:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO kept VALUES (1)")
        wait_caught_up(config, conn, timeout=30)  # the record's transaction committed
        with conn.cursor() as cur:
            cur.execute("INSERT INTO other VALUES (1), (2)")
            cur.execute("UPDATE other SET id = id + 10")
        wait_caught_up(config, conn, timeout=30)
    assert [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "kept"))] == [{"id": 1}]
