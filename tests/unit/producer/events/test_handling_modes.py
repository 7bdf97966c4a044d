"""Debezium's handling modes (contract.type_table.TypeModes) in the producer's types and values:
the pure rules (Debezium's own records are compared in
tests/integration/producer/test_debezium_handling_modes.py)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.type_table import TypeModes
from producer.events.avro_types import avro_type
from producer.events.values import value_converter
from producer.table_schema import ColumnDef


def _col(data_type: str, column_type: str, nullable: bool = True, **kw) -> ColumnDef:
    return ColumnDef("c", data_type, column_type, nullable, 1, **kw)


def _avro_value(col: ColumnDef, modes: TypeModes, v):
    """``v`` converted, and read back through its Avro type (fastavro): what a consumer reads."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "c", "type": avro_type(col, modes)}]}
    out = value_converter(col, modes=modes)(v)
    parsed = fastavro.parse_schema(schema)
    fastavro.validation.validate({"c": out}, parsed, raise_errors=True)
    return out


def test_an_unknown_mode_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="decimal.handling.mode: 'exact' is not one of precise, double, string"):
        TypeModes(decimal="exact")
    with pytest.raises(ValueError, match="binary.handling.mode"):
        TypeModes(binary="base32")


DEC = _col("decimal", "decimal(65,30)", numeric_precision=65, numeric_scale=30)


@given(st.decimals(min_value=Decimal("-1e34"), max_value=Decimal("1e34"), places=30, allow_nan=False))
def test_decimal_as_string_is_the_plain_digits_at_the_scale_and_as_double_the_nearest_double(d):
    text = _avro_value(DEC, TypeModes(decimal="string"), d)
    assert Decimal(text) == d and "E" not in text and len(text.split(".")[1]) == 30
    assert _avro_value(DEC, TypeModes(decimal="double"), d) == float(d)


def test_bigint_unsigned_as_long_wraps_as_debeziums_long():
    col = _col("bigint", "bigint unsigned")
    assert avro_type(col, TypeModes(bigint_unsigned="long")) == ["null", "long"]
    conv = value_converter(col, modes=TypeModes(bigint_unsigned="long"))
    assert [conv(v) for v in (0, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1)] == [0, 2 ** 63 - 1, -2 ** 63, -1]


@pytest.mark.parametrize("mode, text", [("base64", "+/8A"), ("base64-url-safe", "-_8A"), ("hex", "fbff00")])
def test_binary_as_text(mode, text):
    assert _avro_value(_col("varbinary", "varbinary(9)"), TypeModes(binary=mode), b"\xfb\xff\x00") == text
    # BINARY(n): padded to n first, as in bytes mode
    assert _avro_value(_col("binary", "binary(4)", char_max_length=4), TypeModes(binary="hex"), b"\x01") == "01000000"


def test_connect_time_precision_is_kafka_connects_temporal_types():
    modes = TypeModes(time_precision="connect")
    time_col = _col("time", "time(6)", nullable=False)
    assert avro_type(time_col, modes)[1]["logicalType"] == "time-millis"  # always nullable: see below
    conv = value_converter(time_col, modes=modes)
    assert conv(timedelta(hours=12, microseconds=1500)) == 43_200_001
    assert conv(timedelta(hours=24)) == 86_400_000
    # outside 00:00:00-24:00:00 Kafka Connect's Time has no value: null, as Debezium writes
    assert [conv(timedelta(hours=-1)), conv(timedelta(microseconds=-1)), conv(timedelta(hours=838))] == [None] * 3
    dt = _col("datetime", "datetime(6)", datetime_precision=6)
    assert avro_type(dt, modes)[1]["connect.name"] == "org.apache.kafka.connect.data.Timestamp"
    assert _avro_value(dt, modes, "2001-02-03 04:05:06.789012") == 981173106789
    assert avro_type(_col("date", "date"), modes)[1]["logicalType"] == "date"
