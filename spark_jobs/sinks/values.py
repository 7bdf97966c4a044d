"""Column values: Avro values (as fastavro decodes them) -> the PostgreSQL and MySQL
parameters of each column kind, and reading them from a row.

* Times (``MicroTime``) are written as ``[-]H:MM:SS.ffffff`` text, which both servers read
  exactly (pymysql's own ``timedelta`` literal is wrong for negative values).
* ``Timestamp``/``MicroTimestamp`` carry the DATETIME wall clock read as UTC: they become
  naive datetimes.  ``ZonedTimestamp`` is an instant: an aware UTC datetime for PostgreSQL;
  for MySQL a naive UTC datetime written on a ``time_zone = '+00:00'`` session.
* Geometry keeps the WKB only (the SRID is not stored).  A ``Point`` without WKB gets one
  built from ``x``/``y``.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from typing import Any

from common.errors import UnsupportedType
from contract.conversion_rules import time_fields
from spark_jobs.errors import SinkError
from spark_jobs.sinks.layout import SinkColumn, TableLayout, as_sink_column

__all__ = [
    "postgres_converter",
    "mysql_converter",
    "is_pass_through",
    "days_to_date",
    "micros_to_timedelta",
    "millis_to_datetime",
    "micros_to_datetime",
    "parse_zoned_timestamp",
    "format_time_micros",
    "bits_to_int",
    "bits_to_text",
    "geometry_wkb",
    "row_getter",
    "row_error",
]

_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
_UTC = timezone.utc


def days_to_date(days: int) -> date:
    """io.debezium.time.Date (days since 1970-01-01) -> date."""
    try:
        return _EPOCH_DATE + timedelta(days=days)
    except OverflowError:
        raise ValueError(f"date {days} days from 1970-01-01 is outside years 1..9999") from None


def micros_to_timedelta(us: int) -> timedelta:
    """io.debezium.time.MicroTime -> timedelta (negative and > 24 h allowed)."""
    return timedelta(microseconds=us)


def millis_to_datetime(ms: int) -> datetime:
    """io.debezium.time.Timestamp (ms since epoch, wall clock as UTC) -> naive datetime."""
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        raise ValueError(f"timestamp {ms} ms is outside years 1..9999") from None


def micros_to_datetime(us: int) -> datetime:
    """io.debezium.time.MicroTimestamp (us since epoch, wall clock as UTC) -> naive datetime."""
    try:
        return _EPOCH + timedelta(microseconds=us)
    except OverflowError:
        raise ValueError(f"timestamp {us} us is outside years 1..9999") from None


def parse_zoned_timestamp(text: str) -> datetime:
    """io.debezium.time.ZonedTimestamp (ISO-8601 with offset or ``Z``) -> aware datetime in UTC."""
    try:
        v = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO-8601 timestamp: {text!r}") from None
    if v.tzinfo is None:
        v = v.replace(tzinfo=_UTC)
    return v.astimezone(_UTC)


def format_time_micros(us: int) -> str:
    """Microseconds as ``[-]H:MM:SS.ffffff``: the exact TIME literal (and interval input), from
    :func:`contract.conversion_rules.time_fields` (the rule the native COPY encoder runs)."""
    fields = time_fields(us, 1)
    sign = "-" if fields < 0 else ""
    f = -fields if fields < 0 else fields
    hours, minutes, seconds = f // 10_000_000_000, f // 100_000_000 % 100, f // 1_000_000 % 100
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{f % 1_000_000:06d}"


def bits_to_int(b: bytes) -> int:
    """io.debezium.data.Bits (little-endian bytes) -> the unsigned number."""
    return int.from_bytes(b, "little")


def bits_to_text(b: bytes, n: int) -> str:
    """io.debezium.data.Bits -> PostgreSQL bit(n) text, most significant bit first."""
    v = int.from_bytes(b, "little")
    if v >> n:
        raise ValueError(f"bit value {b!r} does not fit in {n} bits")
    return format(v, f"0{n}b")


def geometry_wkb(v: Mapping[str, Any]) -> bytes:
    """The WKB of a Debezium Geometry/Point record (a Point without WKB gets one from x/y)."""
    wkb = v.get("wkb")
    if wkb is not None:
        return bytes(wkb)
    if "x" in v and "y" in v:
        return struct.pack("<BIdd", 1, 1, float(v["x"]), float(v["y"]))
    raise ValueError(f"geometry value without WKB: {v!r}")


def _nullable(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        return None if v is None else fn(v)
    conv.__name__ = getattr(fn, "__name__", "conv")
    return conv


def _identity(v: Any) -> Any:
    return v


def is_pass_through(conv: Callable[[Any], Any]) -> bool:
    """Whether a converter returns its input unchanged (callers may skip calling it)."""
    return conv is _identity


def _time_ms_text(ms: int) -> str:
    return format_time_micros(ms * 1000)


#: Per temporal kind, the number its Avro value is (days; ms or us of the day; ms or us since the
#: epoch): a value of an Avro logical type (date, time-millis, timestamp-micros, ...) read by a
#: reader that converts them (fastavro) is a date, time or datetime object, turned back into it.
_UNITS = {"date": None, "time_ms": 1000, "time": 1, "timestamp_ms": 1000, "timestamp_us": 1}


def temporal_number(kind: str, v: Any) -> Any:
    """``v`` as the number its kind's Avro value is (:data:`_UNITS`); a number stays as it is."""
    if isinstance(v, (int, float)) or v is None or kind not in _UNITS:
        return v
    unit = _UNITS[kind]
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        us = (v - _EPOCH) // timedelta(microseconds=1)
        return us // unit if unit else us // 86_400_000_000
    if isinstance(v, date):
        return (v - _EPOCH_DATE).days
    if isinstance(v, dtime):
        us = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
        return us // (unit or 1)
    return v


