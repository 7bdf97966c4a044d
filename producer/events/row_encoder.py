"""Row images straight to Avro bytes: each column's value converter and field encoder fused.

The general path of a row image is two passes and a dict: :class:`RowConverter` builds the
Avro record (a dict of converted values), then the record is encoded field by field.
:class:`RowEncoder` does the same work in one pass over the row's values, with the same
two functions per column -- the converter of :mod:`producer.events.values` and the
encoder of :func:`producer.events.avro_template.field_encoder` -- so its bytes are, by
construction, those of the general path; it only leaves out the intermediate record.

It takes the common case only and says so by raising (the caller then takes the general
path, which gives the same value or raises the error the user would have seen):

* a row without exactly the table's columns (the general path names the missing or
  unknown one);
* an empty SET (told by its ``none_sources`` reason: the general path makes it ``''``);
* any error of a converter or an encoder.

Keys come out as the key record's body (no framing).  Two key bodies are equal exactly
when the converted key records are, except for FLOAT/DOUBLE columns (``-0.0`` and ``0.0``
are equal values with different bytes): :attr:`RowEncoder.keys_comparable` tells.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

from fastavro.schema import expand_schema

from common.errors import CDCError
from common.generated_code import run_generated
from producer.events.avro_template import (
    CONTINUED_VARINTS,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    avro_bytes,
    avro_long,
    avro_varint,
    decimal_bytes,
    field_encoder,
    type_name,
)
from producer.events.values import EMPTY_SET, RowConverter

#: Avro types whose encodings are equal exactly when the values are (nullable or not).
_COMPARABLE = {"int", "long", "string", "bytes", "boolean", "null"}


class NotFast(CDCError):  # noqa: N818 - a signal to take the general path, not an error
    """This row takes the general path."""


def keys_comparable(key_schema: Any) -> bool:
    """Whether equal keys of ``key_schema`` (a key record's schema) have equal bodies (no FLOAT
    or DOUBLE field: ``-0.0`` and ``0.0``)."""
    return all(_comparable(f["type"]) for f in expand_schema(key_schema)["fields"])


def _comparable(t: Any) -> bool:
    if isinstance(t, list):
        return all(_comparable(x) for x in t)
    if isinstance(t, dict):
        return t.get("type") in _COMPARABLE and t.get("logicalType") in (None, "decimal")
    return t in _COMPARABLE


def _fused(fields: list[dict], plan: list[tuple[str, str, Any]], what: str) -> list[tuple[str, Any, Any]]:
    """``(column, converter, field encoder)`` of each field, in order.  (A key schema names
    its fields among the key's columns only, so a key field's name may differ from the
    converter's for the same column: they are matched by position.)"""
    if len(fields) != len(plan) or (what == "row" and [f["name"] for f in fields] != [f for _, f, _ in plan]):
        raise NotFast(f"the {what} schema's fields are not the converter's columns")
    return [(name, conv, field_encoder(f["type"])) for (name, _, conv), f in zip(plan, fields)]


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
INT_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}


def int_code(v: str, parts: int = 2) -> str:
    """The expression of ``avro_varint(v)`` for an int ``v`` in a long's range, looked up 14
    bits at a time up to ``parts`` lookups (``_small``, ``_cont`` and ``_varint`` in its
    namespace: see :func:`producer.events.avro_template.avro_varint`)."""
    code = f"_small[z] if (z := ({v} << 1) ^ ({v} >> 63)) < {SMALL_VARINT_LIMIT} else "
    for k in range(2, parts + 1):
        lookups = " + ".join([f"_cont[z >> {14 * j} & {SMALL_VARINT_LIMIT - 1}]" if j else
                              f"_cont[z & {SMALL_VARINT_LIMIT - 1}]" for j in range(k - 1)] + [f"_small[z >> {14 * (k - 1)}]"])
        code += f"{lookups} if z < {SMALL_VARINT_LIMIT ** k} else "
    return f"({code}_varint({v}))"


def _str_code(v: str) -> str:
    """The expression of an Avro string's encoding of a str ``v``."""
    return f"(_small[len(b) << 1] + b if len(b := {v}.encode('utf-8')) < {SMALL_VARINT_LIMIT >> 1} else _bytes(b))"


