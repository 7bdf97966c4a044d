"""BinlogImageEncoder: binlog row images straight to Avro bodies, byte for byte the values' way.

The values' way is what the producer does without it: the binlog reader's RowDecoder turns
the row data into values, the producer's RowEncoder turns each image into its key and row
bodies.  Hypothesis draws tables of every supported column type (nullable or not, with a key
or without) and row data -- mostly well formed, often not -- and wherever the image encoder
gives bodies, the values' way gives the same ones; where it refuses, the reader sends
values.  The examples check that it does take the common rows (so a refusal of everything
would fail), and that the producer's records are the same from encoded images as from values.
"""

from __future__ import annotations

import os
import struct
from decimal import Decimal

import pytest
from fastavro.schema import expand_schema
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pymysqlreplication.constants import FIELD_TYPE as T

from common.errors import CDCError
from contract.position import BinlogPosition
from producer.column_controls import ColumnControls
from producer.column_mappers import ColumnMappers
from producer.binlog.reader import RowChanges
from producer.binlog.row_decoder import EncodedImages, RowDecoder
from producer.binlog.table_map import column_def_from_binlog
from producer.events import image_encoder
from producer.events.avro_template import field_encoder
from producer.events.builder import EventBuilder, StreamEncoding, table_events
from producer.events.image_encoder import BinlogImageEncoder
from producer.events.row_encoder import NotFast
from producer.table_schema import TableDef
from tests.native_helpers import can_build
from tests.unit.producer.binlog.test_row_decoder import _column, _pack_datetime2, _pack_decimal, columns_and_values
from tests.unit.producer.events.test_row_encoder import AvroOut


def _table(columns: list, nullable: list[bool], key: list[int], name: str = "t") -> TableDef:
    defs = [column_def_from_binlog(c, i + 1, n) for i, (c, n) in enumerate(zip(columns, nullable))]
    return TableDef("db", name, defs, [defs[i].name for i in key])


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return "raised", type(exc).__name__


def values_way(columns: list, te, data: bytes, update: bool) -> list:
    """The bodies the producer makes of the values the reader decodes: ``[key, row, ...]``,
    by the general path (the converters' records, each encoded whole); raises where the
    producer would (a row it cannot convert or encode)."""
    packed = RowDecoder(columns).decode_packed(data, update)
    encode_row = field_encoder(expand_schema(te.row_schema))
    encode_key = None if te.key_schema is None else field_encoder(expand_schema(te.key_schema))
    out = []
    for j in range(len(packed.images)):
        # (the columns the events leave out dropped, as EventBuilder does)
        values = {n: v for n, v in zip(packed.names, packed.images[j]) if n not in te.dropped}
        none_sources = packed.none_sources(j)
        key = None if encode_key is None else encode_key(te.converter.convert_key(values, none_sources))
        out += [key, encode_row(te.converter.convert(values, none_sources))]
    return out


def _well_formed(col, values):
    """The column's value bytes, with well-formed DECIMAL and DATETIME2 values mixed in (random
    bytes are seldom valid ones)."""
    if col.type == T.NEWDECIMAL:
        p, s = col.precision, col.decimals
        valid = st.integers(-(10 ** p) + 1, 10 ** p - 1).map(lambda u: _pack_decimal(Decimal(u).scaleb(-s), p, s))
        return st.one_of(valid, values)
    if col.type == T.DATETIME2:
        size = (col.fsp + 1) // 2
        limit = 10 ** col.fsp
        fraction = st.integers(0, limit - 1).map(lambda f: (f * (100 if col.fsp % 2 else 1) // (10 if col.fsp % 2 else 1)
                                                           ).to_bytes(size, "big") if size else b"")
        valid = st.builds(lambda y, mo, d, h, mi, sec, frac: _pack_datetime2(y, mo, d, h, mi, sec) + frac,
                          st.integers(1, 9999), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
                          st.integers(0, 59), st.integers(0, 59), fraction)
        return st.one_of(valid, values)
    return values


