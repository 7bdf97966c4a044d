"""A :class:`~common.sql.row_reads.RowSession`'s rows (the generated parser's, and the plain
loop's, :func:`~common.sql.row_parser.plain_row`) and statements are pymysql's: the same
result set, served by a scripted server (tests/wire_helpers.py) to the session and to pymysql
(its public API: ``cursor.execute``, ``fetchall``), gives the same values of every type,
NULLs and long values; the same parameters give the same statement text, with and without
the server's NO_BACKSLASH_ESCAPES."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysql.constants import FIELD_TYPE as F
from pymysql.converters import conversions

from common.sql import wire
from common.sql.row_parser import plain_row
from common.sql.row_reads import RowSession, readings
from common.sql.sessions import READ_DECODERS
from common.sql.tls import TlsSettings
from tests.wire_helpers import ScriptedServer, handshake_v10, ok_packet

BINARY, UTF8MB4 = 63, 45
EOF = b"\xfe\x00\x00\x02\x00"


def _lenenc(value: bytes) -> bytes:
    return wire.encode_lenenc_int(len(value)) + value


def _column_def(name: str, type_: int, charset: int) -> bytes:
    strings = [b"def", b"db", b"t", b"t", name.encode(), name.encode()]
    return b"".join(_lenenc(s) for s in strings) + b"\x0c" + charset.to_bytes(2, "little") + bytes(4) \
        + bytes((type_,)) + bytes(5)


def _serve(columns: list[tuple[str, int, int]], rows: list[bytes], seen: list[str], status: int = 2):
    """A server's script: logged in, every statement answered with an OK (``status``), every
    SELECT with ``rows`` of ``columns`` (name, type, character set); the statements kept in ``seen``."""
    def script(side):
        side.write(handshake_v10("mysql_native_password"))
        side.read_login()
        side.write(ok_packet(status=status))
        while True:
            side.seq = 0
            data = side.read()
            if data[:1] == b"\x01":  # COM_QUIT
                return
            sql = data[1:].decode()
            seen.append(sql)
            if not sql.startswith("SELECT"):
                side.write(ok_packet(status=status))
                continue
            side.write(wire.encode_lenenc_int(len(columns)))
            for name, type_, charset in columns:
                side.write(_column_def(name, type_, charset))
            side.write(EOF)
            for row in rows:
                side.write(row)
            side.write(EOF)
    return script


def _both(columns, rows, sql: str, params=None, status: int = 2) -> tuple[tuple, tuple]:
    """(the session's, pymysql's): (the rows' values, the statements sent)."""
    out = []
    for client in ("ours", "pymysql"):
        seen: list[str] = []
        server = ScriptedServer(_serve(columns, rows, seen, status))
        if client == "ours":
            session = RowSession(wire.connect("127.0.0.1", server.port, "cdc", "pw", tls=TlsSettings("disabled"),
                                              connect_timeout=30, read_timeout=30), READ_DECODERS)
            with session:
                session.execute("SET time_zone = '+00:00'")
                got = session.values(sql, params)
        else:
            conn = pymysql.connect(host="127.0.0.1", port=server.port, user="cdc", password="pw", charset="utf8mb4",
                                   conv={**conversions, **READ_DECODERS}, autocommit=None, connect_timeout=30)
            with conn, conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                cur.execute(sql, params)
                got = list(cur.fetchall())
        server.join()
        out.append((got, seen))
    return out[0], out[1]


def _ints(bits: int):
    return st.integers(-(1 << (bits - 1)), (1 << bits) - 1).map(lambda i: str(i).encode())


_TEXT = st.text(max_size=300).map(str.encode)
# (type, character set, its values' texts)
COLUMNS = [
    (F.TINY, BINARY, _ints(8)), (F.SHORT, BINARY, _ints(16)), (F.INT24, BINARY, _ints(24)),
    (F.LONG, BINARY, _ints(32)), (F.LONGLONG, BINARY, _ints(64)),
    (F.NEWDECIMAL, BINARY, st.decimals(allow_nan=False, allow_infinity=False, places=4).map(lambda d: str(d).encode())),
    (F.DOUBLE, BINARY, st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode())),
    (F.FLOAT, BINARY, st.sampled_from([b"1.5", b"-3.25e-07", b"0"])),
    (F.DATETIME, BINARY, st.one_of(st.datetimes().map(lambda d: str(d).encode()),
                                   st.sampled_from([b"0000-00-00 00:00:00", b"2024-02-30 10:00:00", b"2024-01-01 10:00:00.5"]))),
    (F.TIMESTAMP, BINARY, st.datetimes(min_value=dt.datetime(1970, 1, 2)).map(lambda d: str(d).encode())),
    (F.DATE, BINARY, st.one_of(st.dates().map(lambda d: d.isoformat().encode()), st.just(b"0000-00-00"))),
    (F.TIME, BINARY, st.sampled_from([b"-838:59:59.000000", b"10:00:00.5", b"00:00:01", b"12:00"])),
    (F.YEAR, BINARY, st.sampled_from([b"2024", b"0", b"1901"])),
    (F.VAR_STRING, UTF8MB4, _TEXT), (F.STRING, UTF8MB4, _TEXT), (F.BLOB, UTF8MB4, _TEXT),
    (F.VAR_STRING, BINARY, st.binary(max_size=300)), (F.STRING, BINARY, st.binary(max_size=20)),
    (F.BLOB, BINARY, st.binary(max_size=70_000)), (F.BIT, BINARY, st.binary(min_size=1, max_size=8)),
    (F.JSON, BINARY, st.sampled_from([b'{"a": [1, "\xc3\xa9"]}', b"null", b"[]"])),
    (F.GEOMETRY, BINARY, st.binary(max_size=30)),
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(*[st.one_of(st.none(), values) for _, _, values in COLUMNS]), min_size=1, max_size=12))
def test_every_row_of_every_type_is_pymysqls(rows):
    columns = [(f"c{i}", type_, charset) for i, (type_, charset, _) in enumerate(COLUMNS)]
    payloads = [b"".join(b"\xfb" if v is None else _lenenc(v) for v in row) for row in rows]
    (ours, _), (theirs, _) = _both(columns, payloads, "SELECT * FROM t")
    assert len(ours) == len(theirs) == len(rows)
    plain = [plain_row(readings([wire.Column(n, cs, t, 0) for n, t, cs in columns], READ_DECODERS), p) for p in payloads]
    for got, expected, slow in zip(ours, theirs, plain):
        assert got == expected == slow and [type(v) for v in got] == [type(v) for v in expected]


