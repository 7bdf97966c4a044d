"""The outbox event router (``producer.outbox``, Debezium's EventRouter) on the real stack:
a consumer reads the routed topics (issue 57)."""

from __future__ import annotations

import json

import pytest

from common.errors import ConfigError
from confluent_kafka.admin import AdminClient

from common.kafka.clients import base_config
from common.kafka.topic_reader import read_topic
from contract.envelope import POSITION_HEADER
from producer.app import ProducerApp
from tests.producer_helpers import ProducerThread, decoder, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

OUTBOX = ("CREATE TABLE outbox (id VARCHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, "
          "aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload LONGTEXT)")


def _routed(cfg, topic: str) -> list[tuple]:
    """``(key, value, headers)`` of each record of a routed topic, keys and values decoded."""
    dec = decoder(cfg) if cfg.producer.format == "avro" else None
    out = []
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
        key, value = m.key(), m.value()
        if dec is not None:
            key, value = (None if key is None else dec.decode(key)), (None if value is None else dec.decode(value))
        else:
            key, value = (None if key is None else json.loads(key)), (None if value is None else json.loads(value))
        out.append((key, value, {k: v for k, v in (m.headers() or []) if k != POSITION_HEADER}))
    return out


def _topics(cfg) -> set[str]:
    return set(AdminClient(base_config(cfg.kafka)).list_topics(timeout=10).topics)


