"""Row images of binlog rows events, decoded like python-mysql-replication but faster.

python-mysql-replication decodes every value through a chain of type checks, bitmap
look-ups and small reads, which makes it the slowest step of the producer.  A
:class:`RowDecoder` is compiled once per table map: one reader per column, chosen up
front, reading from the event's bytes by offset.  Each reader transcribes the library's
own (python-mysql-replication 1.0) code for that type -- same byte interpretation, same
Python values, same ``none_sources`` reasons, including the library's per-event memory
of them -- so the rows are the ones ``RowsEvent.rows`` gives; differential tests check
it on the same bytes.

Only what is transcribed is decoded here: integers, YEAR, FLOAT/DOUBLE, DECIMAL, CHAR,
VARCHAR, TEXT/BLOB, ENUM, SET, BIT, DATE, TIME2, DATETIME2, TIMESTAMP2, the pre-5.6 TIME,
DATETIME and TIMESTAMP, GEOMETRY and MySQL's binary JSON (by the library's public JSON
parser), full row images (``binlog_row_image=FULL``), named columns.  On the library's reader
(``library_reader``) any other table (NEWDATE, the old DECIMAL...) or event kind, and any
row the fast path cannot read (an error of any sort), is decoded by the library itself;
the own client's reader refuses them, naming the table and column.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import functools
import struct
from typing import Any, Callable

from pymysqlreplication.constants import BINLOG, NONE_SOURCE
from pymysqlreplication.constants import FIELD_TYPE as T
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

from common.errors import UnsupportedType
from common.generated_code import run_generated
from contract.conversion_rules import datetime2_fraction, packed_date_days, packed_decimal, packed_time_seconds
from producer.binlog.binlog_events import VECTOR
from producer.binlog.json_binary import document_text

#: ``reader(buf, offset, reasons) -> (value, next offset)``; ``reasons`` is the event's
#: column name -> why-None map (python-mysql-replication keeps one per event).
Reader = Callable[[bytes, int, dict], tuple[Any, int]]

_EVENT_TYPES = frozenset({BINLOG.WRITE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.DELETE_ROWS_EVENT_V1,
                          BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2})
_COMPRESSED_BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def _struct(fmt: str) -> Reader:
    s = struct.Struct(fmt)
    size, unpack = s.size, s.unpack_from

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        return unpack(buf, off)[0], off + size
    read.inline = ("struct", unpack, size, fmt)  # type: ignore[attr-defined]
    return read


def _uint_le(size: int) -> Callable[[bytes, int], int]:
    """``packet.read_uint_by_size`` (little-endian unsigned) of 1 to 8 bytes."""
    if not 1 <= size <= 8:
        raise UnsupportedType(f"integer of {size} bytes")
    return lambda buf, off: int.from_bytes(buf[off:off + size], "little")


def _int_be(buf: bytes, off: int, size: int) -> int:
    """``packet.read_int_be_by_size`` for 1 to 4 bytes: big-endian, signed."""
    return int.from_bytes(buf[off:off + size], "big", signed=True)


def _slice(binary: int, start: int, size: int, data_length: int) -> int:
    """``RowsEvent.__read_binary_slice``."""
    binary = binary >> data_length - (start + size)
    mask = (1 << size) - 1
    return binary & mask


def _int24(unsigned: bool) -> Reader:
    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        a, b, c = buf[off], buf[off + 1], buf[off + 2]
        if unsigned:
            return a + (b << 8) + (c << 16), off + 3
        res = a | (b << 8) | (c << 16)
        if res >= 0x800000:
            res -= 0x1000000
        return res, off + 3
    return read


def _year(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
    return buf[off] + 1900, off + 1


def _decode_with(col) -> Callable[[bytes], Any]:
    """``RowsEvent.__read_string``'s decoding of the bytes (strict errors)."""
    if col.character_set_name is None:
        return _decoding(lambda b: b.decode(errors="strict"), "utf-8")
    encoding = RowsEvent.charset_to_encoding(col.character_set_name)
    try:
        codecs.lookup(encoding)
    except LookupError:
        # The library keeps the bytes of an encoding Python lacks -- but Python decodes
        # empty bytes to "" without looking the encoding up.
        return lambda b: b if b else ""
    return _decoding(lambda b: b.decode(encoding, "strict"), encoding)


