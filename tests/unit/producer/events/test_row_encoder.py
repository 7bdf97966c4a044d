"""The Avro fast path of EventBuilder.records (RowEncoder): byte for byte the general path.

The general path converts each row image to a record dict and encodes the envelope with
the template; the fast path encodes the values in one pass.  Every record (key, value,
position, tombstones) must be the same, on the table of every type, and the rows the fast
path does not take (empty SETs, float keys that changed, bad values) must give what the
general path gives, errors included.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from common.errors import CDCError
from contract.codecs.serde import AvroWriter
from contract.position import BinlogPosition
from producer.column_controls import ColumnControls
from producer.binlog.reader import RowChanges
from producer.binlog.row_decoder import PackedRows
from producer.errors import ConversionError
from contract.type_table import TypeModes
from producer.events.builder import EventBuilder
from producer.events.row_encoder import encode_rows
from producer.events.values import RowConverter
from producer.table_schema import ColumnDef, TableDef
from tests.unit.producer.events.test_types_and_values import BINLOG_ROW, SNAPSHOT_ROW, TABLE

BASE = BinlogPosition.from_binlog("mysql-bin.000007", 1234)


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    """The envelope's ts_ms is the time of writing: the same for both paths here."""
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)


class AvroOut:
    """The Avro format of RecordEncoder, without Kafka; records which schemas it was asked for."""

    def __init__(self) -> None:
        self.writers: dict[int, AvroWriter] = {}
        self.asked: list[str] = []

    def _writer(self, schema: dict) -> AvroWriter:
        self.asked.append(schema["name"])
        w = self.writers.get(id(schema))
        if w is None:
            w = self.writers[id(schema)] = AvroWriter(schema)
        return w

    def encode(self, schema, record, topic, role):
        return None if record is None else self._writer(schema).encode(record)

    def header(self, schema, topic, role):
        return self._writer(schema).header

    def json_writer(self, schema, topic):
        return None


def _general(monkeypatch, builder: EventBuilder, ch: RowChanges, **kw):
    with monkeypatch.context() as m:
        m.setattr(EventBuilder, "_fast_records", lambda self, te, ch, start, *a: start)
        return builder.records(ch, ch.first, len(ch.rows), AvroOut(), **kw)


def _both(monkeypatch, ch: RowChanges, table: TableDef = TABLE, tombstones: bool = True, **kw):
    fast = EventBuilder("cdc", "prod", 1, tombstones=tombstones).records(ch, ch.first, len(ch.rows), AvroOut(), **kw)
    general = _general(monkeypatch, EventBuilder("cdc", "prod", 1, tombstones=tombstones), ch, **kw)
    return fast, general


def packed(kind: str, rows: list[dict], table: TableDef) -> PackedRows:
    """``rows`` (library dicts) as the binlog reader hands them over."""
    names = tuple(table.column_names)
    pairs = [(r["before_values"], r["before_none_sources"], r["after_values"], r["after_none_sources"])
             for r in rows] if kind == "update" else [(r["values"], r["none_sources"]) for r in rows]
    images, odd = [], {}
    for pair in pairs:
        for values, none_sources in zip(pair[::2], pair[1::2]):
            if any(reason != "null" for reason in none_sources.values()):
                odd[len(images)] = none_sources
            images.append(tuple(values[n] for n in names))
    return PackedRows(names, kind == "update", images, odd or None)


FORM = "dicts"


@pytest.fixture(params=["dicts", "packed"])
def form(request):
    """Rows as library dicts, or as the reader's PackedRows."""
    globals()["FORM"] = request.param
    yield request.param
    globals()["FORM"] = "dicts"


def _changes(kind: str, rows: list[dict], table: TableDef = TABLE, first: int = 0) -> RowChanges:
    if FORM == "packed":
        rows = packed(kind, rows, table)
    return RowChanges(kind, table.db, table.name, table, BASE, rows, first, 1700000000000, "0-1-9", 42,
                      "mysql-bin.000007", "mysql-bin.000007", 1000)


def _null_row(i: int) -> dict:
    return {**{c: None for c in TABLE.column_names}, "id": i}


ROW2 = dict(BINLOG_ROW, id=2, ti=0, dec1=Decimal("-0E-30"), dec2=Decimal("-0.01"), fl=-0.0, db=5e-324,
            vc="", tx="", bl="", st={"y"}, dt3=datetime(1970, 1, 1), tm=timedelta(0), yr=1900,
            tiu=-1, iu=-1, t1=True, ch=b"ab")  # unsigned values read without signedness, a bool, bytes for text


