"""MySQL's binary JSON (a JSON column's value in a binlog row image) read into a tree: pure.

python-mysql-replication's ``json_binary.parse_json`` reads opaque scalars through Python's
``datetime`` (a TIME of more than 23 hours, which JSON_OBJECT('t', CAST('-838:59:59' AS TIME))
stores, raises ``hour must be in 0..23``: the producer stopped) and DECIMALs as ``Decimal``
that later became floats.  This reader keeps every scalar as MySQL has it:

* objects as ``dict`` (``str`` keys, in the document's order: MySQL's, sorted by length then
  bytes), arrays as ``list``, strings as ``str``, literals as True/False/None;
* int16/32/64 and uint16/32/64 as ``int``, doubles as ``float``;
* opaque values: DECIMAL as :class:`decimal.Decimal` of its exact digits and scale; DATE, TIME,
  DATETIME and TIMESTAMP as :class:`Temporal`, the text MySQL shows for them
  (``2024-02-29``, ``-838:59:59.000000``, ``9999-12-31 23:59:59.999999``); any other as
  :class:`Opaque` (its field type and bytes; MySQL shows ``base64:type<N>:<base64>``).

The format (MySQL's ``json_binary.h``): a type byte, then the value.  An object or array has
its element count and byte size (2-byte fields in the small form, 4-byte in the large), key
entries (offset, 2-byte length) for an object, then value entries: a type byte and either the
value itself (literals, int16, uint16; int32 and uint32 in the large form) or its offset from
the start of the object.  Strings and opaque data carry a variable-length size (7 bits a byte,
low first).
"""

from __future__ import annotations

import base64
import json
import struct
from decimal import Context, Decimal
from typing import Any, NamedTuple

from contract.conversion_rules import packed_decimal

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0, 1, 2, 3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING, OPAQUE = 4, 5, 6, 7, 8, 9, 10, 11, 12, 15
# MySQL field types an opaque value may carry that MySQL shows as scalars.
_DECIMAL, _DATE, _TIME, _DATETIME, _TIMESTAMP = 246, 10, 11, 12, 7

_FIXED = {INT16: struct.Struct("<h"), UINT16: struct.Struct("<H"), INT32: struct.Struct("<i"),
          UINT32: struct.Struct("<I"), INT64: struct.Struct("<q"), UINT64: struct.Struct("<Q"),
          DOUBLE: struct.Struct("<d")}
_INT64 = struct.Struct("<q")
_EXACT = Context(prec=80)


class Temporal(str):
    """A DATE, TIME, DATETIME or TIMESTAMP inside a JSON document, as MySQL's text shows it
    (a JSON string there)."""


class Opaque(NamedTuple):
    """An opaque value of another MySQL field type (a BLOB's bytes, a GEOMETRY...)."""

    field_type: int
    data: bytes


def parse(data: bytes) -> Any:
    """The document of a JSON column's binary value (type byte first); ``b""`` is JSON null,
    as MySQL writes an empty value for it."""
    if not data:
        return None
    return _value(data[0], data, 1, len(data))


def _value(t: int, d: bytes, at: int, end: int) -> Any:
    """The value of type ``t`` whose bytes start at ``d[at]`` (within ``d[:end]``)."""
    if t in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
        return _container(t, d, at, end)
    if t == LITERAL:
        return _literal(d[at])
    if t in _FIXED:
        return _FIXED[t].unpack_from(d, at)[0]
    if t == STRING:
        n, at = _varlen(d, at)
        _need(at + n, end)
        return d[at:at + n].decode("utf-8")
    if t == OPAQUE:
        field_type = d[at]
        n, at = _varlen(d, at + 1)
        _need(at + n, end)
        return opaque(field_type, d[at:at + n])
    raise ValueError(f"binary JSON: unknown value type {t}")


def _literal(b: int) -> Any:
    if b == 0:
        return None
    if b in (1, 2):
        return b == 1
    raise ValueError(f"binary JSON: unknown literal {b}")


def _need(stop: int, end: int) -> None:
    if stop > end:
        raise ValueError("binary JSON: truncated value")


