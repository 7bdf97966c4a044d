"""Sink schema: Avro row schema -> sink column types, value conversion, batch reduction.

The schemas are the producer's own (``producer.events.values`` + ``envelope_schema``), and
values go through the producer's converters and fastavro, so what is tested here is what
the sinks will receive.
"""

from __future__ import annotations

import io
import json
import pickle
import socket
import struct
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import UnsupportedType
from contract.envelope import envelope_schema
from producer.events.avro_types import avro_field, avro_fullname, row_record_schema
from producer.events.values import RowConverter, value_converter
from producer.table_schema import ColumnDef, TableDef
from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.batch import ApplyResult, Change, reduce_batch, reduce_for_layout
from spark_jobs.sinks.keys import _json_value, freeze_key, key_hash, key_json
from spark_jobs.sinks.layout import SinkColumn, row_columns, table_layout
from spark_jobs.sinks.naming import POSITION_COLUMN, sink_identifier, sink_table_name
from spark_jobs.sinks.types import mysql_key_types, mysql_type, postgres_type
from spark_jobs.sinks.values import (
    bits_to_int,
    bits_to_text,
    days_to_date,
    format_time_micros,
    geometry_wkb,
    micros_to_datetime,
    micros_to_timedelta,
    millis_to_datetime,
    mysql_converter,
    parse_zoned_timestamp,
    postgres_converter,
)

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200)
UTC = timezone.utc


def P(n: int) -> str:
    return f"{n:030d}"


