"""Value normalisation: one comparable form per source column *kind*, whatever side a value
comes from (the source, PostgreSQL, MySQL, a decoded changelog record).

Kinds (:func:`cdc.verify.spec.column_kind` of the source column):
``int`` (all integer types, BOOL, YEAR; BIGINT UNSIGNED is ``numeric`` in PostgreSQL),
``decimal`` (exact text, trailing zeros and exponent removed, ``-0`` is ``0``),
``float32`` (FLOAT: the float32 value, so PostgreSQL's shortest ``real`` text, MySQL's
``CAST(f AS DOUBLE)`` and the Avro float agree; drill-down allows a relative 1e-6),
``double`` (``repr`` of the float; FLOAT(M,D)/DOUBLE(M,D) rounded to D places as the
producer does), ``bit`` (an int: MySQL's big-endian bytes, PostgreSQL's ``bit(n)`` text
or ``boolean``, Avro's little-endian Bits), ``text`` (str, also ENUM, SET, UUID, INET),
``bytes`` (bytes/bytea/memoryview), ``json`` (parsed and dumped with sorted keys:
MySQL JSON, MariaDB's ``json_valid`` LONGTEXT, PostgreSQL ``jsonb``), ``date`` (ISO
text), ``time`` (microseconds: MySQL TIME timedelta, PostgreSQL interval or time),
``datetime`` and ``timestamp`` (naive UTC ``YYYY-MM-DD HH:MM:SS.ffffff``; aware values,
e.g. ``timestamptz``, are converted to UTC; every connection runs on UTC),
``geometry`` (the WKB; the source's 4-byte SRID prefix is dropped, as the sinks do).
MySQL's zero dates (``0000-00-00``, any zero part) count as NULL, as the producer emits
them.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

from producer.events.values import BINARY_TEXT, signed_long

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)
_F32 = struct.Struct("<f")


def canonical_decimal(v: Any) -> str:
    """Exact text of a decimal: no exponent, no trailing fractional zeros, ``-0`` is ``0``.

    Done on the digits (``Decimal.normalize`` would round to the context's 28 digits,
    DECIMAL(65,30) has 65).
    """
    if isinstance(v, Decimal):
        d = v
    elif isinstance(v, float):
        d = Decimal(repr(v))
    else:
        d = Decimal(str(v).strip())
    if not d.is_finite():
        return str(d)
    sign, digits, exp = d.as_tuple()
    ds = list(digits)
    while exp < 0 and len(ds) > 1 and ds[-1] == 0:
        ds.pop()
        exp += 1
    s = "".join(map(str, ds)).lstrip("0") or "0"
    if s == "0":
        return "0"
    if exp >= 0:
        s += "0" * exp
    else:
        n = -exp
        s = ("0." + "0" * (n - len(s)) + s) if len(s) <= n else (s[:-n] + "." + s[-n:])
    return ("-" if sign else "") + s


def _plain_float(f: float) -> Any:
    if f != f:
        return "NaN"
    if f == 0.0:
        return 0.0  # -0.0 is 0.0
    return f


def canonical_float32(v: Any) -> Any:
    """The float32 value of ``v`` as a Python float (3.14, 3.140000104904175 -> the same)."""
    f = float(v)
    try:
        f = _F32.unpack(_F32.pack(f))[0]
    except OverflowError:  # not a float32 at all: left as it is, it will differ
        pass
    return _plain_float(f)


def canonical_double(v: Any, scale: int | None = None) -> Any:
    f = float(v)
    if scale is not None and math.isfinite(f):
        f = round(f, scale)
    return _plain_float(f)


def canonical_json(v: Any) -> Any:
    """JSON as compact text with sorted keys and each number by its value (text that does not
    parse stays as it is): an integer of 64 bits exactly, any other number as a double, as
    MySQL's JSON holds them; an integral one written as an integer.  PostgreSQL's jsonb keeps
    numbers as numeric, so MySQL's ``1e+20`` or ``-0.0`` read back from it as
    ``100000000000000000000`` and ``0.0``: the same numbers here."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        v = bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, str):
        try:
            v = json.loads(v, parse_int=_json_int)
        except ValueError:
            return v
    return _json_text(v)


def _json_int(text: str) -> Any:
    n = int(text)
    return n if -(1 << 64) < n < 1 << 64 else float(text)


