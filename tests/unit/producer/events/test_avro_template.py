"""RecordTemplate and the Avro primitives: byte for byte what fastavro writes."""

from __future__ import annotations

import io
from datetime import datetime
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.envelope import envelope_schema
from contract.errors import SerdeError
from producer.events.avro_template import RecordTemplate, avro_int, avro_long, avro_string, field_encoder
from producer.events.avro_types import row_record_schema
from producer.events.builder import ENVELOPE_VARIABLE, envelope_value
from producer.events.values import RowConverter
from producer.table_schema import ColumnDef, TableDef


def fastavro_bytes(schema, value) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def _wrapped(t):
    return {"type": "record", "name": "W", "fields": [{"name": "v", "type": t}]}


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_avro_long(n):
    assert avro_long(n) == fastavro_bytes("long", n)


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_avro_int(n):
    assert avro_int(n) == fastavro_bytes("int", n)


@given(st.text())
def test_avro_string(s):
    assert avro_string(s) == fastavro_bytes("string", s)


@pytest.mark.parametrize("encode, n", [(avro_long, 1 << 63), (avro_long, -(1 << 63) - 1), (avro_int, 1 << 31)])
def test_out_of_range_integers_are_refused(encode, n):
    with pytest.raises(ValueError):
        encode(n)


@pytest.mark.parametrize("t, values", [
    (["null", "string"], [None, "", "x"]),
    (["string", "null"], [None, "été"]),
    (["null", "long"], [None, 0, -1, 1 << 40]),
    ({"type": "string", "connect.version": 1}, ["a"]),
    ({"type": "long", "logicalType": "timestamp-millis"}, [datetime(2024, 1, 2, 3, 4, 5)]),
    (["null", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}], [None, Decimal("-1.25")]),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}, [{"a": 3}]),
    ("boolean", [True, False]),
    (["null", "boolean"], [None, True]),
    ("float", [0.0, -0.0, 3.140000104904175, float("inf"), float("nan"), 1]),
    ("double", [0.0, -0.0, 1e308, -2.5e-308, float("-inf"), 7]),
    ("bytes", [b"", b"\x00\xff", bytearray(b"ab")]),
    ({"type": "bytes", "connect.name": "io.debezium.data.Bits"}, [b"\x01\x02"]),
    ({"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0},
     [Decimal(0), Decimal(18446744073709551615), Decimal(-128), Decimal(127), Decimal(128), Decimal("-0")]),
    ({"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30},
     [Decimal("-" + "9" * 35 + "." + "9" * 30), Decimal("1E-30"), Decimal("12.5"), Decimal("-0E-30"), b"\x01"]),
    ({"type": "record", "name": "G", "fields": [{"name": "wkb", "type": "bytes"},
                                               {"name": "srid", "type": ["null", "int"], "default": None}]},
     [{"wkb": b"\x01", "srid": 4326}, {"wkb": b"", "srid": None}, {"wkb": b"\x02"}]),
])
def test_field_encoder_matches_fastavro(t, values):
    for v in values:
        assert field_encoder(t)(v) == fastavro_bytes(_wrapped(t), {"v": v})


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4), st.integers(4, 40))
def test_decimal_encoder_matches_fastavro(d, precision):
    t = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 4}
    try:
        expected = fastavro_bytes(_wrapped(t), {"v": d})
    except ValueError as exc:  # too many digits for the precision: the same refusal
        with pytest.raises(ValueError, match=str(exc)):
            field_encoder(t)(d)
    else:
        assert field_encoder(t)(d) == expected


def test_decimal_of_another_scale_is_refused_like_fastavro():
    t = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
    with pytest.raises(ValueError, match="Scale provided in schema does not match"):
        field_encoder(t)(Decimal("1.234"))


# --- the change-event envelope -------------------------------------------------------------

def _col(name, data_type, column_type, ordinal, nullable=True, **kw) -> ColumnDef:
    return ColumnDef(name=name, data_type=data_type, column_type=column_type, nullable=nullable, ordinal=ordinal, **kw)