@pytest.mark.parametrize("fmt", ["avro", "debezium-json"])
def test_outbox_inserts_are_routed_keyed_by_aggregate_with_the_id_header(stack, config, test_db, unique, fmt):
    order, customer = unique("Order"), unique("Customer")
    run_sql(stack, test_db, OUTBOX, "CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    config.producer.format = fmt
    config.source.include_databases = [test_db]
    config.producer.outbox = {"table": f"{test_db}.outbox", "additional_placement": "type:header:eventType"}
    start_at_current(config)
    with ProducerThread(config):
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            cur.execute("INSERT INTO orders VALUES (1, 100)")
            cur.execute("INSERT INTO outbox VALUES ('e-1', %s, '1', 'OrderCreated', '{\"id\": 1, \"total\": 100}'),"
                        " ('e-2', %s, 'c7', 'CustomerUpdated', '{\"name\": \"Ann\"}')", (order, customer))
            conn.commit()
            cur.execute("INSERT INTO outbox VALUES ('e-3', %s, '1', 'OrderPaid', NULL)", (order,))
            cur.execute("UPDATE outbox SET type = 'changed' WHERE id = 'e-1'")  # ignored, with a warning
            cur.execute("DELETE FROM outbox")  # ignored
            cur.execute("INSERT INTO orders VALUES (2, 200)")
            conn.commit()
        wait_for(lambda: len(_routed(config, f"outbox.event.{order}")) == 2, 60, what="the routed order events")
        wait_for(lambda: len(_routed(config, f"{config.kafka.topic_prefix}.{test_db}.orders")) >= 2, 60,
                 what="the orders table's events")
    orders, customers = _routed(config, f"outbox.event.{order}"), _routed(config, f"outbox.event.{customer}")
    if fmt == "debezium-json":
        string = {"type": "string", "optional": False}
        assert [k for k, _, _ in orders] == [{"schema": string, "payload": "1"}] * 2
        assert [v for _, v, _ in orders] == [
            {"schema": {"type": "string", "optional": True}, "payload": '{"id": 1, "total": 100}'},
            {"schema": {"type": "string", "optional": True}, "payload": None}]  # (a NULL payload: no tombstone)
        assert customers[0][:2] == ({"schema": string, "payload": "c7"},
                                    {"schema": {"type": "string", "optional": True}, "payload": '{"name": "Ann"}'})
    else:  # Avro: the columns' values with their Avro types; a NULL payload writes no value
        assert [(k, v) for k, v, _ in orders] == [("1", '{"id": 1, "total": 100}'), ("1", None)]
        assert [(k, v) for k, v, _ in customers] == [("c7", '{"name": "Ann"}')]
    assert [h for _, _, h in orders] == [{"id": b"e-1", "eventType": b"OrderCreated"},
                                         {"id": b"e-3", "eventType": b"OrderPaid"}]
    assert customers[0][2] == {"id": b"e-2", "eventType": b"CustomerUpdated"}
    # The outbox table has no change topic of its own; the other tables are untouched.
    assert f"{config.kafka.topic_prefix}.{test_db}.outbox" not in _topics(config)
    assert len(_routed(config, f"{config.kafka.topic_prefix}.{test_db}.orders")) == 2


def test_envelope_placement_custom_route_and_tombstones(stack, config, test_db, unique):
    kind = unique("inv")
    run_sql(stack, test_db, "CREATE TABLE events (event_id BIGINT PRIMARY KEY, kind VARCHAR(60) NOT NULL, "
                          "ref INT NOT NULL, body VARCHAR(200), created INT)")
    config.producer.format = "debezium-json"
    config.source.include_databases = [test_db]
    config.producer.outbox = {
        "table": f"{test_db}.events", "id_column": "event_id", "aggregate_type_column": "kind",
        "aggregate_id_column": "ref", "payload_column": "body", "topic_regex": r"(?<kind>[a-z]+)_([0-9a-f]+)_(\d+)",
        "topic_replacement": f"{config.kafka.topic_prefix}.routed.${{kind}}.$2", "tombstone_on_empty_payload": True,
        "additional_placement": ["created:envelope:at"]}
    start_at_current(config)
    run_sql(stack, test_db,
            f"INSERT INTO events VALUES (7, '{kind}', 70, 'hello', 1700), (8, '{kind}', 70, '  ', 1800)")
    run_until_caught_up(config)
    _, run, _ = kind.split("_")
    (k1, v1, h1), (k2, v2, h2) = _routed(config, f"{config.kafka.topic_prefix}.routed.inv.{run}")
    assert k1 == k2 == {"schema": {"type": "int32", "optional": False}, "payload": 70}
    assert v1 == {"schema": {"type": "struct", "fields": [{"type": "string", "optional": True, "field": "payload"},
                                                          {"type": "int32", "optional": True, "field": "at"}],
                             "optional": False,
                             "name": f"{config.kafka.topic_prefix}.{test_db}.events.{kind}.Value"},
                  "payload": {"payload": "hello", "at": 1700}}
    assert v2 is None and h1 == {"id": b"7"} and h2 == {"id": b"8"}  # an empty payload: a tombstone


def test_bad_outbox_settings_stop_the_start_naming_them(stack, config, test_db):
    run_sql(stack, test_db, OUTBOX)
    config.source.include_databases = [test_db]
    config.producer.outbox = {"table": f"{test_db}.outbox", "payload_column": "body"}
    with pytest.raises(ConfigError, match=r"producer\.outbox\.payload_column: 'body' is not a column"):
        ProducerApp(config).run(max_events=1, idle_exit_s=1)
    config.producer.outbox = {"table": f"{test_db}.outbox", "topic_replacement": "x.${aggregate}"}
    with pytest.raises(ConfigError, match=r"producer\.outbox\.topic_replacement"):
        ProducerApp(config)


def test_a_snapshot_of_the_outbox_table_routes_its_rows(stack, config, test_db, unique):
    """Debezium routes its snapshot's reads of the outbox table as inserts; so do we (the chunk
    reads leave its rows as values for the router, whatever the format)."""
    order = unique("Order")
    run_sql(stack, test_db, OUTBOX,
          f"INSERT INTO outbox VALUES ('e-1', '{order}', '1', 'OrderCreated', 'a'), "
          f"('e-2', '{order}', '2', 'OrderCreated', 'b'), ('e-3', '{order}', '1', 'OrderPaid', 'c')")
    config.source.include_databases = [test_db]
    config.snapshot.chunk_size = 2
    config.producer.outbox = {"table": f"{test_db}.outbox"}
    start_at_current(config)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.outbox"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), 90, what="snapshot completed")
    routed = _routed(config, f"outbox.event.{order}")
    assert [(k, v, h["id"]) for k, v, h in routed] == [("1", "a", b"e-1"), ("2", "b", b"e-2"), ("1", "c", b"e-3")]


def test_ddl_and_truncate_of_the_outbox_table_route_nothing_again(stack, config, test_db, unique):
    """A DDL that rewrites rows would snapshot a table by itself, a TRUNCATE write a truncate
    event on its change topic: the outbox table has neither (its rows are events, routed once)."""
    order = unique("Order")
    run_sql(stack, test_db, OUTBOX)
    config.source.include_databases = [test_db]
    config.producer.outbox = {"table": f"{test_db}.outbox"}
    start_at_current(config)
    run_sql(stack, test_db, f"INSERT INTO outbox VALUES ('e-1', '{order}', '1', 'OrderCreated', 'a')",
          "ALTER TABLE outbox ADD COLUMN tenant INT NOT NULL DEFAULT 7",
          "TRUNCATE TABLE outbox",
          f"INSERT INTO outbox VALUES ('e-2', '{order}', '1', 'OrderPaid', 'b', 8)")
    run_until_caught_up(config, idle_s=3)
    assert [(k, v, h["id"]) for k, v, h in _routed(config, f"outbox.event.{order}")] == [
        ("1", "a", b"e-1"), ("1", "b", b"e-2")]
    assert f"{config.kafka.topic_prefix}.{test_db}.outbox" not in _topics(config)


def test_cdc_verify_leaves_the_outbox_table_out(stack, config, test_db):
    """Its rows are routed events, not a table the sinks hold: verify's captured tables skip it."""
    from cdc.verify.discovery import source_tables

    run_sql(stack, test_db, OUTBOX, "CREATE TABLE orders (id INT PRIMARY KEY)")
    config.source.include_databases = [test_db]
    with stack.admin() as conn:
        assert (test_db, "outbox") in source_tables(conn, config, None)[0]
        config.producer.outbox = {"table": f"{test_db}.outbox"}
        assert source_tables(conn, config, None)[0] == [(test_db, "orders")]


def test_envelope_placement_in_avro(stack, config, test_db, unique):
    kind = unique("inv")
    run_sql(stack, test_db, "CREATE TABLE events (id BIGINT PRIMARY KEY, aggregatetype VARCHAR(60) NOT NULL, "
                          "aggregateid INT NOT NULL, payload VARCHAR(200), created INT)")
    config.source.include_databases = [test_db]
    config.producer.outbox = {"table": f"{test_db}.events", "additional_placement": "created:envelope:at"}
    start_at_current(config)
    run_sql(stack, test_db,
            f"INSERT INTO events VALUES (7, '{kind}', 70, 'hello', 1700), (8, '{kind}', 71, NULL, NULL)")
    run_until_caught_up(config)
    assert [(k, v, h) for k, v, h in _routed(config, f"outbox.event.{kind}")] == [
        (70, {"payload": "hello", "at": 1700}, {"id": b"7"}), (71, {"payload": None, "at": None}, {"id": b"8"})]