# ----------------------------------------------------------------------------- catalogue
# (name, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARSET, MAXLEN,
#  expected kind, PostgreSQL type, MySQL type)
CATALOGUE = [
    ("id", "int", "int(11)", 10, 0, None, None, None, "int", "integer", "INT"),
    ("ti", "tinyint", "tinyint(4)", 3, 0, None, None, None, "smallint", "smallint", "SMALLINT"),
    ("tiu", "tinyint", "tinyint(3) unsigned", 3, 0, None, None, None, "smallint", "smallint", "SMALLINT"),
    ("bo", "tinyint", "tinyint(1)", 3, 0, None, None, None, "smallint", "smallint", "SMALLINT"),
    ("si", "smallint", "smallint(6)", 5, 0, None, None, None, "smallint", "smallint", "SMALLINT"),
    ("siu", "smallint", "smallint(5) unsigned", 5, 0, None, None, None, "int", "integer", "INT"),
    ("mi", "mediumint", "mediumint(9)", 7, 0, None, None, None, "int", "integer", "INT"),
    ("miu", "mediumint", "mediumint(8) unsigned", 8, 0, None, None, None, "int", "integer", "INT"),
    ("iu", "int", "int(10) unsigned", 10, 0, None, None, None, "long", "bigint", "BIGINT"),
    ("bi", "bigint", "bigint(20)", 19, 0, None, None, None, "long", "bigint", "BIGINT"),
    ("biu", "bigint", "bigint(20) unsigned", 20, 0, None, None, None, "decimal", "numeric(20,0)", "DECIMAL(20,0)"),
    ("d65", "decimal", "decimal(65,30)", 65, 30, None, None, None, "decimal", "numeric(65,30)", "DECIMAL(65,30)"),
    ("d10", "decimal", "decimal(10,2)", 10, 2, None, None, None, "decimal", "numeric(10,2)", "DECIMAL(10,2)"),
    ("fl", "float", "float", 12, None, None, None, None, "float", "real", "FLOAT"),
    ("fl2", "float", "float(10,2)", 10, 2, None, None, None, "double", "double precision", "DOUBLE"),
    ("db", "double", "double", 22, None, None, None, None, "double", "double precision", "DOUBLE"),
    ("b1", "bit", "bit(1)", 1, None, None, None, None, "boolean", "boolean", "BIT(1)"),
    ("b13", "bit", "bit(13)", 13, None, None, None, None, "bits", "bit(13)", "BIT(13)"),
    ("b64", "bit", "bit(64)", 64, None, None, None, None, "bits", "bit(64)", "BIT(64)"),
    ("ch", "char", "char(5)", None, None, None, "utf8mb4", 5, "string", "text", "LONGTEXT"),
    ("vc", "varchar", "varchar(100)", None, None, None, "utf8mb4", 100, "string", "text", "LONGTEXT"),
    ("tx", "text", "text", None, None, None, "utf8mb4", 65535, "string", "text", "LONGTEXT"),
    ("lat", "varchar", "varchar(20)", None, None, None, "latin1", 20, "string", "text", "LONGTEXT"),
    ("bn", "binary", "binary(4)", None, None, None, None, 4, "bytes", "bytea", "LONGBLOB"),
    ("vb", "varbinary", "varbinary(10)", None, None, None, None, 10, "bytes", "bytea", "LONGBLOB"),
    ("bl", "blob", "blob", None, None, None, None, 65535, "bytes", "bytea", "LONGBLOB"),
    ("en", "enum", "enum('a','b''q','c,d')", None, None, None, "utf8mb4", 3, "enum", "text", "LONGTEXT"),
    ("st", "set", "set('x','y','z')", None, None, None, "utf8mb4", 5, "set", "text", "LONGTEXT"),
    ("js", "json", "json", None, None, None, None, None, "json", "jsonb", "JSON"),
    ("jsm", "longtext", "longtext", None, None, None, "utf8mb4", 4294967295, "string", "text", "LONGTEXT"),
    ("d", "date", "date", None, None, None, None, None, "date", "date", "DATE"),
    ("tm", "time", "time", None, None, 0, None, None, "time", "interval", "TIME(6)"),
    ("tm6", "time", "time(6)", None, None, 6, None, None, "time", "interval", "TIME(6)"),
    ("dt", "datetime", "datetime", None, None, 0, None, None, "timestamp_ms", "timestamp(3) without time zone",
     "DATETIME(3)"),
    ("dt3", "datetime", "datetime(3)", None, None, 3, None, None, "timestamp_ms", "timestamp(3) without time zone",
     "DATETIME(3)"),
    ("dt6", "datetime", "datetime(6)", None, None, 6, None, None, "timestamp_us", "timestamp(6) without time zone",
     "DATETIME(6)"),
    ("ts", "timestamp", "timestamp", None, None, 0, None, None, "zoned_timestamp", "timestamp(6) with time zone",
     "TIMESTAMP(6)"),
    ("ts6", "timestamp", "timestamp(6)", None, None, 6, None, None, "zoned_timestamp",
     "timestamp(6) with time zone", "TIMESTAMP(6)"),
    ("yr", "year", "year(4)", None, None, None, None, None, "year", "smallint", "YEAR"),
    ("pt", "point", "point", None, None, None, None, None, "point", "bytea", "LONGBLOB"),
    ("geo", "geometry", "geometry", None, None, None, None, None, "geometry", "bytea", "LONGBLOB"),
    ("ls", "linestring", "linestring", None, None, None, None, None, "geometry", "bytea", "LONGBLOB"),
    ("uu", "uuid", "uuid", None, None, None, None, None, "string", "text", "LONGTEXT"),
    ("ip6", "inet6", "inet6", None, None, None, None, None, "string", "text", "LONGTEXT"),
    ("ip4", "inet4", "inet4", None, None, None, None, None, "string", "text", "LONGTEXT"),
]


def make_col(row, ordinal: int, nullable: bool = True) -> ColumnDef:
    name, dt, ct, prec, scale, dtp, cs, maxlen = row[:8]
    return ColumnDef(name=name, data_type=dt, column_type=ct, nullable=nullable, ordinal=ordinal,
                     numeric_precision=prec, numeric_scale=scale, datetime_precision=dtp, character_set=cs,
                     char_max_length=maxlen)


COLS = [make_col(r, i + 1, nullable=r[0] != "id") for i, r in enumerate(CATALOGUE)]
TABLE = TableDef("shop", "everything", COLS, ["id"])


def envelope_for(table: TableDef, prefix: str = "cdc") -> dict:
    ns = avro_fullname(f"{prefix}.{table.db}.{table.name}")
    return envelope_schema(row_record_schema(table, f"{ns}.Value"), f"{ns}.Envelope")


