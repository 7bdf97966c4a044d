"""Debezium's column controls on the real stack (issue 57): ``source.column_exclude_list`` /
``column_include_list``, ``source.message_key_columns`` and ``producer.skipped_operations``,
in the binlog stream and in snapshots, in both formats (Avro and ``debezium-json``), on every
compiled path the producer takes by default (the binlog image encoder steps aside for a table
whose events leave columns out; the chunk reads keep theirs, selecting only what is captured).
"""

from __future__ import annotations

import json

import pytest

from common.kafka.topic_reader import read_topic
from producer.app import ProducerApp
from producer.errors import ColumnControlsError
from tests.producer_helpers import ProducerThread, read_events, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot


def _events(cfg, db: str, table: str) -> list[tuple[dict | None, dict | None, list[str] | None]]:
    """``(key, value, the value's 'after' field names in its schema)`` of every record of a table
    topic, in either format (the schema's fields: the Avro writer schema's, the Connect schema's)."""
    topic = f"{cfg.kafka.topic_prefix}.{db}.{table}"
    if cfg.producer.format == "avro":
        return [(k, v, None) for _, k, v in read_events(cfg, topic)]
    out = []
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
        if m.value() is None:
            continue  # (a tombstone)
        k, v = json.loads(m.key()) if m.key() else None, json.loads(m.value())
        after = next(f for f in v["schema"]["fields"] if f["field"] == "after")
        out.append((None if k is None else k["payload"], v["payload"], [f["field"] for f in after["fields"]]))
    return out


def _statements_on(stack, db: str, table: str) -> list[str]:
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log WHERE command_type = 'Query' "
                    "AND CONVERT(argument USING utf8mb4) LIKE %s", (f"SELECT%`{db}`.`{table}`%",))
        return [r[0] for r in cur.fetchall()]


@pytest.mark.parametrize("fmt", ["avro", "debezium-json"])
def test_excluded_columns_and_message_key_in_stream_and_snapshot(stack, config, test_db, fmt):
    run_sql(stack, test_db,
          "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(40), secret VARCHAR(20), photo BLOB)",
          "CREATE TABLE nopk (code VARCHAR(10) NOT NULL, qty INT, note VARCHAR(10))",
          "INSERT INTO users VALUES (1, 'a@x', 'pw1', 0x01), (2, 'b@x', 'pw2', NULL)",
          "INSERT INTO nopk VALUES ('k1', 1, 'n1'), ('k2', 2, 'n2')")
    config.producer.format = fmt
    config.source.include_databases = [test_db]
    config.source.column_exclude_list = [rf"{test_db}\.users\.(secret|photo)", rf"{test_db}\.NOPK\.note"]
    config.source.message_key_columns = f"{test_db}.nopk:code"
    config.snapshot.chunk_size = 1
    start_at_current(config)
    with ProducerThread(config):
        run_sql(stack, test_db, "INSERT INTO users VALUES (3, 'c@x', 'pw3', 0x03)",
              "UPDATE users SET secret = 'new', email = 'c2@x' WHERE id = 3", "DELETE FROM users WHERE id = 2",
              "INSERT INTO nopk VALUES ('k3', 3, 'n3')", "UPDATE nopk SET qty = 30, note = 'x' WHERE code = 'k3'",
              "UPDATE nopk SET code = 'k4' WHERE code = 'k3'", "DELETE FROM nopk WHERE code = 'k1'")
        run_sql(stack, None, "SET GLOBAL log_output = 'TABLE'", "TRUNCATE TABLE mysql.general_log",
              "SET GLOBAL general_log = 1")
        try:
            sid = snapshot(config, [f"{test_db}.users", f"{test_db}.nopk"])
            wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=90, what="snapshot completed")
        finally:
            run_sql(stack, None, "SET GLOBAL general_log = 0")
    users, nopk = _events(config, test_db, "users"), _events(config, test_db, "nopk")
    assert [(k, v["op"], v["before"], v["after"]) for k, v, _ in users] == [
        ({"id": 3}, "c", None, {"id": 3, "email": "c@x"}),
        ({"id": 3}, "u", {"id": 3, "email": "c@x"}, {"id": 3, "email": "c2@x"}),
        ({"id": 2}, "d", {"id": 2, "email": "b@x"}, None),
        ({"id": 1}, "r", None, {"id": 1, "email": "a@x"}),
        ({"id": 3}, "r", None, {"id": 3, "email": "c2@x"}),
    ]
    assert [(k, v["op"], v["after"]) for k, v, _ in nopk] == [
        ({"code": "k3"}, "c", {"code": "k3", "qty": 3}),
        ({"code": "k3"}, "u", {"code": "k3", "qty": 30}),
        ({"code": "k3"}, "d", None),  # a change of the message key: delete + create, as Debezium
        ({"code": "k4"}, "c", {"code": "k4", "qty": 30}),
        ({"code": "k1"}, "d", None),
        ({"code": "k2"}, "r", {"code": "k2", "qty": 2}),  # the snapshot is cut on the message key
        ({"code": "k4"}, "r", {"code": "k4", "qty": 30}),
    ]
    if fmt == "debezium-json":  # the writer schemas leave the columns out too
        assert {tuple(f) for _, _, f in users} == {("id", "email")}
        assert {tuple(f) for _, _, f in nopk} == {("code", "qty")}
    # The chunk reads SELECT only the captured columns.
    reads = _statements_on(stack, test_db, "users") + _statements_on(stack, test_db, "nopk")
    chunk_reads = [s for s in reads if "`email`" in s or "`qty`" in s]
    assert chunk_reads, reads
    assert not [s for s in chunk_reads if "secret" in s or "photo" in s or "note" in s], chunk_reads


def test_include_list_keeps_only_the_listed_columns(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT, c INT)")
    config.source.include_databases = [test_db]
    config.source.column_include_list = [rf"{test_db}\.t\.(id|b)"]
    start_at_current(config)
    run_sql(stack, test_db, "INSERT INTO t VALUES (1, 2, 3, 4)")
    run_until_caught_up(config)
    assert [v["after"] for _, v, _ in _events(config, test_db, "t")] == [{"id": 1, "b": 3}]


@pytest.mark.parametrize("skipped, ops", [("u,d,t", ["c"]), ("c", ["u", "d", "t"]), ("none", ["c", "u", "d", "t"])])
def test_skipped_operations(stack, config, test_db, skipped, ops):
    run_sql(stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    config.source.include_databases = [test_db]
    config.producer.skipped_operations = config.producer.model_validate({"skipped_operations": skipped}) \
        .skipped_operations
    start_at_current(config)
    run_sql(stack, test_db, "INSERT INTO t VALUES (1, 1)", "UPDATE t SET v = 2", "DELETE FROM t", "TRUNCATE TABLE t")
    run_until_caught_up(config)
    assert [v["op"] for _, v, _ in _events(config, test_db, "t")] == ops


def test_an_unknown_message_key_column_stops_the_start_naming_the_setting(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE nopk (code VARCHAR(10), qty INT)")
    config.source.include_databases = [test_db]
    config.source.message_key_columns = f"{test_db}.nopk:kode"
    with pytest.raises(ColumnControlsError) as err:
        ProducerApp(config).run(idle_exit_s=1)
    assert "source.message_key_columns" in str(err.value) and "'kode'" in str(err.value)
    assert f"{test_db}.nopk" in str(err.value)