def _decoding(decode: Callable[[bytes], Any], encoding: str) -> Callable[[bytes], Any]:
    decode.encoding = encoding  # type: ignore[attr-defined] - ``b.decode(encoding, "strict")``
    return decode


def _string(col, length_size: int) -> Reader:
    length_of, decode = _uint_le(length_size), _decode_with(col)

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        n = length_of(buf, off)
        off += length_size
        return decode(buf[off:off + n]), off + n
    read.inline = ("string", length_size, decode)  # type: ignore[attr-defined]
    return read


def _pascal_bytes(length_size: int) -> Reader:
    length_of = _uint_le(length_size)

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        n = length_of(buf, off)
        off += length_size
        return buf[off:off + n], off + n
    return read


def _json(length_size: int) -> Reader:
    """MySQL's binary JSON: its length, then the document as its text
    (:func:`producer.binlog.json_binary.document_text`: every scalar as MySQL has it, a TIME
    beyond 23 hours and a DECIMAL's digits included, which python-mysql-replication's
    ``parse_json`` cannot give); an empty value is None.  A document that is JSON's ``null`` is
    the text ``"null"``, as a snapshot's SELECT reads it: not SQL NULL, which the row's null
    bitmap says."""
    length_of = _uint_le(length_size)

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        n = length_of(buf, off)
        off += length_size
        if not n:
            return None, off
        if off + n > len(buf):
            raise ValueError("truncated JSON value")
        return document_text(buf[off:off + n]), off + n
    return read


def _enum(col) -> Reader:
    index_of, size, values = _uint_le(col.size), col.size, col.enum_values

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        i = index_of(buf, off)
        return (values[i] if values else None), off + size
    return read


def _set(col) -> Reader:
    mask_of, size, values, name = _uint_le(col.size), col.size, col.set_values, col.name

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        bit_mask = mask_of(buf, off)
        off += size
        if values:
            ret = {val for idx, val in enumerate(values) if bit_mask & (1 << idx)}
            if ret:
                return ret, off
        reasons[name] = NONE_SOURCE.EMPTY_SET
        return None, off
    return read


def _bit(col) -> Reader:
    nbytes, bits = col.bytes, col.bits
    # Bits kept of each byte: the first holds the remainder (RowsEvent.__read_bit).
    ends = [(bits if nbytes == 1 else (bits % 8 or 8)) if i == 0 else 8 for i in range(nbytes)]

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        resp = "".join(format(buf[off + i] & ((1 << end) - 1), f"0{end}b") for i, end in enumerate(ends))
        return resp, off + nbytes
    return read


def _decimal_layout(col) -> tuple[int, int, int, int, int, int, int]:
    """(size, head bytes, tail bytes, digits of the head and tail groups, whole groups of
    the integral and fractional parts) of a DECIMAL's binary form."""
    integral = col.precision - col.decimals
    uncomp_integral = int(integral / 9)
    uncomp_fractional = int(col.decimals / 9)
    comp_integral = integral - (uncomp_integral * 9)
    comp_fractional = col.decimals - (uncomp_fractional * 9)
    head, tail = _COMPRESSED_BYTES[comp_integral], _COMPRESSED_BYTES[comp_fractional]
    size = head + 4 * (uncomp_integral + uncomp_fractional) + tail
    return size, head, tail, comp_integral, comp_fractional, uncomp_integral, uncomp_fractional


def decimal_size(col) -> int:
    """The bytes of a DECIMAL column's packed form."""
    return _decimal_layout(col)[0]


def decimal_code(col, out: str, fail: str) -> tuple[list[str], int, dict[str, Any]]:
    """``(lines, size, names)``: Python statements (unindented) that set ``out`` to the DECIMAL at
    ``buf[off:]`` as its unscaled integer (its digits, signed; scale ``col.decimals``) by
    :func:`contract.conversion_rules.packed_decimal` (the rule the native encoder runs), and that
    evaluate ``fail`` (which must raise) where a group is out of its range, which the library
    reads as a string of its own (:func:`_new_decimal` then builds that).  ``names``: what the
    lines use.  They neither check nor move ``off``: the caller checks the row's end."""
    lines = [f"{out} = _packed_decimal(buf, off, {col.precision}, {col.decimals})",
             f"if {out} is None:",
             f"    {fail}"]
    return lines, decimal_size(col), {"_packed_decimal": packed_decimal}


