"""Avro encoding of records whose fields mostly repeat from one record to the next.

A change-event envelope has a dozen fields that are the same for every row of a binlog
event (connector, database, table, server id, file, ...) and a few that change (the row
images, the row index, the op, the position).  Encoding every envelope whole with
fastavro redoes the constant part each time.  Avro's binary encoding is a plain
concatenation -- a record is its fields' encodings in order, with no framing, so a nested
record's fields are just part of the sequence -- hence :class:`RecordTemplate`:

* the schema's fields are flattened (nested records opened up, named types expanded) and
  cut into runs of constant fields around the variable ones;
* :meth:`RecordTemplate.bind` encodes the constant runs of one example record, once per
  group of records;
* :meth:`RecordTemplate.encode` joins those bytes with the variable fields' encodings.

Fields are encoded by :func:`field_encoder`: strings and integers directly, a
``["null", T]`` union as its branch index then ``T`` (the branch follows from the value
being None or not: no union resolution), anything else (records, bytes, logical types...)
with fastavro.

The result is byte for byte what fastavro writes for the whole record (unit-tested).
"""

from __future__ import annotations

import io
from typing import Any, Callable, Sequence

import fastavro
from fastavro.schema import expand_schema

from contract.errors import SerdeError

Encoder = Callable[[Any], bytes]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def avro_long(n: int) -> bytes:
    """Avro ``long`` (and ``int``): zig-zag, then a little-endian base-128 varint."""
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n} is out of the range of an Avro long")
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_int(n: int) -> bytes:
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n} is out of the range of an Avro int")
    return avro_long(n)


def avro_string(s: str) -> bytes:
    """Avro ``string``: the UTF-8 byte length as a long, then the bytes."""
    b = s.encode("utf-8")
    return avro_long(len(b)) + b


def _null(v: Any) -> bytes:
    if v is not None:
        raise ValueError(f"{v!r} is not null")
    return b""


def _type_name(t: Any) -> str | None:
    """The primitive type name of ``t`` if it is a plain primitive (no logical type)."""
    if isinstance(t, str):
        return t
    if isinstance(t, dict) and isinstance(t.get("type"), str) and "logicalType" not in t:
        return t["type"] if t["type"] != "record" else None
    return None


def _fastavro_encoder(schema: Any) -> Encoder:
    """fastavro's encoding of a value of ``schema`` (for any type)."""
    wrapped = isinstance(schema, dict) and schema.get("type") == "record"
    parsed = fastavro.parse_schema(schema if wrapped else
                                   {"type": "record", "name": "_value", "fields": [{"name": "v", "type": schema}]})
    write = fastavro.schemaless_writer

    def encode(v: Any) -> bytes:
        buf = io.BytesIO()
        write(buf, parsed, v if wrapped else {"v": v})
        return buf.getvalue()
    return encode


def field_encoder(t: Any) -> Encoder:
    """The encoder of a value of the (expanded) Avro type ``t``."""
    name = _type_name(t)
    if name == "string":
        return avro_string
    if name == "long":
        return avro_long
    if name == "int":
        return avro_int
    if name == "null":
        return _null
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        null_index = t.index("null")
        null_tag, value_tag = avro_long(null_index), avro_long(1 - null_index)
        inner = field_encoder(t[1 - null_index])

        def union(v: Any) -> bytes:
            return null_tag if v is None else value_tag + inner(v)
        return union
    return _fastavro_encoder(t)


def _leaves(fields: list[dict], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, type)`` of every field, nested records (not in unions) opened up."""
    out: list[tuple[str, Any]] = []
    for f in fields:
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "record":
            out.extend(_leaves(t["fields"], f"{prefix}{f['name']}."))
        else:
            out.append((f"{prefix}{f['name']}", t))
    return out


class RecordTemplate:
    """Encodes records of ``schema`` whose only changing fields are ``variable``.

    ``variable``: dotted paths of fields (``"source.row"`` for a field of a nested
    record), in schema order; :meth:`encode` takes their values in that order."""

    def __init__(self, schema: dict, variable: Sequence[str]) -> None:
        self.name = schema.get("name")
        leaves = _leaves(expand_schema(schema)["fields"])
        paths = [p for p, _ in leaves]
        missing = [v for v in variable if v not in paths]
        if missing:
            raise ValueError(f"schema {self.name} has no field(s) {missing}")
        if sorted(variable, key=paths.index) != list(variable):
            raise ValueError(f"variable fields {list(variable)} are not in the order of schema {self.name}")
        self.variable = tuple(variable)
        self._encoders: list[Encoder] = []
        # The constant fields before, between and after the variable ones: (path, encoder).
        self._runs: list[list[tuple[list[str], Encoder]]] = [[]]
        for path, t in leaves:
            if path in self.variable:
                self._encoders.append(field_encoder(t))
                self._runs.append([])
            else:
                self._runs[-1].append((path.split("."), field_encoder(t)))

    def bind(self, example: dict, header: bytes = b"") -> tuple[bytes, ...]:
        """The constant parts of records like ``example`` (its variable fields are not read),
        ``header`` before the first: pass the result to :meth:`encode`."""
        parts = []
        try:
            for run in self._runs:
                out = []
                for path, encode in run:
                    v = example
                    for key in path:
                        v = v[key]
                    out.append(encode(v))
                parts.append(b"".join(out))
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise SerdeError(f"record does not fit schema {self.name}: {exc}") from exc
        parts[0] = header + parts[0]
        return tuple(parts)

    def record(self, example: dict, values: Sequence[Any]) -> dict:
        """The whole record :meth:`encode` writes: ``example`` with the variable fields set
        to ``values`` (nested records on their paths copied, ``example`` left as it is)."""
        out = dict(example)
        for path, v in zip(self.variable, values, strict=True):
            *parents, last = path.split(".")
            node = out
            for p in parents:
                node[p] = node = dict(node[p])
            node[last] = v
        return out

    def encode(self, bound: tuple[bytes, ...], values: Sequence[Any]) -> bytes:
        """One record: the constant parts ``bound`` with the variable fields' ``values``."""
        parts = [bound[0]]
        try:
            for i, (encode, v) in enumerate(zip(self._encoders, values, strict=True)):
                parts.append(encode(v))
                parts.append(bound[i + 1])
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise SerdeError(f"record does not fit schema {self.name}: {exc}") from exc
        return b"".join(parts)