ENVELOPE = envelope_for(TABLE)


def avro_round_trip(schema: dict, record: dict) -> dict:
    parsed = parse_schema(schema)
    buf = io.BytesIO()
    schemaless_writer(buf, parsed, record)
    buf.seek(0)
    return schemaless_reader(buf, parsed, parsed)


def envelope_value(after: dict | None, position: str = P(1)) -> dict:
    return {"before": None, "after": after, "source": {
        "version": "0", "connector": "mysql", "name": "t", "ts_ms": 0, "snapshot": "false", "db": "shop",
        "sequence": None, "table": "everything", "server_id": 1, "gtid": None, "file": "mysql-bin.000001",
        "pos": 4, "row": 0, "thread": None, "query": None},
        "op": "c", "ts_ms": 0, "transaction": None, "position": position, "snapshot_window": None}


# ----------------------------------------------------------------------------- type mapping
@pytest.mark.parametrize("row", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_every_producer_type_maps(row):
    cols = {c.name: c for c in row_columns(ENVELOPE)}
    c = cols[row[0]]
    assert (c.kind, postgres_type(c), mysql_type(c)) == (row[8], row[9], row[10])


def test_columns_follow_the_row_schema_in_order_with_nullability():
    cols = row_columns(ENVELOPE)
    assert [c.name for c in cols] == [r[0] for r in CATALOGUE]
    assert [c.field for c in cols] == [r[0] for r in CATALOGUE]
    nullable = {c.name: c.nullable for c in cols}
    assert nullable["id"] is False and nullable["vc"] is True
    by_name = {c.name: c for c in cols}
    assert (by_name["d65"].precision, by_name["d65"].scale) == (65, 30)
    assert by_name["b13"].length == 13


def test_envelope_after_is_a_reference_to_the_before_record():
    after = next(f for f in ENVELOPE["fields"] if f["name"] == "after")
    assert isinstance(after["type"][1], str)  # the producer references the row record by name
    assert row_columns(ENVELOPE) == row_columns(ENVELOPE["fields"][0]["type"][1])


def test_geometry_named_type_referenced_a_second_time():
    # 'geo' defines io.debezium.data.geometry.Geometry, 'ls' only references it by name
    row = ENVELOPE["fields"][0]["type"][1]
    ls = next(f for f in row["fields"] if f["name"] == "ls")
    assert ls["type"] == ["null", "io.debezium.data.geometry.Geometry"]
    assert {c.name: c.kind for c in row_columns(ENVELOPE)}["ls"] == "geometry"


def test_json_text_and_fastavro_parsed_schemas_are_accepted():
    expected = row_columns(ENVELOPE)
    assert row_columns(json.dumps(ENVELOPE)) == expected
    assert row_columns(parse_schema(ENVELOPE)) == expected


def test_renamed_field_keeps_the_source_column_name():
    cols = [ColumnDef("9 weird-col", "int", "int(11)", False, 1), ColumnDef("ok", "varchar", "varchar(5)", True, 2)]
    sc = row_columns(envelope_for(TableDef("d", "t", cols, ["9 weird-col"])))
    assert [(c.name, c.field) for c in sc] == [("9 weird-col", "_9_weird_col"), ("ok", "ok")]
    layout = table_layout(envelope_for(TableDef("d", "t", cols, ["9 weird-col"])), ["9 weird-col"])
    assert layout.key_values({"_9_weird_col": 5}, None) == (5,)
    assert layout.key_values({"9 weird-col": 5}, None) == (5,)
    assert layout.key_values(None, {"_9_weird_col": 7, "ok": "x"}) == (7,)


def test_avro_field_dicts_are_accepted_by_the_type_functions():
    for col, row in zip(COLS, CATALOGUE):
        if col.data_type in ("geometry", "linestring", "point"):
            continue  # named records need the whole schema (tested above)
        f = avro_field(col)
        assert postgres_type(f) == row[9], col.name
        assert mysql_type(f) == row[10], col.name


def test_plain_avro_logical_types():
    def kind(t):
        return row_columns({"type": "record", "name": "R", "fields": [{"name": "x", "type": t}]})[0]
    assert postgres_type(kind({"type": "int", "logicalType": "date"})) == "date"
    assert postgres_type(kind({"type": "long", "logicalType": "timestamp-micros"})) == "timestamp(6) without time zone"
    assert postgres_type(kind({"type": "long", "logicalType": "timestamp-millis"})) == "timestamp(3) without time zone"
    assert postgres_type(kind({"type": "long", "logicalType": "time-micros"})) == "interval"
    assert postgres_type(kind({"type": "bytes", "logicalType": "decimal", "precision": 7, "scale": 3})) == "numeric(7,3)"
    assert postgres_type(kind({"type": "fixed", "name": "F", "size": 4})) == "bytea"
    assert postgres_type(kind({"type": "enum", "name": "E", "symbols": ["A"]})) == "text"
    assert postgres_type(kind({"type": "string", "connect.name": "some.custom.Name"})) == "text"
    assert kind({"type": "long"}).nullable is False and kind(["null", "long"]).nullable is True


@pytest.mark.parametrize("bad", [
    ["null", "int", "string"],
    {"type": "long", "connect.name": "io.debezium.time.NanoTimestamp"},
    {"type": "array", "items": "int"},
    {"type": "record", "name": "Other", "fields": []},
])
def test_unsupported_types_raise(bad):
    with pytest.raises(UnsupportedType):
        row_columns({"type": "record", "name": "R", "fields": [{"name": "x", "type": bad}]})


def test_reserved_and_duplicate_column_names_are_refused():
    with pytest.raises(SinkError, match="reserves"):
        row_columns({"type": "record", "name": "R", "fields": [{"name": POSITION_COLUMN, "type": "int"}]})
    with pytest.raises(SinkError, match="both named"):
        row_columns({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                              {"name": "A", "type": "int"}]})