ROW3 = dict(BINLOG_ROW, id=3, dt3=datetime(1969, 12, 31, 23, 59, 59, 999999),  # floor division before the epoch
            dt6=datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))),  # aware: the converter's way
            dec2=Decimal("1.5"), dec0=Decimal("7E+3"))  # another exponent than the scale: quantized first


@pytest.mark.parametrize("kind, rows", [
    ("insert", [{"values": BINLOG_ROW, "none_sources": {}}, {"values": ROW2, "none_sources": {}},
                {"values": ROW3, "none_sources": {}},
                {"values": _null_row(3), "none_sources": {c: "null" for c in TABLE.column_names if c != "id"}}]),
    ("delete", [{"values": BINLOG_ROW, "none_sources": {}}, {"values": _null_row(3), "none_sources": {}}]),
    ("update", [  # same key; key changed; to and from all NULLs
        {"before_values": BINLOG_ROW, "before_none_sources": {}, "after_values": dict(BINLOG_ROW, vc="x"),
         "after_none_sources": {}},
        {"before_values": BINLOG_ROW, "before_none_sources": {}, "after_values": ROW2, "after_none_sources": {}},
        {"before_values": _null_row(3), "before_none_sources": {}, "after_values": ROW2, "after_none_sources": {}},
    ]),
])
@pytest.mark.parametrize("tombstones", [True, False])
def test_fast_path_is_the_general_path_byte_for_byte(form, monkeypatch, kind, rows, tombstones):
    fast, general = _both(monkeypatch, _changes(kind, rows), tombstones=tombstones)
    assert fast == general
    assert len(fast) >= len(rows)
    # and the fast path did take every row
    fast_records, reached = EventBuilder._fast_records, []
    monkeypatch.setattr(EventBuilder, "_fast_records", lambda *a: reached.append(fast_records(*a)) or reached[-1])
    EventBuilder("cdc", "prod", 1).records(_changes(kind, rows), 0, len(rows), AvroOut())
    assert reached == [len(rows)]


def test_rows_already_written_are_skipped_alike(form, monkeypatch):
    rows = [{"values": dict(BINLOG_ROW, id=i), "none_sources": {}} for i in range(1, 6)]
    ch = _changes("insert", rows, first=1)
    fast, general = _both(monkeypatch, ch, skip_up_to=BASE.encode_row(4))
    assert fast == general and [r[3] for r in fast] == [BASE.encode_row(6), BASE.encode_row(8)]


def test_empty_set_rows_take_the_general_path(form, monkeypatch):
    row = dict(BINLOG_ROW, st=None)
    rows = [{"values": BINLOG_ROW, "none_sources": {}}, {"values": row, "none_sources": {"st": "empty set"}},
            {"values": dict(BINLOG_ROW, id=5), "none_sources": {}}]
    fast, general = _both(monkeypatch, _changes("insert", rows))
    assert fast == general
    # the empty SET is '' (not null): the general path's value
    assert fast[1][2] != _both(monkeypatch, _changes("insert", [{"values": row, "none_sources": {}}]))[0][0][2]


def test_a_bad_value_raises_the_general_paths_error(form, monkeypatch):
    rows = [{"values": BINLOG_ROW, "none_sources": {}}, {"values": dict(BINLOG_ROW, i="nope"), "none_sources": {}}]
    with pytest.raises(ConversionError) as fast:
        EventBuilder("cdc", "prod", 1).records(_changes("insert", rows), 0, 2, AvroOut())
    with pytest.raises(ConversionError) as general:
        _general(monkeypatch, EventBuilder("cdc", "prod", 1), _changes("insert", rows))
    assert str(fast.value) == str(general.value) and "shop.everything.i" in str(fast.value)


def test_missing_and_unknown_columns_raise_the_general_paths_error(monkeypatch):  # (dicts only)
    missing = dict(BINLOG_ROW)
    del missing["vc"]
    for values in (missing, dict(BINLOG_ROW, nope=1)):
        rows = [{"values": values, "none_sources": {}}]
        with pytest.raises(ConversionError) as fast:
            EventBuilder("cdc", "prod", 1).records(_changes("insert", rows), 0, 1, AvroOut())
        with pytest.raises(ConversionError) as general:
            _general(monkeypatch, EventBuilder("cdc", "prod", 1), _changes("insert", rows))
        assert str(fast.value) == str(general.value)


