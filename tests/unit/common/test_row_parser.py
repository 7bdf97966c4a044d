"""Rows parsed by the generated row parser are pymysql's rows."""

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st
from pymysql.converters import convert_date, convert_timedelta
from pymysql.protocol import MysqlPacket

from common.sql.row_parser import row_parser
from common.sql.sessions import datetime_from_text


class _Result:
    """What pymysql's ``MySQLResult._read_row_from_packet`` reads of its result."""

    def __init__(self, converters):
        self.converters = converters


def _pymysql_row(payload: bytes, converters) -> tuple:
    from pymysql.connections import MySQLResult
    return MySQLResult._read_row_from_packet(_Result(converters), MysqlPacket(payload, "utf8"))


def _length_coded(value: bytes | None, wide: int) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 251 and not wide:
        return bytes([n]) + value
    if n < 1 << 16 and wide <= 1:
        return b"\xfc" + n.to_bytes(2, "little") + value
    if n < 1 << 24 and wide <= 2:
        return b"\xfd" + n.to_bytes(3, "little") + value
    return b"\xfe" + n.to_bytes(8, "little") + value


CONVERTERS = [(None, int), ("utf8", None), (None, None), ("ascii", Decimal), (None, datetime_from_text),
              (None, convert_date), (None, convert_timedelta), ("utf8", None)]
VALUES = [st.integers(-2**63, 2**64).map(lambda i: str(i).encode()), st.text().map(str.encode),
          st.binary(max_size=600), st.decimals(allow_nan=False, allow_infinity=False).map(lambda d: str(d).encode()),
          st.sampled_from([b"2024-02-29 12:00:00.123", b"0000-00-00 00:00:00", b"1999-01-01 00:00:00"]),
          st.sampled_from([b"2024-02-29", b"0000-00-00"]), st.sampled_from([b"-838:59:59.000000", b"12:00:01"]),
          st.text(min_size=250, max_size=300).map(str.encode)]


@given(st.tuples(*[st.one_of(st.none(), v) for v in VALUES]), st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_every_row_is_pymysqls(values, wides):
    payload = b"".join(_length_coded(v, w) for v, w in zip(values, wides))
    assert row_parser(CONVERTERS)(payload) == _pymysql_row(payload, CONVERTERS)


def test_a_payload_it_does_not_fit_is_refused():
    parse = row_parser([(None, None), (None, None)])
    for bad in (b"\x01a", b"\x01a\x01b\x00", b"\x05ab"):
        try:
            parse(bad)
        except (IndexError, ValueError):
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_a_parser_is_generated_once_per_columns_readings():
    from common.sql.row_parser import cached_row_parser
    first = cached_row_parser(CONVERTERS)
    assert cached_row_parser(list(CONVERTERS)) is first
    assert cached_row_parser(CONVERTERS[:2]) is not first