@st.composite
def tables_and_rows(draw):
    cols_and_values = [draw(columns_and_values(f"c{i}")) for i in range(draw(st.integers(1, 6)))]
    cols_and_values = [(c, _well_formed(c, values)) for c, values in cols_and_values]
    columns = [c for c, _ in cols_and_values]
    nullable = draw(st.lists(st.booleans(), min_size=len(columns), max_size=len(columns)))
    key = draw(st.lists(st.integers(0, len(columns) - 1), unique=True, max_size=2))
    update = draw(st.booleans())
    data = b""
    for _ in range(draw(st.integers(1, 4)) * (2 if update else 1)):
        # mostly no NULL where the column may not be NULL (the common case), sometimes one
        nulls = [draw(st.booleans()) and (n or draw(st.integers(0, 9)) == 0) for n in nullable]
        bitmap = sum(1 << i for i, null in enumerate(nulls) if null).to_bytes((len(columns) + 7) // 8, "little")
        data += bitmap + b"".join(draw(values) for (_, values), null in zip(cols_and_values, nulls) if not null)
    if draw(st.integers(0, 9)) == 0:
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]  # a short row
    return columns, nullable, key, data, update, draw(column_controls(columns, key))


@st.composite
def column_controls(draw, columns: list, key: list[int], left_out: bool = True) -> ColumnControls:
    """Often none; else some of the columns outside the key left out of the events (where
    ``left_out``), masked, hashed or truncated (producer/column_controls.py, column_mappers.py)."""
    others = [f"db.t.{c.name}" for i, c in enumerate(columns) if i not in key]
    if not others or draw(st.integers(0, 2)) == 0:
        return ColumnControls()
    choices = ["out", "mask", "hash", "truncate", None] if left_out else ["mask", "hash", "truncate", None]
    roles = draw(st.lists(st.sampled_from(choices), min_size=len(others), max_size=len(others)))
    picked = {role: [n for n, r in zip(others, roles) if r == role] for role in ("out", "mask", "hash", "truncate")}
    hashes = [{"algorithm": "SHA-256", "salt": "pepper", "columns": ",".join(picked["hash"])}] if picked["hash"] else []
    return ColumnControls(exclude=picked["out"], mappers=ColumnMappers(
        mask={4: picked["mask"]} if picked["mask"] else None,
        truncate={2: picked["truncate"]} if picked["truncate"] else None, hashes=hashes))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables_and_rows())
def test_encoded_images_are_the_values_way_byte_for_byte(example):
    columns, nullable, key, data, update, controls = example
    te = table_events("cdc", _table(columns, nullable, key), controls)
    try:
        encoder = BinlogImageEncoder(columns, te)
    except NotFast:  # the documented refusal (float keys...): the reader sends values
        assume(False)
    mine = _outcome(lambda: encoder.encode(data, update).bodies)
    if mine[0] == "ok":
        assert _outcome(lambda: values_way(columns, te, data, update)) == mine


def test_the_native_encoder_is_built_where_it_can_be_and_used():
    # make venv builds it (setup.py) where a C compiler and Python's headers are, as on these
    # machines; without them the build goes on and the generated Python encodes.
    if can_build():
        assert image_encoder._binlog_images is not None
        assert image_encoder.native_enabled() == (os.environ.get(image_encoder.NATIVE_ENV, "1") != "0")
    te = table_events("cdc", _table(BENCH, [i != 0 for i in range(len(BENCH))], [0]))
    assert type(BinlogImageEncoder(BENCH, te)._images).__name__ == (
        "Program" if image_encoder.native_enabled() else "function")
    assert type(BinlogImageEncoder(BENCH, te, native=False)._images).__name__ == "function"


@pytest.mark.skipif(image_encoder._binlog_images is None, reason="the extension is not built (no C compiler)")
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tables_and_rows())
def test_the_native_encoder_gives_the_generated_pythons_bodies_and_refusals(example):
    """Byte for byte, and a row one refuses the other refuses too (the values' way then)."""
    columns, nullable, key, data, update, controls = example
    try:
        te = table_events("cdc", _table(columns, nullable, key), controls)
        python = BinlogImageEncoder(columns, te, native=False)
    except Exception:  # noqa: BLE001 - not on the fast path: neither encoder is made
        with pytest.raises(Exception):  # noqa: B017 - the same refusal
            BinlogImageEncoder(columns, table_events("cdc", _table(columns, nullable, key), controls), native=True)
        return
    native = BinlogImageEncoder(columns, te, native=True)
    mine = _outcome(lambda: native.encode(data, update).bodies)
    theirs = _outcome(lambda: python.encode(data, update).bodies)
    assert mine[0] == theirs[0]
    if mine[0] == "ok":
        assert mine == theirs