def decimal_unscaled(col) -> tuple[int, Callable[[bytes, int], int | None]]:
    """``(size, unscaled)``: ``unscaled(buf, off)`` is :func:`decimal_code`'s integer, or None
    where it fails; a truncated value raises ValueError."""
    lines, size, env = decimal_code(col, "u", "return None")
    code = ["def unscaled(buf, off):",
            f"    if len(buf) - off < {size}:",
            "        raise ValueError('truncated DECIMAL')",
            *("    " + line for line in lines),
            "    return u"]
    run_generated("\n".join(code), "DECIMAL reader", env)
    return size, env["unscaled"]


def _new_decimal(col) -> Reader:
    size, head, tail, comp_integral, comp_fractional, uncomp_integral, uncomp_fractional = _decimal_layout(col)
    _, unscaled = decimal_unscaled(col)
    Decimal = decimal.Decimal
    scale = col.decimals
    negative_zero = Decimal(f"-0E-{scale}")

    def read_slow(buf: bytes, off: int) -> Any:
        first = buf[off]
        if first & 0x80 != 0:
            res, mask = "", 0
        else:
            res, mask = "-", -1
        data = bytes((first ^ 0x80,)) + buf[off + 1:off + size]
        p = 0
        if head > 0:
            res += str(_int_be(data, 0, head) ^ mask)
            p = head
        for _ in range(uncomp_integral):
            res += f"{_int_be(data, p, 4) ^ mask:09d}"
            p += 4
        res += "."
        for _ in range(uncomp_fractional):
            res += f"{_int_be(data, p, 4) ^ mask:09d}"
            p += 4
        if tail > 0:
            res += f"{_int_be(data, p, tail) ^ mask:0{comp_fractional}d}"
        return Decimal(res)

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        """The string the library builds, when every group is in range (else built that way)."""
        u = unscaled(buf, off)
        if u is None:
            return read_slow(buf, off), off + size
        if u == 0 and not buf[off] & 0x80:  # a negative zero keeps its sign, as in the library's string
            return negative_zero, off + size
        return Decimal(f"{u}E-{scale}"), off + size
    return read


def _fsp(col) -> tuple[int, Callable[[bytes, int], int]]:
    """``RowsEvent.__read_fsp``: (bytes used, reader of the microseconds)."""
    fsp = col.fsp
    size = 1 if fsp in (1, 2) else 2 if fsp in (3, 4) else 3 if fsp in (5, 6) else 0
    if size == 0:
        return 0, lambda buf, off: 0
    odd, scale = fsp % 2, 10 ** (6 - fsp)

    def micros(buf: bytes, off: int) -> int:
        microsecond = _int_be(buf, off, size)
        if odd:
            microsecond = int(microsecond / 10)
        return microsecond * scale
    return size, micros


def _datetime2(col) -> Reader:
    fsp_size, micros = _fsp(col)
    name, out_of_range = col.name, NONE_SOURCE.OUT_OF_DATETIME2_RANGE
    new = datetime.datetime

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        data = int.from_bytes(buf[off:off + 5], "big")
        year_month = data >> 22 & 0x1FFFF
        if fsp_size:
            microsecond = micros(buf, off + 5)
        else:
            microsecond = 0
        if 0 <= microsecond <= 999_999:  # (else as the library: built, then replaced)
            try:
                return (new(year_month // 13, year_month % 13, data >> 17 & 31, data >> 12 & 31, data >> 6 & 63,
                            data & 63, microsecond if microsecond > 0 else 0), off + 5 + fsp_size)
            except ValueError:
                reasons[name] = out_of_range
                return None, off + 5 + fsp_size
        try:
            t = new(year=int(year_month / 13), month=year_month % 13, day=_slice(data, 18, 5, 40),
                    hour=_slice(data, 23, 5, 40), minute=_slice(data, 28, 6, 40), second=_slice(data, 34, 6, 40))
        except ValueError:
            reasons[name] = out_of_range
            return None, off + 5 + fsp_size
        microsecond = micros(buf, off + 5)
        if microsecond > 0:
            t = t.replace(microsecond=microsecond)
        return t, off + 5 + fsp_size
    return read


