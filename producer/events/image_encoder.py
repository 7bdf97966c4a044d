"""Binlog row images straight to Avro bodies, in the binlog reader process.

Streaming, a row image used to cross three steps: the reader process decoded it to Python
values (a ``Decimal``, a ``datetime``, a ``str`` per column), pickled them to the producer,
which unpickled them, converted them and encoded them to Avro.  For the tables on the Avro
fast path (:class:`~producer.events.row_encoder.RowEncoder`) a :class:`BinlogImageEncoder`
does all of it in one function generated per table map, reading the event's bytes:

* a DECIMAL becomes its unscaled integer and then its Avro bytes, a DATETIME2 its epoch
  milli- or microseconds, with no ``Decimal`` or ``datetime`` built (the statements come
  from :func:`~producer.binlog.row_decoder.decimal_code` and
  :func:`~producer.binlog.row_decoder.datetime2_code`);
* a UTF-8 string's bytes are the Avro string's bytes (checked to be UTF-8, not decoded);
* integers are read and encoded inline, every other column by its decoder's reader, the
  column's converter and its field encoder -- the same functions as the values' way;
* a value's parts (a union's branch, a length, the bytes) are joined once per row.

So what crosses to the producer is bytes (:class:`~producer.binlog.row_decoder.EncodedImages`):
per image its key body and row body, as :class:`RowEncoder` writes them from the values the
:class:`~producer.binlog.row_decoder.RowDecoder` gives -- byte for byte (a differential test
checks it on arbitrary bytes).  Anything it does not take raises, and the event then takes
the values' way (``RowDecoder.packed_rows``): a value the decoder reads as None other than
NULL (an empty SET, a zero date...), a DECIMAL the library reads as a string of its own,
bad UTF-8, a value out of its Avro type's range, a NULL in a column that may not be NULL.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

from fastavro.schema import expand_schema
from pymysqlreplication.constants import FIELD_TYPE as T

from common.generated_code import eval_generated, run_generated
from producer.binlog.row_decoder import EncodedImages, column_reader, datetime2_code, decimal_code, decimal_size
from producer.events.avro_template import field_encoder
from producer.events.row_encoder import NotFast, keys_comparable
from producer.events.value_code import (
    UTF8,
    Mapped,
    datetime_unit,
    decimal_lines,
    general_code,
    general_lines,
    int_lines,
    int_range,
    is_decimal,
    is_utf8_string,
    joined,
    key_fields,
    key_parts,
    mapped_column,
    namespace,
    split_union,
    utf8_lines,
    varint_lines,
)
from producer.table_schema import TableDef

try:  # the native encoder (producer/events/_binlog_images.c, built by setup.py where a C compiler is)
    from producer.events import _binlog_images
except ImportError:  # pragma: no cover - no compiler at install time: the generated Python does it
    _binlog_images = None

#: Set to 0 to encode with the generated Python only (the native encoder is its twin in C).
NATIVE_ENV = "CDC_IMAGES_NATIVE"


def native_enabled() -> bool:
    """Whether row images are encoded by the native encoder (built, and not switched off)."""
    return _binlog_images is not None and sys.byteorder == "little" and os.environ.get(NATIVE_ENV, "1") != "0"


def _struct_range(fmt: str) -> tuple[int, int]:
    bits = struct.calcsize(fmt) * 8
    return (0, (1 << bits) - 1) if fmt[-1].isupper() else (-(1 << bits - 1), (1 << bits - 1) - 1)


#: The values an integer column's struct format reads.
_STRUCT_RANGE = {fmt: _struct_range(fmt) for fmt in ("<b", "<B", "<h", "<H", "<i", "<I", "<q", "<Q")}


def _length_code(size: int) -> str:
    """A little-endian length of ``size`` bytes at ``off``."""
    if size == 1:
        return "buf[off]"
    if size == 2:
        return "buf[off] | buf[off + 1] << 8"
    return f"int.from_bytes(buf[off:off + {size}], 'little')"


def _value_code(i: int, col: Any, t: Any, convert: Any, nullable: bool,
                env: dict, empty_set: Any = "") -> tuple[list[str], list[str], bool]:
    """``(lines, parts, sets_null)``: statements that read column ``i``'s (non-NULL) value at
    ``off``, advancing ``off``, and set the names ``parts`` (bytes), whose concatenation is the
    value's encoding as Avro type ``t`` (no union branch); where the column's converter makes
    the value None (a zero TIMESTAMP) and the column is ``nullable``, they set the union's
    null branch instead (``a{i}``, and the parts empty): ``sets_null`` says they may."""
    read = column_reader(col)
    inline = getattr(read, "inline", None)
    if col.type == T.NEWDECIMAL and is_decimal(convert, t, col.decimals):
        lines, size, names = decimal_code(col, "v", "_not_fast()")
        env.update(names)
        # (a group beyond its digits is refused: the values' way reads it as the library does)
        return lines + decimal_lines(i, t) + [f"off += {size}"], [f"l{i}", f"y{i}"], False
    unit = datetime_unit(convert, t)
    if col.type == T.DATETIME2 and unit is not None:
        lines, size, names = datetime2_code(col, "v", "_not_fast()", unit)
        env.update(names)
        return lines + varint_lines(i) + [f"off += {size}"], [f"y{i}"], False
    if inline is not None and inline[0] == "struct":
        env[f"s{i}"] = inline[1]
        lines = [f"v = s{i}(buf, off)[0]", f"off += {inline[2]}"]
        as_int = int_lines(i, convert, t, env, _STRUCT_RANGE.get(inline[3]))
        return lines + (as_int or [f"y{i} = {general_code(i, convert, t, env)}"]), [f"y{i}"], False
    if inline is not None and inline[0] == "string":
        size, decode = inline[1], inline[2]
        lines = [f"n = {_length_code(size)}", f"off += {size}"]
        if is_utf8_string(getattr(decode, "encoding", None), convert, t):
            # (the decoder's strict decode, without the decode: the bytes are the string's)
            return lines + [f"y{i} = buf[off:off + n]", "off += n"] + utf8_lines(i), [f"l{i}", f"y{i}"], False
        env[f"d{i}"] = decode
        return lines + [f"v = d{i}(buf[off:off + n])", "off += n", f"y{i} = {general_code(i, convert, t, env)}"], \
            [f"y{i}"], False
    env[f"r{i}"] = read
    if col.type == T.SET:  # an empty SET reads as None (reason 'empty set'): '' by RowConverter's rule
        env[f"ee{i}"], env[f"es{i}"] = field_encoder(t), empty_set  # (or the mapper's value of '')
        return [f"v, off = r{i}(buf, off, reasons)",
                "if v is None:",
                f"    y{i} = ee{i}(es{i})",
                "else:",
                f"    y{i} = {general_code(i, convert, t, env)}"], [f"y{i}"], False
    return [f"v, off = r{i}(buf, off, reasons)",
            "if v is None:",
            "    _not_fast()",
            *general_lines(i, convert, t, nullable, env)], [f"y{i}"], nullable


def _skip_code(i: int, col: Any, env: dict) -> list[str]:
    """Statements that move ``off`` past column ``i``'s (non-NULL) value, read as the decoder reads
    it (its errors too) and dropped: a column left out of the events."""
    read = column_reader(col)
    inline = getattr(read, "inline", None)
    if inline is not None and inline[0] == "struct":
        return [f"off += {inline[2]}"]
    if inline is not None and inline[0] == "string":
        env[f"d{i}"] = inline[2]
        return [f"n = {_length_code(inline[1])}", f"off += {inline[1]}", f"d{i}(buf[off:off + n])", "off += n"]
    env[f"r{i}"] = read
    return [f"v, off = r{i}(buf, off, reasons)"]


class BinlogImageEncoder:
    """The key and row bodies of the row images of one table map's rows events.

    ``columns``: the table map's columns (python-mysql-replication's ``Column``), which the
    table version ``te`` (a :class:`~producer.events.builder.TableEvents`) was made from: the
    columns its events leave out (``source.column_*_list``) are read past, a masked, hashed or
    truncated column takes its converter's value (producer/column_mappers.py).  Raises
    :class:`NotFast` when the table's keys are not comparable, or its key is not
    made of its row's encodings (then its events take the values' way).  The bodies come from
    the native encoder (``_binlog_images.c``, :func:`native_images`) where it is built, else
    from the generated Python (:func:`_compile`): the same bytes, and the same rows refused."""

    def __init__(self, columns: list, te: Any, *, native: bool | None = None) -> None:
        table: TableDef = te.table
        if te.key_schema is not None and not keys_comparable(te.key_schema):
            raise NotFast(f"{table.qualified_name}: its keys' bytes are not comparable")
        names = [c.name for c in columns]
        if any(not n for n in names) or [n for n in names if n not in te.dropped] != table.column_names:
            raise NotFast(f"{table.qualified_name}: the table map's columns are not the table's")
        self.ident = te.ident
        fields = expand_schema(te.row_schema)["fields"]
        plan = te.converter.plan
        if [f["name"] for f in fields] != [f for _, f, _ in plan]:
            raise NotFast(f"{table.qualified_name}: the row schema's fields are not the converter's")
        # Per column of the table map: its row type and converter (None: left out of the events,
        # source.column_*_list), and the encoding of a NULL where its converter makes one a value
        # (a mask, producer/column_mappers.py).
        captured = {name: (f["type"], conv) for (name, _, conv), f in zip(plan, fields)}
        row_types = [captured[n][0] if n in captured else None for n in names]
        converters = [captured[n][1] if n in captured else None for n in names]
        mapped = [mapped_column(table.column(n), *captured[n]) if n in captured else None for n in names]
        key_types: list[Any] = []
        if te.key_schema is not None:
            key_types = [f["type"] for f in expand_schema(te.key_schema)["fields"]]
        key_index = [names.index(name) for name in te.key_columns]
        # (native: None, the native encoder where it is built and not switched off)
        compile_images = native_images if (native_enabled() if native is None else native) else _compile
        self._images = compile_images(columns, row_types, converters, list(zip(key_index, key_types)), mapped)

    def encode(self, data: bytes, update: bool) -> EncodedImages:
        """The bodies of an event's row data (after its bitmaps); raises where a row does
        not fit (:class:`NotFast`, or the error of reading it)."""
        bodies = self._images(data)
        if update and len(bodies) % 4:
            raise ValueError("truncated update row")
        return EncodedImages(self.ident, update, bodies)


def _compile(columns: list, row_types: list, converters: list, key: list[tuple[int, Any]],
             mapped: list[Mapped | None]) -> Any:
    """``images(buf) -> [key body or None, row body, ...]`` of the row images in ``buf``.
    A nullable column's union branch and its value's parts are joined with the rest of the
    row: no concatenation per value.  A row without NULLs (the common case) takes code
    without a test per column.  A column whose row type is None is read past (left out); a
    :class:`Mapped` one writes its NULL's encoding for a NULL (its value branch first)."""
    env = namespace()
    null_bytes = (len(columns) + 7) // 8
    code: dict[bool, list[str]] = {True: [], False: []}  # the row's statements, by whether a column is NULL
    parts: dict[bool, list[str]] = {True: [], False: []}  # the row body's parts (names of bytes), likewise
    columns_parts, sets_nulls = [], []
    for i, (col, t, convert, m) in enumerate(zip(columns, row_types, converters, mapped)):
        if t is None:  # left out: read past
            lines = _skip_code(i, col, env)
            code[True] += [f"if not nulls & {1 << i}:", *("    " + line for line in lines)]
            code[False] += lines
            columns_parts.append((None, None, False, []))
            sets_nulls.append(False)
            continue
        null_tag, value_tag, inner = split_union(t)
        lines, value_parts, sets_null = _value_code(i, col, inner, convert, null_tag is not None, env,
                                                    "" if m is None else m.empty_set)
        code[True].append(f"if nulls & {1 << i}:")
        if m is not None and m.null is not None:  # a NULL is a value: its encoding
            env[f"nv{i}"], env[f"t{i}"] = m.null, value_tag
            code[True] += ([f"    a{i} = t{i}"] if null_tag is not None else []) + \
                [f"    {p} = b''" for p in value_parts[:-1]] + [f"    {value_parts[-1]} = nv{i}"]
        elif null_tag is None:
            code[True].append("    _not_fast()")  # NULL where the schema has no null: the values' way says so
        else:
            env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
            code[True] += [f"    a{i} = n{i}"] + [f"    {p} = b''" for p in value_parts]
        code[True].append("else:")
        if null_tag is not None:
            env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
            code[True].append(f"    a{i} = t{i}")
            parts[True].append(f"a{i}")
            if sets_null:  # the converter may make it None: the union's branch is a name then
                code[False].append(f"a{i} = t{i}")
            parts[False].append(f"a{i}" if sets_null else f"t{i}")
        code[True] += ["    " + line for line in lines]
        code[False] += lines
        parts[True] += value_parts
        parts[False] += value_parts
        columns_parts.append((t, inner, null_tag is not None, value_parts))
        sets_nulls.append(sets_null)
    for some_null in (True, False):
        def branch(ci: int, some_null: bool = some_null) -> str:
            return f"a{ci}" if some_null or sets_nulls[ci] else f"t{ci}"
        kparts, checks = key_parts(columns_parts, key, branch)
        row_body = joined(parts[some_null]) if parts[some_null] else "b''"  # (every column left out)
        code[some_null] += checks + [f"append({joined(kparts)})", f"append({row_body})"]
    lines = ["def images(buf):",
             "    out = []",
             "    append = out.append",
             "    reasons = {}",
             "    off = 0",
             "    end = len(buf)",
             "    while off < end:",
             "        nulls = " + ("buf[off]" if null_bytes == 1 else
                                   f"int.from_bytes(buf[off:off + {null_bytes}], 'little')"),
             f"        off += {null_bytes}",
             "        if nulls:",
             *("            " + line for line in code[True]),
             "        else:",
             *("            " + line for line in code[False]),
             "    if off != end:",
             "        raise ValueError('row data overrun')",
             "    return out"]
    run_generated("\n".join(lines), "binlog image encoder", env)
    return env["images"]