def _column_code(i: int, t: Any, convert: Any, encode: Any, env: dict) -> str:
    """The expression encoding value ``v{i}`` of a column of Avro type ``t``: ``encode(convert(v))``,
    with the calls left out for the values a converter passes through unchanged (ints and
    strings) and whose encoding is plain."""
    env[f"c{i}"], env[f"e{i}"] = convert, encode
    general = f"e{i}(c{i}(v{i}))"
    through = getattr(convert, "passes_through", None)
    null_tag = value_tag = None
    inner = t
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        n = t.index("null")
        null_tag, value_tag, inner = avro_long(n), avro_long(1 - n), t[1 - n]
    name = type_name(inner)
    special = _special_code(i, inner, convert, env)
    if special is not None:
        test, value = special
        if null_tag is None:
            return f"({value} if {test} else {general})"
        env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
        return f"(n{i} if v{i} is None else t{i} + {value} if {test} else {general})"
    if through is None or name not in ("int", "long", "string"):
        return general
    kind, low = through
    if name == "string" and kind is str:
        plain = f"({_str_code(f'v{i}')} if type(v{i}) is str else {general})"
        value_plain = _str_code(f"v{i}")
    elif name in INT_RANGE and kind is int:
        lo, hi = INT_RANGE[name]
        env[f"lo{i}"], env[f"hi{i}"] = lo if low is None else max(lo, low), hi
        plain = f"({int_code(f'v{i}')} if type(v{i}) is int and lo{i} <= v{i} <= hi{i} else {general})"
        value_plain = None
    else:
        return general
    if null_tag is None:
        return plain
    # None converts to None, which the union writes as its null branch.
    env[f"n{i}"], env[f"t{i}"] = null_tag, value_tag
    if value_plain is not None:
        return f"(n{i} if v{i} is None else t{i} + {value_plain} if type(v{i}) is str else {general})"
    return (f"(n{i} if v{i} is None else t{i} + {int_code(f'v{i}')} if type(v{i}) is int and lo{i} <= v{i} <= hi{i} "
            f"else {general})")


def _decimal_body(scale: int, precision: int) -> Any:
    """The Avro ``bytes`` decimal of a Decimal already of exponent ``-scale`` (what the
    column's converter returns unchanged, see ``decimal_scale``), None for any other.

    Read off the Decimal's text (``str`` is its cheapest accessor): a Decimal of exponent
    ``-scale`` prints as its digits with the point ``scale`` places from the end (``-0.05``,
    ``1234.56``; ``1234`` for scale 0), unless it prints in scientific notation (tiny
    values, positive exponents), which is refused here with every other exponent, NaN and
    infinities.  Its digits are those of the unscaled value, so a value of more than
    ``precision`` digits is refused as ``as_tuple`` would tell."""
    limit = 10 ** precision if precision > 0 else 0  # (no value has no digits: none passes)
    point = -scale - 1

    def body(v: Decimal) -> bytes | None:
        s = str(v)
        if scale:
            if s[point:point + 1] != "." or "E" in s:
                return None
            digits = s[:point] + s[point + 1:]
        else:
            digits = s
        if not (digits[1:] if digits[:1] == "-" else digits).isdigit():
            return None
        unscaled = int(digits)
        if not -limit < unscaled < limit:
            return None
        return decimal_bytes(unscaled)
    return body


def _special_code(i: int, t: Any, convert: Any, env: dict) -> tuple[str, str] | None:
    """``(test, expression)`` encoding ``v{i}`` straight from a naive datetime (DATETIME) or a
    Decimal at the column's scale (DECIMAL), or None."""
    unit = getattr(convert, "datetime_unit", None)
    if unit is not None and type_name(t) == "long":
        env["datetime"] = datetime
        v = f"v{i}"
        return (f"type({v}) is datetime and {v}.tzinfo is None",
                f"_varint((({v}.toordinal() - {_EPOCH_ORDINAL}) * 86400 + {v}.hour * 3600 + {v}.minute * 60 + "
                f"{v}.second) * {1_000_000 // unit} + {v}.microsecond // {unit})")
    scale = getattr(convert, "decimal_scale", None)
    if scale is not None and isinstance(t, dict) and t.get("type") == "bytes" and t.get("logicalType") == "decimal" \
            and t.get("scale", 0) == scale and isinstance(t.get("precision"), int):
        env["Decimal"], env[f"dec{i}"] = Decimal, _decimal_body(scale, t["precision"])
        return f"type(v{i}) is Decimal and (d{i} := dec{i}(v{i})) is not None", f"d{i}"
    return None


def _compile(plan: list[tuple[Any, Any, Any, Any]], what: str) -> Any:
    """A function of a row image (a dict by column name, or a tuple in column order) to the
    concatenated encodings of ``plan``'s columns ``(name or index, type, convert, encode)``."""
    env: dict[str, Any] = {"_bytes": avro_bytes, "_varint": avro_varint, "_small": SMALL_VARINTS,
                           "_cont": CONTINUED_VARINTS}
    lines = [f"def {what}(values):"]
    for i, (where, t, convert, encode) in enumerate(plan):
        env[f"k{i}"] = where
        lines.append(f"    v{i} = values[k{i}]")
    exprs = [_column_code(i, t, convert, encode, env) for i, (_, t, convert, encode) in enumerate(plan)]
    lines.append("    return b''.join((" + "".join(f"{e}, " for e in exprs) + "))")
    run_generated("\n".join(lines), f"{what} encoder", env)
    return env[what]


