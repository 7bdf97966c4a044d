"""RowDecoder against python-mysql-replication's own decoder, on the same bytes.

Hypothesis draws tables of supported column types (with their table-map metadata) and
row data -- mostly well formed, often not (random temporal bits, decimal digits out of
range, bad UTF-8, short rows) -- and the library decodes the same bytes through its
``RowsEvent``.  Wherever the library returns rows, the fast decoder returns the same
values, of the same types, with the same ``none_sources``; wherever the library raises,
so does the fast decoder (and the reader then lets the library decode, and fail).
"""

from __future__ import annotations

import json
import socket
import struct
from datetime import datetime
from decimal import Context, Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.constants import FIELD_TYPE as T
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from common.sql import wire
from producer.binlog.json_binary import JsonText, json_text
from producer.binlog.row_decoder import RowDecoder
from tests.wire_helpers import ScriptedServer, handshake_v10, ok_packet

CHARSETS = ["utf8mb4", "latin1", "binary", None]
#: (the library's reader names its control connection's database by pymysql's old keyword)
pytestmark = pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")


def _column(name: str, type_: int, **meta) -> Column:
    base = {"type": type_, "name": name, "unsigned": False, "is_primary": False, "charset_id": None,
            "character_set_name": None, "collation_name": None, "enum_values": None, "set_values": None,
            "visibility": False}
    return Column(**{**base, **meta})


EOF_PACKET = b"\xfe\x00\x00\x02\x00"
#: What the library asks a server before the dump, and the one row each answer holds.
VARIABLES = {"SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'": ("binlog_checksum", "NONE"),
             "SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA';": ("binlog_row_metadata", "FULL")}


def _lenenc(value: bytes) -> bytes:
    return wire.encode_lenenc_int(len(value)) + value


def _variable_row(side, row: tuple[str, str]) -> None:
    """A ``SHOW VARIABLES`` result set of one row: two VAR_STRING columns, EOF-framed."""
    side.write(b"\x02")
    for name in ("Variable_name", "Value"):
        side.write(b"".join(_lenenc(x) for x in (b"def", b"", b"", b"", name.encode(), name.encode()))
                   + b"\x0c" + (45).to_bytes(2, "little") + (256).to_bytes(4, "little") + bytes((253,)) + bytes(5))
    side.write(EOF_PACKET)
    side.write(b"".join(_lenenc(v.encode()) for v in row))
    side.write(EOF_PACKET)


def _binlog_server(events: list[bytes]) -> ScriptedServer:
    """A MySQL 8 server's side of one connection, as python-mysql-replication uses it: logged
    in, its statements answered (``VARIABLES``; SET: OK), a COM_BINLOG_DUMP answered with
    ``events`` and the end of the binlog (non-blocking), until the client quits."""
    def script(side):
        side.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (its small packets sent at once)
        side.write(handshake_v10("mysql_native_password", version="8.0.36"))
        side.read_login()
        side.write(ok_packet())
        while True:
            side.seq = 0
            data = side.read()
            if data[:1] == b"\x01":  # COM_QUIT
                return
            if data[:1] == b"\x12":  # COM_BINLOG_DUMP
                for ev in events:
                    side.write(b"\x00" + ev)
                side.write(EOF_PACKET)
                continue
            assert data[:1] == b"\x03", data  # COM_QUERY
            sql = data[1:].decode()
            if sql.upper().startswith("SET "):
                side.write(ok_packet())
            else:
                _variable_row(side, VARIABLES[sql])
    return ScriptedServer(script)


