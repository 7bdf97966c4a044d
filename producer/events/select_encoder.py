"""Snapshot chunk rows straight from the SELECT's bytes to Avro bodies, in the chunk read process.

A chunk's SELECT answers in MySQL's text protocol: per row, per column, a length and the
value's text (or NULL).  The values' way parses that text to Python values (pymysql's
converters: an ``int``, a ``Decimal``, a ``datetime``, a ``str`` per column), and the
producer's :class:`~producer.events.row_encoder.RowEncoder` converts and encodes them.  For
a table on the Avro fast path a :class:`SelectRowEncoder` does it in one function generated
per table version and result layout, reading the row's bytes:

* an integer's text to its varint (``int`` of the bytes);
* a DECIMAL's text to its unscaled integer (the digits without the point: the server writes
  exactly the column's scale), then its Avro bytes -- no ``Decimal``;
* a DATETIME's and a DATE's text to epoch milli- or microseconds and days (the date looked up
  per date, the time from its digits) -- no ``datetime``;
* a UTF-8 string's bytes as the Avro string's bytes (checked to be UTF-8, not decoded);
* every other column the values' way: pymysql's converter for the column, then the
  column's converter and field encoder -- the same functions.

Byte for byte what RowEncoder writes from pymysql's values (a differential test checks it on
arbitrary bytes); a row it does not take raises (:class:`~producer.events.row_encoder.NotFast`
or the error of reading it), and that row takes the values' way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from fastavro.schema import expand_schema
from pymysql.converters import convert_date

from common.generated_code import eval_generated, run_generated
from common.sql.row_parser import column_code, length_coded
from common.sql.sessions import datetime_from_text
from contract.conversion_rules import date_text_days, datetime_text_units, decimal_text, int_text
from producer.events import value_code as code
from producer.events.avro_template import type_name
from producer.events.row_encoder import NotFast, keys_comparable

try:  # the native encoder (producer/events/_select_rows.c, built by setup.py where a C compiler is)
    from producer.events import _select_rows
except ImportError:  # pragma: no cover - no compiler at install time: the generated Python does it
    _select_rows = None

#: Set to 0 to encode with the generated Python only (the native encoder is its twin in C).
NATIVE_ENV = "CDC_SELECT_NATIVE"


def native_enabled() -> bool:
    """Whether chunk rows are encoded by the native encoder (built, and not switched off)."""
    return _select_rows is not None and os.environ.get(NATIVE_ENV, "1") != "0"


class EpochDays(dict):
    """Days since 1970-01-01 of a date's text (``YYYY-MM-DD`` as bytes), False where it is not a
    valid date in that form: a cache of :func:`contract.conversion_rules.date_text_days` (the
    rule the native encoder runs), filled by :meth:`of`, bounded."""

    def of(self, text: bytes) -> int | bool:
        days = date_text_days(text)
        if len(self) >= 65_536:
            self.clear()
        self[text] = False if days is None else days
        return self[text]


_DAYS = EpochDays()
#: What the generated statements call: the conversion rules (contract/conversion_rules.py), and the
#: DATE cache of one.
_RULES = {"_days": _DAYS, "_datetime_text": datetime_text_units, "_decimal_text": decimal_text, "_int_text": int_text}


def _datetime_lines(i: int, unit: int) -> list[str]:
    """``y{i}`` from ``b``, a DATETIME's text ``YYYY-MM-DD hh:mm:ss[.f{1,6}]`` (what
    ``datetime_from_text`` parses to a datetime), in ``unit`` microseconds since the epoch:
    :func:`contract.conversion_rules.datetime_text_units`, the rule the native encoder runs."""
    return [f"v = _datetime_text(b, {unit})",
            "if v is None:",
            "    _not_fast()",
            *code.varint_lines(i)]


def _value_code(i: int, reading: tuple[str | None, Callable | None], t: Any, convert: Any, nullable: bool,
                env: dict) -> tuple[list[str], list[str], bool]:
    """``(lines, parts, sets_null)``: statements that turn ``b`` (``n`` bytes: column ``i``'s
    text, not NULL; read as pymysql's ``reading``, its encoding and converter) into the names
    ``parts``, whose concatenation is its encoding as Avro type ``t``; ``sets_null``: they may
    set the union's null branch instead (see :func:`~producer.events.value_code.general_lines`)."""
    encoding, read = reading
    if read is int:
        as_int = code.int_lines(i, convert, t, env)
        if as_int is not None:
            return ["v = _int_text(b)", "if v is None:", "    _not_fast()", *as_int], [f"y{i}"], False
    if read is Decimal and isinstance(t, dict) and code.is_decimal(convert, t, t.get("scale", 0)):
        digits = [f"v = _decimal_text(b, {t.get('scale', 0)})",  # (contract.conversion_rules, as _select_rows.c)
                  "if v is None:",
                  "    _not_fast()"]
        return digits + code.decimal_lines(i, t), [f"l{i}", f"y{i}"], False
    unit = code.datetime_unit(convert, t)
    if read is datetime_from_text and unit is not None:
        return _datetime_lines(i, unit), [f"y{i}"], False
    if read is convert_date and getattr(convert, "date_days", False) and type_name(t) == "int":
        return ["v = _days.get(b)",
                "if v is None:",
                "    v = _days.of(b)",
                "if v is False:",
                "    _not_fast()",
                *code.varint_lines(i)], [f"y{i}"], False
    if read is None and code.is_utf8_string(encoding, convert, t):
        return [f"y{i} = b", *code.utf8_lines(i)], [f"l{i}", f"y{i}"], False
    # pymysql's value (row_parser's reading), then the values' way
    value = "b" if encoding is None else f"b.decode(enc{i})"
    env[f"enc{i}"], env[f"r{i}"] = encoding, read
    lines = [f"v = {value if read is None else f'r{i}({value})'}", *code.general_lines(i, convert, t, nullable, env)]
    return lines, [f"y{i}"], nullable


class SelectRowEncoder:
    """The key and row bodies of the rows of a table version's chunk SELECT.

    ``te``: the table version (a :class:`~producer.events.builder.TableEvents` of rows read by a
    SELECT); ``readings``: per result column (the table's columns, in order) pymysql's
    ``(encoding, converter)`` (:func:`common.sql.row_reads.readings`).  Raises :class:`NotFast` when the
    table's keys are not comparable or not made of its row's encodings; a masked, hashed or
    truncated column is converted by its mapper's converter.  ``row``
    is the native encoder (``_select_rows.c``, :func:`native_row`) where it is built, else the
    generated Python (:func:`_compile`): where the native one gives bodies they are the same."""

    def __init__(self, te: Any, readings: list[tuple[str | None, Callable | None]], *,
                 native: bool | None = None) -> None:
        if te.key_schema is not None and not keys_comparable(te.key_schema):
            raise NotFast(f"{te.table.qualified_name}: its keys' bytes are not comparable")
        fields = expand_schema(te.row_schema)["fields"]
        plan = te.converter.plan
        if len(readings) != len(plan) or [f["name"] for f in fields] != [f for _, f, _ in plan]:
            raise NotFast(f"{te.table.qualified_name}: the result's columns are not the table's")
        key_types: list[Any] = []
        if te.key_schema is not None:
            key_types = [f["type"] for f in expand_schema(te.key_schema)["fields"]]
        names = te.table.column_names
        key = list(zip([names.index(name) for name in te.key_columns], key_types))
        self.ident = te.ident
        row_types, converters = [f["type"] for f in fields], [conv for _, _, conv in plan]
        # (a masked, hashed or truncated column: its converter's way, a NULL perhaps a value)
        mapped = [code.mapped_column(col, t, conv) for col, t, conv in zip(te.table.columns, row_types, converters)]
        compile_row = native_row if (native_enabled() if native is None else native) else _compile
        self.row = compile_row(readings, row_types, converters, key, mapped)


def _compile(readings: list, row_types: list, converters: list, key: list[tuple[int, Any]],
             mapped: list[code.Mapped | None]) -> Any:
    """``row(data) -> (key body or None, row body)`` of one row's payload (a :class:`Mapped
    <producer.events.value_code.Mapped>` column writes its NULL's encoding for a NULL)."""
    env = code.namespace()
    env.update({"_length": length_coded, **_RULES})
    lines = ["def row(data):", "    p = 0"]
    columns_parts, parts = [], []
    for i, (reading, t, convert, m) in enumerate(zip(readings, row_types, converters, mapped)):
        null_tag, value_tag, inner = code.split_union(t)
        value_lines, value_parts, _ = _value_code(i, reading, inner, convert, null_tag is not None, env)
        if m is not None and m.null is not None:  # a NULL is a value: its encoding
            env[f"nv{i}"], env[f"n{i}"], env[f"t{i}"] = m.null, null_tag, value_tag
            null = [*(f"{p} = b''" for p in value_parts[:-1]), f"{value_parts[-1]} = nv{i}"]
            if null_tag is None:
                lines += ["    " + line for line in column_code(null, value_lines)]
            else:
                lines += ["    " + line
                          for line in column_code([f"a{i} = t{i}", *null], [f"a{i} = t{i}", *value_lines])]
                parts.append(f"a{i}")
        elif null_tag is None:  # (a NULL where the schema has no null: the values' way says so)
            lines += ["    " + line for line in column_code(["_not_fast()"], value_lines)]
        else:
            env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
            lines += ["    " + line for line in column_code([f"a{i} = n{i}", *(f"{p} = b''" for p in value_parts)],
                                                           [f"a{i} = t{i}", *value_lines])]
            parts.append(f"a{i}")
        parts += value_parts
        columns_parts.append((t, inner, null_tag is not None, value_parts))
    kparts, checks = code.key_parts(columns_parts, key, lambda ci: f"a{ci}")
    lines += ["    if p != len(data):",
              "        raise ValueError('the row has more or fewer bytes than its columns')",
              *("    " + line for line in checks),
              f"    return {code.joined(kparts)}, {code.joined(parts)}"]
    run_generated("\n".join(lines), "SELECT row encoder", env)
    return env["row"]


def native_row(readings: list, row_types: list, converters: list, key: list[tuple[int, Any]],
               mapped: list[code.Mapped | None]) -> Any:
    """What :func:`_compile` gives, by the native encoder (``_select_rows.Program``): integers,
    DECIMALs of up to 38 digits, DATETIMEs, DATEs and UTF-8 strings from their text in C, every
    other column by its statements of :func:`_value_code`, compiled into a function of its own."""
    return _select_rows.Program(native_plan(readings, row_types, converters, key, mapped))


def native_plan(readings: list, row_types: list, converters: list, key: list[tuple[int, Any]],
                mapped: list[code.Mapped | None] | None = None) -> tuple:
    """The plan of ``_select_rows.Program`` (its layout: the top of ``_select_rows.c``), making the
    choices :func:`_value_code` makes."""
    env = code.namespace()
    env.update(_RULES)
    ops = _select_rows
    plan, column_types = [], []
    for i, ((encoding, read), t, convert) in enumerate(zip(readings, row_types, converters)):
        null_tag, value_tag, inner = code.split_union(t)
        column_types.append((t, inner, null_tag is not None))
        tags = (null_tag, value_tag)
        through = code.int_range(convert, inner) if read is int else None
        m = None if mapped is None else mapped[i]
        if m is not None:  # (a mapped column: its converter, a NULL perhaps a value)
            plan.append((ops.PY, *tags, _column_function(i, (encoding, read), inner, convert, null_tag, value_tag, env),
                         m.null))
        elif through is not None:
            other = eval_generated(f"lambda v: {code.general_code(i, convert, inner, env)}", "SELECT column encoder", env)
            plan.append((ops.INT, *tags, *through, other))
        elif read is Decimal and isinstance(inner, dict) and code.is_decimal(convert, inner, inner.get("scale", 0)) \
                and inner["precision"] <= 38:
            plan.append((ops.DECIMAL, *tags, inner.get("scale", 0), inner["precision"]))
        elif read is datetime_from_text and code.datetime_unit(convert, inner) is not None:
            plan.append((ops.DATETIME, *tags, code.datetime_unit(convert, inner)))
        elif read is convert_date and getattr(convert, "date_days", False) and type_name(inner) == "int":
            plan.append((ops.DATE, *tags))
        elif read is None and code.is_utf8_string(encoding, convert, inner):
            plan.append((ops.UTF8, *tags))
        else:
            plan.append((ops.PY, *tags, _column_function(i, (encoding, read), inner, convert, null_tag, value_tag, env),
                         None))
    return tuple(plan), tuple(code.key_fields(column_types, key)), NotFast


def _column_function(i: int, reading: tuple, inner: Any, convert: Any, null_tag: bytes | None,
                     value_tag: bytes | None, env: dict) -> Any:
    """``column(text) -> encoding or None`` of column ``i``'s non-NULL text: its :func:`_value_code`
    statements (None: the converter made it the union's null)."""
    lines, value_parts, sets_null = _value_code(i, reading, inner, convert, null_tag is not None, env)
    env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
    body = ["n = len(b)"] + ([f"a{i} = t{i}"] if sets_null else []) + lines + \
        [f"return None if a{i} is n{i} else {code.joined(value_parts)}" if sets_null else
         f"return {code.joined(value_parts)}"]
    source = "\n".join([f"def column{i}(b):", *("    " + line for line in body)])
    run_generated(source, "SELECT column encoder", env)
    return env[f"column{i}"]