def _json_text(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ",".join(f"{_json_text(str(k))}:{_json_text(v[k])}" for k in sorted(v, key=str)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(map(_json_text, v)) + "]"
    if v is None or isinstance(v, (bool, str, int)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (float, Decimal)):
        f = float(v)
        if f.is_integer() and abs(f) < 1 << 64:
            return str(int(f))  # (-0.0 is 0)
        return repr(f) if math.isfinite(f) else json.dumps(str(v))
    return json.dumps(str(v), ensure_ascii=False)


def canonical_vector(v: Any) -> Any:
    """A float vector as a JSON array of its float32 values: MySQL's VECTOR bytes (little-endian
    float32s), a list (PostgreSQL's real[], a lake's list, the events' Avro array) or JSON text
    (the MySQL sink's column)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        if len(b) % 4:
            return b  # not a vector: left as it is, it will differ
        v = struct.unpack(f"<{len(b) // 4}f", b)
    elif isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return v
    try:
        return json.dumps([canonical_float32(x) for x in v], separators=(",", ":"))
    except (TypeError, ValueError):
        return str(v)


def _zero_date_text(s: str) -> bool:
    """``0000-00-00``, ``2024-00-10``...: MySQL's zero dates (the producer emits NULL)."""
    m = re.match(r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})", s)
    return bool(m) and 0 in (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _dt_text(d: datetime) -> str:
    if d.tzinfo is not None:
        d = d.astimezone(_UTC).replace(tzinfo=None)
    return d.isoformat(sep=" ", timespec="microseconds")


def canonical_datetime(v: Any) -> Any:
    """Naive UTC ``YYYY-MM-DD HH:MM:SS.ffffff`` (aware values converted to UTC)."""
    if isinstance(v, datetime):
        return _dt_text(v)
    if isinstance(v, date):
        return _dt_text(datetime(v.year, v.month, v.day))
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    if _zero_date_text(s):
        return None
    try:
        return _dt_text(datetime.fromisoformat(s.strip()))
    except ValueError:
        return s


def canonical_date(v: Any) -> Any:
    if isinstance(v, datetime):
        v = _dt_text(v)[:10]
        return v
    if isinstance(v, date):
        return v.isoformat()
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    if _zero_date_text(s):
        return None
    try:
        return date.fromisoformat(s.strip()[:10]).isoformat()
    except ValueError:
        return s


_TIME_RE = re.compile(r"\s*(-)?(\d+):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d{0,6})\d*)?\s*\Z")


def canonical_time(v: Any) -> Any:
    """Microseconds (negative and above 24 h allowed, as MySQL TIME)."""
    if isinstance(v, timedelta):
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, dtime):
        return (v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000 + v.microsecond
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    m = _TIME_RE.match(s)
    if not m:
        return s
    neg, h, mi, sec, frac = m.groups()
    total = ((int(h) * 60 + int(mi)) * 60 + int(sec or 0)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    return -total if neg else total


def canonical_int(v: Any) -> Any:
    if isinstance(v, int):
        return int(v)
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else canonical_decimal(v)
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if isinstance(v, date):  # YEAR read as a date by some drivers
        return v.year
    try:
        return int(str(v).strip())
    except ValueError:
        return str(v)


def canonical_bits(v: Any) -> Any:
    """BIT(n) as its number: MySQL bytes (big-endian), PostgreSQL bit text or boolean."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return int.from_bytes(bytes(v), "big")
    if isinstance(v, str):
        s = v.strip()
        if s and set(s) <= {"0", "1"}:
            return int(s, 2)
        return s
    return int(v)


def canonical_bytes(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return bytes(v)


def canonical_text(v: Any, members: Sequence[str] = ()) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, (set, frozenset)):  # a SET as a Python set: MySQL's order is the definition order
        order = {m: i for i, m in enumerate(members)}
        return ",".join(sorted((str(x) for x in v), key=lambda m: (order.get(m, len(order)), m)))
    return str(v)


def _generic(v: Any) -> Any:
    """Any value by its Python type (columns of a type verify does not know)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, str)):
        return v
    if isinstance(v, Decimal):
        return canonical_decimal(v)
    if isinstance(v, float):
        return _plain_float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, datetime):
        return _dt_text(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, (timedelta, dtime)):
        return canonical_time(v)
    if isinstance(v, (dict, list)):
        return canonical_json(v)
    return str(v)


