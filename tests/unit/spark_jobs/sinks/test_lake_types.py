"""The lake tables' types and the staged changes: every producer type to its Arrow type, the
stored value through the producer, Avro and the staging table unchanged, and the reduction of
a batch's parts to one change per key (the DBLog upsert rule in Arrow)."""

from __future__ import annotations

import struct
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import UnsupportedType
from producer.events.avro_types import avro_field
from producer.events.values import value_converter
from spark_jobs.sinks.batch import Change, reduce_batch
from spark_jobs.sinks.lake_stage import reduce_changes, safe_segment
from spark_jobs.sinks.lake_types import OP_COLUMN, arrow_type, changes_table, iceberg_type, lake_schema
from spark_jobs.sinks.layout import SinkColumn, row_columns, table_layout
from spark_jobs.sinks.naming import POSITION_COLUMN
from tests.unit.spark_jobs.sinks.test_sinks import CATALOGUE, ENVELOPE, P, SETTINGS, TABLE, avro_round_trip

UTC = timezone.utc

#: Per column kind of the catalogue: the Arrow type of its lake column.
EXPECTED_ARROW = {
    "int": pa.int32(), "smallint": pa.int16(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "boolean": pa.bool_(), "string": pa.string(), "enum": pa.string(), "set": pa.string(), "json": pa.string(),
    "bytes": pa.binary(), "date": pa.date32(), "time": pa.int64(), "timestamp_ms": pa.timestamp("us"),
    "timestamp_us": pa.timestamp("us"), "zoned_timestamp": pa.timestamp("us", tz="UTC"), "year": pa.int16(),
    "geometry": pa.binary(), "point": pa.binary(),
}


@pytest.mark.parametrize("row", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_every_producer_type_has_a_lake_type(row):
    col = next(c for c in row_columns(ENVELOPE) if c.name == row[0])
    got = arrow_type(col)
    if col.kind == "decimal":
        assert got == (pa.decimal128(col.precision, col.scale) if col.precision <= 38 else pa.string())
    elif col.kind == "bits":
        assert got == (pa.int64() if col.length <= 63 else pa.decimal128(20, 0))
    else:
        assert got == EXPECTED_ARROW[col.kind]
    # Iceberg has no 16-bit integers
    if got == pa.int16():
        assert arrow_type(col, small_ints=False) == pa.int32()


def test_bigint_unsigned_is_decimal_20_0_and_unknown_kinds_are_refused():
    col = next(c for c in row_columns(ENVELOPE) if c.name == "biu")
    assert arrow_type(col) == pa.decimal128(20, 0)
    with pytest.raises(UnsupportedType):
        arrow_type(SinkColumn("x", "x", "interval_of_doom"))
    with pytest.raises(UnsupportedType):
        arrow_type(SinkColumn("x", "x", "bits", length=65))


def _pyiceberg_type(t: pa.DataType):
    """The Iceberg type pyiceberg gives an Arrow type (its public ``pyarrow_to_schema``, as it
    converts the schema of a table it creates; the field id given in the field's metadata)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    return pyarrow_to_schema(pa.schema([pa.field("c", t, metadata={"PARQUET:field_id": "1"})])).fields[0].field_type


#: Every Arrow type a lake column takes, and the other widths of a type a column may arrive in.
LAKE_ARROW_TYPES = sorted({*EXPECTED_ARROW.values(), pa.int32(), pa.int8(), pa.large_string(), pa.large_binary(),
                           pa.decimal128(20, 0), pa.decimal128(38, 10), pa.decimal128(1, 0),
                           pa.timestamp("us", tz="+00:00")}, key=str)


@pytest.mark.parametrize("t", LAKE_ARROW_TYPES, ids=str)
def test_the_iceberg_type_of_every_lake_type_is_the_one_pyiceberg_creates_a_table_with(t):
    assert iceberg_type(t) == _pyiceberg_type(t)


@pytest.mark.parametrize("row", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_every_producer_type_has_an_iceberg_type(row):
    col = next(c for c in row_columns(ENVELOPE) if c.name == row[0])
    t = arrow_type(col, small_ints=False)
    assert iceberg_type(t) == _pyiceberg_type(t)


def test_a_float_vectors_iceberg_type_is_the_list_pyiceberg_creates_a_table_with():
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    t = pa.list_(pa.field("element", pa.float32(), metadata={"PARQUET:field_id": "2"}))
    made = pyarrow_to_schema(pa.schema([pa.field("c", t, metadata={"PARQUET:field_id": "1"})])).fields[0].field_type
    ours = iceberg_type(arrow_type(SinkColumn("c", "c", "float_vector")))
    assert (ours.element_type, ours.element_required) == (made.element_type, made.element_required)


@pytest.mark.parametrize("t", [pa.time64("us"), pa.timestamp("ns"), pa.timestamp("us", tz="Europe/Paris"),
                               pa.decimal256(40, 0), pa.list_(pa.int32()), pa.uint64()], ids=str)
def test_an_arrow_type_no_lake_column_takes_has_no_iceberg_type(t):
    """(a list of float32, a float vector's, is the one list a lake column takes)"""
    with pytest.raises(UnsupportedType):
        iceberg_type(t)


# the stored value (what pymysql reads) -> producer -> Avro -> the staged table: the value again
LAKE_ROUND_TRIP = [
    ("d", date(1000, 1, 1), date(1000, 1, 1)),
    ("d", date(9999, 12, 31), date(9999, 12, 31)),
    ("tm6", timedelta(hours=-838, minutes=-59, seconds=-59), -(838 * 3600 + 59 * 60 + 59) * 1_000_000),
    ("tm6", timedelta(hours=30, microseconds=5), 30 * 3600 * 1_000_000 + 5),
    ("dt", datetime(1000, 1, 1), datetime(1000, 1, 1)),
    ("dt3", datetime(2024, 2, 29, 23, 59, 59, 999000), datetime(2024, 2, 29, 23, 59, 59, 999000)),
    ("dt6", datetime(9999, 12, 31, 23, 59, 59, 999999), datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("dt6", datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(1969, 12, 31, 23, 59, 59, 999999)),
    ("ts6", datetime(2038, 1, 19, 3, 14, 7, 499999), datetime(2038, 1, 19, 3, 14, 7, 499999, tzinfo=UTC)),
    ("yr", 2155, 2155),
    ("b13", b"\x10\x01", 0b1000000000001),
    ("b64", b"\xff" * 8, Decimal(2 ** 64 - 1)),
    ("b1", b"\x01", True),
    ("biu", 18446744073709551615, Decimal("18446744073709551615")),
    ("d10", Decimal("-12345678.91"), Decimal("-12345678.91")),
    ("d65", Decimal("-99999999999999999999999999999999999.999999999999999999999999999999"),
     "-99999999999999999999999999999999999.999999999999999999999999999999"),
    ("bn", b"\x01\x02", b"\x01\x02\x00\x00"),
    ("vc", "emoji \U0001F600 ok", "emoji \U0001F600 ok"),
    ("st", "x,z", "x,z"),
    ("js", '{"k": [1, 2.5, "\u00e9"]}', '{"k": [1, 2.5, "\u00e9"]}'),
    ("pt", struct.pack("<i", 0) + struct.pack("<BIdd", 1, 1, 1.0, 2.0), struct.pack("<BIdd", 1, 1, 1.0, 2.0)),
    ("fl", 1.5, 1.5),
]


@pytest.mark.parametrize("column, stored, expected", LAKE_ROUND_TRIP,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(LAKE_ROUND_TRIP)])
def test_producer_value_round_trips_into_the_staged_table(column, stored, expected):
    col = TABLE.column(column)
    decoded = avro_round_trip({"type": "record", "name": "R", "fields": [avro_field(col)]},
                              {column: value_converter(col)(stored)})[column]
    layout = table_layout(ENVELOPE, ["id"])
    row = {c.field: None for c in layout.columns}
    row.update({"id": 1, next(c.field for c in layout.columns if c.name == column): decoded})
    staged = changes_table(layout, [Change({"id": 1}, "c", row, P(5))])
    got = staged.column(column)[0].as_py()
    assert got == expected and type(got) is type(expected)
    if isinstance(expected, Decimal):
        assert str(got) == str(expected)
    assert staged.column(POSITION_COLUMN)[0].as_py() == P(5) and staged.column(OP_COLUMN)[0].as_py() == "c"


def test_a_delete_stages_its_key_only_and_the_schema_is_nullable():
    layout = table_layout(ENVELOPE, ["id"])
    staged = changes_table(layout, [Change({"id": 7}, "d", None, P(9))])
    assert staged.column("id")[0].as_py() == 7 and staged.column("vc")[0].as_py() is None
    assert all(f.nullable for f in lake_schema(layout, soft_delete=True))
    assert lake_schema(layout, soft_delete=True).names[-2:] == [POSITION_COLUMN, "__cdc_deleted"]


def test_a_value_that_does_not_fit_names_its_column():
    layout = table_layout(ENVELOPE, ["id"])
    row = {c.field: None for c in layout.columns}
    row.update({"id": 1, "d": "not a day"})
    with pytest.raises(UnsupportedType, match="'d'"):
        changes_table(layout, [Change({"id": 1}, "c", row, P(1))])


def test_safe_segment():
    assert safe_segment("cdc-merge:cdc/src/1a2b") == "cdc-merge_cdc_src_1a2b"
    assert safe_segment("") == "_"


_KEYS = st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "ü"]))


