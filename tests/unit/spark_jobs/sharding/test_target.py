"""The routed target's sink layout (spark_jobs.sharding.target): origin columns first and in
the key, the union of the shards' columns (optimistic DDL), widened types, NULL for columns a
shard lacks, refusal naming both tables."""

from __future__ import annotations

import pytest

from spark_jobs.errors import IncompatibleShards
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.routes import Route
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import target_fields, target_row, target_schema
from spark_jobs.sinks.layout import table_layout

ROUTE = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders", ddl="optimistic"))
S1, S2, S3 = (ShardId("main", f"shop_0{i}", "orders") for i in (1, 2, 3))


def envelope(ns: str, fields: list[dict]) -> dict:
    """A Debezium-style envelope: the row record defined in ``before``, named in ``after``."""
    row = {"type": "record", "name": "Value", "namespace": ns, "fields": fields}
    return {"type": "record", "name": "Envelope", "namespace": ns, "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", f"{ns}.Value"], "default": None},
        {"name": "op", "type": "string"}]}


STATUS = {"type": "enum", "name": "status", "symbols": ["new", "paid"]}


def test_union_of_columns_origin_first_and_in_the_key():
    a = envelope("cdc.shop_01.orders", [{"name": "id", "type": "int"}, {"name": "qty", "type": "int"},
                                        {"name": "status", "type": ["null", STATUS]}])
    b = envelope("cdc.shop_02.orders", [{"name": "id", "type": "int"}, {"name": "qty", "type": "long"},
                                        {"name": "note", "type": "string"}])
    schema, key = target_schema(ROUTE, {S2: (b, ["id"]), S1: (a, ["id"])})
    assert key == ["__source", "__db", "__table", "id"]
    assert target_fields(schema) == ["__source", "__db", "__table", "id", "qty", "status", "note"]
    layout = table_layout(schema, key)
    kinds = {c.name: (c.kind, c.nullable) for c in layout.columns}
    assert kinds["qty"] == ("long", True)  # the widened type, nullable
    assert kinds["note"] == ("string", True)  # a column one shard lacks
    assert kinds["id"][0] == "int" and kinds["__source"][0] == "string"
    # the same whatever order the shards come in
    assert target_schema(ROUTE, {S1: (a, ["id"]), S2: (b, ["id"])}) == (schema, key)
    row = target_row(ROUTE, S1, {"id": 7, "qty": 2, "status": "new"}, target_fields(schema))
    assert row == {"__source": "main", "__db": "shop_01", "__table": "orders", "id": 7, "qty": 2, "status": "new",
                   "note": None}


def test_named_types_are_defined_once_in_the_target():
    a = envelope("cdc.shop_01.orders", [{"name": "id", "type": "int"}, {"name": "s", "type": STATUS},
                                        {"name": "t", "type": ["null", "cdc.shop_01.orders.status"]}])
    schema, key = target_schema(ROUTE, {S1: (a, ["id"])})
    import fastavro
    fastavro.parse_schema(schema)  # valid Avro: the enum defined once, referenced after
    assert {c.name: c.kind for c in table_layout(schema, key).columns}["t"] == "string"


def test_incompatible_shards_are_refused_naming_both_tables():
    a = envelope("cdc.shop_01.orders", [{"name": "id", "type": "int"}, {"name": "coupon", "type": "string"}])
    c = envelope("cdc.shop_03.orders", [{"name": "id", "type": "int"}, {"name": "coupon", "type": "long"}])
    with pytest.raises(IncompatibleShards) as err:
        target_schema(ROUTE, {S1: (a, ["id"]), S3: (c, ["id"])})
    assert "main/shop_01.orders" in str(err.value) and "main/shop_03.orders" in str(err.value)
    with pytest.raises(IncompatibleShards, match="keyed by"):
        target_schema(ROUTE, {S1: (a, ["id"]), S3: (c, ["coupon"])})


def test_merged_clean_changelog_schemas_round_trip():
    import io

    import fastavro

    from spark_jobs.sharding.target import target_envelope_schema, target_key, target_key_schema
    a = envelope("cdc.shop_01.orders", [{"name": "id", "type": "int"}, {"name": "s", "type": ["null", STATUS]}])
    b = envelope("cdc.shop_02.orders", [{"name": "id", "type": "int"}, {"name": "note", "type": "string"}])
    schema, key = target_schema(ROUTE, {S1: (a, ["id"]), S2: (b, ["id"])})
    key_schema, env_schema = target_key_schema(schema, key), target_envelope_schema(a, schema)
    row = target_row(ROUTE, S2, {"id": 1, "note": "x"}, target_fields(schema))
    value = {"before": None, "after": row, "op": "c"}
    for sch, rec in ((key_schema, target_key(row, key)), (env_schema, value)):
        parsed = fastavro.parse_schema(sch)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, rec)
        buf.seek(0)
        assert fastavro.schemaless_reader(buf, parsed) == rec
    assert [f["name"] for f in key_schema["fields"]] == key


def test_history_conflict_the_newest_schemas_hide():
    """shop_01 adds coupon as text then drops it, shop_02 adds it as a number: the newest
    schemas merge, every version does not (the target kept the text column)."""
    from spark_jobs.errors import ShardDDLConflict
    from spark_jobs.sharding.target import check_history
    ident = {"name": "id", "type": "int"}
    v1 = envelope("cdc.shop_01.orders", [ident])
    v2 = envelope("cdc.shop_01.orders", [ident, {"name": "coupon", "type": ["null", "string"]}])
    w2 = envelope("cdc.shop_02.orders", [ident, {"name": "coupon", "type": ["null", "long"]}])
    target_schema(ROUTE, {S1: (v1, ["id"]), S2: (w2, ["id"])})  # the newest schemas merge
    keys = {S1: ["id"], S2: ["id"]}
    with pytest.raises(ShardDDLConflict) as err:
        check_history(ROUTE, {S1: [("a1", v1), ("a2", v2), ("a3", v1)], S2: [("b1", v1), ("b2", w2)]}, keys)
    assert "main/shop_01.orders" in str(err.value) and "main/shop_02.orders" in str(err.value)
    # widenings and same DDL everywhere are fine
    check_history(ROUTE, {S1: [("a1", v1), ("a2", v2)], S2: [("b1", v1), ("b2", v2)]}, keys)
    check_history(ROUTE, {}, {})


def test_joins_no_shard_has_are_made():
    dec = lambda p, sc: {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": sc}  # noqa: E731
    a = envelope("cdc.shop_01.orders", [{"name": "id", "type": "int"}, {"name": "price", "type": dec(10, 2)},
                                        {"name": "s", "type": {"type": "string",
                                                               "connect.name": "io.debezium.data.Enum"}}])
    b = envelope("cdc.shop_02.orders", [{"name": "id", "type": "int"}, {"name": "price", "type": dec(12, 0)},
                                        {"name": "s", "type": {"type": "string",
                                                               "connect.name": "io.debezium.data.EnumSet"}}])
    schema, key = target_schema(ROUTE, {S1: (a, ["id"]), S2: (b, ["id"])})
    cols = {c.name: c for c in table_layout(schema, key).columns}
    assert (cols["price"].kind, cols["price"].precision, cols["price"].scale) == ("decimal", 14, 2)
    assert cols["s"].kind == "string"
