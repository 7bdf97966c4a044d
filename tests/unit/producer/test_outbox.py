"""The outbox event router's settings and routing (producer/events/outbox.py), pure."""

from __future__ import annotations

import pytest

from common.config import CDCConfig, OutboxConfig
from producer.errors import OutboxError
from producer.events.outbox import OutboxRouter, header_text, java_regex, java_replacement
from producer.table_schema import ColumnDef, TableDef


def _router(**settings) -> OutboxRouter:
    return OutboxRouter(OutboxConfig(table="shop.outbox", **settings), "cdc")


def _table(*names: str) -> TableDef:
    return TableDef("shop", "outbox", [ColumnDef(n, "varchar", "varchar(255)", n != "id", i + 1)
                                      for i, n in enumerate(names)], ["id"])


def test_debeziums_defaults_route_by_aggregate_type():
    r = _router()
    assert r.topic("Order") == "outbox.event.Order"
    assert r.routes("shop", "outbox") and not r.routes("shop", "orders") and not r.routes("other", "outbox")


def test_java_replacements_are_python_templates():
    rx = java_regex(r"(?<kind>[a-z]+)-(\d+)", "s")
    assert rx.fullmatch("order-12").expand(java_replacement("ev.${kind}.$2", rx, "s")) == "ev.order.12"
    assert rx.fullmatch("order-12").expand(java_replacement(r"a\$b\\c.$1", rx, "s")) == "a$b\\c.order"
    # Java reads digits as long as they name a group: "$21" with two groups is group 2, then "1"
    assert rx.fullmatch("x-7").expand(java_replacement("$21", rx, "s")) == "71"


def test_a_regex_that_does_not_match_leaves_the_value_as_the_topic():
    r = _router(topic_regex="(?<routedByValue>order.*)", topic_replacement="orders.${routedByValue}")
    assert r.topic("order_paid") == "orders.order_paid"
    assert r.topic("Customer") == "Customer"


@pytest.mark.parametrize("settings, named", [
    ({"topic_regex": "(?<routedByValue>.*"}, "producer.outbox.topic_regex"),
    ({"topic_replacement": "outbox.${nope}"}, "producer.outbox.topic_replacement"),
    ({"topic_replacement": "outbox.$3"}, "producer.outbox.topic_replacement"),
    ({"topic_replacement": "outbox.$x"}, "producer.outbox.topic_replacement"),
    ({"additional_placement": ["type:somewhere"]}, "producer.outbox.additional_placement"),
    ({"additional_placement": "type:partition"}, "producer.outbox.additional_placement"),
])
def test_bad_settings_are_refused_naming_them(settings, named):
    with pytest.raises(OutboxError, match=named.replace(".", r"\.")):
        _router(**settings)


def test_columns_are_checked_against_the_table():
    r = _router(additional_placement="type:header:eventType")
    r.check(_table("id", "aggregatetype", "aggregateid", "payload", "type"))
    with pytest.raises(OutboxError, match=r"producer\.outbox\.payload_column: 'payload' is not a column"):
        r.check(_table("id", "aggregatetype", "aggregateid", "body", "type"))
    with pytest.raises(OutboxError, match=r"additional_placement: 'type' is not a column"):
        r.check(_table("id", "aggregatetype", "aggregateid", "payload"))
    with pytest.raises(OutboxError, match="left out by source.column"):
        r.check(_table("id", "aggregatetype", "aggregateid", "payload", "type"),
                _table("id", "aggregatetype", "aggregateid", "payload"))
    with pytest.raises(OutboxError, match="is not captured"):
        r.check(None, captured=False)
    r.check(None)  # (created later: checked at its first row)


def test_a_route_that_is_no_topic_name_is_an_error():
    with pytest.raises(Exception, match="not a Kafka topic name"):
        _router().topic("orders/paid")
    with pytest.raises(Exception, match="NULL aggregatetype"):
        _router().topic(None)


def test_headers_are_the_text_of_the_value():
    """As Kafka Connect's SimpleHeaderConverter writes them (its answers, asked in its JVM)."""
    from decimal import Decimal
    assert [header_text(v) for v in ("4d47", 42, True, None, b"\x01\x02", Decimal("12.30"))] == [
        b"4d47", b"42", b"true", None, b"AQI=", b"12.30"]
    assert [header_text(v) for v in (1e10, 1.5, -2.5e-5, 0.001, 1234567.0, 12345678.0)] == [
        b"1.0E10", b"1.5", b"-2.5E-5", b"0.001", b"1234567.0", b"1.2345678E7"]


def test_the_setting_reads_from_yaml_with_debeziums_defaults():
    cfg = CDCConfig.model_validate({"producer": {"outbox": {"table": "shop.outbox",
                                                            "additional_placement": "type:header:eventType,a:envelope"}}})
    o = cfg.producer.outbox
    assert (o.id_column, o.aggregate_id_column, o.aggregate_type_column, o.payload_column) == \
        ("id", "aggregateid", "aggregatetype", "payload")
    assert o.topic_replacement == "outbox.event.${routedByValue}" and not o.tombstone_on_empty_payload
    assert o.additional_placement == ["type:header:eventType", "a:envelope"]
    assert CDCConfig.model_validate({}).producer.outbox is None
    with pytest.raises(Exception, match="database.table"):
        CDCConfig.model_validate({"producer": {"outbox": {"table": "outbox"}}})


def test_debeziums_replacement_syntax_survives_the_configuration_file(tmp_path, monkeypatch):
    """``${VAR}`` in cdc.yaml is expanded from the environment, but not in the replacement,
    whose ``${routedByValue}`` is Debezium's: written and read back as it is."""
    from common.config import load_config, write_config

    monkeypatch.setenv("KAFKA_HOST", "broker:9092")
    path = tmp_path / "cdc.yaml"
    path.write_text("kafka: {bootstrap_servers: '${KAFKA_HOST}'}\n"
                    "producer: {outbox: {table: shop.outbox, topic_replacement: 'events.${routedByValue}'}}\n")
    cfg = load_config(path)
    assert cfg.kafka.bootstrap_servers == "broker:9092"
    assert cfg.producer.outbox.topic_replacement == "events.${routedByValue}"
    cfg.producer.outbox.topic_replacement = "outbox.event.${routedByValue}"
    write_config(cfg, path)
    assert load_config(path).producer.outbox.topic_replacement == "outbox.event.${routedByValue}"