def library_event(columns: list[Column], data: bytes, update: bool):
    """A v2 rows event holding row data, as python-mysql-replication's public
    ``BinLogStreamReader`` reads it from a server: the 19-byte event header, the post-header
    (table id 1, flags, no extra data), the column count, the present-columns bitmap(s), then
    the rows, served by a scripted server (no real server sends arbitrary row bytes; the
    reader's control connection, which the library's events ask which server it is, to
    another).  The table map is the reader's own (``table_map``), holding table 1."""
    etype = BINLOG.UPDATE_ROWS_EVENT_V2 if update else BINLOG.WRITE_ROWS_EVENT_V2
    bitmap = b"\xff" * ((len(columns) + 7) // 8)
    assert len(columns) < 251  # (the column count in one byte)
    body = (1).to_bytes(6, "little") + struct.pack("<HH", 0, 2) + bytes([len(columns)]) \
        + bitmap * (2 if update else 1) + data
    header = struct.pack("<IBIIIH", 0, etype, 1, 19 + len(body), 0, 0)
    stream_server, ctl_server = _binlog_server([header + body]), _binlog_server([])
    login = {"host": "127.0.0.1", "user": "cdc", "password": "pw", "ssl_disabled": True, "connect_timeout": 10,
             "read_timeout": 10}
    stream = BinLogStreamReader(connection_settings={**login, "port": stream_server.port}, server_id=99,
                                ctl_connection_settings={**login, "port": ctl_server.port},
                                log_file="mysql-bin.000001", log_pos=4, resume_stream=True, blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent], enable_logging=False)
    stream.table_map[1] = Table(1, "db", "t", columns)
    try:
        event = stream.fetchone()
    finally:
        stream.close()
    stream_server.join()
    ctl_server.join()
    assert isinstance(event, UpdateRowsEvent if update else WriteRowsEvent), event
    return event


def library_rows(columns: list[Column], data: bytes, update: bool) -> list[dict]:
    """``RowsEvent.rows`` of row data, through the library's own decoding."""
    return library_event(columns, data, update).rows


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return "raised", type(exc).__name__


def _typed(rows: list[dict]) -> list:
    """Rows with every value as (type name, repr): 1 == 1.0 == True must not pass."""
    return [{k: {n: (type(v).__name__, repr(v)) for n, v in image.items()} for k, image in row.items()}
            for row in rows]


# --- columns and their value bytes --------------------------------------------------------

def _fixed(n: int):
    return st.binary(min_size=n, max_size=n)


def _length_prefixed(length_size: int, content):
    def frame(b: bytes) -> bytes:
        return len(b).to_bytes(length_size, "little") + b
    return content.map(frame)


def _text(charset: str | None):
    encoding = {"utf8mb4": "utf-8", "latin1": "cp1252", "binary": None, None: "utf-8"}[charset]
    valid = st.text(max_size=12).map(lambda s: s.encode(encoding, "ignore") if encoding else s.encode())
    return st.one_of(valid, st.binary(max_size=12))


