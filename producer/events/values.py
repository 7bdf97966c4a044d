"""Converting MySQL/MariaDB column values to the Avro values of :mod:`producer.events.avro_types`.

Input shapes
============
Converters accept the values of both readers.  Observed with MariaDB 10.11 (binlog
``ROW``/``FULL``, ``binlog_row_metadata=FULL``), pymysql 1.x and python-mysql-replication
1.0.17:

===================  ==========================================  ==============================================
type                 pymysql (snapshot SELECT)                   python-mysql-replication (binlog row event)
===================  ==========================================  ==============================================
integers             int, unsigned already unsigned              int; unsigned correct with FULL metadata (a
                                                                 negative value for an unsigned column is
                                                                 wrapped by 2**bits here, as Debezium does)
BIGINT UNSIGNED      int up to 18446744073709551615              int up to 18446744073709551615
DECIMAL              Decimal (scale as declared)                 Decimal (scale as declared)
FLOAT                float from text: 3.14                       float32 widened: 3.140000104904175
FLOAT(10,2)          1234.56                                     1234.56005859375
DOUBLE               float                                       float
BIT(n)               bytes, big-endian, ceil(n/8) long           str of '0'/'1', MSB first, n chars ('1010')
CHAR/VARCHAR/TEXT    str                                         str decoded with the column charset; bytes
                                                                 when Python has no codec (ucs2 -> raw bytes)
BINARY(n)            bytes, n long                               bytes with trailing 0x00 STRIPPED; '' (str)
                                                                 when all zero
VARBINARY/BLOB       bytes                                       bytes; '' (str, not b'') when empty
ENUM                 str ('' for the invalid-value index 0)      str ('' for index 0); None if the binlog has
                                                                 no ENUM metadata
SET                  str 'x,z' ('' when empty)                   python set {'x','z'} (unordered); an EMPTY
                                                                 set arrives as None with none_sources[col]
                                                                 == 'empty set'
JSON (MariaDB)       str, text as inserted                       str, text as inserted (JSON is LONGTEXT)
JSON (MySQL 8)       str, MySQL's normalised text                parsed tree: dict/list/int/float/bool/None/
                                                                 Decimal/datetime with bytes keys and bytes
                                                                 strings (from the library's source)
DATE                 datetime.date; '0000-00-00' and year-0      date; None for any zero part (none_sources:
                     dates as str                                'out of date range'); a date invalid for
                                                                 Python (ALLOW_INVALID_DATES, 2024-02-30)
                                                                 makes the library raise ValueError
TIME                 timedelta, exact                            timedelta; WRONG for negative values with a
                                                                 fractional part (see fix_binlog_negative_time)
DATETIME             naive datetime; zero values as str          naive datetime; None for zero parts
                     ('0000-00-00 00:00:00.000')
TIMESTAMP            naive datetime in the SESSION time zone;    naive datetime in UTC; the zero timestamp as
                     zero as str '0000-00-00 00:00:00'           datetime(1970, 1, 1, 0, 0)
YEAR                 int; 0 for 0000                             int; 1900 for 0000 (library adds 1900 to 0)
GEOMETRY, POINT...   bytes: 4-byte LE SRID + WKB                 bytes: 4-byte LE SRID + WKB
UUID (MariaDB)       str '6ccd780c-baba-1026-9564-5b8c656024db'  16 bytes big-endian, trailing 0x00 stripped
INET6 (MariaDB)      str '2001:db8::ff00:42:8329'                16 bytes, trailing 0x00 stripped
===================  ==========================================  ==============================================

Consequences for the readers:

* the snapshot reader must run ``SET time_zone = '+00:00'`` on its connection, because
  converters read naive TIMESTAMP datetimes as UTC (aware datetimes are converted);
* the binlog reader must build its converters with ``binlog=True`` (this applies
  :func:`fix_binlog_negative_time` to TIME values and reads top-level ``bytes`` of a
  ``json`` column as a MySQL binary-JSON string scalar), and should pass the row's
  ``none_sources`` to :meth:`RowConverter.convert` so an empty SET becomes ``''``
  instead of null.
"""

from __future__ import annotations