def normalise(kind: str, v: Any, *, scale: int | None = None, members: Sequence[str] = ()) -> Any:
    """The comparable form of a value read from MySQL/MariaDB or PostgreSQL (None stays None).

    ``kind`` is :func:`column_kind` of the source column; ``scale`` the D of FLOAT(M,D) /
    DOUBLE(M,D); ``members`` the SET members (for a SET returned as a Python set).
    """
    if v is None:
        return None
    if kind == "int":
        return canonical_int(v)
    if kind == "decimal":
        try:
            return canonical_decimal(v)
        except (InvalidOperation, ValueError):
            return str(v)
    if kind == "float32":
        return canonical_float32(v) if scale is None else canonical_double(v, scale)
    if kind == "double":
        return canonical_double(v, scale)
    if kind == "bit":
        return canonical_bits(v)
    if kind == "text":
        return canonical_text(v, members)
    if kind == "bytes" or kind == "geometry":
        return canonical_bytes(v)
    if kind == "json":
        return canonical_json(v)
    if kind == "vector":
        return canonical_vector(v)
    if kind == "date":
        return canonical_date(v)
    if kind == "time":
        return canonical_time(v)
    if kind in ("datetime", "timestamp"):
        return canonical_datetime(v)
    return _generic(v)


def normalise_avro(kind: str, v: Any, *, fsp: int = 0, scale: int | None = None, members: Sequence[str] = ()) -> Any:
    """The comparable form of a decoded changelog value (Debezium/Avro representation).

    DATE is days since 1970-01-01, TIME microseconds, DATETIME milliseconds (fsp <= 3)
    or microseconds since the epoch, TIMESTAMP ISO-8601 text in UTC, BIT(1) a boolean,
    BIT(n) little-endian bytes, geometry a ``{wkb, srid}`` record; JSON-format records
    carry bytes as base64 and decimals as text.
    """
    if v is None:
        return None
    if kind == "bit":
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, str):
            v = base64.b64decode(v)
        if isinstance(v, (bytes, bytearray)):
            return int.from_bytes(bytes(v), "little")
        return int(v)
    if kind in ("bytes", "geometry"):
        if isinstance(v, dict):
            v = v.get("wkb")
            if v is None:
                return None
        if isinstance(v, str):
            v = base64.b64decode(v)
        return bytes(v)
    if kind == "date" and isinstance(v, int):
        try:
            return (_EPOCH_DATE + timedelta(days=v)).isoformat()
        except OverflowError:
            return v
    if kind == "datetime" and isinstance(v, int):
        try:
            return _dt_text(_EPOCH + (timedelta(milliseconds=v) if fsp <= 3 else timedelta(microseconds=v)))
        except OverflowError:
            return v
    return normalise(kind, v, scale=scale, members=members)


def source_value(kind: str, v: Any, **kw: Any) -> Any:
    """A value read from the source table (the SRID prefix of geometries dropped)."""
    if kind == "geometry" and v is not None:
        b = bytes(v)
        return b[4:] if len(b) > 4 else b
    return normalise(kind, v, **kw)


# --- Debezium's handling modes: what the events carry of a source value --------------------------
#: How a column's source value is written under a handling mode (cdc.verify.spec.written_as), and
#: whether the source value can be found again from the written one (a key column must).
WRITTEN = {
    "double": False,          # decimal.handling.mode: double
    "long": True,             # bigint.unsigned.handling.mode: long (wraps above 2**63-1)
    "base64": True,           # binary.handling.mode
    "base64-url-safe": True,
    "hex": True,
    "time_ms": False,         # time.precision.mode: connect (ms of the day; null outside a day)
    "datetime_ms": False,     # time.precision.mode: connect (DATETIME to the millisecond)
}


def as_written(how: str, v: Any) -> Any:
    """A source value as the events carry it under the handling mode ``how`` (:data:`WRITTEN`)."""
    if v is None or not how:
        return v
    if how == "double":
        return float(Decimal(v) if not isinstance(v, (int, float, Decimal)) else v)
    if how == "long":
        return signed_long(int(v))
    if how in BINARY_TEXT:  # (the producer's own rules: producer.events.values)
        return BINARY_TEXT[how](bytes(v) if not isinstance(v, str) else v.encode("utf-8", "surrogateescape"))
    if how == "time_ms":
        us = canonical_time(v)
        if not isinstance(us, int) or not 0 <= us <= 86_400_000_000:
            return None
        return us - us % 1000
    if how == "datetime_ms" and isinstance(v, datetime):
        return v.replace(microsecond=v.microsecond - v.microsecond % 1000)
    return v


def as_source(how: str, canon: Any) -> Any:
    """The source value of a written key value (the modes :data:`WRITTEN` can find it again)."""
    if canon is None or not how:
        return canon
    if how == "long":
        return canon + (1 << 64) if canon < 0 else canon
    if how == "hex":
        return bytes.fromhex(canon)
    if how in ("base64", "base64-url-safe"):
        return (base64.b64decode if how == "base64" else base64.urlsafe_b64decode)(canon)
    raise ValueError(f"a key written as {how} cannot be looked up in the source")
