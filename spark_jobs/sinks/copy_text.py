"""A row image's PostgreSQL COPY text, written straight from its Avro bytes.

The PostgreSQL sink's usual way (:meth:`PostgresSink._write`) takes rows as decoded dicts:
every value built as a Python object (a ``Decimal``, an ``int`` then a ``datetime``, a
``str``), converted per column, then formatted again by psycopg for COPY.  For the rows a
merge batch applies, :func:`compile_copy_encoder` writes, per writer schema and sink
table, the Python source of one function that reads the row record from its Avro bytes
and returns its COPY text line (the table's columns, tab-separated, in the table's column
order), as :mod:`contract.codecs.avro_decoder` does for values: an integer's digits from its
varint, a string's bytes as they are (escaped for COPY where they must be), a date's text
from its day count.  Two kinds go as the numbers they are in Avro, for the stage table to
convert (:func:`stage_column`): a timestamp as its count since the epoch, a decimal as its
unscaled value; formatting them in Python cost more than all the rest of a row.

Where the native extension is built (``spark_jobs/sinks/_copy_text.c``, its ``copy_line``), the
line is written by it from a program of the same choices (:func:`_text_of` makes them for
both); a property test holds the two to the same bytes for every kind, NULLs and COPY's
special characters included, and to the same failures on malformed images.
A differential test holds the lines, through the stage table, to the same table contents
as the dict path.  Column kinds with no text here (zoned timestamps, bits, geometry, an
Avro enum) raise :class:`~contract.errors.NotCompiled`: the caller keeps the dict path for
that table.  Malformed input raises ``ValueError``/``IndexError``; text PostgreSQL refuses
(a NUL character, bytes that are not UTF-8, numbers beyond a column's precision) fails
the COPY, and the caller applies the records one by one the usual way.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from fastavro.schema import expand_schema

from common.errors import UnsupportedType
from common.generated_code import compile_generated
from contract.codecs.avro_decoder import CodeWriter, native_enabled, native_skip_words
from contract.conversion_rules import civil_date
from contract.errors import NotCompiled
from contract.type_table import COPY_TEXT_NULL, COPY_TEXTS, copy_text_code
from spark_jobs.sinks.layout import column_kind
from spark_jobs.sinks.values import format_time_micros

try:  # spark_jobs/sinks/_copy_text.c, built by setup.py where a C compiler is
    from spark_jobs.sinks import _copy_text
except ImportError:  # pragma: no cover - a build without it: the generated Python writes the lines
    _copy_text = None

__all__ = ["CopyEncoder", "compile_copy_encoder", "copy_escape", "copy_lines_of", "date_text", "stage_column"]

CopyEncoder = Callable[[bytes, int], bytes]

#: COPY text's special characters in a value (``\N`` is NULL; tab and newline separate).
_SPECIAL = re.compile(rb"[\\\t\n\r]").search
_ESCAPES = ((b"\\", b"\\\\"), (b"\t", b"\\t"), (b"\n", b"\\n"), (b"\r", b"\\r"))
_DATES: dict[int, bytes] = {}  # days since 1970-01-01 -> ISO text (bounded: see date_text)


def copy_escape(raw: bytes) -> bytes:
    """A value's bytes as COPY text: backslash, tab, newline and carriage return escaped."""
    if _SPECIAL(raw) is None:
        return raw
    for plain, escaped in _ESCAPES:
        raw = raw.replace(plain, escaped)
    return raw