import base64
import codecs
import json
import re
import socket
import struct
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any, Callable, Mapping, Sequence

from common.errors import UnsupportedType
from producer.binlog.json_binary import JsonText, RawNumber, json_text
from producer.errors import ConversionError
from contract.type_table import DECIMAL20, DEFAULT_MODES, INTEGER_TYPES, TypeModes, family_of
from producer.events.avro_types import decimal_precision_scale, field_names
from producer.table_schema import ColumnDef, TableDef

__all__ = [
    "value_converter",
    "RowConverter",
    "canonical_json",
    "fix_binlog_negative_time",
    "days_from_civil",
    "python_codec",
]


# =============================================================================== helpers
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MICROS_PER_DAY = 86_400_000_000
_F32 = struct.Struct("<f")
_DECIMAL_CONTEXT = Context(prec=200, rounding=ROUND_HALF_EVEN)
_UTC = timezone.utc

_DATE_RE = re.compile(r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})\s*\Z")
_DATETIME_RE = re.compile(
    r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{0,6})\d*)?)?\s*\Z"
)
_TIME_RE = re.compile(r"\s*(-)?(\d+):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d{0,6})\d*)?\s*\Z")


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, no validation)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _text(v: Any) -> str:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("ascii", "replace")
    return str(v)


def _parse_date_days(v: Any) -> int | None:
    """Days since epoch of a 'YYYY-MM-DD' string; None for zero parts."""
    s = _text(v)
    m = _DATE_RE.match(s) or _DATETIME_RE.match(s)
    if not m:
        raise ValueError(f"not a DATE value: {v!r}")
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if y == 0 or mo == 0 or d == 0:
        return None
    return days_from_civil(y, mo, d)


def _parse_datetime(v: Any) -> tuple[int, int, int, int, int, int, int] | None:
    """(y, mo, d, h, mi, s, us) of a 'YYYY-MM-DD HH:MM:SS[.ffffff]' string; None for zero dates."""
    s = _text(v)
    m = _DATETIME_RE.match(s)
    if not m:
        raise ValueError(f"not a DATETIME/TIMESTAMP value: {v!r}")
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if y == 0 or mo == 0 or d == 0:
        return None
    h = int(m.group(4) or 0)
    mi = int(m.group(5) or 0)
    sec = int(m.group(6) or 0)
    frac = m.group(7) or ""
    us = int(frac.ljust(6, "0")) if frac else 0
    return y, mo, d, h, mi, sec, us


def _naive_utc(v: datetime) -> datetime:
    if v.tzinfo is not None:
        v = v.astimezone(_UTC).replace(tzinfo=None)
    return v


def _datetime_micros(v: datetime) -> int:
    if v.tzinfo is not None:
        v = _naive_utc(v)
    return ((v.toordinal() - _EPOCH_ORDINAL) * 86400 + v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000 + v.microsecond


def _timedelta_micros(v: timedelta) -> int:
    return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds


def fix_binlog_negative_time(v: timedelta) -> timedelta:
    """Undo python-mysql-replication 1.0.17's decoding error for negative TIME with fractions.

    The library returns ``-(floor(|t|) + 1s - frac(|t|))`` for a negative TIME ``t`` with a
    non-zero fractional part (observed: ``-00:00:00.000001`` -> ``-0.999999s``,
    ``-12:34:56.789`` -> ``-12:34:56.211``; ``.5`` happens to come out right).  The map is
    its own inverse, so applying it again restores the true value.  Values that are not
    negative or have no fraction are returned unchanged.
    """
    micros = _timedelta_micros(v)
    if micros >= 0 or micros % 1_000_000 == 0:
        return v
    mag = -micros
    whole = mag - mag % 1_000_000
    frac = mag - whole
    return timedelta(microseconds=-(whole + 1_000_000 - frac))


def _parse_time_micros(v: Any) -> int:
    s = _text(v)
    m = _TIME_RE.match(s)
    if not m:
        raise ValueError(f"not a TIME value: {v!r}")
    neg, h, mi, sec, frac = m.groups()
    us = int(frac.ljust(6, "0")) if frac else 0
    total = ((int(h) * 60 + int(mi)) * 60 + int(sec or 0)) * 1_000_000 + us
    return -total if neg else total


def _float32(v: float) -> float:
    """The shortest decimal float that has the same float32 value as ``v``."""
    f = _F32.unpack(_F32.pack(v))[0]
    if f != f or f in (float("inf"), float("-inf")):
        return f
    for digits in (6, 7, 8, 9):
        cand = float(f"{f:.{digits}g}")
        if _F32.unpack(_F32.pack(cand))[0] == f:
            return cand
    return f  # pragma: no cover - 9 significant digits always round-trip a float32


# character sets -> Python codecs
_CHARSET_CODECS = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "ascii": "ascii",
    "latin1": "cp1252", "latin2": "iso8859-2", "latin5": "iso8859-9", "latin7": "iso8859-13",
    "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257",
    "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "cp932": "cp932",
    "koi8r": "koi8-r", "koi8u": "koi8-u", "greek": "iso8859-7", "hebrew": "iso8859-8",
    "sjis": "shift_jis", "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "euc_kr",
    "gbk": "gbk", "gb2312": "gb2312", "gb18030": "gb18030", "big5": "big5",
    "tis620": "tis-620", "macroman": "mac-roman", "macce": "mac-latin2",
}


