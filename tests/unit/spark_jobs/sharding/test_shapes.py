"""Table shapes: type joins, fitting rows, unions and the start check of a route's shards."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.errors import IncompatibleShards
from spark_jobs.sharding.shapes import (
    ShardId,
    TableShape,
    check_compatible,
    column_type,
    fits,
    join_types,
    shape_of_sink_columns,
    type_conflict,
    union_of,
)
from spark_jobs.sinks.layout import SinkColumn, row_columns

TYPES = st.one_of(
    st.sampled_from(["smallint", "int", "long", "float", "double", "string", "enum", "set", "json", "date",
                     "time", "time_ms", "timestamp_ms", "timestamp_us", "bytes", "boolean", "year"]),
    st.builds(lambda p, s: f"decimal({p},{min(s, p)})", st.integers(1, 65), st.integers(0, 30)),
    st.builds(lambda n: f"bits({n})", st.integers(2, 64)),
)

A, B = ShardId("east", "shop_01", "orders"), ShardId("west", "shop_03", "orders")


@pytest.mark.parametrize("a, b, joined", [
    ("int", "int", "int"), ("smallint", "long", "long"), ("int", "smallint", "int"), ("float", "double", "double"),
    ("enum", "string", "string"), ("enum", "set", "string"), ("time_ms", "time", "time"),
    ("timestamp_us", "timestamp_ms", "timestamp_us"), ("bits(3)", "bits(9)", "bits(9)"),
    ("decimal(10,2)", "decimal(12,0)", "decimal(14,2)"), ("decimal(5,2)", "decimal(5,1)", "decimal(6,2)"),
    ("int", "string", None), ("long", "double", None), ("int", "decimal(10,0)", None), ("date", "timestamp_ms", None),
    ("decimal(65,0)", "decimal(65,30)", None), ("json", "string", None), ("bytes", "string", None),
])
def test_join_types(a, b, joined):
    assert join_types(a, b) == joined
    assert join_types(b, a) == joined


@given(TYPES, TYPES, TYPES)
def test_join_is_commutative_associative_and_idempotent(a, b, c):
    assert join_types(a, a) == a
    assert join_types(a, b) == join_types(b, a)
    ab, bc = join_types(a, b), join_types(b, c)
    left = join_types(ab, c) if ab is not None else None
    right = join_types(a, bc) if bc is not None else None
    if left is not None and right is not None:
        assert left == right
    if left is not None:  # the join is an upper bound of both
        assert join_types(a, left) == left and join_types(c, left) == left


def test_fits_needs_the_key_and_every_column_with_a_type_that_widens():
    table = TableShape.of({"id": "long", "v": "string", "extra": "int"}, ["id"])
    assert fits(TableShape.of({"id": "int", "v": "enum"}, ["id"]), table)  # columns missing: NULL
    assert not fits(TableShape.of({"id": "int", "w": "int"}, ["id"]), table)  # a column the table lacks
    assert not fits(TableShape.of({"id": "int", "extra": "long"}, ["id"]), table)  # narrower in the table
    assert not fits(TableShape.of({"id": "int", "v": "string"}, ["v"]), table)  # another key


def test_union_keeps_order_of_first_appearance_and_makes_non_key_columns_nullable():
    base = TableShape.of({"id": "int", "a": "int"}, ["id"])
    u = union_of([TableShape.of({"id": "long", "b": "string"}, ["id"]), TableShape.of({"a": "long"}, [])], ["id"],
                 base)
    assert [(c.name, c.type, c.nullable) for c in u.columns] == [
        ("id", "long", False), ("a", "long", True), ("b", "string", True)]
    with pytest.raises(ValueError, match="do not join"):
        union_of([TableShape.of({"a": "string"}, [])], ["id"], base)


def test_type_conflict_names_both_tables_and_types():
    msg = type_conflict([("t1", TableShape.of({"id": "int", "c": "int"}, ["id"])),
                         ("t2", TableShape.of({"id": "int", "c": "long"}, ["id"])),
                         ("t3", TableShape.of({"id": "int", "c": "string"}, ["id"]))])
    assert msg == "column 'c' is int in t1 but string in t3"
    assert type_conflict([("t1", TableShape.of({"d": "decimal(50,0)"}, [])),
                          ("t2", TableShape.of({"d": "decimal(30,20)"}, []))]) == \
        "column 'd' is decimal(50,0) in t1 but decimal(30,20) in t2"  # 70 digits: more than MySQL's 65
    assert type_conflict([("t1", TableShape.of({"d": "int"}, [])), ("t2", TableShape.of({"e": "string"}, []))]) is None


def test_check_compatible_merges_or_refuses_naming_both_tables():
    a = TableShape.of({"id": "int", "v": "string", "only_a": "date"}, ["id"])
    b = TableShape.of({"id": "long", "v": "enum"}, ["id"])
    merged = check_compatible("shop.orders", {B: b, A: a})
    assert merged.types() == {"id": "long", "v": "string", "only_a": "date"} and merged.key == ("id",)
    with pytest.raises(IncompatibleShards) as err:
        check_compatible("shop.orders", {A: a, B: TableShape.of({"id": "int", "v": "int"}, ["id"])})
    assert "east/shop_01.orders" in str(err.value) and "west/shop_03.orders" in str(err.value)
    assert "route to shop.orders" in str(err.value) and "'v'" in str(err.value)
    with pytest.raises(IncompatibleShards, match=r"east/shop_01.orders is keyed by \(id\) but west/shop_03.orders "
                                                 r"by \(v\)"):
        check_compatible("shop.orders", {A: a, B: TableShape.of({"id": "int", "v": "string"}, ["v"])})
    with pytest.raises(IncompatibleShards, match="west/shop_03.orders has no primary key"):
        check_compatible("shop.orders", {A: a, B: TableShape.of({"id": "int"}, [])})
    with pytest.raises(IncompatibleShards, match="no table"):
        check_compatible("shop.orders", {})


def test_shapes_from_sink_columns_and_json():
    schema = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "int"},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
        {"name": "flags", "type": {"type": "bytes", "connect.name": "io.debezium.data.Bits", "length": 5}}]}
    shape = shape_of_sink_columns(row_columns(schema), ["id"])
    assert shape.types() == {"id": "int", "price": "decimal(10,2)", "flags": "bits(5)"}
    assert [c.nullable for c in shape.columns] == [False, True, False]
    assert TableShape.from_json(shape.to_json()) == shape
    assert column_type(SinkColumn("t", "t", "timestamp_us")) == "timestamp_us"
    with pytest.raises(ValueError, match="not columns"):
        TableShape.of({"a": "int"}, ["b"])
    with pytest.raises(ValueError, match="named twice"):
        TableShape.of([("a", "int"), ("a", "long")], [])
