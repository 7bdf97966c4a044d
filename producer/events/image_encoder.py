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

import struct
from typing import Any

from fastavro.schema import expand_schema
from pymysqlreplication.constants import FIELD_TYPE as T

from contract.avro_template import (
    CONTINUED_VARINTS,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    avro_long,
    avro_varint,
    field_encoder,
    type_name,
)
from producer.binlog.row_decoder import EncodedImages, column_reader, datetime2_code, decimal_code
from producer.events.row_encoder import INT_RANGE, NotFast, int_code
from producer.table_schema import TableDef

_UTF8 = frozenset({"utf8", "utf-8", "utf_8"})


def _struct_range(fmt: str) -> tuple[int, int]:
    bits = struct.calcsize(fmt) * 8
    return (0, (1 << bits) - 1) if fmt[-1].isupper() else (-(1 << bits - 1), (1 << bits - 1) - 1)


#: The values an integer column's struct format reads.
_STRUCT_RANGE = {fmt: _struct_range(fmt) for fmt in ("<b", "<B", "<h", "<H", "<i", "<I", "<q", "<Q")}


def _not_fast() -> Any:
    raise NotFast()


def _split_union(t: Any) -> tuple[bytes | None, bytes | None, Any]:
    """``(null tag, value tag, inner type)`` of a ``["null", T]`` union; ``(None, None, t)`` else."""
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        n = t.index("null")
        return avro_long(n), avro_long(1 - n), t[1 - n]
    return None, None, t


def _length_code(size: int) -> str:
    """A little-endian length of ``size`` bytes at ``off``."""
    if size == 1:
        return "buf[off]"
    if size == 2:
        return "buf[off] | buf[off + 1] << 8"
    return f"int.from_bytes(buf[off:off + {size}], 'little')"


def _value_code(i: int, col: Any, t: Any, convert: Any, nullable: bool,
                env: dict) -> tuple[list[str], list[str], bool]:
    """``(lines, parts, sets_null)``: statements that read column ``i``'s (non-NULL) value at
    ``off``, advancing ``off``, and set the names ``parts`` (bytes), whose concatenation is the
    value's encoding as Avro type ``t`` (no union branch); where the column's converter makes
    the value None (a zero TIMESTAMP) and the column is ``nullable``, they set the union's
    null branch instead (``a{i}``, and the parts empty): ``sets_null`` says they may."""
    read = column_reader(col)
    inline = getattr(read, "inline", None)
    name = type_name(t)
    env[f"c{i}"], env[f"e{i}"] = convert, field_encoder(t)
    general = f"e{i}(cv) if (cv := c{i}(v)) is not None else _not_fast()"
    if col.type == T.NEWDECIMAL and getattr(convert, "decimal_scale", None) == col.decimals \
            and isinstance(t, dict) and t.get("type") == "bytes" and t.get("logicalType") == "decimal" \
            and t.get("scale", 0) == col.decimals and isinstance(t.get("precision"), int):
        # the unscaled integer, then as decimal_bytes: two's complement with a sign bit to spare, after its length
        lines, size = decimal_code(col, "v", "_not_fast()")
        # (the head group may hold more digits than its width: the library reads it whole)
        lines += [f"if not -{10 ** t['precision']} < v < {10 ** t['precision']}:", "    _not_fast()"]
        lines += ["if v >= 0:",
                  f"    y{i} = v.to_bytes((v.bit_length() + 8) >> 3, 'big')",
                  "else:",
                  f"    y{i} = v.to_bytes(((-v).bit_length() + 8) >> 3, 'big', signed=True)",
                  f"l{i} = _small[len(y{i}) << 1]",
                  f"off += {size}"]
        return lines, [f"l{i}", f"y{i}"], False
    unit = getattr(convert, "datetime_unit", None)
    if col.type == T.DATETIME2 and unit in (1, 1000) and name == "long":
        lines, size, names = datetime2_code(col, "v", "_not_fast()", unit)
        env.update(names)
        return lines + [f"y{i} = {int_code('v', parts=3)}", f"off += {size}"], [f"y{i}"], False
    through = getattr(convert, "passes_through", None)
    if inline is not None and inline[0] == "struct":
        env[f"s{i}"] = inline[1]
        lines = [f"v = s{i}(buf, off)[0]", f"off += {inline[2]}"]
        if through is not None and through[0] is int and name in INT_RANGE and inline[3] in _STRUCT_RANGE:
            lo, hi = INT_RANGE[name]
            lo = lo if through[1] is None else max(lo, through[1])
            low, high = _STRUCT_RANGE[inline[3]]
            if lo <= low and high <= hi:  # every value the format reads passes through and fits
                return lines + [f"y{i} = {int_code('v')}"], [f"y{i}"], False
            env[f"lo{i}"], env[f"hi{i}"] = lo, hi
            return lines + [f"y{i} = {int_code('v')} if lo{i} <= v <= hi{i} else {general}"], [f"y{i}"], False
        return lines + [f"y{i} = {general}"], [f"y{i}"], False
    if inline is not None and inline[0] == "string":
        size, decode = inline[1], inline[2]
        encoding = getattr(decode, "encoding", None)
        if encoding in _UTF8 and through is not None and through[0] is str and name == "string":
            # The Avro string's bytes are the column's bytes, once they are known to be UTF-8
            # (the decoder's strict decode; Python's UTF-8 decoder accepts exactly UTF-8).
            return [f"n = {_length_code(size)}",
                    f"off += {size}",
                    f"y{i} = buf[off:off + n]",
                    "off += n",
                    f"if not y{i}.isascii():",
                    f"    y{i}.decode('utf-8')",
                    f"l{i} = _small[n << 1] if n < {SMALL_VARINT_LIMIT >> 1} else _varint(n)"], [f"l{i}", f"y{i}"], False
        env[f"d{i}"] = decode
        return [f"n = {_length_code(size)}",
                f"off += {size}",
                f"v = d{i}(buf[off:off + n])",
                "off += n",
                f"y{i} = {general}"], [f"y{i}"], False
    env[f"r{i}"] = read
    if col.type == T.SET:  # an empty SET reads as None (reason 'empty set'): '' by RowConverter's rule
        return [f"v, off = r{i}(buf, off, reasons)",
                "if v is None:",
                f"    y{i} = e{i}('')",
                "else:",
                f"    y{i} = {general}"], [f"y{i}"], False
    return [f"v, off = r{i}(buf, off, reasons)",
            "if v is None:",
            "    _not_fast()",
            f"cv = c{i}(v)",
            "if cv is None:",
            f"    a{i} = n{i}" if nullable else "    _not_fast()",
            f"    y{i} = b''",
            "else:",
            f"    y{i} = e{i}(cv)"], [f"y{i}"], nullable