def _latin1_fallback(err: UnicodeDecodeError) -> tuple[str, int]:
    # MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined mapped to C1 controls.
    return err.object[err.start:err.end].decode("latin-1"), err.end


codecs.register_error("cdc_latin1_fallback", _latin1_fallback)


def python_codec(charset: str | None) -> tuple[str, str]:
    """(codec, errors) to decode text of a MySQL character set; unknown sets decode as UTF-8."""
    name = (charset or "utf8mb4").lower()
    codec = _CHARSET_CODECS.get(name)
    if codec is None:
        try:
            codec = codecs.lookup(name).name
        except LookupError:
            codec = "utf-8"
    # python-mysql-replication reports latin1 columns as "cp1252" (its Python codec name)
    return codec, ("cdc_latin1_fallback" if codec == "cp1252" else "replace")


# JSON
def _json_tree(o: Any) -> Any:
    """A MySQL binary-JSON tree from the binlog library made json.dumps-able."""
    t = type(o)
    if t is dict:
        return {(k.decode("utf-8", "replace") if type(k) is bytes else str(k)): _json_tree(x) for k, x in o.items()}
    if t is list or t is tuple:
        return [_json_tree(x) for x in o]
    if t is bytes or t is bytearray:
        return bytes(o).decode("utf-8", "replace")
    if t is Decimal:
        return int(o) if o == o.to_integral_value() and o.as_tuple().exponent >= 0 else float(o)
    if t is datetime:
        return o.strftime("%Y-%m-%d %H:%M:%S.%f")
    if t is date:
        return o.isoformat()
    if t is time:
        return o.strftime("%H:%M:%S.%f")
    if t is timedelta:
        us = _timedelta_micros(o)
        sign, us = ("-", -us) if us < 0 else ("", us)
        return f"{sign}{us // 3_600_000_000:02d}:{us // 60_000_000 % 60:02d}:{us // 1_000_000 % 60:02d}.{us % 1_000_000:06d}"
    return o


def _dump_json(o: Any) -> str:
    return json.dumps(o, ensure_ascii=False, separators=(", ", ": "), allow_nan=False)


def canonical_json(text: str) -> str:
    """JSON text in one canonical form: parsed and re-serialised MySQL-style.

    Keys keep their order (MySQL already sorts them, MariaDB keeps the inserted order in
    both the snapshot and the binlog), separators are ``", "`` and ``": "`` as in MySQL's
    own output, non-ASCII stays literal, numbers with a point or an exponent keep their text
    (a DECIMAL's digits, MySQL's ``1e20`` and ``0.0000001``: :class:`RawNumber`), so MySQL's
    own text (a snapshot's SELECT) comes out unchanged, as the binlog's does
    (:func:`producer.binlog.json_binary.json_text`).  Text that does not parse is returned unchanged.
    """
    try:
        return json_text(json.loads(text, parse_float=RawNumber))
    except (ValueError, TypeError):
        return text


# =============================================================================== converters
Converter = Callable[[Any], Any]