FLOAT_KEY = TableDef("shop", "fk", [
    ColumnDef(name="k", data_type="double", column_type="double", nullable=False, ordinal=1),
    ColumnDef(name="v", data_type="int", column_type="int(11)", nullable=True, ordinal=2),
], ["k"])


def test_a_float_key_from_minus_zero_to_zero_is_no_key_change(form, monkeypatch):
    rows = [{"before_values": {"k": -0.0, "v": 1}, "before_none_sources": {}, "after_values": {"k": 0.0, "v": 2},
             "after_none_sources": {}},
            {"before_values": {"k": 1.0, "v": 1}, "before_none_sources": {}, "after_values": {"k": 2.0, "v": 2},
             "after_none_sources": {}}]
    fast, general = _both(monkeypatch, _changes("update", rows, FLOAT_KEY))
    assert fast == general
    assert len(fast) == 1 + 3  # an update; then a delete, its tombstone and a create


def test_excluded_columns_take_the_general_path(form, monkeypatch):
    rows = [{"values": BINLOG_ROW, "none_sources": {}}]
    ch = _changes("insert", rows)
    builder = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={"shop.everything": ["vc"]}))
    calls = []
    monkeypatch.setattr(EventBuilder, "_fast_records", lambda self, *a: calls.append(a) or a[2])
    builder.records(ch, 0, 1, AvroOut())
    assert calls == []


def test_schemas_are_asked_for_in_the_same_order(form, monkeypatch):
    rows = [{"values": BINLOG_ROW, "none_sources": {}}]
    fast_out, general_out = AvroOut(), AvroOut()
    EventBuilder("cdc", "prod", 1).records(_changes("insert", rows), 0, 1, fast_out)
    with monkeypatch.context() as m:
        m.setattr(EventBuilder, "_fast_records", lambda self, te, ch, start, *a: start)
        EventBuilder("cdc", "prod", 1).records(_changes("insert", rows), 0, 1, general_out)
    assert list(dict.fromkeys(fast_out.asked)) == list(dict.fromkeys(general_out.asked))


def test_packed_rows_are_the_library_rows():
    rows = [{"before_values": BINLOG_ROW, "before_none_sources": {"gc": "null"},
             "after_values": dict(BINLOG_ROW, st=None), "after_none_sources": {"st": "empty set", "gc": "null"}}]
    p = packed("update", rows, TABLE)
    assert p.odd == {1: {"st": "empty set", "gc": "null"}} and len(p) == 1
    assert p[0]["after_none_sources"] == {"st": "empty set", "gc": "null"} and p[0]["before_values"] == BINLOG_ROW
    assert p.expand() == rows


def test_a_key_column_renamed_apart_from_the_row_is_encoded_by_position():
    """The key schema names its fields among the key's columns only: 'a-b' is a_b there but
    a_b_2 in the row (after the column a_b).  The fast path matches them by position; the
    general path's key record (RowConverter.convert_key) uses the key schema's names."""
    table = TableDef("shop", "odd", [
        ColumnDef(name="a_b", data_type="int", column_type="int(11)", nullable=False, ordinal=1),
        ColumnDef(name="a-b", data_type="int", column_type="int(11)", nullable=False, ordinal=2),
    ], ["a-b"])
    out = AvroOut()
    [(_, key, _, _)] = EventBuilder("cdc", "prod", 1).records(
        _changes("insert", [{"values": {"a_b": 1, "a-b": 300}, "none_sources": {}}], table), 0, 1, out)
    writer = next(w for w in out.writers.values() if w.schema["name"].endswith("Key"))
    assert key[:len(writer.header)] == writer.header
    assert fastavro.schemaless_reader(io.BytesIO(key[len(writer.header):]), writer.parsed, None) == {"a_b": 300}
    assert RowConverter(table, binlog=True).convert_key({"a_b": 1, "a-b": 300}) == {"a_b": 300}
    general = AvroOut()
    with_fallback = EventBuilder("cdc", "prod", 1)
    with_fallback._fast_records = lambda te, ch, start, *a: start  # the general path only
    [(_, general_key, _, _)] = with_fallback.records(
        _changes("insert", [{"values": {"a_b": 1, "a-b": 300}, "none_sources": {}}], table), 0, 1, general)
    assert general_key == key