def test_mysql_key_types_fit_innodb_key_limit():
    one = mysql_key_types([SinkColumn("k", "k", "string", False)])
    assert one == {"k": "VARCHAR(749)"}
    two = mysql_key_types([SinkColumn("a", "a", "string", False), SinkColumn("b", "b", "long", False),
                           SinkColumn("c", "c", "bytes", False)])
    assert two["b"] == "BIGINT"
    share = (3000 - 8 - 4) // 2
    assert two == {"a": f"VARCHAR({share // 4})", "b": "BIGINT", "c": f"VARBINARY({share})"}
    assert 4 * (share // 4) + share + 8 <= 3072


def test_mysql_refuses_what_it_cannot_store():
    with pytest.raises(UnsupportedType):
        mysql_type(SinkColumn("x", "x", "decimal", True, 66, 2))
    with pytest.raises(UnsupportedType):
        table_layout(ENVELOPE, ["js"])  # JSON as a key


def test_layout_key_lookup_and_errors():
    layout = table_layout(ENVELOPE, ["id"])
    assert layout.key_names == ["id"]
    assert [c.name for c in layout.non_key][:2] == ["ti", "tiu"]
    assert layout.key_values({"id": 3}, None) == (3,)
    assert layout.key_values((4,), None) == (4,)
    assert layout.key_values(5, None) == (5,)
    with pytest.raises(SinkError):
        layout.key_values({"nope": 1}, None)
    with pytest.raises(SinkError):
        layout.key_values(None, None)
    with pytest.raises(SinkError, match="not a column"):
        table_layout(ENVELOPE, ["missing"])
    with pytest.raises(SinkError):
        table_layout(ENVELOPE, [])


# ----------------------------------------------------------------------------- values
def test_temporal_converters_edge_values():
    assert days_to_date(0) == date(1970, 1, 1)
    assert days_to_date(-1) == date(1969, 12, 31)
    assert days_to_date(-719162) == date(1, 1, 1)
    assert days_to_date(2932896) == date(9999, 12, 31)
    with pytest.raises(ValueError):
        days_to_date(2932897)
    assert micros_to_timedelta(-1) == timedelta(microseconds=-1)
    assert millis_to_datetime(-1) == datetime(1969, 12, 31, 23, 59, 59, 999000)
    assert micros_to_datetime(1_700_000_000_123_456) == datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert micros_to_datetime(-62135596800000000) == datetime(1, 1, 1)
    with pytest.raises(ValueError):
        micros_to_datetime(253402300800000000)  # 10000-01-01


@pytest.mark.parametrize("us, text", [
    (0, "00:00:00.000000"),
    (-1, "-00:00:00.000001"),
    (1, "00:00:00.000001"),
    (-(12 * 3600 + 34 * 60 + 56) * 1_000_000 - 789000, "-12:34:56.789000"),
    ((838 * 3600 + 59 * 60 + 59) * 1_000_000, "838:59:59.000000"),
    (-(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 1, "-838:59:59.000001"),
    (25 * 3600 * 1_000_000, "25:00:00.000000"),
])
def test_time_text_is_exact_for_negative_and_long_times(us, text):
    assert format_time_micros(us) == text
    assert postgres_converter(SinkColumn("t", "t", "time"))(us) == text
    assert mysql_converter(SinkColumn("t", "t", "time"))(us) == text


def test_zoned_timestamp():
    assert parse_zoned_timestamp("2024-01-02T03:04:05.120Z") == datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)
    assert parse_zoned_timestamp("2024-01-02T03:04:05+02:00") == datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert parse_zoned_timestamp("2038-01-19T03:14:07.999999Z").tzinfo == UTC
    col = SinkColumn("ts", "ts", "zoned_timestamp")
    assert postgres_converter(col)("1970-01-01T00:00:01Z") == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert mysql_converter(col)("1970-01-01T00:00:01Z") == datetime(1970, 1, 1, 0, 0, 1)  # naive UTC
    with pytest.raises(ValueError):
        parse_zoned_timestamp("yesterday")


def test_bits_booleans_geometry():
    b = (0b101000000001).to_bytes(2, "little")
    assert bits_to_int(b) == 0b101000000001
    assert bits_to_text(b, 12) == "101000000001"
    assert bits_to_text(b"\xff\xff\xff\xff\xff\xff\xff\xff", 64) == "1" * 64
    with pytest.raises(ValueError):
        bits_to_text(b"\xff\x1f", 12)
    assert postgres_converter(SinkColumn("b", "b", "bits", length=12))(b) == "101000000001"
    assert mysql_converter(SinkColumn("b", "b", "bits", length=12))(b) == 0b101000000001
    wkb = struct.pack("<BIdd", 1, 1, 1.5, -2.0)
    assert geometry_wkb({"wkb": wkb, "srid": 4326}) == wkb
    assert geometry_wkb({"x": 1.5, "y": -2.0, "wkb": None, "srid": None}) == wkb
    with pytest.raises(ValueError):
        geometry_wkb({"wkb": None, "srid": None})


def test_pass_through_values_keep_type_and_precision():
    d = Decimal("-12345678901234567890123456789012345.123456789012345678901234567890")
    for conv in (postgres_converter, mysql_converter):
        assert conv(SinkColumn("d", "d", "decimal", True, 65, 30))(d) == d
        assert str(conv(SinkColumn("d", "d", "decimal", True, 65, 30))(d)) == str(d)
        assert conv(SinkColumn("s", "s", "string"))("emoji \U0001F600 \u00e9\0") == "emoji \U0001F600 \u00e9\0"
        assert conv(SinkColumn("b", "b", "bytes"))(b"\x00\xff") == b"\x00\xff"
        assert conv(SinkColumn("y", "y", "year"))(0) == 0
        assert conv(SinkColumn("y", "y", "year"))(2155) == 2155
        for kind in ("date", "time", "timestamp_ms", "bits", "zoned_timestamp", "geometry"):
            assert conv(SinkColumn("n", "n", kind, length=3))(None) is None


# Producer input (what pymysql gives for the stored value) -> Avro (producer) -> fastavro ->
# sink converter: the sink parameter must be the stored value again.
ROUND_TRIP = [
    ("d", date(1000, 1, 1), date(1000, 1, 1)),
    ("d", date(9999, 12, 31), date(9999, 12, 31)),
    ("d", date(1969, 7, 20), date(1969, 7, 20)),
    ("tm6", timedelta(hours=-838, minutes=-59, seconds=-59), "-838:59:59.000000"),
    ("tm6", timedelta(microseconds=-1), "-00:00:00.000001"),
    ("tm6", timedelta(hours=30, microseconds=5), "30:00:00.000005"),
    ("dt", datetime(1000, 1, 1), datetime(1000, 1, 1)),
    ("dt3", datetime(2024, 2, 29, 23, 59, 59, 999000), datetime(2024, 2, 29, 23, 59, 59, 999000)),
    ("dt6", datetime(9999, 12, 31, 23, 59, 59, 999999), datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("dt6", datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(1969, 12, 31, 23, 59, 59, 999999)),
    ("ts6", datetime(2038, 1, 19, 3, 14, 7, 499999), datetime(2038, 1, 19, 3, 14, 7, 499999, tzinfo=UTC)),
    ("ts", datetime(1970, 1, 1, 0, 0, 1), datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
    ("yr", 0, 0),
    ("yr", 2155, 2155),
    ("b13", b"\x10\x01", "1000000000001"),
    ("b1", b"\x01", True),
    ("biu", 18446744073709551615, Decimal("18446744073709551615")),
    ("d65", Decimal("-99999999999999999999999999999999999.999999999999999999999999999999"),
     Decimal("-99999999999999999999999999999999999.999999999999999999999999999999")),
    ("d65", Decimal("0E-30"), Decimal("0E-30")),
    ("bn", b"\x01\x02", b"\x01\x02\x00\x00"),
    ("vc", "emoji \U0001F600 ok", "emoji \U0001F600 ok"),
    ("st", "x,z", "x,z"),
    ("js", '{"k": [1, 2.5, "\u00e9"]}', '{"k": [1, 2.5, "\u00e9"]}'),
    ("pt", struct.pack("<i", 0) + struct.pack("<BIdd", 1, 1, 1.0, 2.0), struct.pack("<BIdd", 1, 1, 1.0, 2.0)),
]


@pytest.mark.parametrize("column, stored, expected", ROUND_TRIP,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(ROUND_TRIP)])
def test_producer_value_round_trips_to_a_postgres_parameter(column, stored, expected):
    col = TABLE.column(column)
    avro_value = value_converter(col)(stored)
    schema = {"type": "record", "name": "R", "fields": [avro_field(col)]}
    decoded = avro_round_trip(schema, {column: avro_value})[column]
    sink_col = next(c for c in row_columns(ENVELOPE) if c.name == column)
    got = postgres_converter(sink_col)(decoded)
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, Decimal):
        assert str(got) == str(expected)


def test_whole_envelope_round_trip_through_fastavro():
    conv = RowConverter(TABLE)
    stored = {c.name: None for c in COLS}
    stored.update({"id": 1, "d65": Decimal("1.5"), "tm": timedelta(seconds=-1), "pt": struct.pack("<i", 4326)
                   + struct.pack("<BIdd", 1, 1, 3.0, 4.0), "ts6": datetime(2020, 5, 6, 7, 8, 9, 123456)})
    value = avro_round_trip(ENVELOPE, envelope_value(conv.convert(stored)))
    row = value["after"]
    layout = table_layout(ENVELOPE, ["id"])
    params = {c.name: postgres_converter(c)(row[c.field]) for c in layout.columns}
    assert params["d65"] == Decimal("1.5") and str(params["d65"]) == "1.500000000000000000000000000000"
    assert params["tm"] == "-00:00:01.000000"
    assert params["pt"] == struct.pack("<BIdd", 1, 1, 3.0, 4.0)
    assert params["ts6"] == datetime(2020, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert params["vc"] is None


# ----------------------------------------------------------------------------- keys and names
def test_key_json_and_hash_are_canonical():
    assert key_json([1, "a", b"\x00\xff", Decimal("1.50"), None]) == '[1,"a","00ff","1.5",null]'
    assert key_hash([Decimal("1.50")]) == key_hash([Decimal("1.5")])
    assert key_hash([Decimal("-0.00")]) == key_hash([Decimal("0")])
    assert key_hash([-0.0]) == key_hash([0.0])
    assert key_hash(["a"]) != key_hash(["A"]) != key_hash(["a "])
    assert key_hash([1, 2]) != key_hash([12]) and key_hash(["1,2"]) != key_hash(["1", "2"])
    assert len(key_hash(["\U0001F600"])) == 16
    assert freeze_key({"b": 1, "a": [1, 2]}) == freeze_key({"a": [1, 2], "b": 1})


def test_sink_names_fit_identifier_limits():
    assert sink_table_name("shop", "orders") == "shop__orders"
    long = sink_table_name("d" * 64, "t" * 64)
    assert len(long.encode()) <= 63 and long.startswith("d" * 40)
    assert long != sink_table_name("d" * 64, "t" * 63 + "u")
    emoji = sink_identifier("\U0001F600" * 20, 63)
    assert len(emoji.encode()) <= 63
    assert sink_table_name("d" * 30, "t" * 30, 64) == "d" * 30 + "__" + "t" * 30
    with pytest.raises(SinkError):
        sink_table_name("", "t")


# ----------------------------------------------------------------------------- reduce_batch
def test_reduce_batch_keeps_the_newest_per_key_and_splits():
    recs = [
        ({"id": 1}, "c", {"id": 1, "v": "a"}, P(1)),
        ({"id": 1}, "u", {"id": 1, "v": "b"}, P(5)),
        ({"id": 2}, "c", {"id": 2, "v": "x"}, P(2)),
        ({"id": 2}, "d", None, P(3)),
        ({"id": 1}, "u", {"id": 1, "v": "b"}, P(5)),   # a copy
        ({"id": 3}, "r", {"id": 3, "v": "r"}, P(4)),
        ({"id": 1}, "c", {"id": 1, "v": "a"}, P(1)),   # a copy, late
    ]
    red = reduce_batch(recs)
    assert [(c.key["id"], c.row["v"]) for c in red.upserts] == [(3, "r"), (1, "b")]
    assert [(c.key["id"], c.position) for c in red.deletes] == [(2, P(3))]
    assert red.superseded == 4
    assert all(isinstance(c, Change) for c in red.upserts + red.deletes)


def test_reduce_batch_validates_records():
    with pytest.raises(SinkError, match="op"):
        reduce_batch([({"id": 1}, "x", {"id": 1}, P(1))])
    with pytest.raises(SinkError, match="position"):
        reduce_batch([({"id": 1}, "c", {"id": 1}, "12")])
    with pytest.raises(SinkError, match="position"):
        reduce_batch([({"id": 1}, "c", {"id": 1}, "\u0661" * 30)])  # non-ASCII digits
    with pytest.raises(SinkError, match="row"):
        reduce_batch([({"id": 1}, "u", None, P(1))])
    with pytest.raises(SinkError):
        reduce_batch([({"id": 1}, "c")])


def test_reduce_for_layout_keys_by_key_columns_and_reads_keys_from_rows():
    cols = [ColumnDef("a", "varchar", "varchar(10)", False, 1, character_set="utf8mb4"),
            ColumnDef("b", "int", "int(11)", False, 2), ColumnDef("v", "int", "int(11)", True, 3)]
    layout = table_layout(envelope_for(TableDef("d", "t", cols, ["a", "b"])), ["a", "b"])
    recs = [
        ({"b": 1, "a": "x"}, "c", {"a": "x", "b": 1, "v": 1}, P(1)),
        (None, "u", {"a": "x", "b": 1, "v": 2}, P(2)),        # key from the row
        ({"a": "x", "b": 2}, "d", None, P(3)),
        ({"a": "X", "b": 1}, "c", {"a": "X", "b": 1, "v": 9}, P(4)),  # a different key: case matters
    ]
    red = reduce_for_layout(recs, layout)
    assert [(kv, ch.row["v"]) for ch, kv in red.upserts] == [(("x", 1), 2), (("X", 1), 9)]
    assert [kv for _, kv in red.deletes] == [("x", 2)]
    assert red.superseded == 1


class _Obj:
    def __init__(self, key, op, row, position):
        self.key, self.op, self.row, self.position = key, op, row, position


@st.composite
def batches(draw):
    """Distinct events (unique positions) of a few keys, then copies, in any order."""
    n = draw(st.integers(1, 40))
    positions = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n, unique=True))
    events = []
    for p in positions:
        k = draw(st.sampled_from([1, 2, 3, 4, 5, "a", "A", b"\x00", (1, "x")]))
        op = draw(st.sampled_from("curd"))
        row = None if op == "d" else {"k": k, "v": p}
        events.append(({"k": k}, op, row, P(p)))
    copies = draw(st.lists(st.sampled_from(events), max_size=30))
    shaped = draw(st.sampled_from(["tuple", "change", "object"]))
    batch = draw(st.permutations(events + copies))
    if shaped == "change":
        batch = [Change(*r) for r in batch]
    elif shaped == "object":
        batch = [_Obj(*r) for r in batch]
    return events, batch