def _varlen(d: bytes, at: int) -> tuple[int, int]:
    """A variable-length size at ``d[at]`` (7 bits a byte, low first; at most 5 bytes)."""
    n = shift = 0
    for i in range(5):
        b = d[at + i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, at + i + 1
        shift += 7
    raise ValueError("binary JSON: a size of more than 5 bytes")


def _container(t: int, d: bytes, start: int, end: int) -> Any:
    """An object or array whose header starts at ``d[start]``; offsets count from there."""
    large = t in (LARGE_OBJECT, LARGE_ARRAY)
    word = 4 if large else 2
    count = int.from_bytes(d[start:start + word], "little")
    size = int.from_bytes(d[start + word:start + 2 * word], "little")
    stop = start + size
    _need(stop, end)
    at = start + 2 * word
    keys: list[str] = []
    if t in (SMALL_OBJECT, LARGE_OBJECT):
        for _ in range(count):
            offset = int.from_bytes(d[at:at + word], "little")
            length = int.from_bytes(d[at + word:at + word + 2], "little")
            _need(start + offset + length, stop)
            keys.append(d[start + offset:start + offset + length].decode("utf-8"))
            at += word + 2
    values = []
    for _ in range(count):
        vt = d[at]
        if vt == LITERAL or vt in (INT16, UINT16) or large and vt in (INT32, UINT32):  # inlined
            values.append(_value(vt, d, at + 1, stop))
        else:
            values.append(_value(vt, d, start + int.from_bytes(d[at + 1:at + 1 + word], "little"), stop))
        at += 1 + word
    if t in (SMALL_ARRAY, LARGE_ARRAY):
        return values
    return dict(zip(keys, values))


def opaque(field_type: int, data: bytes) -> Any:
    """An opaque value: a DECIMAL (precision, scale, its packed digits), a temporal type (its
    packed 8-byte form), else :class:`Opaque`."""
    if field_type == _DECIMAL and len(data) >= 2:
        precision, scale = data[0], data[1]
        unscaled = packed_decimal(data, 2, precision, scale)
        if unscaled is None:
            raise ValueError("binary JSON: a DECIMAL's digits out of their range")
        return Decimal(unscaled).scaleb(-scale, context=_EXACT)  # (up to 65 digits: no rounding)
    if field_type in (_DATE, _TIME, _DATETIME, _TIMESTAMP) and len(data) >= 8:
        packed = _INT64.unpack_from(data)[0]
        return Temporal(time_text(packed) if field_type == _TIME else datetime_text(packed, field_type == _DATE))
    return Opaque(field_type, bytes(data))


def time_text(packed: int) -> str:
    """A TIME's text from its packed form (MySQL's ``TIME_from_longlong_time_packed``):
    ``[-]hh:mm:ss.ffffff``, the hours up to 838."""
    sign, packed = ("-", -packed) if packed < 0 else ("", packed)
    hms, micros = packed >> 24, packed % (1 << 24)
    hour, minute, second = (hms >> 12) % (1 << 10), (hms >> 6) % (1 << 6), hms % (1 << 6)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


def datetime_text(packed: int, date_only: bool) -> str:
    """A DATE's or DATETIME's text from its packed form (``TIME_from_longlong_datetime_packed``):
    ``yyyy-mm-dd`` or ``yyyy-mm-dd hh:mm:ss.ffffff``."""
    packed = -packed if packed < 0 else packed
    micros, ymdhms = packed % (1 << 24), packed >> 24
    ymd, hms = ymdhms >> 17, ymdhms % (1 << 17)
    day, ym = ymd % (1 << 5), ymd >> 5
    month, year = ym % 13, ym // 13
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if date_only:
        return date
    return f"{date} {hms >> 12:02d}:{(hms >> 6) % (1 << 6):02d}:{hms % (1 << 6):02d}.{micros:06d}"


class JsonText(str):
    """A JSON column's value from the binlog as its final text (:func:`document_text`): the
    converter writes it as it is (a ``str`` would be JSON text to normalise)."""


def document_text(data: bytes) -> JsonText:
    """The text of a JSON column's binary value (:func:`parse`, then :func:`json_text`)."""
    return JsonText(json_text(parse(data)))


def json_text(v: Any) -> str:
    """A document of :func:`parse` as MySQL's text shows it: ``", "`` and ``": "`` between
    members, non-ASCII literal, DECIMALs with their exact digits, temporal scalars as strings,
    other opaque values as ``"base64:type<N>:<base64>"``, doubles as :func:`double_text`."""
    t = type(v)
    if t is dict:
        return "{" + ", ".join(f"{_string(k)}: {json_text(x)}" for k, x in v.items()) + "}"
    if t is list:
        return "[" + ", ".join(json_text(x) for x in v) + "]"
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return str(v)
    if t is float:
        return double_text(v)
    if t is RawNumber:
        return str(v)
    if t is Decimal:
        return format(v, "f")
    if t is Opaque:
        return _string(f"base64:type{v.field_type}:{base64.b64encode(v.data).decode()}")
    return _string(str(v))  # str, Temporal


class RawNumber(str):
    """A number of a JSON text kept as its text was (``json.loads(..., parse_float=RawNumber)``):
    :func:`json_text` writes it back unchanged, a DECIMAL's digits and MySQL's own forms kept."""


#: MySQL writes a double in positional notation while its decimal point is within this many
#: digits of the units (``my_gcvt``'s MAX_DECPT_FOR_F_FORMAT, DBL_DIG), else as ``<d>[.<ddd>]e<exp>``.
_MAX_DECPT_FOR_F_FORMAT = 15


def double_text(d: float) -> str:
    """A JSON double's text as MySQL writes it (``my_gcvt``): its shortest digits (Python's
    ``repr`` has the same), positional while the point is within 15 digits of the units
    (``0.0000001``, ``123456789.125``), else exponential without a ``+`` (``1e20``,
    ``1.7976931348623157e308``, ``5e-324``); ``.0`` after one that would read as an integer."""
    if d != d or d in (float("inf"), float("-inf")):
        raise ValueError(f"binary JSON: a double {d!r} JSON cannot hold")
    sign = "-" if str(d).startswith("-") else ""
    digits_tuple, exponent = Decimal(repr(abs(d))).normalize().as_tuple()[1:]
    digits = "".join(map(str, digits_tuple)).rstrip("0") or "0"
    decpt = len(digits_tuple) + int(exponent) if digits != "0" else 1
    if -_MAX_DECPT_FOR_F_FORMAT <= decpt <= _MAX_DECPT_FOR_F_FORMAT:
        if decpt <= 0:
            text = "0." + "0" * -decpt + digits
        elif decpt < len(digits):
            text = digits[:decpt] + "." + digits[decpt:]
        else:
            text = digits + "0" * (decpt - len(digits))
    else:
        text = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + f"e{decpt - 1}"
    text = sign + text
    return text if "." in text or "e" in text else text + ".0"


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


__all__ = ["JsonText", "Opaque", "RawNumber", "Temporal", "datetime_text", "document_text", "double_text", "json_text", "opaque",
           "parse", "time_text"]