class EpochSeconds(dict):
    """Seconds since 1970-01-01 of the first second of a DATETIME2's date, by the date's
    packed bits (``data >> 17``: year*13+month, day); False for a date the decoder refuses (a
    zero or invalid one): a cache of :func:`contract.conversion_rules.packed_date_days` (the
    rule the native encoder runs), filled by :meth:`of`, bounded."""

    def of(self, ymd: int) -> int | bool:
        days = packed_date_days(ymd)
        seconds = False if days is None else days * 86400
        if len(self) >= 65_536:
            self.clear()
        self[ymd] = seconds
        return seconds


@functools.cache
def seconds_of_day() -> tuple[int, ...]:
    """A DATETIME2's time of day in seconds, by its packed bits (``data & 0x1FFFF``: hour,
    minute, second in 5, 6 and 6 bits); -1 where the decoder refuses it (hour 24 and up,
    minute or second 60 and up): :func:`contract.conversion_rules.packed_time_seconds` of each."""
    return tuple(-1 if s is None else s for s in map(packed_time_seconds, range(1 << 17)))


def datetime2_code(col, out: str, fail: str, unit: int = 1) -> tuple[list[str], int, dict[str, Any]]:
    """``(lines, size, names)``: Python statements (unindented) that set ``out`` to the
    DATETIME2 at ``buf[off:]`` in ``unit`` microseconds (1 or 1000) since 1970-01-01 00:00 of
    its wall clock -- the datetime :func:`_datetime2` builds, read as UTC and floor-divided --
    from the packed fields without building it; they evaluate ``fail`` (which must raise)
    where that reader gives no plain datetime (a zero or invalid date or time: None and a
    reason; a fraction out of range or negative).  ``names``: what the lines use (put them
    in their namespace).  They neither check nor move ``off``."""
    fsp_size, _ = _fsp(col)
    fsp = col.fsp
    lines = ["_d = int.from_bytes(buf[off:off + 5], 'big')",
             "_s = _days.get(_d >> 17)",
             "if _s is None:",
             "    _s = _days.of(_d >> 17)",
             "_t = _sod[_d & 131071]",
             "if _s is False or _t < 0:",
             f"    {fail}",
             f"{out} = (_s + _t) * {1_000_000 // unit}"]
    if fsp_size:
        # the fraction as _fsp reads it (signed, a tenth dropped for an odd precision), in units
        # (read unsigned: a negative one, its sign bit set, is above the limit)
        lines += [f"_f = _fraction(int.from_bytes(buf[off + 5:off + {5 + fsp_size}], 'big'), {fsp}, {unit})",
                  "if _f is None:",
                  f"    {fail}",
                  f"{out} += _f"]
    return lines, 5 + fsp_size, {"_days": _EPOCH_SECONDS, "_sod": seconds_of_day(), "_fraction": datetime2_fraction}


_EPOCH_SECONDS = EpochSeconds()


def _timestamp2(col) -> Reader:
    fsp_size, micros = _fsp(col)
    from_ts = datetime.datetime.utcfromtimestamp

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        t = from_ts(_int_be(buf, off, 4))
        microsecond = micros(buf, off + 4)
        if microsecond > 0:
            t = t.replace(microsecond=microsecond)
        return t, off + 4 + fsp_size
    return read


def _time2(col) -> Reader:
    fsp_size, micros = _fsp(col)
    delta = datetime.timedelta

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        data = _int_be(buf, off, 3)
        sign = 1 if _slice(data, 0, 1, 24) else -1
        if sign == -1:
            data = ~data + 1
        t = delta(hours=_slice(data, 2, 10, 24), minutes=_slice(data, 12, 6, 24), seconds=_slice(data, 18, 6, 24),
                  microseconds=micros(buf, off + 3)) * sign
        return t, off + 3 + fsp_size
    return read


def _datetime(col) -> Reader:
    """The pre-5.6 DATETIME (``RowsEvent.__read_datetime``): YYYYMMDDhhmmss as a little-endian
    integer of 8 bytes, split by the library's float arithmetic; 0, or a zero year, month or day,
    is None (out of range)."""
    name, out_of_range, new = col.name, NONE_SOURCE.OUT_OF_DATETIME_RANGE, datetime.datetime

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        if len(buf) < off + 8:
            raise ValueError("truncated DATETIME")
        value = int.from_bytes(buf[off:off + 8], "little")
        if value == 0:
            reasons[name] = out_of_range
            return None, off + 8
        date = value / 1000000
        time = int(value % 1000000)
        year, month, day = int(date / 10000), int((date % 10000) / 100), int(date % 100)
        if year == 0 or month == 0 or day == 0:
            reasons[name] = out_of_range
            return None, off + 8
        return new(year=year, month=month, day=day, hour=int(time / 10000), minute=int((time % 10000) / 100),
                   second=int(time % 100)), off + 8
    return read