BENCH = [_column("id", T.LONG), _column("name", T.VARCHAR, max_length=400, character_set_name="utf8mb4"),
         _column("price", T.NEWDECIMAL, precision=12, decimals=2), _column("at", T.DATETIME2, fsp=3),
         _column("qty", T.LONG, unsigned=True), _column("note", T.BLOB, length_size=2, character_set_name="utf8mb4"),
         _column("big", T.LONGLONG), _column("small", T.TINY), _column("us", T.DATETIME2, fsp=6),
         _column("latin", T.VARCHAR, max_length=20, character_set_name="latin1"),
         _column("d", T.DATE), _column("f", T.DOUBLE)]


def _image(nulls: int, *parts: bytes) -> bytes:
    return nulls.to_bytes(2, "little") + b"".join(parts)


def _bench_image(i: int, name: str, price: str, at: tuple, note: str, big: int, us: tuple, fsp6: int) -> bytes:
    name_b, note_b = name.encode(), note.encode()
    return _image(0, struct.pack("<i", i), struct.pack("<H", len(name_b)) + name_b,
                  _pack_decimal(Decimal(price), 12, 2), _pack_datetime2(*at) + (123 * 10).to_bytes(2, "big"),
                  struct.pack("<I", 4_000_000_000), struct.pack("<H", len(note_b)) + note_b, struct.pack("<q", big),
                  struct.pack("<b", -128), _pack_datetime2(*us) + fsp6.to_bytes(3, "big"), b"\x03caf",
                  bytes([0x21, 0x91, 0x0f]), struct.pack("<d", 2.5))


ROWS = [
    _bench_image(1, "plain", "1.25", (2024, 2, 29, 13, 5, 9), "x" * 9000, 1 << 40, (2024, 1, 1, 0, 0, 0), 1),
    _bench_image(-7, "été ✓", "-0.00", (1969, 12, 31, 23, 59, 59), "", -(1 << 63), (1000, 1, 1, 0, 0, 0), 999999),
    _bench_image(2_000_000, "", "-9999999999.99", (9999, 12, 31, 23, 59, 59), "ü", (1 << 63) - 1,
                 (1970, 1, 1, 0, 0, 0), 0),
    _image(0b1111_1111_1110, struct.pack("<i", 3)),  # every column NULL but the key
]


def _bench_encoder(key: list[int] | None = None) -> tuple:
    te = table_events("cdc", _table(BENCH, [i != 0 for i in range(len(BENCH))], [0] if key is None else key))
    return te, BinlogImageEncoder(BENCH, te)


@pytest.mark.parametrize("update", [False, True])
def test_common_rows_are_encoded_where_they_are_read(update):
    """Every row of the benchmark-like table is taken (DECIMAL, DATETIME2 of both precisions,
    UTF-8 strings short and long, integers at their edges, NULLs) and gives the values' bytes."""
    te, encoder = _bench_encoder()
    data = b"".join(ROWS)
    encoded = encoder.encode(data, update)
    assert type(encoded) is EncodedImages and len(encoded) == len(ROWS) // (2 if update else 1)
    assert encoded.bodies == values_way(BENCH, te, data, update)
    assert encoded.ident == (te.table.qualified_name, te.table.fingerprint(), ("id",))


@pytest.mark.parametrize("bad", [
    _image(0, struct.pack("<i", 1), b"\x02\xff\xfe"),  # not UTF-8: the decoder's error, by the library
    _image(0, struct.pack("<i", 1), b"\x00", _pack_decimal(Decimal(1), 12, 2),
           _pack_datetime2(2024, 2, 30, 0, 0, 0) + b"\x00\x00"),  # 30 February: None and a reason
    _image(1, b""),  # NULL in the key, which may not be NULL
    ROWS[0][:-3],  # truncated
])
def test_rows_it_does_not_take_are_refused(bad):
    _, encoder = _bench_encoder()
    with pytest.raises(Exception):  # noqa: B017 - any: the reader then sends values
        encoder.encode(ROWS[1] + bad, False)


