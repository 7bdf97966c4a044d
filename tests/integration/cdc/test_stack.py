"""The embedded stack really runs: binlog, broker, PostgreSQL, lifecycle."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pymysql
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc.stack.kafka_broker import node_pids
from cdc.stack.manager import read_stack, stack_down, stack_status, stack_up
from cdc.stack.process import pid_alive
from common.config import load_config
from common.kafka.clients import ensure_topics
from common.kafka.offsets import end_offsets


def _master_position(conn) -> tuple[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], row[1]


def test_binlog_row_events_with_column_names(stack, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(50), qty INT)")
        log_file, log_pos = _master_position(conn)
        cur.execute("INSERT INTO items VALUES (1, 'apple', 3), (2, 'pear', 5)")
        cur.execute("UPDATE items SET qty = 4 WHERE id = 1")
        cur.execute("DELETE FROM items WHERE id = 2")
    m = stack.mysql
    reader = BinLogStreamReader(
        connection_settings={"host": m["host"], "port": m["port"], "user": m["cdc_user"], "password": m["cdc_password"]},
        server_id=4000 + uuid.uuid4().int % 1000, log_file=log_file, log_pos=log_pos, resume_stream=True,
        blocking=False, only_schemas=[test_db], only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    seen = []
    try:
        for ev in reader:
            for row in ev.rows:
                seen.append((type(ev).__name__, {k: v for k, v in row.items() if "none_sources" not in k}))
    finally:
        reader.close()
    assert seen == [
        ("WriteRowsEvent", {"values": {"id": 1, "name": "apple", "qty": 3}}),
        ("WriteRowsEvent", {"values": {"id": 2, "name": "pear", "qty": 5}}),
        ("UpdateRowsEvent", {"before_values": {"id": 1, "name": "apple", "qty": 3},
                             "after_values": {"id": 1, "name": "apple", "qty": 4}}),
        ("DeleteRowsEvent", {"values": {"id": 2, "name": "pear", "qty": 5}}),
    ]


def test_server_has_the_binlog_settings_cdc_needs(stack):
    with stack.cdc() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@server_id")
        assert cur.fetchone() == (1, "ROW", "FULL", "FULL", 1)


def test_cdc_user_has_least_privilege(stack, test_db):
    signal = stack.mysql["signal_table"]
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with stack.cdc() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{test_db}`.t")  # may read every table
        sid = uuid.uuid4().hex
        cur.execute(f"INSERT INTO {signal} (id, type, data) VALUES (%s, 'log', '{{}}')", (sid,))
        cur.execute(f"DELETE FROM {signal} WHERE id = %s", (sid,))
        for stmt in (f"INSERT INTO `{test_db}`.t VALUES (1)", f"UPDATE {signal} SET type = 'x'",
                     f"DROP TABLE `{test_db}`.t", f"CREATE DATABASE `{test_db}_x`"):
            with pytest.raises(pymysql.err.OperationalError) as err:
                cur.execute(stmt)
            assert err.value.args[0] in (1142, 1044), stmt  # command denied / access denied


def test_signal_table_has_debezium_shape(stack):
    db, table = stack.mysql["signal_table"].split(".")
    with stack.cdc() as conn, conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE, COLUMN_KEY FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table))
        cols = cur.fetchall()
    assert [c[0] for c in cols] == ["id", "type", "data"]
    assert cols[0][1:] == ("varchar", "NO", "PRI")
    assert cols[1][1:3] == ("varchar", "NO")


def test_produce_consume_round_trip_with_idempotent_producer_and_group(stack, config, topic):
    ensure_topics(config.kafka, [topic], partitions=3)
    producer = Producer({"bootstrap.servers": stack.bootstrap, "enable.idempotence": True, "acks": "all"})
    sent = {f"k{i}": f"v{i}" for i in range(300)}
    for k, v in sent.items():
        producer.produce(topic, key=k.encode(), value=v.encode())
    assert producer.flush(30) == 0
    group = f"g-{topic}"
    got: dict[str, str] = {}
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got[msg.key().decode()] = msg.value().decode()
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    consumer.close()
    assert got == sent
    # The group's committed offsets add up to every record read.
    assert sum(tp.offset for tp in committed) == len(sent)


@pytest.mark.parametrize("transactional", [False, True])
def test_end_offsets_reach_the_true_end_with_many_record_batches(stack, config, topic, transactional):
    ensure_topics(config.kafka, [topic], partitions=2)
    conf = {"bootstrap.servers": stack.bootstrap, "enable.idempotence": True, "linger.ms": 500,
            "batch.num.messages": 100000}
    if transactional:
        conf["transactional.id"] = f"tx-{topic}"
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
    counts = {0: 0, 1: 0}
    for round_ in range(3):
        if transactional:
            producer.begin_transaction()
        for i in range(1000):
            part = i % 2
            producer.produce(topic, value=b"x" * 50, partition=part)
            counts[part] += 1
        if transactional:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
    # Transactions add one commit marker per transaction to each partition; the coordinator writes
    # the last one after it answered the commit, so the ends are asked until they are there (30 s).
    want = {p: counts[p] + (3 if transactional else 0) for p in (0, 1)}
    deadline = time.monotonic() + 30
    ends = end_offsets(stack.bootstrap, [(topic, 0), (topic, 1)])
    while any(ends[(topic, p)][1] < want[p] for p in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.02)
        ends = end_offsets(stack.bootstrap, [(topic, 0), (topic, 1)])
    for part in (0, 1):
        low, end = ends[(topic, part)]
        expected = want[part]
        assert (low, end) == (0, expected)
        # Reading from low to end yields every record (and stops there).
        consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"r-{topic}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, part, low)])
        n, last = 0, -1
        deadline = time.monotonic() + 30
        while last < end - (2 if transactional else 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                n += 1
                last = msg.offset()
        consumer.close()
        assert n == counts[part]


def test_postgres_reachable(stack):
    with psycopg.connect(stack.pg_dsn) as conn:
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)


def test_stack_up_twice_is_harmless_and_down_leaves_nothing(tmp_path):
    state = tmp_path / "own-stack"
    first = stack_up(state)
    try:
        pids = {part: first.data[part]["pid"] for part in ("mysql", "postgres")}
        pids["kafka"] = first.data["kafka"]["nodes"][0]["pid"]
        assert all(pid_alive(p) for p in pids.values())
        with pymysql.connect(host="127.0.0.1", port=first.mysql["port"], user="root",
                             password=first.mysql["admin_password"], autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE keepme")
        admin = AdminClient({"bootstrap.servers": first.kafka["bootstrap_servers"]})
        admin.create_topics([NewTopic("keepme", 3, 1)])["keepme"].result(30)
        second = stack_up(state)
        again = {part: second.data[part]["pid"] for part in ("mysql", "postgres")}
        assert {**again, "kafka": second.data["kafka"]["nodes"][0]["pid"]} == pids  # nothing restarted
        assert second.mysql["port"] == first.mysql["port"]
        cfg = load_config(state / "cdc.yaml")
        assert cfg.source.port == first.mysql["port"] and cfg.kafka.bootstrap_servers == first.kafka["bootstrap_servers"]
        assert cfg.sinks.postgres.enabled and cfg.sinks.postgres.dsn.get_secret_value() == first.postgres["dsn"]
        assert all(ok for ok, _ in stack_status(state).values())
        assert json.loads((state / "stack.json").read_text())["mysql"]["pid"] == pids["mysql"]
        assert oct((state / "stack.json").stat().st_mode & 0o777) == "0o600"  # holds passwords
    finally:
        stopped = stack_down(state)
    assert sorted(stopped) == ["kafka", "mysql", "postgres"]
    assert not any(pid_alive(p) for p in pids.values())
    # A later 'up' reuses the data: the database and the topic created above are still there.
    again = stack_up(state)
    try:
        with pymysql.connect(host="127.0.0.1", port=again.mysql["port"], user="root",
                             password=again.mysql["admin_password"]) as conn, conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'keepme'")
            assert cur.fetchone() == ("keepme",)
        topics = AdminClient({"bootstrap.servers": again.kafka["bootstrap_servers"]}).list_topics(timeout=30).topics
        assert len(topics["keepme"].partitions) == 3
        assert again.notes == []  # (no loss reported)
    finally:
        stack_down(state)
    data = read_stack(state)
    assert not any(pid_alive(p) for p in [data["mysql"]["pid"], data["postgres"]["pid"], *node_pids(data["kafka"])])