@st.composite
def columns_and_values(draw, name: str):
    """A column and a strategy for the bytes of one of its (non-NULL) values."""
    kind = draw(st.sampled_from(["int", "float", "year", "string", "blob", "decimal", "enum", "set", "bit", "date",
                                 "time2", "datetime2", "timestamp2", "geometry", "time", "datetime", "timestamp"]))
    if kind == "int":
        type_, size = draw(st.sampled_from([(T.TINY, 1), (T.SHORT, 2), (T.INT24, 3), (T.LONG, 4), (T.LONGLONG, 8)]))
        return _column(name, type_, unsigned=draw(st.booleans())), _fixed(size)
    if kind == "float":
        type_, size = draw(st.sampled_from([(T.FLOAT, 4), (T.DOUBLE, 8)]))
        return _column(name, type_, size=size), _fixed(size)
    if kind == "year":
        return _column(name, T.YEAR), _fixed(1)
    if kind == "string":
        type_ = draw(st.sampled_from([T.VARCHAR, T.STRING]))
        max_length = draw(st.sampled_from([1, 10, 255, 256, 1000]))
        charset = draw(st.sampled_from(CHARSETS))
        col = _column(name, type_, max_length=max_length, character_set_name=charset)
        return col, _length_prefixed(2 if max_length > 255 else 1, _text(charset))
    if kind == "blob":
        length_size = draw(st.integers(1, 4))
        charset = draw(st.sampled_from(CHARSETS))
        col = _column(name, T.BLOB, length_size=length_size, character_set_name=charset)
        return col, _length_prefixed(length_size, _text(charset))
    if kind == "decimal":
        precision = draw(st.integers(1, 65))
        decimals = draw(st.integers(0, min(30, precision)))
        col = _column(name, T.NEWDECIMAL, precision=precision, decimals=decimals)
        comp = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
        integral = precision - decimals
        size = comp[integral % 9] + 4 * (integral // 9) + 4 * (decimals // 9) + comp[decimals % 9]
        return col, _fixed(size)
    if kind == "enum":
        size = draw(st.sampled_from([1, 2]))
        values = draw(st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=4).map(lambda v: [""] + v)))
        return _column(name, T.ENUM, size=size, enum_values=values), _fixed(size)
    if kind == "set":
        size = draw(st.integers(1, 8))
        values = draw(st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=10, unique=True)))
        return _column(name, T.SET, size=size, set_values=values), _fixed(size)
    if kind == "bit":
        bits = draw(st.integers(1, 64))
        return _column(name, T.BIT, bits=bits, bytes=(bits + 7) // 8), _fixed((bits + 7) // 8)
    if kind == "date":
        return _column(name, T.DATE), _fixed(3)
    if kind == "datetime":  # (pre-5.6: YYYYMMDDhhmmss as an integer, valid or not)
        valid = st.builds(lambda d, t: d * 1000000 + t, st.integers(10000101, 99991231), st.integers(0, 235959))
        return _column(name, T.DATETIME), st.one_of(valid, st.integers(0, 2**64 - 1)).map(
            lambda v: v.to_bytes(8, "little"))
    if kind == "time":
        return _column(name, T.TIME), _fixed(3)
    if kind == "timestamp":
        return _column(name, T.TIMESTAMP), _fixed(4)
    if kind == "geometry":
        length_size = draw(st.integers(1, 4))
        return _column(name, T.GEOMETRY, length_size=length_size), _length_prefixed(length_size, st.binary(max_size=30))
    fsp = draw(st.integers(0, 6))
    fsp_bytes = (fsp + 1) // 2
    type_, size = {"time2": (T.TIME2, 3), "datetime2": (T.DATETIME2, 5), "timestamp2": (T.TIMESTAMP2, 4)}[kind]
    return _column(name, type_, fsp=fsp), _fixed(size + fsp_bytes)


@st.composite
def events(draw):
    cols_and_values = [draw(columns_and_values(f"c{i}")) for i in range(draw(st.integers(1, 6)))]
    columns = [c for c, _ in cols_and_values]
    update = draw(st.booleans())
    data = b""
    for _ in range(draw(st.integers(1, 4)) * (2 if update else 1)):
        nulls = draw(st.lists(st.booleans(), min_size=len(columns), max_size=len(columns)))
        bitmap = sum(1 << i for i, null in enumerate(nulls) if null).to_bytes((len(columns) + 7) // 8, "little")
        data += bitmap + b"".join(draw(values) for (_, values), null in zip(cols_and_values, nulls) if not null)
    if draw(st.integers(0, 9)) == 0:
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]  # a short row
    return columns, data, update


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events())
def test_decodes_exactly_as_python_mysql_replication(event):
    columns, data, update = event
    decoder = RowDecoder(columns)
    lib = _outcome(lambda: _typed(library_rows(columns, data, update)))
    mine = _outcome(lambda: _typed(decoder.decode(data, update)))
    if lib[0] == "raised":
        assert mine[0] == "raised", (lib, mine)
    else:
        assert mine == lib


def _pack_datetime2(y, mo, d, h, mi, s) -> bytes:
    ym = y * 13 + mo
    value = (1 << 39) | (ym << 22) | (d << 17) | (h << 12) | (mi << 6) | s
    return value.to_bytes(5, "big")


