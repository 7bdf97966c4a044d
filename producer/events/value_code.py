"""Generated code that turns one column's value into its Avro encoding: the pieces shared by
the encoders that read rows straight to Avro bodies where they are read -- the binlog image
encoder (:mod:`producer.events.image_encoder`, binlog bytes) and the SELECT row encoder
(:mod:`producer.events.select_encoder`, the text protocol's bytes).

Each piece is a list of statements for column ``i`` that leaves its encoding in names of
bytes (its *parts*: ``y{i}``, with ``l{i}`` before it for a length) from a value the caller
has read into ``v`` (or, for a string, its bytes into ``y{i}`` and their length into ``n``).
The encoding is always the one :class:`~producer.events.row_encoder.RowEncoder` writes for
the value the values' way gives, or the statements call ``_not_fast()`` (the row then takes
the values' way): the same converter and field encoder for anything not written out here.
A nullable column's union branch is the caller's: ``a{i}`` (``t{i}``, or ``n{i}`` for null).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from producer.events.avro_template import (
    CONTINUED_VARINTS,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    avro_long,
    avro_varint,
    field_encoder,
    type_name,
)
from producer.events.row_encoder import INT_RANGE, NotFast, int_code

#: Python codec names of UTF-8 (as pymysql and python-mysql-replication name it).
UTF8 = frozenset({"utf8", "utf-8", "utf_8"})


def not_fast() -> Any:
    raise NotFast()


def namespace() -> dict[str, Any]:
    """The names every generated encoder uses."""
    return {"_not_fast": not_fast, "_varint": avro_varint, "_small": SMALL_VARINTS, "_cont": CONTINUED_VARINTS}


def split_union(t: Any) -> tuple[bytes | None, bytes | None, Any]:
    """``(null tag, value tag, inner type)`` of a ``["null", T]`` union; ``(None, None, t)`` else."""
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        n = t.index("null")
        return avro_long(n), avro_long(1 - n), t[1 - n]
    return None, None, t


def is_decimal(convert: Any, t: Any, scale: int) -> bool:
    """Whether a DECIMAL of ``scale`` converts to an Avro ``bytes`` decimal of that scale with
    its digits unchanged (its unscaled integer is all the encoding needs)."""
    return getattr(convert, "decimal_scale", None) == scale and isinstance(t, dict) and t.get("type") == "bytes" \
        and t.get("logicalType") == "decimal" and t.get("scale", 0) == scale and isinstance(t.get("precision"), int)


def decimal_lines(i: int, t: Any) -> list[str]:
    """``v``, a DECIMAL's unscaled integer: ``decimal_bytes`` inline (its length, then two's
    complement with a sign bit to spare), refused beyond the precision (as fastavro refuses)."""
    limit = 10 ** t["precision"]
    return [f"if not -{limit} < v < {limit}:",
            "    _not_fast()",
            "if v >= 0:",
            f"    y{i} = v.to_bytes((v.bit_length() + 8) >> 3, 'big')",
            "else:",
            f"    y{i} = v.to_bytes(((-v).bit_length() + 8) >> 3, 'big', signed=True)",
            f"l{i} = _small[len(y{i}) << 1]"]


def datetime_unit(convert: Any, t: Any) -> int | None:
    """The unit (1 or 1000 microseconds) of a DATETIME's converter whose value is an Avro
    long of that many units since the epoch (its wall clock read as UTC), else None."""
    unit = getattr(convert, "datetime_unit", None)
    return unit if unit in (1, 1000) and type_name(t) == "long" else None


def varint_lines(i: int) -> list[str]:
    """``v``, an int in a long's range (a timestamp's units)."""
    return [f"y{i} = {int_code('v', parts=3)}"]


def int_range(convert: Any, t: Any) -> tuple[int, int] | None:
    """The ints a column's converter passes through unchanged to Avro int or long ``t``, as
    ``(lo, hi)``: their encoding is their varint; None for any other column."""
    through = getattr(convert, "passes_through", None)
    name = type_name(t)
    if through is None or through[0] is not int or name not in INT_RANGE:
        return None
    lo, hi = INT_RANGE[name]
    return (lo if through[1] is None else max(lo, through[1])), hi


def int_lines(i: int, convert: Any, t: Any, env: dict, reads: tuple[int, int] | None = None) -> list[str] | None:
    """``v``, an int (``reads``: the range the reading gives): ``y{i}``, where the converter
    passes ints through to an Avro int or long; None for any other column."""
    through = int_range(convert, t)
    if through is None:
        return None
    lo, hi = through
    if reads is not None and lo <= reads[0] and reads[1] <= hi:  # every value read passes through and fits
        return [f"y{i} = {int_code('v')}"]
    env[f"lo{i}"], env[f"hi{i}"] = lo, hi
    return [f"y{i} = {int_code('v')} if lo{i} <= v <= hi{i} else {general_code(i, convert, t, env)}"]


def is_utf8_string(encoding: str | None, convert: Any, t: Any) -> bool:
    """Whether a column read as text of ``encoding`` encodes as those bytes (an Avro string
    whose converter passes strings through)."""
    through = getattr(convert, "passes_through", None)
    return encoding in UTF8 and through is not None and through[0] is str and type_name(t) == "string"


def utf8_lines(i: int) -> list[str]:
    """``y{i}``, ``n`` bytes read as UTF-8 text: they are the Avro string's bytes, once known to
    be UTF-8 (Python's UTF-8 decoder accepts exactly UTF-8); ``l{i}``, their length."""
    return [f"if not y{i}.isascii():",
            f"    y{i}.decode('utf-8')",
            f"l{i} = _small[n << 1] if n < {SMALL_VARINT_LIMIT >> 1} else _varint(n)"]


def general_code(i: int, convert: Any, t: Any, env: dict) -> str:
    """The expression of ``v``'s encoding by the column's converter and field encoder (a value
    the converter makes None is refused)."""
    env[f"c{i}"], env[f"e{i}"] = convert, field_encoder(t)
    return f"e{i}(cv) if (cv := c{i}(v)) is not None else _not_fast()"


def general_lines(i: int, convert: Any, t: Any, nullable: bool, env: dict) -> list[str]:
    """``v``: ``y{i}`` by the column's converter and field encoder; where the converter makes it
    None (a zero TIMESTAMP), the union's null branch when ``nullable`` (``a{i}``, ``y{i}``
    empty), else refused."""
    env[f"c{i}"], env[f"e{i}"] = convert, field_encoder(t)
    return [f"cv = c{i}(v)",
            "if cv is None:",
            f"    a{i} = n{i}" if nullable else "    _not_fast()",
            f"    y{i} = b''",
            "else:",
            f"    y{i} = e{i}(cv)"]


class Mapped(NamedTuple):
    """What a masked, hashed or truncated column (producer/column_mappers.py) writes besides its
    converter's values: the encoding of a NULL, which its converter makes a value (a mask; None:
    the union's null branch), and the value of an empty SET (which the binlog decoder reads as
    None)."""

    null: bytes | None
    empty_set: Any


def mapped_column(col: Any, t: Any, convert: Any) -> Mapped | None:
    """The :class:`Mapped` of a column (its definition, row type and converter) whose values a
    mapper changes; None for any other.  Such a column takes its converter's way in the fast
    encoders (its converter has none of the attributes their fast ops look for)."""
    if col.mapping is None or col.mapping.transform(col) is None:
        return None
    null = convert(None)
    return Mapped(None if null is None else field_encoder(split_union(t)[2])(null),
                  col.mapping.wrap(lambda v: "", col)(None))


def key_parts(columns: list[tuple[Any, Any, bool, list[str]]], key: list[tuple[int, Any]],
              branch: Any) -> tuple[list[str], list[str]]:
    """``(parts, checks)``: the key body's parts and the statements that refuse a key they
    cannot encode.  ``columns``: per column ``(row type, inner type, nullable, value parts)``;
    ``key``: per key field ``(column index, key type)``; ``branch(i)``: the name of nullable
    column ``i``'s union branch.  A key field is its column's row encoding (or, for a nullable
    column in a key without null, the value's: a NULL is refused); else :class:`NotFast`."""
    parts: list[str] = []
    checks: list[str] = []
    for ci, with_branch, refuse_null in key_fields([c[:3] for c in columns], key):
        value_parts = columns[ci][3]
        if refuse_null and branch(ci) == f"a{ci}":
            checks += [f"if a{ci} is n{ci}:", "    _not_fast()"]
        parts += [branch(ci), *value_parts] if with_branch else value_parts
    return parts, checks


def key_fields(columns: list[tuple[Any, Any, bool]], key: list[tuple[int, Any]]) -> list[tuple[int, bool, bool]]:
    """Per key field ``(column index, with the union's branch, refused when NULL)``: a key field
    is its column's row encoding (with its union branch), or, for a nullable column in a key
    without null, the value's (a NULL is refused); else :class:`NotFast`.  ``columns``: per
    column ``(row type, inner type, nullable)``; ``key``: per key field ``(column index, key type)``."""
    fields = []
    for ci, kt in key:
        t, inner, nullable = columns[ci]
        t, inner = _bare(t), _bare(inner)  # (a value field's Connect parameters: its bytes are the key's)
        if kt == t:
            fields.append((ci, nullable, False))
        elif nullable and kt == inner:
            fields.append((ci, False, True))
        else:
            raise NotFast("a key field is not its column's row encoding")
    return fields


def _bare(t: Any) -> Any:
    """``t`` without Connect parameters a column mapper added (producer/column_mappers.py), which
    change no byte of its encoding: ``{"type": "int", "connect.parameters": ...}`` is ``"int"``."""
    if isinstance(t, list):
        return [_bare(x) for x in t]
    if isinstance(t, dict) and "connect.parameters" in t:
        rest = {k: v for k, v in t.items() if k != "connect.parameters"}
        return rest["type"] if list(rest) == ["type"] and isinstance(rest["type"], str) else t
    return t


def joined(parts: list[str]) -> str:
    """The expression of the concatenation of ``parts``."""
    if not parts:
        return "None"
    return parts[0] if len(parts) == 1 else "b''.join((" + "".join(f"{p}, " for p in parts) + "))"