def date_text(days: int) -> bytes:
    """``YYYY-MM-DD`` of a day count since 1970-01-01 (years 1..9999, else ``ValueError``)."""
    text = _DATES.get(days)
    if text is None:
        ymd = civil_date(days)  # (the rule _copy_text.c's text_date runs too)
        if ymd is None:
            raise ValueError(f"date {days} days from 1970-01-01 is outside years 1..9999")
        text = b"%04d-%02d-%02d" % (ymd // 10000, ymd // 100 % 100, ymd % 100)
        if len(_DATES) < 200_000:
            _DATES[days] = text
    return text


def _time_text(us: int) -> bytes:
    return format_time_micros(us).encode()


def _float_text(v: float) -> bytes:
    return repr(v).encode()  # (inf, -inf and nan are read by PostgreSQL as they are)


_NUMBER_KINDS = ("smallint", "int", "long", "year", "timestamp_ms", "timestamp_us")  # (timestamps: stage_column)
_LONG_LOGICAL = (None, "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
                 "local-timestamp-millis", "local-timestamp-micros")


def _text_of(t: Any, kind: str, scale: int) -> tuple[str, int | None]:
    """How a value of non-union Avro type ``t`` becomes the COPY text of a ``kind`` column:
    ``(how, size)``, ``how`` one of digits, date, time, time_ms (of a long), string
    (escaped), decimal (the unscaled value's digits), hex (bytes), bool, double, float, and
    ``size`` a fixed type's (None: bytes with a length).  :class:`NotCompiled` for a kind
    without text."""
    prim = t.get("type") if isinstance(t, dict) else t
    logical = t.get("logicalType") if isinstance(t, dict) else None
    size = int(t["size"]) if prim == "fixed" else None
    if prim in ("int", "long") and logical in _LONG_LOGICAL:
        how = "digits" if kind in _NUMBER_KINDS else kind if kind in ("date", "time", "time_ms") else None
        if how is None:
            raise NotCompiled(f"no COPY text for a {kind} column of an Avro int/long")
        return how, None
    if prim == "string" and kind in ("string", "enum", "set", "json"):
        return "string", None
    if prim in ("bytes", "fixed") and kind == "decimal":
        if scale < 0:
            raise NotCompiled("a decimal of negative scale")
        return "decimal", size
    if prim in ("bytes", "fixed") and kind == "bytes" and logical is None:
        return "hex", size
    if (prim, kind) in (("boolean", "boolean"), ("double", "double"), ("float", "float")):
        return {"boolean": "bool"}.get(prim, prim), None
    raise NotCompiled(f"no COPY text for a {kind} column of Avro type {prim!r}")


def _plain(t: Any) -> Any:
    """``t`` with a named type's wrapper taken off (``{"type": {...}}``, ``{"type": [...]}``)."""
    while isinstance(t, dict) and isinstance(t.get("type"), (dict, list)):
        t = t["type"]
    return t


class _CopyWriter(CodeWriter):
    """:class:`CodeWriter` with the COPY text of each column kind."""

    def text(self, t: Any, kind: str, scale: int, d: int, target: str) -> None:
        t = _plain(t)
        if isinstance(t, list):
            def branch(bt: Any, bd: int) -> None:
                if bt == "null":
                    self.emit(bd, f"{target} = b'\\\\N'")
                else:
                    self.text(bt, kind, scale, bd, target)
            self.union(d, t, branch)
            return
        how, size = _text_of(t, kind, scale)
        raw = v = self.var()
        if how in ("digits", "date", "time", "time_ms"):
            self.long(d, v)
        elif how in ("string", "decimal", "hex"):
            if size is None:
                n = self.var()
                self.long(d, n)
            self.blob(d, raw, n if size is None else size)
        self.emit(d, f"{target} = " + {
            "digits": f"b'%d' % {v}", "date": f"_date({v})", "time": f"_time({v})", "time_ms": f"_time({v} * 1000)",
            "string": f"{raw} if _special({raw}) is None else _escape({raw})",
            "decimal": f"b'%d' % int.from_bytes({raw}, 'big', signed=True)",  # (unscaled: stage_column)
            "hex": f"b'\\\\\\\\x' + {raw}.hex().encode()",
            "bool": "b't' if b[i] == 1 else b'f'; i += 1",
            "double": "_float(_unpack_d(b, i)[0]); i += 8", "float": "_float(_unpack_f(b, i)[0]); i += 4"}[how])


# The native line (spark_jobs/sinks/_copy_text.c ``copy_line``): a text node per column, its
# codes the type table's (contract.type_table.COPY_TEXTS; the C enum is generated from it).
_T_NULL = COPY_TEXT_NULL
_T_CODES = {how: copy_text_code(how) for how in COPY_TEXTS}


def _text_words(t: Any, kind: str, scale: int) -> list[int]:
    """The native line's text node of a value of expanded type ``t`` for a ``kind`` column."""
    t = _plain(t)
    if isinstance(t, list):
        words = [_T_CODES["union"], len(t)]
        for bt in t:
            sub = [_T_NULL] if bt == "null" else _text_words(bt, kind, scale)
            words += [len(sub), *sub]
        return words
    how, size = _text_of(t, kind, scale)
    return [_T_CODES[how]] if size is None else [_T_CODES[how + "_fixed"], size]


def _native(name: str) -> Any:
    """A function of the native COPY encoder (None where it is not built or the native reads are
    off: :func:`contract.codecs.avro_decoder.native_enabled`)."""
    return getattr(_copy_text, name, None) if native_enabled() else None


def _native_line(fields: list[dict], columns: Sequence[Any]) -> CopyEncoder | None:
    """:func:`compile_copy_encoder`'s line by the native extension (None where it is off)."""
    copy_line = _native("copy_line")
    if copy_line is None:
        return None
    index = {c.field: n for n, c in enumerate(columns)}
    words = [len(fields)]
    for f in fields:
        n = index.get(f["name"])
        if n is None:
            words += [-1, *native_skip_words(f["type"])]
        else:
            col = columns[n]
            words += [n, *_text_words(f["type"], col.kind, int(col.scale or 0))]
    return partial(copy_line, array("i", words).tobytes(), len(columns))  # line(data, at)


def copy_lines_of(line: CopyEncoder) -> Callable[[list, int, int], bytes] | None:
    """For a native ``line`` (:func:`compile_copy_encoder`'s, by the extension): a function
    ``lines(changes, start, stop)`` giving the upserts' stage lines of ``changes[start:stop]``
    (:class:`~spark_jobs.sinks.batch.EncodedChange` tuples) in one call: each row image's line,
    a tab, the change's position, a tab, ``\\N`` (no key hash) and a newline.  None for a line of
    the generated Python."""
    copy_line, copy_lines = _native("copy_line"), _native("copy_lines")
    if copy_lines is None or not isinstance(line, partial) or line.func is not copy_line:
        return None
    return partial(copy_lines, *line.args)


def stage_column(kind: str, scale: int | None, column: str, pg_type: str) -> tuple[str, str]:
    """``(stage column type, expression of the target value)`` of a column of ``kind``
    whose COPY text :func:`compile_copy_encoder` writes, ``column`` the stage column's
    quoted name as ``s.<name>``: a timestamp's epoch count and a decimal's unscaled value
    become the column's value in PostgreSQL, exactly (integer arithmetic: the seconds and
    the rest of a timestamp added apart, a decimal multiplied by a power of ten, which
    keeps its digits); every other kind goes as the column's own type."""
    if kind in ("timestamp_ms", "timestamp_us"):
        per, unit = (1000, "millisecond") if kind == "timestamp_ms" else (1_000_000, "microsecond")
        return "bigint", (f"timestamp '1970-01-01' + ({column} / {per}) * interval '1 second' "
                          f"+ mod({column}, {per}) * interval '1 {unit}'")
    if kind == "decimal" and scale:
        return "numeric", f"{column} * 0.{'0' * (int(scale) - 1)}1"
    return pg_type, column


def compile_copy_encoder(row_union: Any, columns: Sequence[Any]) -> CopyEncoder:
    """A function ``line(data, at)``: the COPY text of the row image whose union (``["null",
    row]``, as a change event's ``before``/``after``) starts at ``data[at]``, for the sink
    ``columns`` (:class:`~spark_jobs.sinks.layout.SinkColumn`, each reading the row field
    ``column.field``), in their order, tab-separated, without a newline.  A null image is
    a ``ValueError``.  Raises :class:`NotCompiled` for a column it has no text for, or a
    column whose field the row does not have."""
    try:
        expanded = expand_schema(row_union)
    except RecursionError:
        raise NotCompiled("a recursive schema") from None
    if not (isinstance(expanded, list) and len(expanded) == 2 and expanded[0] == "null"
            and isinstance(expanded[1], dict) and expanded[1].get("type") == "record"):
        raise NotCompiled("a row image is a [null, record] union")
    fields = expanded[1]["fields"]
    wanted = {c.field: c for c in columns}
    missing = set(wanted) - {f["name"] for f in fields}
    if missing:
        raise NotCompiled(f"the row has no field {min(missing)!r}")
    for f in fields:  # (the row's own field must be what the column was laid out from: same kind, same scale)
        col = wanted.get(f["name"])
        if col is None:
            continue
        try:
            kind, _, attrs = column_kind(f["type"], what=f["name"])
        except UnsupportedType as exc:
            raise NotCompiled(str(exc)) from None
        if kind != col.kind or (attrs.get("scale") or 0) != (col.scale or 0):
            raise NotCompiled(f"field {f['name']!r} is a {kind} here, its column a {col.kind}")
    native = _native_line(fields, columns)
    if native is not None:
        return native
    src = _CopyWriter()
    src.consts.update({"_special": _SPECIAL, "_escape": copy_escape, "_date": date_text, "_time": _time_text,
                       "_float": _float_text})
    src.emit(1, "if b[i] != 2: raise ValueError('a null row image')")
    src.emit(1, "i += 1")
    out = {}
    for f in fields:
        col = wanted.get(f["name"])
        if col is None:
            src.skip(f["type"], 1)
            continue
        out[f["name"]] = target = src.var()
        src.text(f["type"], col.kind, int(col.scale or 0), 1, target)
    src.emit(1, "if i > len(b): raise IndexError('record too short')")
    src.emit(1, "return b'\\t'.join((" + "".join(out[c.field] + ", " for c in columns) + "))")
    text = "def line(b, i):\n" + "\n".join(src.lines) + "\n"
    try:
        code = compile_generated(text, "COPY text encoder")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise NotCompiled(f"cannot compile: {exc}") from None
    namespace = dict(src.consts)
    exec(code, namespace)  # noqa: S102 - source written above from the schema's structure only
    return namespace["line"]