def test_tables_off_the_fast_path_get_no_image_encoder():
    cols = [_column("f", T.FLOAT, size=4), _column("i", T.LONG)]
    with pytest.raises(NotFast):  # a float key: equal keys can have different bytes
        BinlogImageEncoder(cols, table_events("cdc", _table(cols, [False, False], [0])))
    encoding = StreamEncoding("cdc", ColumnControls(exclude_columns={"db.t": ["note"]}), frozenset({"db.signals"}))
    assert encoding.image_encoder(_table(BENCH, [True] * len(BENCH), [0]), BENCH) is not None  # (read past)
    assert encoding.image_encoder(_table(BENCH, [True] * len(BENCH), [0], name="signals"), BENCH) is None
    assert encoding.image_encoder(_table(BENCH, [True] * len(BENCH), [0], name="u"), BENCH) is not None
    keyless = StreamEncoding("cdc", ColumnControls(key_columns={"db.u": ["name"]}), frozenset())
    assert keyless.image_encoder(_table(BENCH, [True] * len(BENCH), [], name="u"), BENCH) is not None


def _changes(kind: str, rows, table: TableDef) -> RowChanges:
    return RowChanges(kind, table.db, table.name, table, BinlogPosition.from_binlog("mysql-bin.000007", 1234), rows, 0,
                      1700000000000, "0-1-9", 42, "mysql-bin.000007", "mysql-bin.000007", 1000)


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
@pytest.mark.parametrize("tombstones", [True, False])
def test_records_from_encoded_images_are_the_records_from_values(kind, tombstones):
    """Inserts, deletes, updates keeping and changing their key (a delete and a create),
    skipped rows, a start past the first row: the same records either way."""
    te, encoder = _bench_encoder()
    key_change = ROWS[0][:2] + struct.pack("<i", 99) + ROWS[0][6:]
    data = b"".join(ROWS + [ROWS[0], key_change, ROWS[2], ROWS[2]]) if kind == "update" else b"".join(ROWS)
    table = te.table
    values = RowDecoder(BENCH).decode_packed(data, kind == "update")
    encoded = encoder.encode(data, kind == "update")
    for start, skip in [(0, None), (1, None), (0, BinlogPosition.from_binlog("mysql-bin.000007", 1234, 2).encode())]:
        outs = [EventBuilder("cdc", "prod", 1, tombstones=tombstones).records(
            _changes(kind, rows, table), start, len(rows), AvroOut(), skip_up_to=skip) for rows in (values, encoded)]
        assert outs[0] == outs[1] and outs[0]
        if kind == "update":
            # the key change: d, then c; then an update keeping its key
            assert [r[3][-2:] for r in outs[1] if r[2] is not None][-3:] == ["04", "05", "06"]


CONTROLS = ColumnControls(exclude=[r"db\.t\.(note|big)"], mappers=ColumnMappers(
    mask={5: [r"db.t.name"]}, truncate={1: ["db.t.latin"]},
    hashes=[{"algorithm": "MD5", "salt": "s", "columns": "db.t.f"}]))


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_the_column_controls_keep_the_encoded_images_way(kind):
    """Columns left out, masked, truncated: the reader still encodes the images (the native
    encoder where built), and the producer's records are those it makes from values."""
    table = _table(BENCH, [i != 0 for i in range(len(BENCH))], [0])
    te = table_events("cdc", table, CONTROLS)
    encoder = StreamEncoding("cdc", CONTROLS, frozenset()).image_encoder(table, BENCH)
    assert encoder is not None and type(encoder._images).__name__ == (
        "Program" if image_encoder.native_enabled() else "function")
    data = b"".join(ROWS)
    encoded = encoder.encode(data, kind == "update")
    assert encoded.bodies == values_way(BENCH, te, data, kind == "update")
    assert b"*****" in encoded.bodies[1] and b"*****" in encoded.bodies[-1]  # (the all-NULL row's mask too)
    values = RowDecoder(BENCH).decode_packed(data, kind == "update")
    outs = [EventBuilder("cdc", "prod", 1, controls=CONTROLS).records(_changes(kind, rows, table), 0, len(rows),
                                                                       AvroOut()) for rows in (values, encoded)]
    assert outs[0] == outs[1] and outs[0]


def test_records_from_images_encoded_for_another_table_version_are_refused():
    te, encoder = _bench_encoder()
    encoded = encoder.encode(ROWS[0], False)
    other = _table(BENCH, [True] * len(BENCH), [0], name="t")  # NULLs allowed: another fingerprint
    with pytest.raises(CDCError, match="not for this table version"):
        EventBuilder("cdc", "prod", 1).records(_changes("insert", encoded, other), 0, 1, AvroOut())
    with pytest.raises(CDCError, match="not for this table version"):  # columns left out: another version
        EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={"db.t": ["note"]})).records(
            _changes("insert", encoded, te.table), 0, 1, AvroOut())