class BinlogImageEncoder:
    """The key and row bodies of the row images of one table map's rows events.

    ``columns``: the table map's columns (python-mysql-replication's ``Column``), which the
    table version ``te`` (a :class:`~producer.events.builder.TableEvents`) was made from.
    Raises :class:`NotFast` when the table is not on the Avro fast path, or its key is not
    made of its row's encodings (then its events take the values' way)."""

    def __init__(self, columns: list, te: Any) -> None:
        enc = te.encoder
        if enc is None or not enc.keys_comparable:
            raise NotFast(f"{te.table.qualified_name}: no fast Avro path for its rows")
        table: TableDef = te.table
        if [c.name for c in columns] != table.column_names or any(not c.name for c in columns):
            raise NotFast(f"{table.qualified_name}: the table map's columns are not the table's")
        self.ident = te.ident
        fields = expand_schema(te.row_schema)["fields"]
        plan = te.converter.plan
        if [f["name"] for f in fields] != [f for _, f, _ in plan]:
            raise NotFast(f"{table.qualified_name}: the row schema's fields are not the converter's")
        key_types: list[Any] = []
        if te.key_schema is not None:
            key_types = [f["type"] for f in expand_schema(te.key_schema)["fields"]]
        key_index = [table.column_names.index(name) for name in te.key_columns]
        self._images = _compile(columns, [f["type"] for f in fields], [conv for _, _, conv in plan],
                                list(zip(key_index, key_types)))

    def encode(self, data: bytes, update: bool) -> EncodedImages:
        """The bodies of an event's row data (after its bitmaps); raises where a row does
        not fit (:class:`NotFast`, or the error of reading it)."""
        bodies = self._images(data)
        if update and len(bodies) % 4:
            raise ValueError("truncated update row")
        return EncodedImages(self.ident, update, bodies)


def _compile(columns: list, row_types: list, converters: list, key: list[tuple[int, Any]]) -> Any:
    """``images(buf) -> [key body or None, row body, ...]`` of the row images in ``buf``.
    A nullable column's union branch and its value's parts are joined with the rest of the
    row: no concatenation per value.  A row without NULLs (the common case) takes code
    without a test per column."""
    env: dict[str, Any] = {"_not_fast": _not_fast, "_varint": avro_varint, "_small": SMALL_VARINTS,
                           "_cont": CONTINUED_VARINTS}
    null_bytes = (len(columns) + 7) // 8
    code = {True: [], False: []}  # the row's statements, by whether a column is NULL
    parts = {True: [], False: []}  # the row body's parts (names of bytes), likewise
    columns_parts = []
    for i, (col, t, convert) in enumerate(zip(columns, row_types, converters)):
        null_tag, value_tag, inner = _split_union(t)
        lines, value_parts, sets_null = _value_code(i, col, inner, convert, null_tag is not None, env)
        code[True].append(f"if nulls & {1 << i}:")
        if null_tag is None:
            code[True].append("    _not_fast()")  # NULL where the schema has no null: the values' way says so
        else:
            env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
            code[True] += [f"    a{i} = n{i}"] + [f"    {p} = b''" for p in value_parts]
        code[True].append("else:")
        if null_tag is not None:
            code[True].append(f"    a{i} = t{i}")
            parts[True].append(f"a{i}")
            if sets_null:  # the converter may make it None: the union's branch is a name then
                code[False].append(f"a{i} = t{i}")
                parts[False].append(f"a{i}")
            else:
                parts[False].append(f"t{i}")
        code[True] += ["    " + line for line in lines]
        code[False] += lines
        parts[True] += value_parts
        parts[False] += value_parts
        columns_parts.append((t, inner, null_tag is not None, sets_null, value_parts))
    for some_null in (True, False):
        key_parts = []
        for ci, kt in key:
            t, inner, nullable, sets_null, value_parts = columns_parts[ci]
            branch = f"a{ci}" if some_null or sets_null else f"t{ci}"
            if kt == t:
                key_parts += [branch, *value_parts] if nullable else value_parts
            elif nullable and kt == inner:  # a nullable column in a key that has no null: NULL does not fit
                if branch == f"a{ci}":
                    code[some_null] += [f"if a{ci} is n{ci}:", "    _not_fast()"]
                key_parts += value_parts
            else:
                raise NotFast("a key field is not its column's row encoding")
        key_expr = "None" if not key else key_parts[0] if len(key_parts) == 1 else \
            "b''.join((" + "".join(f"{p}, " for p in key_parts) + "))"
        code[some_null] += [f"append({key_expr})",
                            "append(b''.join((" + "".join(f"{p}, " for p in parts[some_null]) + ")))"]
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
    exec(compile("\n".join(lines), "<binlog image encoder>", "exec"), env)  # noqa: S102 - generated from the table map
    return env["images"]