class RowEncoder:
    """Avro bodies of the row records and key records of one table version."""

    def __init__(self, converter: RowConverter, row_schema: dict, key_schema: dict | None) -> None:
        fields = expand_schema(row_schema)["fields"]
        plan = _fused(fields, converter.plan, "row")
        self.names = tuple(name for name, _, _ in plan)  # the columns, in order
        self.width = len(plan)
        self.has_sets = converter.has_sets
        types = [f["type"] for f in fields]
        self._row_dict = _compile([(name, t, c, e) for (name, c, e), t in zip(plan, types)], "row")
        self._row_tuple = _compile([(i, t, c, e) for i, ((_, c, e), t) in enumerate(zip(plan, types))], "row")
        self._key_dict = self._key_tuple = None
        self.keys_comparable = True
        if key_schema is not None:
            key_fields = expand_schema(key_schema)["fields"]
            key_plan = _fused(key_fields, converter.key_plan, "key")
            key_types = [f["type"] for f in key_fields]
            self._key_dict = _compile([(name, t, c, e) for (name, c, e), t in zip(key_plan, key_types)], "key")
            self._key_tuple = _compile([(self.names.index(name), t, c, e)
                                        for (name, c, e), t in zip(key_plan, key_types)], "key")
            self.keys_comparable = keys_comparable(key_schema)

    @staticmethod
    def empty_set(none_sources: Mapping[str, str] | None) -> bool:
        """Whether ``none_sources`` (why values are None) tells of an empty SET."""
        return bool(none_sources) and EMPTY_SET in none_sources.values()

    def row(self, values: Mapping[str, Any]) -> bytes:
        """The row record's body of a full row image (``{column: value}``)."""
        if len(values) != self.width:
            raise NotFast()
        return self._row_dict(values)

    def key(self, values: Mapping[str, Any]) -> bytes | None:
        """The key record's body of a row image; None when the table has no key."""
        return None if self._key_dict is None else self._key_dict(values)

    def row_tuple(self, values: tuple) -> bytes:
        """:meth:`row` of the values in column order (:class:`PackedRows`' images)."""
        if len(values) != self.width:
            raise NotFast()
        return self._row_tuple(values)

    def key_tuple(self, values: tuple) -> bytes | None:
        """:meth:`key` of the values in column order."""
        return None if self._key_tuple is None else self._key_tuple(values)


class EncodedRows:
    """A snapshot chunk's rows encoded where they were read (a chunk read process,
    :mod:`producer.snapshot.chunk_process`), so the producer only joins each record's
    envelope around them.

    ``bodies``: ``(key body or None, row body)`` of the first rows, as :class:`RowEncoder`
    gives them; ``rest``: the rows from the first one the encoder did not take, as row dicts
    (the general path encodes them, or raises the error the user sees); ``last``: the last
    row as a dict (the next chunk starts after its key).  ``table``: the table version and key
    columns they were encoded for (:meth:`producer.events.builder.EventBuilder.read_encoding`).
    As a sequence it holds the rows whose values it kept: the last one and ``rest``.
    """

    __slots__ = ("table", "bodies", "rest", "last")

    def __init__(self, table: Any, bodies: list[tuple[bytes | None, bytes]], rest: list[dict],
                 last: dict | None) -> None:
        self.table = table
        self.bodies = bodies
        self.rest = rest
        self.last = last

    def __len__(self) -> int:
        return len(self.bodies) + len(self.rest)

    def __getitem__(self, i: int) -> dict:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        if i >= len(self.bodies):
            return self.rest[i - len(self.bodies)]
        if i == n - 1 and self.last is not None:
            return self.last
        raise LookupError(f"row {i} of the chunk was encoded where it was read: its values were not kept")


def encode_rows(encoder: RowEncoder, table: Any, names: tuple[str, ...], rows: list[tuple]) -> EncodedRows:
    """``rows`` (value tuples in ``names``' order, the encoder's columns) as :class:`EncodedRows`."""
    if tuple(names) != encoder.names:
        raise NotFast("the rows' columns are not the encoder's")
    bodies: list[tuple[bytes | None, bytes]] = []
    row, key = encoder.row_tuple, encoder.key_tuple
    append = bodies.append
    for i, values in enumerate(rows):
        try:
            append((key(values), row(values)))
        except Exception:  # noqa: BLE001 - the general path gives the value or the error
            rest = [dict(zip(names, v)) for v in rows[i:]]
            break
    else:
        rest = []
    return EncodedRows(table, bodies, rest, dict(zip(names, rows[-1])) if rows else None)
