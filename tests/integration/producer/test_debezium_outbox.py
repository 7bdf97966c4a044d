"""The outbox event router against Debezium's own (issue 57).

One MariaDB server, read at once by Debezium 3.6.3's MySQL connector running its EventRouter
SMT (``transforms=outbox``, ``io.debezium.transforms.outbox.EventRouter``; embedded, in a
process of its own: tests/peers/debezium_capture.py) and by our producer with
``producer.outbox`` set to the same settings (``producer.format: debezium-json``).  The same
writes to the outbox table must give the same records: the same topics, and per topic the
same keys (with their Connect schemas), values (with theirs) and headers (``id``, and the
header placements, as Kafka Connect's default ``SimpleHeaderConverter`` writes them) in the
same order.  Updates and deletes of the outbox table give nothing on either side.
"""

from __future__ import annotations

import base64
import json

import pytest

from common.kafka.topic_reader import read_topic
from contract.envelope import POSITION_HEADER
from tests.integration.producer.test_debezium_conformance import DBZ_PREFIX, DebeziumCapture, _admin
from tests.peers.conformance import json_lines
from tests.peers.debezium_capture import debezium_mariadb
from tests.producer_helpers import ProducerThread, start_at_current, wait_for

DEFAULTS = {
    "table": ("CREATE TABLE outbox (id VARCHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, "
              "aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload JSON)"),
    "dml": [
        ("INSERT INTO outbox VALUES ('4d47e190-0402-4048-bc2c-89dd54343cdc', '{order}', '1', 'OrderCreated', "
         "'{{\"id\": 1, \"lines\": [{{\"item\": \"Debezium in Action\", \"qty\": 2}}]}}'), "
         "('5e58f2a1-0000-4048-bc2c-89dd54343cdc', '{customer}', 'c-7', 'CustomerUpdated', '{{\"name\": \"Ann\"}}')"),
        "INSERT INTO outbox VALUES ('6f69a3b2-0000-4048-bc2c-89dd54343cdc', '{order}', '1', 'OrderPaid', NULL)",
        "UPDATE outbox SET type = 'OrderChanged' WHERE aggregateid = '1'",
        "DELETE FROM outbox",
        "INSERT INTO outbox VALUES ('7a7ab4c3-0000-4048-bc2c-89dd54343cdc', '{order}', '2', 'OrderCreated', '[]')",
    ],
    "dbz": {"table.fields.additional.placement": "type:header:eventType"},
    "ours": {"additional_placement": "type:header:eventType"},
    "records": 4,
}
CUSTOM = {
    "table": ("CREATE TABLE events (event_id BIGINT PRIMARY KEY, kind VARCHAR(60) NOT NULL, ref INT NOT NULL, "
              "body LONGTEXT, created BIGINT)"),
    "dml": [
        "INSERT INTO events VALUES (1, '{order}', 10, 'hello', 1700000000000), (2, '{customer}', 20, 'x', NULL)",
        "INSERT INTO events VALUES (3, '{order}', 10, '   ', 1700000000001)",  # empty: a tombstone
        "INSERT INTO events VALUES (4, '{order}', 11, NULL, 1700000000002)",   # NULL: a tombstone
        "UPDATE events SET body = 'y' WHERE event_id = 1",
        "DELETE FROM events WHERE event_id = 2",
    ],
    "dbz": {"route.by.field": "kind", "table.field.event.id": "event_id", "table.field.event.key": "ref",
            "table.field.event.payload": "body", "route.topic.regex": r"(?<kind>[a-z]+)_([0-9a-f]+)_(\d+)",
            "route.topic.replacement": "routed.${kind}.$2.$3", "route.tombstone.on.empty.payload": "true",
            "table.fields.additional.placement": "created:envelope:at,kind:header:k"},
    "ours": {"aggregate_type_column": "kind", "id_column": "event_id", "aggregate_id_column": "ref",
             "payload_column": "body", "topic_regex": r"(?<kind>[a-z]+)_([0-9a-f]+)_(\d+)",
             "topic_replacement": "routed.${kind}.$2.$3", "tombstone_on_empty_payload": True,
             "additional_placement": ["created:envelope:at", "kind:header:k"]},
    "records": 4,
}
CASES = {"defaults": DEFAULTS, "custom": CUSTOM}
#: Debezium's context headers on every record (its extended.headers.enabled, on by default since
#: 3.0: the connector's logical name, task id, kind and run id); we write none on any record
#: (docs/debezium-conformance.md).
CONTEXT_HEADERS = "__debezium.context."