TABLE = TableDef(db="shop", name="items", columns=[
    _col("id", "int", "int(11)", 1, nullable=False),
    _col("name", "varchar", "varchar(64)", 2, character_set="utf8mb4"),
    _col("price", "decimal", "decimal(12,2)", 3, numeric_precision=12, numeric_scale=2),
    _col("at", "datetime", "datetime(3)", 4, datetime_precision=3),
    _col("blob", "blob", "blob", 5),
], primary_key=["id"])
CONVERTER = RowConverter(TABLE, binlog=True)
SCHEMA = envelope_schema(row_record_schema(TABLE, "shop.items.Value"), "shop.items.Envelope")
TEMPLATE = RecordTemplate(SCHEMA, ENVELOPE_VARIABLE)

rows = st.one_of(st.none(), st.builds(
    lambda i, name, cents, at, blob: CONVERTER.convert({"id": i, "name": name, "at": at, "blob": blob,
                                                        "price": None if cents is None else Decimal(cents) / 100}),
    st.integers(-(1 << 31), (1 << 31) - 1), st.one_of(st.none(), st.text(max_size=20)),
    st.one_of(st.none(), st.integers(-(10 ** 11), 10 ** 11)),
    st.one_of(st.none(), st.datetimes(min_value=datetime(1000, 1, 1)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))),
    st.one_of(st.none(), st.binary(max_size=10))))
sources = st.fixed_dictionaries({
    "name": st.text(max_size=10), "ts_ms": st.integers(0, 1 << 45), "db": st.text(max_size=10),
    "table": st.text(max_size=10), "server_id": st.integers(0, 1 << 32),
    "gtid": st.one_of(st.none(), st.text(max_size=20)), "file": st.text(max_size=20), "pos": st.integers(0, 1 << 40),
    "thread": st.one_of(st.none(), st.integers(0, 1 << 40))})


def _example(source: dict, now: int) -> dict:
    full = {"version": "0.1.0", "connector": "mysql", "snapshot": "false", "sequence": None, "row": 0, "query": None,
            **source}
    return envelope_value(None, None, full, "", now, "")


# the variable fields of an envelope: before, after, row, op, position
records_strategy = st.lists(st.tuples(rows, rows, st.integers(0, 10 ** 6), st.sampled_from("cud"),
                                      st.text("0123456789", min_size=30, max_size=30)), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources, st.integers(0, 1 << 45), records_strategy)
def test_envelope_template_is_fastavro_of_the_whole_record(source, now, records):
    example = _example(source, now)
    snapshot = repr(example)
    bound = TEMPLATE.bind(example, b"\xc3\x01HEADER!!")
    for values in records:
        record = TEMPLATE.record(example, values)
        assert TEMPLATE.encode(bound, values) == b"\xc3\x01HEADER!!" + fastavro_bytes(SCHEMA, record)
    assert repr(example) == snapshot  # record() copies what it changes


def test_record_sets_the_variable_fields():
    example = _example({"name": "n", "ts_ms": 1, "db": "d", "table": "t", "server_id": 1, "gtid": None,
                        "file": "f", "pos": 4, "thread": None}, 2)
    record = TEMPLATE.record(example, (None, {"x": 1}, 7, "c", "0" * 30))
    assert (record["before"], record["after"], record["source"]["row"], record["op"], record["position"]) == \
        (None, {"x": 1}, 7, "c", "0" * 30)
    assert record["source"] is not example["source"] and example["source"]["row"] == 0


def test_values_that_do_not_fit_raise_serde_errors():
    example = _example({"name": "n", "ts_ms": 1, "db": "d", "table": "t", "server_id": 1, "gtid": None,
                        "file": "f", "pos": 4, "thread": None}, 2)
    bound = TEMPLATE.bind(example)
    with pytest.raises(SerdeError, match="shop.items.Envelope"):
        TEMPLATE.encode(bound, (None, None, "not an int", "c", "0" * 30))
    with pytest.raises(SerdeError):
        TEMPLATE.bind({**example, "ts_ms": "soon"})


def test_variable_fields_must_exist_in_schema_order():
    with pytest.raises(ValueError, match="no field"):
        RecordTemplate(SCHEMA, ["before", "nope"])
    with pytest.raises(ValueError, match="order"):
        RecordTemplate(SCHEMA, ["after", "before"])