def _numbered(kind: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` of :func:`temporal_number`: a converter that takes the value as a number or as the
    object a converting reader made of it."""
    def conv(v: Any) -> Any:
        return fn(temporal_number(kind, v))
    conv.__name__ = getattr(fn, "__name__", "conv")
    return conv


def _common_converter(c: SinkColumn) -> Callable[[Any], Any] | None:
    k = c.kind
    if k in ("smallint", "int", "long", "year", "float", "double", "boolean", "string", "enum", "set", "json",
             "decimal"):
        return _identity
    if k == "bytes":
        return _nullable(bytes)
    if k == "date":
        return _nullable(_numbered(k, days_to_date))
    if k == "time":
        return _nullable(_numbered(k, format_time_micros))
    if k == "time_ms":
        return _nullable(_numbered(k, _time_ms_text))
    if k == "timestamp_ms":
        return _nullable(_numbered(k, millis_to_datetime))
    if k == "timestamp_us":
        return _nullable(_numbered(k, micros_to_datetime))
    if k in ("geometry", "point"):
        return _nullable(geometry_wkb)
    return None


def postgres_converter(col: Any) -> Callable[[Any], Any]:
    """Avro value -> PostgreSQL parameter (``None`` stays ``None``)."""
    c = as_sink_column(col)
    if c.kind == "bits":
        n = c.length or 1
        return _nullable(lambda b: bits_to_text(b, n))
    if c.kind == "zoned_timestamp":
        return _nullable(parse_zoned_timestamp)
    if c.kind == "float_vector":  # (a list: psycopg writes it as an array)
        return _identity
    conv = _common_converter(c)
    if conv is None:
        raise UnsupportedType(f"column {c.name!r}: no converter for kind {c.kind!r}")
    return conv


def vector_json(v: Any) -> str:
    """A float vector (Avro's array of floats) as a JSON array: MySQL's and MariaDB's sink column."""
    return "[" + ",".join(map(repr, map(float, v))) + "]"


def _naive_utc(text: str) -> datetime:
    return parse_zoned_timestamp(text).replace(tzinfo=None)


def mysql_converter(col: Any) -> Callable[[Any], Any]:
    """Avro value -> MySQL parameter (``None`` stays ``None``); the session is on UTC."""
    c = as_sink_column(col)
    if c.kind == "bits":
        return _nullable(bits_to_int)
    if c.kind == "zoned_timestamp":
        return _nullable(_naive_utc)
    if c.kind == "float_vector":
        return _nullable(vector_json)
    conv = _common_converter(c)
    if conv is None:
        raise UnsupportedType(f"column {c.name!r}: no converter for kind {c.kind!r}")
    return conv


# =============================================================================== rows
def row_getter(fields: list[str]):
    """A function row dict -> tuple of the ``fields``' values (operator.itemgetter, C speed)."""
    if len(fields) == 1:
        f = fields[0]
        return lambda row: (row[f],)
    return operator.itemgetter(*fields)


def row_error(table: str, layout: TableLayout, converters: list, ch: Any, exc: Exception) -> SinkError:
    """The error for a row that could not be converted, naming the column."""
    row = ch.row
    for conv, c in zip(converters, layout.columns):
        if not hasattr(row, "__contains__") or c.field not in row:
            return SinkError(f"{table}: the row at {ch.position} has no field {c.field!r}")
        try:
            conv(row[c.field])
        except Exception as inner:
            return SinkError(f"{table}.{c.name}: cannot write {row[c.field]!r} (position {ch.position}): {inner}")
    return SinkError(f"{table}: cannot write the row at {ch.position}: {exc}")