def native_images(columns: list, row_types: list, converters: list, key: list[tuple[int, Any]],
                  mapped: list[Mapped | None]) -> Any:
    """What :func:`_compile` gives, by the native encoder (``_binlog_images.Program``): integers,
    DECIMALs of up to 38 digits, DATETIME2s and UTF-8 strings read and encoded in C, every other
    column by its statements of :func:`_value_code`, compiled into a function of its own."""
    return _binlog_images.Program(native_plan(columns, row_types, converters, key, mapped))


def _skip_spec(col: Any) -> tuple:
    """``(size, length size, UTF-8, reader)`` of the native SKIP of a column left out (see
    :func:`_skip_code`): a fixed size, or a length-prefixed value (its bytes checked to be
    UTF-8 where the decoder decodes them so), or the decoder's reader."""
    read = column_reader(col)
    inline = getattr(read, "inline", None)
    if inline is not None and inline[0] == "struct":
        return inline[2], 0, False, None
    if inline is not None and inline[0] == "string" and getattr(inline[2], "encoding", None) in UTF8:
        return -1, inline[1], True, None
    return -1, 0, False, read


def native_plan(columns: list, row_types: list, converters: list, key: list[tuple[int, Any]],
                mapped: list[Mapped | None] | None = None) -> tuple:
    """The plan of ``_binlog_images.Program`` (its layout: the top of ``_binlog_images.c``)."""
    env = namespace()
    ops = _binlog_images
    plan, column_types = [], []
    for i, (col, t, convert) in enumerate(zip(columns, row_types, converters)):
        m = None if mapped is None else mapped[i]
        if t is None:  # left out: read past
            plan.append((ops.SKIP, None, None, *_skip_spec(col)))
            column_types.append((None, None, False))
            continue
        null_tag, value_tag, inner = split_union(t)
        column_types.append((t, inner, null_tag is not None))
        tags = (null_tag, value_tag)
        read = column_reader(col)
        inline = getattr(read, "inline", None)
        if m is not None:  # (a mapped column: its converter, a NULL perhaps a value)
            plan.append((ops.PY, *tags, _column_function(i, col, inner, convert, null_tag, value_tag, env,
                                                         m.empty_set), m.null))
            continue
        if col.type == T.NEWDECIMAL and is_decimal(convert, inner, col.decimals) and col.precision <= 38 \
                and inner["precision"] <= 38:
            plan.append((ops.DECIMAL, *tags, decimal_size(col), col.precision, col.decimals, inner["precision"]))
            continue
        unit = datetime_unit(convert, inner)
        if col.type == T.DATETIME2 and unit is not None:
            plan.append((ops.DATETIME2, *tags, col.fsp, unit))
            continue
        if inline is not None and inline[0] == "struct" and inline[3][-1] in "bBhHiIqQ":
            lo, hi = int_range(convert, inner) or (1, 0)  # (1, 0): every value by the converter
            other = eval_generated(f"lambda v: {general_code(i, convert, inner, env)}", "binlog column encoder", env)
            plan.append((ops.INT, *tags, inline[2], inline[3][-1].islower(), lo, hi, other))
            continue
        if inline is not None and inline[0] == "string" and \
                is_utf8_string(getattr(inline[2], "encoding", None), convert, inner):
            plan.append((ops.UTF8, *tags, inline[1]))
            continue
        plan.append((ops.PY, *tags, _column_function(i, col, inner, convert, null_tag, value_tag, env), None))
    fields = key_fields(column_types, key)
    return (len(columns) + 7) // 8, tuple(plan), tuple(fields), NotFast


def _column_function(i: int, col: Any, inner: Any, convert: Any, null_tag: bytes | None, value_tag: bytes | None,
                     env: dict, empty_set: Any = "") -> Any:
    """``column(buf, off, reasons) -> (encoding or None, next offset)`` of column ``i``'s non-NULL
    value: its :func:`_value_code` statements (None: the converter made it the union's null)."""
    lines, value_parts, sets_null = _value_code(i, col, inner, convert, null_tag is not None, env, empty_set)
    env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
    body = ([f"a{i} = t{i}"] if sets_null else []) + lines + \
        [f"return (None if a{i} is n{i} else {joined(value_parts)}), off" if sets_null else
         f"return {joined(value_parts)}, off"]
    code = "\n".join([f"def column{i}(buf, off, reasons):", *("    " + line for line in body)])
    run_generated(code, "binlog column encoder", env)
    return env[f"column{i}"]