@pytest.mark.parametrize("update", [False, True])
def test_none_reasons(update):
    """Why a value is None: an empty SET and an out-of-range DATETIME say so, a NULL says null."""
    cols = [_column("s", T.SET, size=1, set_values=["x", "y"]), _column("d", T.DATETIME2, fsp=0)]
    empty_set = b"\x00" + b"\x00" + _pack_datetime2(2024, 0, 1, 0, 0, 0)  # month 0: out of range
    all_null = b"\x03"
    data = (empty_set + all_null) * (2 if update else 1)
    mine = RowDecoder(cols).decode(data, update)
    assert _typed(mine) == _typed(library_rows(cols, data, update))
    key = "after_none_sources" if update else "none_sources"
    first = mine[0]["before_none_sources" if update else "none_sources"]
    assert first == {"s": "empty set", "d": "out of datetime2 range"}
    assert mine[-1][key] == {"s": "null", "d": "null"}


def test_real_values():
    cols = [_column("id", T.LONG), _column("name", T.VARCHAR, max_length=64, character_set_name="utf8mb4"),
            _column("price", T.NEWDECIMAL, precision=12, decimals=2), _column("at", T.DATETIME2, fsp=3)]
    # DECIMAL(12,2) 1.25: 1 digit (1 byte) + 9 digits (4 bytes) . 2 digits (1 byte), sign bit set.
    price = bytes([0x80, 0, 0, 0, 1, 25])
    at = _pack_datetime2(2024, 2, 29, 13, 5, 9) + (123 * 10).to_bytes(2, "big")
    row = b"\x00" + struct.pack("<i", -7) + bytes([5]) + "été".encode() + price + at
    [decoded] = RowDecoder(cols).decode(row, False)
    assert decoded == {"values": library_rows(cols, row, False)[0]["values"], "none_sources": {}}
    assert decoded["values"] == {"id": -7, "name": "été", "price": Decimal("1.25"),
                                 "at": datetime(2024, 2, 29, 13, 5, 9, 123000)}


def test_unsupported_columns_go_to_the_library():
    assert RowDecoder.for_columns([_column(None, T.LONG)]) is None  # no names: metadata not FULL
    assert RowDecoder.for_columns([_column("d", T.DECIMAL)]) is None  # the old DECIMAL
    assert RowDecoder.for_columns([_column("i", T.LONG)]) is not None


def test_rows_of_an_event_fast_or_by_the_library():
    cols = [_column("id", T.LONG), _column("name", T.VARCHAR, max_length=10, character_set_name="utf8mb4")]
    data = b"\x00" + struct.pack("<i", 1) + b"\x02ab" + b"\x02" + struct.pack("<i", 2)
    decoder = RowDecoder(cols)
    rows = decoder.rows(library_event(cols, data, False))
    assert rows == library_rows(cols, data, False) == [
        {"values": {"id": 1, "name": "ab"}, "none_sources": {}},
        {"values": {"id": 2, "name": None}, "none_sources": {"name": "null"}}]
    # A row image that is not full (binlog_row_image=MINIMAL): the library decodes it.
    ev = library_event(cols, data, False)
    ev.columns_present_bitmap = b"\x01"
    assert not decoder.fits(ev)
    # Bad data: the library decodes it, and raises its own error.
    with pytest.raises(AssertionError, match="Result length not requested length"):
        decoder.rows(library_event(cols, data[:-2], False))


def _pack_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL: 9-digit groups in 4 bytes, the leading/trailing partial groups
    in 1-4 bytes, every byte inverted for a negative value, then the first byte's top bit flipped."""
    sizes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    sign, digits, exp = value.quantize(Decimal(1).scaleb(-scale), context=Context(prec=100)).as_tuple()
    text = "".join(map(str, digits)).rjust(precision, "0")
    integral, fraction = text[:precision - scale], text[precision - scale:]
    head = len(integral) % 9
    parts = ([(integral[:head], sizes[head])] if head else []) + \
        [(integral[i:i + 9], 4) for i in range(head, len(integral), 9)] + \
        [(fraction[i:i + 9], 4) for i in range(0, len(fraction) - len(fraction) % 9, 9)]
    if len(fraction) % 9:
        parts.append((fraction[len(fraction) - len(fraction) % 9:], sizes[len(fraction) % 9]))
    data = bytearray(b"".join(int(d).to_bytes(n, "big") for d, n in parts))
    if sign:
        data = bytearray(b ^ 0xFF for b in data)
    data[0] ^= 0x80
    return bytes(data)