def _time(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
    """The pre-5.6 TIME (``RowsEvent.__read_time``): hhmmss as an unsigned integer of 3 bytes."""
    if len(buf) < off + 3:
        raise ValueError("truncated TIME")
    time = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    return datetime.timedelta(hours=int(time / 10000), minutes=int((time % 10000) / 100),
                              seconds=int(time % 100)), off + 3


def _timestamp(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
    """The pre-5.6 TIMESTAMP: seconds since the epoch, 4 bytes, as the library's naive UTC datetime."""
    if len(buf) < off + 4:
        raise ValueError("truncated TIMESTAMP")
    return datetime.datetime.utcfromtimestamp(int.from_bytes(buf[off:off + 4], "little")), off + 4


def _date(col) -> Reader:
    name, out_of_range, new = col.name, NONE_SOURCE.OUT_OF_DATE_RANGE, datetime.date

    def read(buf: bytes, off: int, reasons: dict) -> tuple[Any, int]:
        time = buf[off] + (buf[off + 1] << 8) + (buf[off + 2] << 16)
        year = (time & ((1 << 15) - 1) << 9) >> 9
        month = (time & ((1 << 4) - 1) << 5) >> 5
        day = time & ((1 << 5) - 1)
        if time == 0 or year == 0 or month == 0 or day == 0:
            reasons[name] = out_of_range
            return None, off + 3
        return new(year=year, month=month, day=day), off + 3
    return read


def column_reader(col) -> Reader:
    """The reader of one table-map column, or :class:`UnsupportedType`."""
    t, unsigned = col.type, getattr(col, "unsigned", False)
    if t == T.TINY:
        return _struct("<B" if unsigned else "<b")
    if t == T.SHORT:
        return _struct("<H" if unsigned else "<h")
    if t == T.LONG:
        return _struct("<I" if unsigned else "<i")
    if t == T.INT24:
        return _int24(unsigned)
    if t == T.LONGLONG:
        return _struct("<Q" if unsigned else "<q")
    if t == T.FLOAT:
        return _struct("<f")
    if t == T.DOUBLE:
        return _struct("<d")
    if t == T.YEAR:
        return _year
    if t in (T.VARCHAR, T.STRING):
        return _string(col, 2 if col.max_length > 255 else 1)
    if t == T.BLOB:
        return _string(col, col.length_size)
    if t == T.NEWDECIMAL:
        return _new_decimal(col)
    if t == T.ENUM:
        return _enum(col)
    if t == T.SET:
        return _set(col)
    if t == T.BIT:
        return _bit(col)
    if t == T.DATE:
        return _date(col)
    if t == T.TIME2:
        return _time2(col)
    if t == T.DATETIME2:
        return _datetime2(col)
    if t == T.TIMESTAMP2:
        return _timestamp2(col)
    if t == T.GEOMETRY:
        return _pascal_bytes(col.length_size)
    if t == T.JSON:
        return _json(col.length_size)
    if t == VECTOR:  # (its float32s as bytes: the converter reads them)
        return _pascal_bytes(col.length_size)
    if t == T.DATETIME:
        return _datetime(col)
    if t == T.TIME:
        return _time
    if t == T.TIMESTAMP:
        return _timestamp
    raise UnsupportedType(f"column {col.name!r} of binlog type {t}")


def table_map_key(ev) -> bytes:
    """What a ``TableMapEvent`` says about its table: its body without the table id and
    flags (the columns' types, metadata, names, charsets, ENUM/SET members...)."""
    return ev.packet.packet.get_all_data()[28:20 + ev.event_size]


def row_data(ev: RowsEvent) -> bytes:
    """The row images of a rows event, read without moving the event's packet (so the
    library can still decode them): what follows the bitmaps, up to the checksum."""
    return ev.packet.packet.get_all_data()[20 + ev.packet.read_bytes:20 + ev.event_size]


class RowDecoder:
    """Decodes the rows of the rows events of one table map."""

    def __init__(self, columns: list) -> None:
        if any(not c.name for c in columns):
            raise UnsupportedType("a column has no name (binlog_row_metadata is not FULL)")
        self.names = tuple(c.name for c in columns)
        self._named_columns: list | None = None  # the last columns list found with these names
        self._plan = [(c.name, column_reader(c)) for c in columns]
        self._all_columns = (1 << len(columns)) - 1  # a columns-present bitmap of a full row image
        self._null_bytes = (len(columns) + 7) // 8
        self._image = _compile_image(self._plan, self._null_bytes)

    @classmethod
    def for_columns(cls, columns: list) -> RowDecoder | None:
        """The decoder of a table map's columns (``TableMapEvent.columns``); None when the
        library must decode them."""
        try:
            return cls(columns)
        except UnsupportedType:
            return None

    def rows(self, ev: RowsEvent) -> list[dict]:
        """``ev.rows``: decoded here when possible, else by the library."""
        rows = self.packed_rows(ev)
        return rows.expand() if type(rows) is PackedRows else rows

    def packed_rows(self, ev: RowsEvent) -> PackedRows | list[dict]:
        """The rows of ``ev``: :class:`PackedRows` when decoded here, else the library's
        ``ev.rows``."""
        if not self.fits(ev):
            return ev.rows
        try:
            return self.decode_packed(row_data(ev), isinstance(ev, UpdateRowsEvent))
        except Exception:  # noqa: BLE001 - the library decodes it (and raises its own error)
            return ev.rows

    def fits(self, ev: RowsEvent) -> bool:
        """Whether this decoder reads ``ev``'s rows: full images of these columns."""
        return (ev.event_type in _EVENT_TYPES and ev.complete and ev.number_of_columns == len(self.names)
                and self._named(ev.columns) and self.full(ev.columns_present_bitmap)
                and (not isinstance(ev, UpdateRowsEvent) or self.full(ev.columns_present_bitmap2)))

    def _named(self, columns: list) -> bool:
        """Whether ``columns`` have this decoder's names (the columns list of the table map the
        library holds for the event's table id, the same object event after event: checked once)."""
        if columns is self._named_columns:
            return True
        if tuple(c.name for c in columns) != self.names:
            return False
        self._named_columns = columns  # (held: its identity cannot pass to another list)
        return True

    def full(self, bitmap: bytes) -> bool:
        """Whether a columns-present bitmap names every column of this decoder's table map."""
        return int.from_bytes(bitmap, "little") & self._all_columns == self._all_columns

    def decode(self, data: bytes, update: bool) -> list[dict]:
        """The rows of an event's row data (after its bitmaps), as ``RowsEvent.rows``."""
        return self.decode_packed(data, update).expand()

    def decode_packed(self, data: bytes, update: bool) -> PackedRows:
        """The rows of an event's row data (after its bitmaps) as :class:`PackedRows`."""
        images: list[tuple] = []
        odd: dict[int, dict[str, str]] = {}
        reasons: dict[str, str] = {}
        image = self._image
        off, end = 0, len(data)
        while off < end:
            values, special, off = image(data, off, reasons)
            if special:  # a value None for another reason than NULL (reasons as the library keeps them)
                odd[len(images)] = {name: reasons.get(name, NONE_SOURCE.NULL)
                                    for name, v in zip(self.names, values) if v is None}
            images.append(values)
        if off != end:
            raise ValueError("row data overrun")
        if update and len(images) % 2:
            raise ValueError("truncated update row")
        return PackedRows(self.names, update, images, odd or None)


def _compile_image(plan: list[tuple[str, Reader]], null_bytes: int) -> Callable[[bytes, int, dict], tuple]:
    """The decoder of one row image of these columns, generated: ``(values, special, next
    offset)``, the values a tuple in column order, ``special`` when a non-NULL column was
    read as None (``reasons`` says why).  The column loop unrolled, fixed-size numbers and
    strings read inline (the same reads as their readers), every other column by its reader."""
    env: dict[str, Any] = {"NULL": NONE_SOURCE.NULL}
    lines = ["def image(buf, off, reasons):",
             f"    nulls = buf[off:off + {null_bytes}]",
             f"    if len(nulls) != {null_bytes}:",
             "        raise ValueError('truncated row')",
             f"    off += {null_bytes}",
             "    special = False"]
    for i, (name, read) in enumerate(plan):
        env[f"k{i}"], env[f"r{i}"] = name, read
        lines += [f"    if nulls[{i >> 3}] & {1 << (i & 7)}:",
                  f"        reasons[k{i}] = NULL",
                  f"        v{i} = None",
                  "    else:"]
        inline = getattr(read, "inline", None)
        if inline is not None and inline[0] == "struct":
            env[f"u{i}"] = inline[1]
            lines += [f"        v{i} = u{i}(buf, off)[0]", f"        off += {inline[2]}"]
        elif inline is not None and inline[0] == "string":
            size, decode = inline[1], inline[2]
            lines += [f"        n = int.from_bytes(buf[off:off + {size}], 'little')", f"        off += {size}"]
            encoding = getattr(decode, "encoding", None)
            if encoding is not None:
                env[f"enc{i}"] = encoding
                lines.append(f"        v{i} = buf[off:off + n].decode(enc{i}, 'strict')")
            else:
                env[f"d{i}"] = decode
                lines.append(f"        v{i} = d{i}(buf[off:off + n])")
            lines.append("        off += n")
        else:
            lines += [f"        v{i}, off = r{i}(buf, off, reasons)",
                      f"        if v{i} is None:",
                      "            special = True"]
    lines += ["    if off > len(buf):",
              "        raise ValueError('truncated row')",
              "    return (" + "".join(f"v{i}, " for i in range(len(plan))) + "), special, off"]
    run_generated("\n".join(lines), "row image decoder", env)
    return env["image"]


class PackedRows:
    """The row images of one rows event as they cross to the parent process: a tuple of
    values per image, in column order (an UPDATE's before and after images alternate),
    and ``none_sources`` only for the images where a value is None for another reason
    than NULL (an empty SET, a zero date...).  Far fewer objects to pickle and unpickle
    than a dict per row and two more per image.

    ``rows[i]`` is row ``i`` as ``RowsEvent.rows`` gives it (dicts, built on demand)."""

    __slots__ = ("names", "update", "images", "odd")

    def __init__(self, names: tuple[str, ...], update: bool, images: list[tuple],
                 odd: dict[int, dict[str, str]] | None) -> None:
        self.names = names  # column names (shared by the events of one table map)
        self.update = update
        self.images = images
        self.odd = odd  # image index -> none_sources, where one is not all NULL

    def __len__(self) -> int:
        return len(self.images) >> 1 if self.update else len(self.images)

    def none_sources(self, j: int) -> dict[str, str]:
        """``none_sources`` of image ``j``."""
        odd = self.odd
        if odd is not None and j in odd:
            return odd[j]
        null = NONE_SOURCE.NULL
        return {name: null for name, v in zip(self.names, self.images[j]) if v is None}

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        names = self.names
        if self.update:
            j = 2 * i
            return {"before_values": dict(zip(names, self.images[j])), "before_none_sources": self.none_sources(j),
                    "after_values": dict(zip(names, self.images[j + 1])),
                    "after_none_sources": self.none_sources(j + 1)}
        return {"values": dict(zip(names, self.images[i])), "none_sources": self.none_sources(i)}

    def expand(self) -> list[dict]:
        """Every row as ``RowsEvent.rows`` gives them."""
        return [self[i] for i in range(len(self))]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedRows):
            return self.expand() == other.expand()
        return isinstance(other, list) and self.expand() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedRows({self.expand()!r})"


class EncodedImages:
    """The row images of one rows event, encoded in the binlog reader process by the image
    encoder it was given (:mod:`producer.events.image_encoder`): per image its key body
    (None: the table has no key) and its row body, flat (``key0, row0, key1, row1, ...``;
    an UPDATE's before and after images alternate, as in :class:`PackedRows`).  ``ident``
    names the table version and key columns they were encoded for.  The values are not kept:
    ``rows[i]`` raises LookupError (whoever needs values gets :class:`PackedRows`)."""

    __slots__ = ("ident", "update", "bodies")

    def __init__(self, ident: tuple, update: bool, bodies: list[bytes | None]) -> None:
        self.ident = ident
        self.update = update
        self.bodies = bodies

    def __len__(self) -> int:
        return len(self.bodies) >> 2 if self.update else len(self.bodies) >> 1

    def __getitem__(self, i: int) -> dict:
        raise LookupError(f"row {i} was encoded in the binlog reader process: its values were not kept")

    def __reduce__(self) -> tuple:
        return EncodedImages, (self.ident, self.update, self.bodies)