@dataclass
class Chunk:
    """A released snapshot chunk (producer.snapshot.coordinator.ReleasedChunk's fields)."""

    rows: list[dict]
    table_def: TableDef = field(default_factory=lambda: TABLE)
    snapshot_id: str = "snap-1"
    chunk_id: int = 3
    open_position: BinlogPosition = field(default_factory=lambda: BASE)
    close_position: BinlogPosition = field(default_factory=lambda: BinlogPosition.from_binlog("mysql-bin.000007", 1500))


def _chunk_both(monkeypatch, chunk: Chunk, excluded=None):
    """The chunk's records by the fast path and by the general one; asserts the fast path
    took every row."""
    took: list[int] = []
    fast_path = EventBuilder._fast_chunk_records
    with monkeypatch.context() as m:
        m.setattr(EventBuilder, "_fast_chunk_records", lambda self, *a: took.append(fast_path(self, *a)) or took[-1])
        fast = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns=excluded)).chunk_records(chunk, AvroOut())
    assert took == [len(chunk.rows)]
    with monkeypatch.context() as m:
        m.setattr(EventBuilder, "_fast_chunk_records", lambda self, *a: 0)
        general = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns=excluded)).chunk_records(chunk, AvroOut())
    return fast, general


def test_snapshot_chunk_records_are_the_general_paths_bytes(monkeypatch):
    """A chunk's rows (as a SELECT gives them) encoded by the table's RowEncoder: the same
    topics, keys, values and positions as the general path, every type and edge value."""
    rows = [SNAPSHOT_ROW, {**{c: None for c in TABLE.column_names}, "id": 2},
            dict(SNAPSHOT_ROW, id=3, dec1=Decimal("-0E-30"), fl=-0.0, st="", vc="", dt3=datetime(1970, 1, 1))]
    fast, general = _chunk_both(monkeypatch, Chunk(rows))
    assert len(fast) == 3 and fast == general
    assert [p for *_, p in fast] == sorted(p for *_, p in fast)


def test_a_bad_snapshot_row_falls_back_to_the_general_paths_error(monkeypatch):
    """A row the encoder cannot take (a column missing) goes the general way, which names
    the column; the rows before it were encoded."""
    bad = {k: v for k, v in SNAPSHOT_ROW.items() if k != "vc"}
    with pytest.raises(ConversionError, match="vc"):
        EventBuilder("cdc", "prod", 1).chunk_records(Chunk([SNAPSHOT_ROW, dict(bad, id=2)]), AvroOut())
    fast, general = _chunk_both(monkeypatch, Chunk([dict(SNAPSHOT_ROW, id=i) for i in range(5)]))
    assert fast == general


def test_a_keyless_chunk_is_the_general_paths_bytes(monkeypatch):
    table = TableDef("shop", "nokey", [
        ColumnDef(name="a", data_type="int", column_type="int(11)", nullable=True, ordinal=1),
        ColumnDef(name="b", data_type="varchar", column_type="varchar(10)", nullable=True, ordinal=2)], [])
    fast, general = _chunk_both(monkeypatch, Chunk([{"a": 1, "b": "x"}, {"a": None, "b": None}], table_def=table))
    assert fast == general and all(key is None for _, key, _, _ in fast)


def _encoded_where_read(rows: list[dict], table: TableDef = TABLE):
    """The rows as a chunk read process hands them over (producer.snapshot.chunk_process):
    encoded from value tuples by the encoder the builder's ReadEncoding builds, pickled."""
    encoding = EventBuilder("cdc", "prod", 1).read_encoding(table)
    names = tuple(table.column_names)
    tuples = [tuple(r.get(c) for c in names) if set(r) == set(names) else tuple(r.values()) for r in rows]
    return pickle.loads(pickle.dumps(encode_rows(encoding.table_events().encoder, encoding.ident, names, tuples)))


