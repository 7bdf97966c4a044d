"""cdc verify's pure parts: value normalisation across MySQL, PostgreSQL and Avro, checksums,
row comparison, key parameters, the keyset predicates and the table spec's typed refusals."""

from __future__ import annotations

import json
import random
import struct
from datetime import date, datetime, timedelta, timezone
from decimal import Context, Decimal, localcontext
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cdc.verify import spec as spec_module
from cdc.verify.changelog import replay_changelog
from cdc.verify.checksum import checksum, row_digest
from cdc.verify.diff import compare_rows
from cdc.verify.normalise import (
    WRITTEN,
    as_source,
    as_written,
    canonical_decimal,
    canonical_float32,
    canonical_json,
    normalise,
    normalise_avro,
    source_value,
)
from cdc.verify.spec import ColumnSpec, KeylessTable, MissingTable, TableSpec, column_kind
from cdc.verify.sql import key_after, key_in_list
from producer.events.values import value_converter
from producer.table_schema import ColumnDef, TableDef

UTC = timezone.utc
F32 = struct.Struct("<f")


def cdef(data_type: str, column_type: str, *, prec=None, scale=None, dtp=None) -> ColumnDef:
    return ColumnDef(name="c", data_type=data_type, column_type=column_type, nullable=True, ordinal=1,
                     numeric_precision=prec, numeric_scale=scale, datetime_precision=dtp)


def spec_of(col: ColumnDef, kind: str | None = None) -> ColumnSpec:
    kind = kind or column_kind(col.data_type)
    return ColumnSpec(col.name, kind, col.name, col.scale if col.data_type in ("float", "double") else None,
                      col.fsp if kind == "datetime" else 0, (col.bit_length or 1) if kind == "bit" else 1,
                      tuple(col.enum_values) if col.data_type == "set" else ())


# ----------------------------------------------------------------------------- decimals
decimals = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(lambda d: abs(d.adjusted()) < 60)


@given(decimals, st.integers(0, 8))
def test_decimal_canonical_ignores_scale_and_exponent(d, extra):
    c = canonical_decimal(d)
    assert "E" not in c and "e" not in c
    assert Decimal(c) == d
    # the same value with more trailing zeros (PostgreSQL numeric(p,s) keeps the scale)
    with localcontext(Context(prec=400)):
        padded = d.quantize(Decimal(1).scaleb(min(d.as_tuple().exponent, 0) - extra))
    assert canonical_decimal(padded) == c
    assert canonical_decimal(str(d)) == c


@given(decimals, decimals)
def test_decimal_canonical_is_injective(a, b):
    assert (canonical_decimal(a) == canonical_decimal(b)) == (a == b)


def test_decimal_canonical_examples():
    big = Decimal("-12345678901234567890123456789012345.123456789012345678901234567890")
    assert canonical_decimal(big) == "-12345678901234567890123456789012345.12345678901234567890123456789"
    assert canonical_decimal(Decimal("-0.000")) == "0"
    assert canonical_decimal(Decimal("1E+3")) == "1000"
    assert canonical_decimal(Decimal("12.500")) == "12.5"
    assert canonical_decimal(Decimal("0.0100")) == "0.01"
    # the last digit matters
    assert canonical_decimal(Decimal("12345678.91")) != canonical_decimal(Decimal("12345678.92"))
    assert normalise("decimal", Decimal("18446744073709551615")) == "18446744073709551615"


# ----------------------------------------------------------------------------- floats
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_forms_agree(x):
    widened = F32.unpack(F32.pack(x))[0]              # MySQL CAST(f AS DOUBLE), Avro float
    pg_text = float(repr(F32.unpack(F32.pack(x))[0]))  # already a float32
    shortest = value_converter(cdef("float", "float"))(widened)  # the producer's float32 text form
    assert canonical_float32(widened) == canonical_float32(shortest) == canonical_float32(pg_text)
    for digits in (9,):
        assert canonical_float32(float(f"{widened:.{digits}g}")) == canonical_float32(widened)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float32_distinct_values_stay_distinct(a, b):
    assume(a != b)
    assert canonical_float32(a) != canonical_float32(b)


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=20))
def test_a_vectors_forms_agree(xs):
    """MySQL's VECTOR bytes (source), the events' Avro floats and a lake's list, PostgreSQL's real[]
    (its shortest float4 text read as doubles) and the MySQL sink's JSON compare equal."""
    from spark_jobs.sinks.values import vector_json
    widened = [F32.unpack(F32.pack(x))[0] for x in xs]
    source = struct.pack(f"<{len(xs)}f", *xs)
    pg_read = [float(f"{x:.9g}") for x in widened]
    forms = [source_value("vector", source), normalise_avro("vector", widened), normalise("vector", pg_read),
             normalise("vector", vector_json(widened))]
    assert forms.count(forms[0]) == len(forms), forms


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=5),
       st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=5))