def passes_through(conv: Converter, t: type, low: int | None = None) -> Converter:
    """Mark ``conv`` as returning values of exact type ``t`` unchanged (ints from ``low`` on,
    when given), and None as None: whoever encodes may skip the call for those."""
    conv.passes_through = (t, low)  # type: ignore[attr-defined]
    return conv


def _int_converter(bits: int | None) -> Converter:
    if bits is None:
        def conv(v: Any) -> Any:
            return None if v is None else int(v)
        return passes_through(conv, int)
    wrap = 1 << bits

    def conv_unsigned(v: Any) -> Any:
        if v is None:
            return None
        v = int(v)
        return v + wrap if v < 0 else v
    return passes_through(conv_unsigned, int, 0)


def _decimal_converter(scale: int, unsigned_wrap: int | None = None) -> Converter:
    quantum = Decimal(1).scaleb(-scale)
    ctx = _DECIMAL_CONTEXT

    def conv(v: Any) -> Any:
        if v is None:
            return None
        if type(v) is not Decimal:
            if isinstance(v, int):
                if unsigned_wrap is not None and v < 0:
                    v += unsigned_wrap
                v = Decimal(v)
            elif isinstance(v, float):
                v = Decimal(repr(v))
            else:
                v = Decimal(_text(v).strip())
        return v.quantize(quantum, context=ctx)
    conv.decimal_scale = scale  # type: ignore[attr-defined] - a Decimal of this exponent is returned as it is
    return conv


def _float_converter(kind: str, scale: int | None) -> Converter:
    if kind == "float":
        def conv_f32(v: Any) -> Any:
            return None if v is None else _float32(float(v))
        return conv_f32
    if scale is not None:
        def conv_rounded(v: Any) -> Any:
            return None if v is None else round(float(v), scale)
        return conv_rounded

    def conv(v: Any) -> Any:
        return None if v is None else float(v)
    return conv


def _bit_int(v: Any) -> int:
    t = type(v)
    if t is str:
        return int(v, 2) if v else 0
    if t is bytes or t is bytearray:
        return int.from_bytes(v, "big")
    return int(v)


def _bit_converter(n: int) -> Converter:
    if n == 1:
        def conv_bool(v: Any) -> Any:
            return None if v is None else _bit_int(v) != 0
        return conv_bool
    nbytes = (n + 7) // 8

    def conv(v: Any) -> Any:
        return None if v is None else _bit_int(v).to_bytes(nbytes, "little")
    return conv


def _string_converter(col: ColumnDef) -> Converter:
    codec, errors = python_codec(col.character_set)

    def conv(v: Any) -> Any:
        if v is None or type(v) is str:
            return v
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v).decode(codec, errors)
        return str(v)
    return passes_through(conv, str)


def _bytes_converter(pad_to: int | None) -> Converter:
    def to_bytes(v: Any) -> bytes:
        if type(v) is bytes:
            return v
        if isinstance(v, str):  # the binlog library returns '' for empty binary values
            return v.encode("utf-8", "surrogateescape")
        return bytes(v)

    if not pad_to:
        def conv(v: Any) -> Any:
            return None if v is None else to_bytes(v)
        return conv

    def conv_padded(v: Any) -> Any:
        if v is None:
            return None
        b = to_bytes(v)
        return b + bytes(pad_to - len(b)) if len(b) < pad_to else b
    return conv_padded


def _enum_converter(col: ColumnDef) -> Converter:
    options = col.enum_values
    text = _string_converter(col)

    def conv(v: Any) -> Any:
        if v is None or type(v) is str:
            return v
        if isinstance(v, int):
            if v == 0:
                return ""
            if 1 <= v <= len(options):
                return options[v - 1]
            raise ValueError(f"ENUM index {v} out of range 1..{len(options)}")
        return text(v)
    return conv