@pytest.mark.parametrize("precision, scale, values", [
    (12, 2, ["332.32", "-332.32", "0", "-0.00", "9999999999.99", "-9999999999.99", "0.01"]),
    (65, 30, ["-12345678901234567890123456789012345.123456789012345678901234567890", "1E-30", "0", "-1"]),
    (5, 5, ["0.12345", "-0.00001", "0"]),
    (10, 0, ["1234567890", "-1", "0"]),
    (18, 9, ["123456789.123456789", "-0.000000001"]),
])
def test_valid_decimals_decode_as_the_library_does(precision, scale, values):
    cols = [_column("d", T.NEWDECIMAL, precision=precision, decimals=scale)]
    data = b"".join(b"\x00" + _pack_decimal(Decimal(v), precision, scale) for v in values)
    mine = RowDecoder(cols).decode(data, False)
    lib = library_rows(cols, data, False)
    assert _typed(mine) == _typed(lib)
    assert [r["values"]["d"].as_tuple() for r in mine] == [r["values"]["d"].as_tuple() for r in lib]
    assert [r["values"]["d"] for r in mine] == [Decimal(v) for v in values]


def _jsonb(value) -> tuple[int, bytes]:
    """``value`` in MySQL's binary JSON (always the large object/array layout, offsets of 4
    bytes; int64 numbers; literals inline in their entries, everything else in the value
    area): its type byte and its bytes."""
    if value is None or value is True or value is False:
        return 0x04, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        return 0x09, struct.pack("<q", value)
    if isinstance(value, float):
        return 0x0B, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        n, out = len(raw), bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                break
        return 0x0C, bytes(out) + raw
    is_object = isinstance(value, dict)
    items = list(value.items()) if is_object else [(None, v) for v in value]
    count = len(items)
    header = 8 + count * 6 * is_object + count * 5
    keys = b"".join(k.encode() for k, _ in items) if is_object else b""
    key_entries, pos = bytearray(), header
    for k, _ in items if is_object else []:
        key_entries += struct.pack("<IH", pos, len(k.encode()))
        pos += len(k.encode())
    value_entries, area = bytearray(), bytearray()
    for _, v in items:
        t, body = _jsonb(v)
        if t == 0x04:  # (a literal is inline: in the entry's offset field)
            value_entries += bytes([t]) + body.ljust(4, b"\0")
            continue
        value_entries += bytes([t]) + struct.pack("<I", pos + len(area))
        area += body
    size = header + len(keys) + len(area)
    return (0x01 if is_object else 0x03), struct.pack("<II", count, size) + bytes(key_entries) + bytes(
        value_entries) + keys + bytes(area)


def _as_library_gives(value):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict):
        return {k.encode(): _as_library_gives(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_library_gives(v) for v in value]
    return value


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_mysql_binary_json_as_the_library_reads_it(doc):
    t, body = _jsonb(doc)
    cols = [_column("id", T.LONG), _column("j", T.JSON, length_size=4)]
    row = b"\x00" + struct.pack("<i", 1) + struct.pack("<I", 1 + len(body)) + bytes([t]) + body
    [decoded] = RowDecoder(cols).decode(row, False)
    library = library_rows(cols, row, False)[0]["values"]
    text = decoded["values"]["j"]
    assert type(text) is JsonText and decoded["values"]["id"] == library["id"] == 1
    if doc is None:
        # A document that is JSON's null: the library gives None, as for SQL NULL; the row
        # decoder gives the text "null", as a snapshot's SELECT reads it.
        assert (text, library["j"]) == ("null", None)
        return
    # The row decoder gives the document's text (json_binary), the library its tree: the same document.
    assert text == json_text(doc)
    assert library["j"] == _as_library_gives(doc) and json.loads(text) == doc