@pytest.fixture(scope="module")
def debezium_server(tmp_path_factory):
    with debezium_mariadb(tmp_path_factory.mktemp("dbz-outbox"), server_id=79) as info:
        yield info


def _theirs(path) -> list[tuple]:
    out = []
    for r in json_lines(path):
        headers = {k: v for k, v in r.get("headers", {}).items() if not k.startswith(CONTEXT_HEADERS)}
        out.append([r["topic"], None if r["key"] is None else json.loads(r["key"]),
                    None if r["value"] is None else json.loads(r["value"]), headers])
    return out


def _ours(cfg, topics: list[str]) -> list[tuple]:
    out = []
    for topic in topics:
        for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
            out.append([topic, None if m.key() is None else json.loads(m.key()),
                        None if m.value() is None else json.loads(m.value()),
                        {k: base64.b64encode(v).decode() for k, v in (m.headers() or []) if k != POSITION_HEADER}])
    return out


def _same_prefix(records: list, ours: str) -> list:
    """Each side names an envelope struct after its own topic prefix (as ``source.name``): ours
    as Debezium's, for the comparison."""
    return json.loads(json.dumps(records).replace(f'"{ours}.', f'"{DBZ_PREFIX}.'))


@pytest.mark.parametrize("case", sorted(CASES))
def test_our_outbox_records_are_debeziums(config, unique, debezium_server, tmp_path, case):
    spec, server, db, cfg = CASES[case], debezium_server, unique("db"), config
    order, customer = unique("order"), unique("customer")
    cfg.source.host, cfg.source.port = server["host"], server["port"]
    cfg.source.user, cfg.source.password = server["cdc_user"], server["cdc_password"]
    cfg.source.signal_table = server["signal_table"]
    cfg.source.include_databases = [db]
    cfg.producer.format = "debezium-json"
    table = spec["table"].split()[2]
    cfg.producer.outbox = {"table": f"{db}.{table}", **spec["ours"]}
    with _admin(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    with _admin(server, db) as conn, conn.cursor() as cur:
        cur.execute(spec["table"])
    start_at_current(cfg)
    dbz = DebeziumCapture(server, db, tmp_path, **{"transforms": "outbox",
                                                   "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
                                                   **{f"transforms.outbox.{k}": v for k, v in spec["dbz"].items()}})
    try:
        with ProducerThread(cfg):
            with _admin(server, db) as conn, conn.cursor() as cur:
                for sql in spec["dml"]:
                    cur.execute(sql.format(order=order, customer=customer))
            wait_for(lambda: len(_theirs(dbz.out)) >= spec["records"], 120, what="Debezium's routed records")
            theirs = _theirs(dbz.out)
            topics = sorted({t for t, *_ in theirs})
            wait_for(lambda: len(_ours(cfg, topics)) >= spec["records"], 60, what="our routed records")
        ours = _ours(cfg, topics)
    finally:
        dbz.close()
        with _admin(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    theirs = _theirs(dbz.out)
    by_topic = sorted(theirs, key=lambda r: r[0])  # (stable: each topic's records in Debezium's order)
    print(json.dumps({"ours": ours, "theirs": by_topic}, indent=1))
    assert len(theirs) == spec["records"]
    assert _same_prefix(ours, cfg.kafka.topic_prefix) == by_topic