def _set_converter(col: ColumnDef) -> Converter:
    options = col.enum_values
    text = _string_converter(col)

    def conv(v: Any) -> Any:
        if v is None or type(v) is str:
            return v
        if isinstance(v, (set, frozenset, list, tuple)):
            members = {text(x) for x in v}
            joined = ",".join(o for o in options if o in members)
            unknown = members.difference(options)
            if unknown:
                # MariaDB's catalog turns 4-byte characters of SET members into '?', so a
                # member may be missing from ``options``: keep it, after the known ones.
                joined = ",".join(filter(None, [joined, *sorted(unknown)]))
            return joined
        if isinstance(v, int):
            return ",".join(o for i, o in enumerate(options) if v >> i & 1)
        return text(v)
    return conv


def _json_converter(col: ColumnDef, binlog: bool) -> Converter:
    mysql_binary = binlog and col.data_type == "json"

    def conv(v: Any) -> Any:
        if v is None:
            return None
        t = type(v)
        if t is JsonText:  # (the binlog's binary JSON, already its text)
            return str(v)
        if t is str:
            return canonical_json(v)
        if t is bytes or t is bytearray:
            if mysql_binary:  # a top-level JSON string scalar from MySQL's binary JSON
                return _dump_json(bytes(v).decode("utf-8", "replace"))
            return canonical_json(bytes(v).decode("utf-8", "replace"))
        return _dump_json(_json_tree(v))
    return conv


def _date_converter() -> Converter:
    epoch = _EPOCH_ORDINAL

    def conv(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, date):  # date, and datetime (a date subclass)
            return v.toordinal() - epoch
        return _parse_date_days(v)
    conv.date_days = True  # type: ignore[attr-defined] - a date's days since 1970-01-01
    return conv