@SETTINGS
@given(batches())
def test_reduce_batch_property_any_order_with_copies(data):
    events, batch = data
    expected: dict = {}
    for e in events:
        k = freeze_key(e[0])
        if k not in expected or expected[k][3] < e[3]:
            expected[k] = e
    red = reduce_batch(batch)
    got = {freeze_key(c.key): tuple(c) for c in red.upserts + red.deletes}
    assert got == {k: tuple(v) for k, v in expected.items()}
    assert all(c.op == "d" for c in red.deletes) and all(c.op != "d" for c in red.upserts)
    positions = [c.position for c in red.upserts]
    assert positions == sorted(positions)
    assert red.superseded == len(batch) - len(expected)


def test_apply_result_counts():
    r = ApplyResult(upserted=3, deleted=1, skipped=2, superseded=4)
    assert r.total == 10
    up, de, sk = r
    assert (up, de, sk) == (3, 1, 2)


def test_sinks_pickle_without_connections():
    from spark_jobs.sinks.mysql import MySQLSink
    from spark_jobs.sinks.postgres import PostgresSink
    pg = pickle.loads(pickle.dumps(PostgresSink("postgresql://x@127.0.0.1:1/db", "s", serialize=False)))
    assert (pg.dsn, pg.schema_name, pg.serialize, pg.db.held) == ("postgresql://x@127.0.0.1:1/db", "s", False, None)
    my = pickle.loads(pickle.dumps(MySQLSink("h", 3306, "u", "p", "sink")))
    assert (my.host, my.port, my.database, my.db.held) == ("h", 3306, "sink", None)