def test_distinct_vectors_stay_distinct(a, b):
    wa, wb = ([F32.unpack(F32.pack(x))[0] or 0.0 for x in v] for v in (a, b))  # (-0 is 0, as for FLOAT)
    assume(wa != wb)
    assert normalise("vector", wa) != normalise("vector", wb)


def test_vector_examples():
    assert normalise("vector", struct.pack("<3f", 1.5, -0.0, 0.1)) == "[1.5,0.0,0.10000000149011612]"
    assert normalise("vector", "[1.5, 0, 0.1]") == normalise("vector", [1.5, 0.0, 0.1])
    assert normalise("vector", b"\x00\x01\x02") == b"\x00\x01\x02"  # not a vector's bytes: differs
    assert normalise("vector", None) is None and column_kind("vector") == "vector"


def test_float_and_double_examples():
    assert normalise("float32", -0.0) == 0.0 and repr(normalise("double", -0.0)) == "0.0"
    assert normalise("double", 0.1) == 0.1 and normalise("double", "0.1") == 0.1
    assert normalise("double", 0.30000000000000004) != normalise("double", 0.3)
    # FLOAT(10,2): the float32 value read as DOUBLE, rounded as the producer does
    assert normalise("float32", 1234.56005859375, scale=2) == normalise("float32", 1234.56, scale=2) == 1234.56
    assert normalise("double", float("nan")) == "NaN"


# ----------------------------------------------------------------------------- temporal
instants = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1))


@given(instants, st.integers(-14 * 60, 14 * 60))
def test_timestamps_naive_utc_and_aware_agree(dt, offset_min):
    tz = timezone(timedelta(minutes=offset_min))
    aware = dt.replace(tzinfo=UTC).astimezone(tz)  # PostgreSQL timestamptz in any session zone
    assert normalise("timestamp", dt) == normalise("timestamp", aware) == normalise("datetime", dt)
    assert normalise("timestamp", dt) != normalise("timestamp", dt + timedelta(microseconds=1))