def _time_converter(binlog: bool) -> Converter:
    def conv(v: Any) -> Any:
        if v is None:
            return None
        if type(v) is timedelta:
            if binlog and v.days < 0 and v.microseconds:
                v = fix_binlog_negative_time(v)
            return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
        if isinstance(v, time):
            return (v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000 + v.microsecond
        if isinstance(v, timedelta):
            return _timedelta_micros(v)
        return _parse_time_micros(v)
    return conv


def _datetime_converter(millis: bool) -> Converter:
    def micros_of(v: Any) -> int | None:
        if isinstance(v, datetime):
            return _datetime_micros(v)
        if isinstance(v, date):
            return (v.toordinal() - _EPOCH_ORDINAL) * _MICROS_PER_DAY
        parts = _parse_datetime(v)
        if parts is None:
            return None
        y, mo, d, h, mi, s, us = parts
        return (days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1_000_000 + us

    if millis:
        def conv_ms(v: Any) -> Any:
            if v is None:
                return None
            us = micros_of(v)
            return None if us is None else us // 1000
        conv_ms.datetime_unit = 1000  # type: ignore[attr-defined] - see below
        return conv_ms

    def conv_us(v: Any) -> Any:
        return None if v is None else micros_of(v)
    # For a naive datetime: its microseconds since the epoch (wall clock as UTC), floor-divided by this.
    conv_us.datetime_unit = 1  # type: ignore[attr-defined]
    return conv_us


def _timestamp_converter(fsp: int) -> Converter:
    fsp = max(0, min(6, fsp))
    cut = 20 + fsp

    def fmt(v: datetime) -> str | None:
        if v.tzinfo is not None:
            v = _naive_utc(v)
        if v.year == 1970 and v.month == 1 and v.day == 1 and v.hour == 0 and v.minute == 0 and v.second == 0:
            # '0000-00-00 00:00:00' as the binlog library decodes it; never a valid TIMESTAMP
            return None
        if fsp:
            return v.isoformat(timespec="microseconds")[:cut] + "Z"
        return v.isoformat(timespec="seconds") + "Z"

    def conv(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, datetime):
            return fmt(v)
        parts = _parse_datetime(v)
        if parts is None:
            return None
        return fmt(datetime(*parts))
    return conv


def _year_converter() -> Converter:
    def conv(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, date):
            v = v.year
        v = int(v)
        return 0 if v == 1900 else v  # the binlog library reports YEAR 0000 as 1900
    return conv


def _split_geometry(v: Any) -> tuple[bytes, int | None]:
    b = v if type(v) is bytes else bytes(v)
    if len(b) < 5:
        raise ValueError(f"geometry value too short ({len(b)} bytes): {b!r}")
    srid = int.from_bytes(b[:4], "little", signed=True)
    return b[4:], (srid or None)


def _geometry_converter() -> Converter:
    def conv(v: Any) -> Any:
        if v is None:
            return None
        wkb, srid = _split_geometry(v)
        return {"wkb": wkb, "srid": srid}
    return conv


def float_vector(v: bytes) -> list[float]:
    """A VECTOR's value (its little-endian float32s, as the binlog and a SELECT give them) as
    its floats; refuses a length that is not a whole number of them."""
    if len(v) % 4:
        raise ValueError(f"a VECTOR value of {len(v)} bytes: not a whole number of float32s")
    return list(struct.unpack(f"<{len(v) // 4}f", v))


def _vector_converter() -> Converter:
    def conv(v: Any) -> Any:
        if v is None:
            return None
        return float_vector(v.encode("latin-1") if isinstance(v, str) else bytes(v))
    return conv


def _point_converter() -> Converter:
    def conv(v: Any) -> Any:
        if v is None:
            return None
        wkb, srid = _split_geometry(v)
        if len(wkb) < 21:
            raise ValueError(f"POINT WKB too short ({len(wkb)} bytes)")
        order = "<" if wkb[0] == 1 else ">"
        gtype = struct.unpack_from(order + "I", wkb, 1)[0]
        if gtype % 1000 != 1:
            raise ValueError(f"WKB geometry type {gtype} is not a POINT")
        x, y = struct.unpack_from(order + "dd", wkb, 5)
        return {"x": x, "y": y, "wkb": wkb, "srid": srid}
    return conv


def _fixed_bytes(v: Any, n: int) -> bytes:
    b = v if type(v) is bytes else bytes(v)
    return b + bytes(n - len(b)) if len(b) < n else b


def _uuid_converter() -> Converter:
    def conv(v: Any) -> Any:
        if v is None or type(v) is str:
            return v
        return str(uuid.UUID(bytes=_fixed_bytes(v, 16)))
    return conv


def _inet_converter(version: int) -> Converter:
    # socket.inet_ntop is libc's formatter, as the server's (IPv4-mapped -> '::ffff:1.2.3.4').
    size, family = (16, socket.AF_INET6) if version == 6 else (4, socket.AF_INET)

    def conv(v: Any) -> Any:
        if v is None or type(v) is str:
            return v
        return socket.inet_ntop(family, _fixed_bytes(v, size))
    return conv


def value_converter(col: ColumnDef, *, binlog: bool = False, modes: TypeModes = DEFAULT_MODES) -> Converter:
    """A function converting one value of ``col`` to its Avro value (None -> None), under the
    handling ``modes`` (:class:`contract.type_table.TypeModes`).

    Build once per column and call per value.  ``binlog=True`` for values decoded by
    python-mysql-replication (see the module docstring); the default suits pymysql.
    """
    family = family_of(col.data_type)
    make = _CONVERTERS.get(family) if family is not None else None
    if make is None:
        raise UnsupportedType(
            f"column {col.name!r}: no value converter for data type {col.data_type!r} ({col.column_type!r})"
        )
    convert = make(col, binlog, modes)
    return convert if col.mapping is None else col.mapping.wrap(convert, col)  # (producer/column_mappers.py)


def _integer_converter(col: ColumnDef, binlog: bool, modes: TypeModes) -> Converter:
    rule = INTEGER_TYPES[col.data_type.lower()]
    if rule.unsigned == DECIMAL20 and col.unsigned:
        if modes.bigint_unsigned == "long":
            return _wrapping_long_converter()
        return _decimal_converter(0, unsigned_wrap=1 << rule.bits)
    return _int_converter(rule.bits if col.unsigned else None)


def signed_long(v: int) -> int:
    """BIGINT UNSIGNED as Debezium's ``bigint.unsigned.handling.mode: long`` writes it: the 64
    bits as a signed long (values above 2**63-1 wrap to negative)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _wrapping_long_converter() -> Converter:
    def conv(v: Any) -> Any:
        return None if v is None else signed_long(int(v))
    return passes_through(conv, int)  # (a long's range passes unchanged; the fast paths' range check)


def _decimal_column_converter(col: ColumnDef, binlog: bool, modes: TypeModes) -> Converter:
    scale = decimal_precision_scale(col)[1]
    precise = _decimal_converter(scale)
    if modes.decimal == "double":
        def conv_double(v: Any) -> Any:
            return None if v is None else float(precise(v))
        return conv_double
    if modes.decimal == "string":
        def conv_string(v: Any) -> Any:
            return None if v is None else format(precise(v), "f")
        return conv_string
    return precise


def _binary_column_converter(col: ColumnDef, binlog: bool, modes: TypeModes) -> Converter:
    as_bytes = _bytes_converter(col.length if col.data_type.lower() == "binary" else None)
    text = BINARY_TEXT.get(modes.binary)
    if text is None:
        return as_bytes

    def conv(v: Any) -> Any:
        return None if v is None else text(as_bytes(v))
    return conv


#: binary.handling.mode's text of bytes (Debezium's: Base64 with padding, its URL-safe form, hex).
BINARY_TEXT: dict[str, Callable[[bytes], str]] = {
    "base64": lambda b: base64.b64encode(b).decode("ascii"),
    "base64-url-safe": lambda b: base64.urlsafe_b64encode(b).decode("ascii"),
    "hex": lambda b: b.hex(),
}


def _time_column_converter(col: ColumnDef, binlog: bool, modes: TypeModes) -> Converter:
    micros = _time_converter(binlog)
    if modes.time_precision != "connect":
        return micros

    def conv_millis(v: Any) -> Any:
        # Kafka Connect's Time holds 00:00:00 to 24:00:00: Debezium writes null outside it (MySQL's
        # TIME spans -838:59:59 to 838:59:59), and so the field is always nullable (avro_types).
        us = micros(v)
        return None if us is None or not 0 <= us <= _MICROS_PER_DAY else us // 1000
    return conv_millis


#: A column's converter, by its family (contract.type_table.SOURCE_TYPES): ``make(col, binlog, modes)``.
_CONVERTERS: dict[str, Callable[[ColumnDef, bool, TypeModes], Converter]] = {
    "integer": _integer_converter,
    "decimal": _decimal_column_converter,
    "float": lambda col, binlog, modes: _float_converter("float" if col.scale is None else "double", col.scale),
    "double": lambda col, binlog, modes: _float_converter("double", col.scale),
    "bit": lambda col, binlog, modes: _bit_converter(col.bit_length or 1),
    "string": lambda col, binlog, modes: _string_converter(col),
    "binary": _binary_column_converter,
    "enum": lambda col, binlog, modes: _enum_converter(col),
    "set": lambda col, binlog, modes: _set_converter(col),
    "json": lambda col, binlog, modes: _json_converter(col, binlog),
    "date": lambda col, binlog, modes: _date_converter(),
    "time": _time_column_converter,
    "datetime": lambda col, binlog, modes: _datetime_converter(millis=col.fsp <= 3 or modes.time_precision == "connect"),
    "timestamp": lambda col, binlog, modes: _timestamp_converter(col.fsp),
    "year": lambda col, binlog, modes: _year_converter(),
    "point": lambda col, binlog, modes: _point_converter(),
    "geometry": lambda col, binlog, modes: _geometry_converter(),
    "vector": lambda col, binlog, modes: _vector_converter(),
    "uuid": lambda col, binlog, modes: _uuid_converter(),
    "inet6": lambda col, binlog, modes: _inet_converter(6),
    "inet4": lambda col, binlog, modes: _inet_converter(4),
}


# =============================================================================== rows
EMPTY_SET = "empty set"  # python-mysql-replication's none_sources reason for an empty SET


def _empty_set(v: Any) -> str:
    return ""


def _short_repr(v: Any, limit: int = 120) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "..."


class RowConverter:
    """Converts a row dict ``{column name: value}`` into an Avro record dict.

    Every column of the table must be present and no other key is allowed: a missing or
    unknown column raises :class:`ConversionError` naming it (a table definition out of
    step with the data is a schema-change bug, never something to paper over).
    """

    def __init__(self, table: TableDef, *, binlog: bool = False, key_columns: Sequence[str] | None = None,
                 modes: TypeModes = DEFAULT_MODES):
        self.table = table
        self.binlog = binlog
        self.modes = modes
        self.field_names: dict[str, str] = field_names(table)
        self._plan = [(c.name, self.field_names[c.name], value_converter(c, binlog=binlog, modes=modes))
                      for c in table.columns]
        self._columns = frozenset(c.name for c in table.columns)
        self._set_fields = {c.name: self.field_names[c.name] for c in table.columns if c.data_type == "set"}
        # (a masked SET's empty set is the mask: producer/column_mappers.py)
        self._empty_set_values = {self.field_names[c.name]: c.mapping.wrap(_empty_set, c)(None)
                                  for c in table.columns if c.data_type == "set" and c.mapping is not None}
        key_names = list(table.primary_key if key_columns is None else key_columns)
        key_cols = table.key_columns(key_names)
        self.key_columns = [c.name for c in key_cols]
        convert_of = {name: conv for name, _, conv in self._plan}
        # The key schema names its fields among the key's columns only (key_record_schema):
        # `a-b` is `a_b` in a key without `a_b`, though `a_b_1` in a row that has both.
        key_fields = field_names(table, key_cols)
        self._key_plan = [(c.name, key_fields[c.name], convert_of[c.name]) for c in key_cols]
        self._key_set_fields = {c.name: key_fields[c.name] for c in key_cols if c.data_type == "set"}

    @property
    def plan(self) -> list[tuple[str, str, Converter]]:
        """``(column, Avro field, converter)`` of every column, in the table's order."""
        return list(self._plan)

    @property
    def key_plan(self) -> list[tuple[str, str, Converter]]:
        """The same for the key columns, in the key's order."""
        return list(self._key_plan)

    @property
    def has_sets(self) -> bool:
        """Whether a SET column is among the columns (``none_sources`` can matter)."""
        return bool(self._set_fields)

    def _missing_or_unknown(self, values: Mapping[str, Any]) -> ConversionError | None:
        missing = [n for n in self.table.column_names if n not in values]
        unknown = [k for k in values if k not in self._columns]
        if not missing and not unknown:
            return None
        parts = []
        if unknown:
            parts.append(f"unknown column(s) {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
        return ConversionError(f"row of {self.table.qualified_name}: {'; '.join(parts)}")

    def _run(self, plan: list, values: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        name = None
        try:
            for name, fname, conv in plan:
                out[fname] = conv(values[name])
        except Exception as exc:
            if name not in values:
                raise ConversionError(f"row of {self.table.qualified_name}: missing column {name!r}") from None
            col = self.table.column(name)
            raise ConversionError(
                f"{self.table.qualified_name}.{name} ({col.column_type}): "
                f"cannot convert {_short_repr(values[name])}: {type(exc).__name__}: {exc}"
            ) from exc
        return out

    def convert(self, values: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The Avro record of a full row.

        ``none_sources`` is python-mysql-replication's per-row map of why a value is None;
        with it, an empty SET (reported as None, reason ``'empty set'``) becomes ``''``.
        """
        out = self._run(self._plan, values)
        if len(values) != len(self._plan):
            err = self._missing_or_unknown(values)
            if err is not None:
                raise err
        if none_sources and self._set_fields:
            self._empty_sets(out, values, none_sources, self._set_fields, self._empty_set_values)
        return out

    @staticmethod
    def _empty_sets(out: dict[str, Any], values: Mapping[str, Any], none_sources: Mapping[str, str],
                    set_fields: Mapping[str, str], empty: Mapping[str, Any] | None = None) -> None:
        """An empty SET reported by the binlog as None (reason ``'empty set'``) is ``''``
        (``set_fields``: SET column -> its field in ``out``)."""
        for name, reason in none_sources.items():
            if reason == EMPTY_SET and values.get(name) is None:
                fname = set_fields.get(name)
                if fname is not None and fname in out:
                    out[fname] = empty.get(fname, "") if empty else ""

    def convert_key(self, values: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The Avro key record from a row (only the key columns are read); ``none_sources``
        as for :meth:`convert` (a SET key column may be the empty set)."""
        out = self._run(self._key_plan, values)
        if none_sources and self._key_set_fields:
            self._empty_sets(out, values, none_sources, self._key_set_fields)
        return out