def test_rows_encoded_where_they_were_read_are_the_general_paths_bytes(monkeypatch):
    """Chunk rows encoded in the chunk read process, then joined into records here: byte for
    byte the general path's records; the last row's values are kept (the next chunk's start)."""
    rows = [SNAPSHOT_ROW, {**{c: None for c in TABLE.column_names}, "id": 2},
            dict(SNAPSHOT_ROW, id=3, dec1=Decimal("-0E-30"), fl=-0.0, st="", vc="", dt3=datetime(1970, 1, 1))]
    encoded = _encoded_where_read(rows)
    assert len(encoded.bodies) == 3 and not encoded.rest and len(encoded) == 3
    assert encoded[-1] == rows[-1] and encoded[2]["id"] == 3
    with pytest.raises(LookupError):
        encoded[0]
    _, general = _chunk_both(monkeypatch, Chunk(rows))
    assert EventBuilder("cdc", "prod", 1).chunk_records(Chunk(encoded), AvroOut()) == general


def test_rows_the_encoder_refused_where_read_take_the_general_path(monkeypatch):
    """A row the encoder does not take (a value of the wrong type) and every row after it
    come over as values: the general path encodes them or raises its error."""
    bad = dict(SNAPSHOT_ROW, id=2, i="nope")
    encoded = _encoded_where_read([SNAPSHOT_ROW, bad, dict(SNAPSHOT_ROW, id=3)])
    assert len(encoded.bodies) == 1 and [r["id"] for r in encoded.rest] == [2, 3]
    with pytest.raises(ConversionError):
        EventBuilder("cdc", "prod", 1).chunk_records(Chunk(encoded), AvroOut())
    fine = _encoded_where_read([SNAPSHOT_ROW, dict(SNAPSHOT_ROW, id=2), dict(SNAPSHOT_ROW, id=3)])
    fine.rest, fine.bodies = [dict(SNAPSHOT_ROW, id=2), dict(SNAPSHOT_ROW, id=3)], fine.bodies[:1]  # as if refused
    _, general = _chunk_both(monkeypatch, Chunk([SNAPSHOT_ROW, dict(SNAPSHOT_ROW, id=2), dict(SNAPSHOT_ROW, id=3)]))
    assert EventBuilder("cdc", "prod", 1).chunk_records(Chunk(fine), AvroOut()) == general


def test_rows_encoded_for_another_table_version_are_refused():
    encoded = _encoded_where_read([SNAPSHOT_ROW])
    other = TableDef(TABLE.db, TABLE.name, TABLE.columns[:-1], TABLE.primary_key)
    with pytest.raises(CDCError, match="encoded for"):
        EventBuilder("cdc", "prod", 1).chunk_records(Chunk(encoded, table_def=other), AvroOut())


def test_no_read_encoding_for_tables_with_excluded_columns():
    builder = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={TABLE.qualified_name: ["vc"]}))
    assert builder.read_encoding(TABLE) is None
    assert EventBuilder("cdc", "prod", 1).read_encoding(TABLE).ident[0] == TABLE.qualified_name


# -- DECIMAL bodies read off the Decimal's text --------------------------------------------------

def _decimal_body_by_tuple(scale: int, precision: int):
    """The former formulation (``as_tuple`` and ``scaleb``): the reference."""
    from decimal import MAX_EMAX, MIN_EMIN, Context

    from producer.events.avro_template import decimal_bytes
    ctx = Context(prec=max(precision, 1), Emax=MAX_EMAX, Emin=MIN_EMIN)

    def body(v):
        _, digits, exp = v.as_tuple()
        if exp != -scale or len(digits) > precision:
            return None
        return decimal_bytes(int(v.scaleb(scale, ctx)))
    return body


_SPECIAL_DECIMALS = ["0", "-0", "0.00", "-0.00", "0E-30", "-0E-30", "7E+3", "1E+2", "1E-7", "1.5E-7", "NaN",
                     "-NaN", "sNaN", "Infinity", "-Infinity", "123", "-123", "1234.56", "-0.05", "0.05", "12.345",
                     "1234.5", "99999999.99", "-99999999.99", "999999999.99", "0.0000001", "1.00000000E-8"]


@given(st.one_of(st.decimals(allow_nan=True, allow_infinity=True), st.sampled_from(_SPECIAL_DECIMALS).map(Decimal),
                 st.tuples(st.integers(-10 ** 40, 10 ** 40), st.integers(0, 30)).map(
                     lambda t: Decimal(t[0]).scaleb(-t[1]))),
       st.integers(0, 30), st.integers(0, 65))
@settings(max_examples=3000, deadline=None)
def test_a_decimal_body_is_what_as_tuple_and_scaleb_give(v, scale, precision):
    _same_or_refused(v, scale, precision)