@given(instants, st.sampled_from([0, 3, 6]))
def test_datetime_and_timestamp_avro_forms(dt, fsp):
    dt = dt.replace(microsecond=dt.microsecond // 10 ** (6 - fsp) * 10 ** (6 - fsp)) if fsp < 6 else dt
    col = cdef("datetime", f"datetime({fsp})" if fsp else "datetime", dtp=fsp)
    assert spec_of(col).avro(value_converter(col)(dt)) == spec_of(col).source(dt)
    ts = cdef("timestamp", f"timestamp({fsp})" if fsp else "timestamp", dtp=fsp)
    assert spec_of(ts).avro(value_converter(ts)(dt)) == spec_of(ts).source(dt)


def test_zero_dates_are_null():
    for kind, v in (("date", "0000-00-00"), ("datetime", "0000-00-00 00:00:00"), ("timestamp", "0000-00-00 00:00:00"),
                    ("datetime", "2024-00-10 10:00:00.000"), ("date", "2024-05-00")):
        assert normalise(kind, v) is None
    assert normalise("date", date(1000, 1, 1)) == "1000-01-01"
    assert normalise("date", datetime(2024, 2, 29, 23, 59)) == "2024-02-29"


@given(st.integers(-(838 * 3600 + 59 * 60 + 59) * 10 ** 6, (838 * 3600 + 59 * 60 + 59) * 10 ** 6))
def test_time_forms_agree(us):
    td = timedelta(microseconds=us)  # MySQL TIME via pymysql, PostgreSQL interval via psycopg
    col = cdef("time", "time(6)", dtp=6)
    spec = spec_of(col)
    assert spec.source(td) == spec.sink(td) == us
    assert spec.avro(value_converter(col)(td)) == us
    # as a MySQL key parameter: the exact TIME literal, which reads back as the same value
    assert normalise("time", spec.param(us, "mysql")) == us
    assert spec.param(us, "postgres") == td
    if 0 <= us < 86_400 * 10 ** 6:
        t = (datetime(2000, 1, 1) + td).time()  # a PostgreSQL `time` column
        assert normalise("time", t) == us


# ----------------------------------------------------------------------------- bits, bytes, geometry
@given(st.integers(1, 64), st.data())
def test_bit_forms_agree(n, data):
    v = data.draw(st.integers(0, 2 ** n - 1))
    col = cdef("bit", f"bit({n})", prec=n)
    spec = spec_of(col)
    mysql = v.to_bytes((n + 7) // 8, "big")                  # pymysql, source and MySQL sink
    pg = (v != 0) if n == 1 else format(v, f"0{n}b")          # PostgreSQL boolean / bit(n) text
    assert spec.source(mysql) == spec.sink(mysql) == spec.sink(pg) == v
    assert spec.avro(value_converter(col)(mysql)) == v        # Avro boolean / little-endian Bits
    assert spec.param(v, "postgres") == pg and spec.param(v, "mysql") == v


def test_bytes_and_geometry():
    assert normalise("bytes", memoryview(b"\x00\xff")) == b"\x00\xff" == normalise("bytes", bytearray(b"\x00\xff"))
    wkb = struct.pack("<BIdd", 1, 1, 1.0, 2.0)
    stored = (4326).to_bytes(4, "little") + wkb               # MySQL: SRID prefix + WKB
    col = cdef("point", "point")
    spec = spec_of(col)
    assert spec.kind == "geometry"
    assert spec.source(stored) == spec.sink(wkb) == spec.avro(value_converter(col)(stored)) == wkb
    assert normalise_avro("bytes", "AP8=") == b"\x00\xff"     # JSON-format records: base64


# ----------------------------------------------------------------------------- json, text
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


@given(json_values, st.randoms())
def test_json_canonical_ignores_order_and_spacing(value, rnd):
    def shuffled(v):
        if isinstance(v, dict):
            items = list(v.items())
            rnd.shuffle(items)
            return {k: shuffled(x) for k, x in items}
        if isinstance(v, list):
            return [shuffled(x) for x in v]
        return v
    mysql_text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False)
    pg_text = json.dumps(shuffled(value), indent=1)
    assert canonical_json(mysql_text) == canonical_json(pg_text) == canonical_json(mysql_text.encode())
    col = cdef("json", "json")
    assert spec_of(col).avro(value_converter(col)(mysql_text)) == spec_of(col).source(mysql_text)


def test_json_examples():
    assert canonical_json('{"b": 1, "a": [1, 2.5, "é"]}') == '{"a":[1,2.5,"é"],"b":1}'
    assert canonical_json("null") == "null" and normalise("json", None) is None
    assert canonical_json("{not json") == "{not json"
    assert canonical_json('{"a": 1}') != canonical_json('{"a": 2}')
    # numbers by their value: as PostgreSQL's jsonb (numeric) gives MySQL's back; a decimal MySQL's
    # JSON (a double) keeps to 17 digits and PostgreSQL's in full
    assert canonical_json('[1.7976931348623157e+308, 1e+20, -0.0, 0.1, 18446744073709551615, 1.50, 1e19, '
                          '-1.2345678901234567e19]') == \
        canonical_json("[179769313486231570" + "0" * 291 + ", 100000000000000000000, 0.0, 0.1, 18446744073709551615, "
                       "1.5, 10000000000000000000, -12345678901234567890.123456789]")
    assert canonical_json("[18446744073709551615]") != canonical_json("[18446744073709551614]")
    assert canonical_json("[1]") != canonical_json('["1"]') and canonical_json("[1]") != canonical_json("[1.1]")
    assert canonical_json('{"a": [true, null]}') == '{"a":[true,null]}'


def test_text_enum_set_unicode():
    assert normalise("text", "Ça va ? 😀") == "Ça va ? 😀"
    assert normalise("text", "abc") != normalise("text", "ABC")
    assert normalise("text", "e\u0301") != normalise("text", "\u00e9")  # no Unicode folding: byte equality
    assert normalise("text", {"z", "x"}, members=("x", "y", "z")) == "x,z"
    col = cdef("set", "set('x','y','z')")
    assert spec_of(col).avro(value_converter(col)("x,z")) == spec_of(col).source("x,z") == "x,z"


def test_integers():
    assert normalise("int", True) == 1 and normalise("int", Decimal("18446744073709551615")) == 2 ** 64 - 1
    assert normalise("int", 2024) == normalise("int", date(2024, 1, 1)) == 2024
    col = cdef("bigint", "bigint(20) unsigned", prec=20, scale=0)
    assert spec_of(col).avro(value_converter(col)(2 ** 64 - 1)) == 2 ** 64 - 1


@given(st.decimals(min_value=-10 ** 8, max_value=10 ** 8, places=2))
def test_decimal_avro_form(d):
    col = cdef("decimal", "decimal(10,2)", prec=10, scale=2)
    spec = spec_of(col)
    assert spec.avro(value_converter(col)(d)) == spec.source(d) == spec.sink(Decimal(str(d)) + Decimal("0.000"))


# ----------------------------------------------------------------------------- kinds and modes
def test_column_kinds_and_chunk_modes():
    assert [column_kind(t) for t in ("tinyint", "year", "decimal", "float", "double", "bit", "varchar", "enum",
                                     "set", "blob", "json", "date", "time", "datetime", "timestamp", "polygon",
                                     "uuid")] == \
        ["int", "int", "decimal", "float32", "double", "bit", "text", "text", "text", "bytes", "json", "date", "time",
         "datetime", "timestamp", "geometry", "text"]
    assert column_kind("longtext", json_columns=True) == "json"

    def table(*kinds):
        cols = [ColumnSpec(f"k{i}", k) for i, k in enumerate(kinds)] + [ColumnSpec("v", "text")]
        return TableSpec("d", "t", cols, [f"k{i}" for i in range(len(kinds))])
    assert table("int").mode == "range" and table("int", "datetime", "bytes").mode == "range"
    assert table("text").mode == "keys" and table("int", "text").mode == "keys"


def test_keyset_predicates():
    assert key_after("postgres", ['"a"'], [1], ">") == ('"a" > %s', [1])
    assert key_after("postgres", ['"a"', '"b"'], [1, "x"], "<=") == ('("a", "b") <= (%s, %s)', [1, "x"])
    sql, params = key_after("mysql", ["`a`", "`b`", "`c`"], [1, 2, 3], ">")
    assert sql == "((`a` > %s) OR (`a` = %s AND `b` > %s) OR (`a` = %s AND `b` = %s AND `c` > %s))"
    assert params == [1, 1, 2, 1, 2, 3]
    sql, params = key_after("mysql", ["`a`", "`b`"], [1, 2], "<=")
    assert sql == "((`a` < %s) OR (`a` = %s AND `b` <= %s))" and params == [1, 1, 2]
    assert key_in_list(["`k`"], [[1], [2]]) == ("`k` IN (%s, %s)", [1, 2])
    assert key_in_list(["a", "b"], [[1, "x"], [2, "y"]]) == ("(a, b) IN ((%s, %s), (%s, %s))", [1, "x", 2, "y"])


# ----------------------------------------------------------------------------- checksums and diffs
rows_strategy = st.dictionaries(st.tuples(st.integers(0, 10 ** 6)),
                                st.tuples(st.text(max_size=5), st.none() | st.integers() | st.binary(max_size=4)),
                                max_size=40)


@given(rows_strategy, st.randoms())
def test_checksum_is_order_independent(rows, rnd):
    items = list(rows.items())
    a = checksum(items)
    rnd.shuffle(items)
    b = checksum(items)
    assert (a.count, a.total) == (b.count, b.total) == (len(rows), b.total)


@given(rows_strategy.filter(bool), st.data())
def test_checksum_sees_any_single_change(rows, data):
    items = list(rows.items())
    i = data.draw(st.integers(0, len(items) - 1))
    key, (s, v) = items[i]
    changed = items[:i] + [(key, (s + "!", v))] + items[i + 1:]
    assert checksum(items).total != checksum(changed).total
    assert checksum(items + [items[i]]).count == len(items) + 1
    assert checksum(items + [items[i], items[i]]).total != checksum(items).total  # copies do not cancel


def test_row_digest_types_matter():
    assert row_digest((1,), ("1",)) != row_digest((1,), (1,))
    assert row_digest((1,), (None,)) != row_digest((1,), ("None",))
    assert row_digest((1,), (b"a",)) != row_digest((1,), ("a",))


def test_compare_rows():
    specs = [ColumnSpec("a", "text"), ColumnSpec("f", "float32"), ColumnSpec("d", "double")]
    src = {(1,): ("x", 1.5, 0.1), (2,): ("y", 2.0, 0.2), (3,): ("z", 3.0, 0.3)}
    sink = [((1,), ("x", 1.5000001, 0.1)),  # FLOAT within 1e-6: equal
            ((2,), ("Y", 2.0, 0.2000001)), ((4,), ("w", 4.0, 0.4))]
    missing, extra, differing = compare_rows(specs, src, sink)
    assert missing == [((3,), ("z", 3.0, 0.3))]
    assert extra == [((4,), ("w", 4.0, 0.4))]
    assert differing == [((2,), [0, 2], ("y", 2.0, 0.2), ("Y", 2.0, 0.2000001))]
    assert src[(3,)] == ("z", 3.0, 0.3)  # not modified


def test_replay_changelog_applies_in_order_and_skips_copies():
    spec = TableSpec("d", "t", [ColumnSpec("id", "int", "id"), ColumnSpec("dt", "datetime", "dt", fsp=6),
                                ColumnSpec("v", "text", "v")], ["id"])

    def env(op, pos, before=None, after=None):
        return {"op": op, "position": f"{pos:030d}", "before": before, "after": after}
    recs = [
        (0, {"id": 1}, env("c", 1, after={"id": 1, "dt": 0, "v": "a"})),
        (0, {"id": 2}, env("c", 2, after={"id": 2, "dt": 1, "v": "b"})),
        (0, {"id": 1}, env("u", 3, after={"id": 1, "dt": 2, "v": "a2"})),
        (0, {"id": 1}, env("u", 3, after={"id": 1, "dt": 2, "v": "COPY"})),  # a copy: same position
        (0, {"id": 2}, env("d", 4, before={"id": 2, "dt": 1, "v": "b"})),
        (1, {"id": 3}, env("c", 1, after={"id": 3, "dt": None})),              # an older schema: no v
    ]
    notes: list[str] = []
    rows = replay_changelog(recs, spec, notes)
    assert rows == {(1,): ("1970-01-01 00:00:00.000002", "a2"), (3,): (None, "<absent from the record>")}
    assert notes and "1 copies" in notes[0]


def test_source_value_drops_the_srid_only_for_geometries():
    assert source_value("geometry", b"\x00\x00\x00\x00WKB!") == b"WKB!"
    assert source_value("bytes", b"\x00\x00\x00\x00WKB!") == b"\x00\x00\x00\x00WKB!"


def test_table_spec_says_by_type_why_a_table_cannot_be_compared(monkeypatch):
    cfg = SimpleNamespace(source=SimpleNamespace(exclude_columns={}, key_columns={}, column_include_list=[],
                                                column_exclude_list=[], message_key_columns=""))
    monkeypatch.setattr(spec_module, "read_table_def", lambda conn, db, table: None)
    assert spec_module.table_spec(None, cfg, "d", "t") == MissingTable("no such table d.t")
    keyless = TableDef("d", "t", [ColumnDef(name="v", data_type="int", column_type="int", nullable=True, ordinal=1)])
    monkeypatch.setattr(spec_module, "read_table_def", lambda conn, db, table: keyless)
    assert spec_module.table_spec(None, cfg, "d", "t") == KeylessTable(
        "no primary key and no source.message_key_columns (or key_columns) entry (the sinks cannot hold it)")


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 50), st.text(max_size=3)), max_size=30))
def test_compare_rows_agrees_with_sets(pairs):
    specs = [ColumnSpec("v", "text")]
    src = {(k,): (v,) for k, v in pairs[: len(pairs) // 2]}
    dst = {(k,): (v,) for k, v in pairs[len(pairs) // 2:]}
    missing, extra, differing = compare_rows(specs, src, list(dst.items()))
    assert {k for k, _ in missing} == set(src) - set(dst)
    assert {k for k, _ in extra} == set(dst) - set(src)
    assert {d[0] for d in differing} == {k for k in set(src) & set(dst) if src[k] != dst[k]}
    assert (checksum(src.items()).total == checksum(dst.items()).total) == (src == dst) or src == dst


def test_random_rows_same_checksum_as_sets():
    rnd = random.Random(7)
    rows = [((i,), (rnd.random(), str(i))) for i in range(1000)]
    assert checksum(rows).total == checksum(reversed(rows)).total


# --- the handling modes: a source value as the events write it ---------------------------------


@given(st.integers(0, 2 ** 64 - 1))
def test_a_wrapped_long_is_found_again(n):
    w = as_written("long", n)
    assert -2 ** 63 <= w < 2 ** 63 and as_source("long", w) == n


@given(st.binary(max_size=40), st.sampled_from(["base64", "base64-url-safe", "hex"]))
def test_bytes_written_as_text_are_found_again(b, how):
    assert isinstance(as_written(how, b), str) and as_source(how, as_written(how, b)) == b


def test_lossy_modes_cannot_be_looked_up():
    assert not WRITTEN["double"] and not WRITTEN["time_ms"] and not WRITTEN["datetime_ms"]
    with pytest.raises(ValueError, match="cannot be looked up"):
        as_source("double", 1.5)
    assert as_written("time_ms", timedelta(hours=-1)) is None
    assert as_written("time_ms", timedelta(hours=12, microseconds=1999)) == 43_200_001_000
    assert as_written("datetime_ms", datetime(2001, 2, 3, 4, 5, 6, 789012)) == datetime(2001, 2, 3, 4, 5, 6, 789000)