@given(st.lists(st.tuples(_KEYS, st.integers(0, 40)), min_size=1, max_size=60))
@SETTINGS
def test_reduce_changes_agrees_with_reduce_batch(drawn):
    """Per key the highest position, whatever the order and with copies (a copy: the same
    key, position and change): the same winners as the row sinks' reduce_batch, in rising
    position order."""
    changes = [(k, "cud"[p % 3], p) for k, p in drawn]
    k1 = [k[0] for k, _, _ in changes]
    k2 = [k[1] for k, _, _ in changes]
    table = pa.table({"k1": pa.array(k1, pa.int64()), "k2": k2, "v": [f"{op}{p}" for _, op, p in changes],
                      POSITION_COLUMN: [P(p) for _, _, p in changes], OP_COLUMN: [op for _, op, _ in changes]})
    got = reduce_changes(table, ["k1", "k2"])
    want = reduce_batch([Change(k, op, {"v": f"{op}{p}"} if op != "d" else None, P(p)) for k, op, p in changes])
    winners = {k: (c.op, c.position) for c in want.upserts + want.deletes for k in [c.key]}
    rows = got.to_pylist()
    assert {(r["k1"], r["k2"]): (r[OP_COLUMN], r[POSITION_COLUMN]) for r in rows} == winners
    assert len(rows) == len(winners)
    assert [r[POSITION_COLUMN] for r in rows] == sorted(r[POSITION_COLUMN] for r in rows)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40)), min_size=1, max_size=60))
@SETTINGS
def test_reduce_changes_of_one_key_column_with_or_without_repeated_keys(drawn):
    """One key column: a batch holding each key once is taken as it is, else reduced."""
    table = pa.table({"k": pa.array([k for k, _ in drawn], pa.int64()), OP_COLUMN: ["cud"[p % 3] for _, p in drawn],
                      POSITION_COLUMN: [P(p) for _, p in drawn]})
    got = reduce_changes(table, ["k"]).to_pylist()
    best: dict[int, str] = {}
    for k, p in drawn:
        best[k] = max(best.get(k, ""), P(p))
    assert {r["k"]: r[POSITION_COLUMN] for r in got} == best and len(got) == len(best)