def _same_or_refused(v: Decimal, scale: int, precision: int) -> None:
    """The bytes the former formulation gives; refused (None: the general path, which writes
    those bytes) only where it refuses too, or where the Decimal prints in scientific
    notation."""
    from producer.events.row_encoder import _decimal_body
    got, want = _decimal_body(scale, precision)(v), _decimal_body_by_tuple(scale, precision)(v)
    if got is None:
        assert want is None or "E" in str(v), (v, want)
    else:
        assert got == want


@pytest.mark.parametrize("text", _SPECIAL_DECIMALS)
@pytest.mark.parametrize("scale", [0, 2, 7, 8, 30])
def test_a_decimal_body_of_edge_values(text, scale):
    _same_or_refused(Decimal(text), scale, 12)


# -- ints and strings: the generated code's inline varints ---------------------------------------

_PLAIN = TableDef(db="d", name="plain", columns=[
    ColumnDef(name="k", data_type="bigint", column_type="bigint(20)", nullable=False, ordinal=1),
    ColumnDef(name="i", data_type="int", column_type="int(11)", nullable=True, ordinal=2),
    ColumnDef(name="s", data_type="varchar", column_type="varchar(20000)", nullable=False, ordinal=3,
              character_set="utf8mb4"),
    ColumnDef(name="t", data_type="text", column_type="text", nullable=True, ordinal=4, character_set="utf8mb4"),
], primary_key=["k"])


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.one_of(st.none(), st.integers(-(1 << 31), (1 << 31) - 1)),
       st.one_of(st.text(max_size=40), st.text(min_size=4090, max_size=4200), st.just("é" * 4097)),
       st.one_of(st.none(), st.text(max_size=20), st.text(alphabet="ab✓", min_size=8190, max_size=8194)))
@settings(max_examples=400, deadline=None)
def test_ints_and_strings_encode_as_the_general_path(k, i, s, t):
    """Varints below 2**14 are looked up inline (string lengths, small ints): the same bytes
    as the converter's record written by fastavro, at and around the table's edges."""
    from producer.events.avro_types import key_record_schema, row_record_schema
    from producer.events.row_encoder import RowEncoder
    conv = RowConverter(_PLAIN, binlog=True)
    row_schema, key_schema = row_record_schema(_PLAIN, "d.plain.Value"), key_record_schema(_PLAIN, name="d.plain.Key")
    enc = RowEncoder(conv, row_schema, key_schema)
    values = {"k": k, "i": i, "s": s, "t": t}
    try:
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, fastavro.parse_schema(row_schema), conv.convert(values))
    except UnicodeEncodeError:  # lone surrogates: both paths refuse them
        with pytest.raises(UnicodeEncodeError):
            enc.row(values)
        return
    assert enc.row(values) == expected.getvalue()
    assert enc.row_tuple((k, i, s, t)) == expected.getvalue()
    key = io.BytesIO()
    fastavro.schemaless_writer(key, fastavro.parse_schema(key_schema), {"k": k})
    assert enc.key(values) == key.getvalue()


@pytest.mark.parametrize("modes", [TypeModes("string", "connect", "long", "base64-url-safe"),
                                   TypeModes("double", binary="hex"), TypeModes(binary="base64")], ids=str)
def test_the_fast_path_is_the_general_path_under_debeziums_handling_modes(form, monkeypatch, modes):
    rows = [{"values": BINLOG_ROW, "none_sources": {}}, {"values": ROW2, "none_sources": {}},
            {"values": ROW3, "none_sources": {}}]
    fast = EventBuilder("cdc", "prod", 1, modes=modes).records(_changes("insert", rows), 0, 3, AvroOut())
    general = _general(monkeypatch, EventBuilder("cdc", "prod", 1, modes=modes), _changes("insert", rows))
    assert fast == general
    assert fast != EventBuilder("cdc", "prod", 1).records(_changes("insert", rows), 0, 3, AvroOut())
    fast_records, reached = EventBuilder._fast_records, []
    monkeypatch.setattr(EventBuilder, "_fast_records", lambda *a: reached.append(fast_records(*a)) or reached[-1])
    EventBuilder("cdc", "prod", 1, modes=modes).records(_changes("insert", rows), 0, 3, AvroOut())
    assert reached == [3]