def test_an_unreachable_database_is_sink_unavailable():
    """The driver's connection failure leaves the sink as SinkUnavailable (a retry, not a poison record)."""
    from spark_jobs.sinks.mysql import MySQLSink
    from spark_jobs.sinks.postgres import PostgresSink
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket is closed
    for sink in (PostgresSink(f"postgresql://x@127.0.0.1:{port}/db?connect_timeout=5", "s"),
                 MySQLSink("127.0.0.1", port, "u", "p", "sink", connect_timeout=5)):
        with pytest.raises(SinkUnavailable, match=type(sink).__name__):
            sink.applied_positions()
        assert sink.db.held is None



def test_postgres_tells_a_database_out_of_reach_from_data_it_refuses():
    import psycopg

    from spark_jobs.sinks.postgres import PostgresSink

    sink = PostgresSink("postgresql://nowhere/x")
    assert sink.db.out_of_reach(psycopg.OperationalError("connection refused"))  # client side: no SQLSTATE
    assert sink.db.out_of_reach(psycopg.errors.AdminShutdown())
    assert sink.db.out_of_reach(psycopg.errors.DeadlockDetected())
    assert not sink.db.out_of_reach(psycopg.errors.ProgramLimitExceeded())  # a key too large for its index


@given(st.lists(st.integers(-(1 << 70), 1 << 70), min_size=1, max_size=4))
def test_an_integer_key_has_the_json_text_of_any_key(values):
    assert key_json(values) == json.dumps([_json_value(v) for v in values], ensure_ascii=False,
                                          separators=(",", ":"), allow_nan=False)
    assert key_json([True, *values]) == json.dumps([True, *values], separators=(",", ":"))  # a bool is not an int
