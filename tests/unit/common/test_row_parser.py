"""Rows parsed by the generated row parser are the plain loop's (:func:`plain_row`, held to
pymysql's own rows by tests/unit/common/test_row_reads.py), on arbitrary values and lengths."""

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st
from pymysql.converters import convert_date, convert_timedelta

from common.sql.row_parser import plain_row, row_parser, values_reader
from common.sql.sessions import datetime_from_text


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
def test_every_row_is_the_plain_loops(values, wides):
    payload = b"".join(_length_coded(v, w) for v, w in zip(values, wides))
    assert row_parser(CONVERTERS)(payload) == plain_row(CONVERTERS, payload)


def test_a_payload_it_does_not_fit_is_refused():
    parse = row_parser([(None, None), (None, None)])
    for bad in (b"\x01a", b"\x01a\x01b\x00", b"\x05ab"):
        try:
            parse(bad)
        except (IndexError, ValueError):
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_a_row_the_parser_does_not_fit_is_read_by_the_plain_loop():
    values = values_reader([(None, None), ("utf8", None)])
    assert values(b"\x01a\x02\xc3\xa9") == (b"a", "\u00e9")
    assert values(b"\x01a\xfb\x00") == (b"a", None)  # (bytes after the last column: ignored, as pymysql does)
    try:
        values(b"\x05ab")
    except ValueError:
        return
    raise AssertionError("a value running past its payload was read")


def test_a_parser_is_generated_once_per_columns_readings():
    from common.sql.row_parser import cached_row_parser
    first = cached_row_parser(CONVERTERS)
    assert cached_row_parser(list(CONVERTERS)) is first
    assert cached_row_parser(CONVERTERS[:2]) is not first
