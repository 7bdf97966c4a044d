"""MySQL's binary JSON read into MySQL's text (producer.binlog.json_binary): the opaque scalars
python-mysql-replication cannot read (a TIME beyond 23 hours, a DECIMAL's digits), and doubles
written as MySQL writes them (the texts a SELECT of MySQL 9.7.4 gave for the same documents)."""

from __future__ import annotations

import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producer.binlog import json_binary as jb


def _opaque(field_type: int, data: bytes) -> bytes:
    assert len(data) < 128
    return bytes([jb.OPAQUE, field_type, len(data)]) + data


def _packed_time(sign: int, h: int, m: int, s: int, us: int) -> bytes:
    return struct.pack("<q", sign * ((((h << 12) | (m << 6) | s) << 24) + us))


def _packed_datetime(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> bytes:
    ymd = ((y * 13 + mo) << 5) | d
    return struct.pack("<q", ((((ymd << 17) | (h << 12) | (mi << 6) | s)) << 24) + us)


def test_opaque_temporal_scalars_read_as_mysql_shows_them():
    assert jb.json_text(jb.parse(_opaque(11, _packed_time(-1, 838, 59, 59, 0)))) == '"-838:59:59.000000"'
    assert jb.json_text(jb.parse(_opaque(11, _packed_time(1, 12, 34, 56, 789000)))) == '"12:34:56.789000"'
    assert jb.json_text(jb.parse(_opaque(12, _packed_datetime(9999, 12, 31, 23, 59, 59, 999999)))) == \
        '"9999-12-31 23:59:59.999999"'
    assert jb.json_text(jb.parse(_opaque(10, _packed_datetime(2024, 2, 29, 0, 0, 0, 0)))) == '"2024-02-29"'
    assert jb.json_text(jb.parse(_opaque(252, b"\x01\x02"))) == '"base64:type252:AQI="'


def test_an_opaque_decimal_keeps_its_digits():
    # DECIMAL(30,9) -12345678901234567890.123456789: 21 integer digits (a 3-digit head in 2 bytes, two
    # groups of 9 in 4 bytes each), 9 fraction digits; the sign bit flipped, every byte inverted (negative)
    packed = bytearray((12).to_bytes(2, "big") + (345678901).to_bytes(4, "big") + (234567890).to_bytes(4, "big")
                       + (123456789).to_bytes(4, "big"))
    packed[0] ^= 0x80
    negative = bytes(b ^ 0xFF for b in packed)
    value = jb.parse(_opaque(246, bytes([30, 9]) + negative))
    assert value == Decimal("-12345678901234567890.123456789")
    assert jb.json_text([value]) == "[-12345678901234567890.123456789]"


@pytest.mark.parametrize("value,text", [
    (1.7976931348623157e308, "1.7976931348623157e308"), (-5e-324, "-5e-324"), (0.1, "0.1"), (1e-7, "0.0000001"),
    (-0.0, "-0.0"), (123456789.125, "123456789.125"), (1e20, "1e20"), (-1.5e-300, "-1.5e-300"), (2.5, "2.5"),
    (100.0, "100.0")])
def test_doubles_are_written_as_mysql_writes_them(value, text):
    assert jb.double_text(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_doubles_text_reads_back_as_the_same_double(value):
    text = jb.double_text(value)
    assert float(text) == value and str(float(text)).startswith("-") == str(value).startswith("-")
    assert "+" not in text and ("." in text or "e" in text)


def test_a_large_object_with_inlined_and_offset_values():
    # {"a": 1, "b": "x"} in the large form: count 2, size, key entries (offset 4, length 2), value
    # entries (type 1, value or offset 4): an int32 inlined (large form), a string at its offset
    keys_at, header = 8 + 2 * 6 + 2 * 5, 8
    body = bytearray(struct.pack("<II", 2, 0))
    body += struct.pack("<IH", keys_at, 1) + struct.pack("<IH", keys_at + 1, 1)
    body += bytes([jb.INT32]) + struct.pack("<i", 1) + bytes([jb.STRING]) + struct.pack("<I", keys_at + 2)
    body += b"ab" + bytes([1]) + b"x"
    struct.pack_into("<I", body, 4, len(body))
    assert header == 8 and jb.json_text(jb.parse(bytes([jb.LARGE_OBJECT]) + bytes(body))) == '{"a": 1, "b": "x"}'


def test_literals_and_an_empty_value():
    assert [jb.json_text(jb.parse(bytes([jb.LITERAL, b]))) for b in (0, 1, 2)] == ["null", "true", "false"]
    assert jb.parse(b"") is None
    with pytest.raises(ValueError, match="truncated"):
        jb.parse(bytes([jb.STRING, 5]) + b"ab")