PARAMS = [1, -(1 << 63), 1 << 64, 2.5, 1e-300, Decimal("-12.340"), True, None, "plain", "it's \\ a \"quote\"\n\r\0\x1a",
          "é 😀 %s", b"\x00'\\\xff", bytearray(b"ab"), dt.datetime(2024, 2, 29, 12, 0, 1, 5), dt.datetime(2024, 1, 1),
          dt.date(1999, 12, 31), dt.time(23, 59, 59, 1), dt.timedelta(hours=-1, microseconds=3), (1, "a", b"b")]


@pytest.mark.parametrize("status", [2, 2 | wire.NO_BACKSLASH_ESCAPES])
def test_a_statements_parameters_are_written_as_pymysql_writes_them(status):
    sql = "SELECT k FROM t WHERE " + " AND ".join(["k > %s"] * len(PARAMS)) + " AND s LIKE 'a%%'"
    (_, ours), (_, theirs) = _both([("k", F.LONG, BINARY)], [_lenenc(b"1")], sql, PARAMS, status)
    assert ours[-1] == theirs[-1]
    assert ("'it''s \\ a \"quote\"" if status & wire.NO_BACKSLASH_ESCAPES else "'it\\'s \\\\ a") in ours[-1]
    (_, ours), (_, theirs) = _both([("k", F.LONG, BINARY)], [], "SELECT 100%%", None, status)  # no parameters: as it is
    assert ours[-1] == theirs[-1] == "SELECT 100%%"


def test_a_statement_without_a_result_set_gives_no_rows():
    seen: list[str] = []
    server = ScriptedServer(_serve([], [], seen))
    with RowSession(wire.connect("127.0.0.1", server.port, "cdc", "pw", tls=TlsSettings("disabled"),
                                 connect_timeout=30), READ_DECODERS) as session:
        assert session.rows("DELETE FROM t") == ([], [])
    server.join()
