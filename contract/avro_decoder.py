"""Avro decoding compiled per writer schema: the merge job's hot path.

fastavro reads any schema by walking it for every record: a dictionary look-up, a type
test and a call per field.  A change-event envelope has some thirty fields, and decoding
was the largest single cost of the merge job (``docs/benchmarks.md``).  Since a topic's
records share a handful of writer schemas, :func:`compile_decoder` turns a schema into
the Python source of one function that reads exactly that schema, field after field,
with the varints of ints and longs read inline, and ``exec``-utes it once.  Measured on
the benchmark's envelope: about 1.7 times fastavro's speed.

The result equals :func:`fastavro.schemaless_reader` for the same writer schema (no
reader schema): records as dicts in field order, unions as their branch's value, enums as
their symbol, ``fixed`` and ``bytes`` as :class:`bytes`, ``decimal`` (on bytes or fixed)
as :class:`decimal.Decimal` with the schema's scale.  A schema with another logical type
(fastavro converts those to dates and times) or a recursive one is not compiled:
:func:`compile_decoder` raises :class:`NotCompiled` and the caller keeps fastavro.
Malformed input raises :class:`~contract.errors.SerdeError` instead of an ``IndexError``.
"""

from __future__ import annotations

import struct
from decimal import Context, Decimal
from typing import Any, Callable

from fastavro.schema import expand_schema

from contract.errors import NotCompiled, SerdeError

Decoder = Callable[[bytes, int], Any]

__all__ = ["Decoder", "NotCompiled", "compile_decoder", "read_long", "schema_label"]

_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


def read_long(b: bytes, i: int) -> tuple[int, int]:
    """An Avro ``long`` (zig-zag varint) at ``b[i]``: ``(value, next index)``."""
    shift = z = 0
    while True:
        x = b[i]
        i += 1
        z |= (x & 0x7F) << shift
        if x < 0x80:
            return (z >> 1) ^ -(z & 1), i
        shift += 7
        if shift > 63:
            raise ValueError("an Avro long longer than 10 bytes")


def _decimal(context: Context, scale: int) -> Callable[[bytes], Decimal]:
    """fastavro's decimal: the big-endian two's-complement unscaled value, scaled."""
    create, neg = context.create_decimal, -scale

    def convert(data: bytes) -> Decimal:
        return create(int.from_bytes(data, "big", signed=True)).scaleb(neg, context)
    return convert


class _Source:
    """The function being written: lines, fresh variable names, the constants it uses."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names = 0
        self.consts: dict[str, Any] = {"_long": read_long, "_unpack_d": struct.Struct("<d").unpack_from,
                                       "_unpack_f": struct.Struct("<f").unpack_from}

    def var(self) -> str:
        self.names += 1
        return f"v{self.names}"

    def const(self, value: Any) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def long(self, d: int, target: str) -> None:
        # one- and two-byte varints (|n| < 8192: lengths, union branches, small numbers)
        # inline, longer ones by a call
        self.emit(d, "x = b[i]")
        self.emit(d, "if x < 128:")
        self.emit(d + 1, f"i += 1; {target} = (x >> 1) ^ -(x & 1)")
        self.emit(d, "elif b[i + 1] < 128:")
        self.emit(d + 1, f"x = (x & 127) | (b[i + 1] << 7); i += 2; {target} = (x >> 1) ^ -(x & 1)")
        self.emit(d, "else:")
        self.emit(d + 1, f"{target}, i = _long(b, i)")

    def blob(self, d: int, target: str, size: str | int) -> None:
        """``size`` bytes at ``i`` into ``target`` (checked: a short record is an error)."""
        self.emit(d, f"{target} = b[i:i + {size}]")
        self.emit(d, f"if len({target}) != {size}: raise IndexError('record too short')")
        self.emit(d, f"i += {size}")

    def value(self, t: Any, d: int, target: str, depth: int = 0) -> None:
        if depth > 64:
            raise NotCompiled("a schema nested deeper than 64 levels (recursive?)")
        if isinstance(t, list):
            branch = self.var()
            self.long(d, branch)
            for k, bt in enumerate(t):
                self.emit(d, f"{'if' if k == 0 else 'elif'} {branch} == {k}:")
                self.value(bt, d + 1, target, depth + 1)
            self.emit(d, "else:")
            self.emit(d + 1, f"raise ValueError('union branch ' + str({branch}) + ' out of range')")
            return
        if isinstance(t, dict):
            kind = t.get("type")
            logical = t.get("logicalType")
            if isinstance(kind, (dict, list)):
                return self.value(kind, d, target, depth + 1)
            if logical is not None and not (logical == "decimal" and kind in ("bytes", "fixed")):
                raise NotCompiled(f"logical type {logical!r}")
            if logical == "decimal":
                ctx = Context(prec=int(t["precision"]))
                conv = self.const(_decimal(ctx, int(t.get("scale", 0))))
                raw = self.var()
                if kind == "bytes":
                    n = self.var()
                    self.long(d, n)
                    self.blob(d, raw, n)
                else:
                    self.blob(d, raw, int(t["size"]))
                self.emit(d, f"{target} = {conv}({raw})")
                return
            if kind == "record":
                parts = []
                for f in t["fields"]:
                    v = self.var()
                    self.value(f["type"], d, v, depth + 1)
                    parts.append((f["name"], v))
                self.emit(d, f"{target} = {{" + ", ".join(f"{n!r}: {v}" for n, v in parts) + "}")
                return
            if kind == "enum":
                symbols = self.const(tuple(t["symbols"]))
                n = self.var()
                self.long(d, n)
                self.emit(d, f"{target} = {symbols}[{n}]")
                return
            if kind == "fixed":
                raw = self.var()
                self.blob(d, raw, int(t["size"]))
                self.emit(d, f"{target} = bytes({raw})")
                return
            if kind in ("array", "map"):
                self._block(t, kind, d, target, depth)
                return
            if kind in _PRIMITIVES:
                return self.value(kind, d, target, depth + 1)
            raise NotCompiled(f"type {kind!r}")
        if t == "null":
            self.emit(d, f"{target} = None")
        elif t in ("int", "long"):
            self.long(d, target)
        elif t in ("string", "bytes"):
            n, raw = self.var(), self.var()
            self.long(d, n)
            self.blob(d, raw, n)
            self.emit(d, f"{target} = {raw}.decode()" if t == "string" else f"{target} = bytes({raw})")
        elif t == "boolean":
            self.emit(d, f"{target} = b[i] == 1; i += 1")
        elif t == "double":
            self.emit(d, f"{target}, = _unpack_d(b, i); i += 8")
        elif t == "float":
            self.emit(d, f"{target}, = _unpack_f(b, i); i += 4")
        else:
            raise NotCompiled(f"type {t!r}")

    def _block(self, t: dict, kind: str, d: int, target: str, depth: int) -> None:
        """Arrays and maps: blocks of ``count`` items until a zero count; a negative count
        is followed by the block's size in bytes."""
        n, item, key = self.var(), self.var(), self.var()
        self.emit(d, f"{target} = {'[]' if kind == 'array' else '{}'}")
        self.emit(d, "while True:")
        self.long(d + 1, n)
        self.emit(d + 1, f"if {n} == 0: break")
        self.emit(d + 1, f"if {n} < 0:")
        self.emit(d + 2, f"{n} = -{n}")
        self.long(d + 2, item)  # the block's size in bytes: not needed
        self.emit(d + 1, f"for _ in range({n}):")
        if kind == "map":
            self.value("string", d + 2, key, depth + 1)
            self.value(t["values"], d + 2, item, depth + 1)
            self.emit(d + 2, f"{target}[{key}] = {item}")
        else:
            self.value(t["items"], d + 2, item, depth + 1)
            self.emit(d + 2, f"{target}.append({item})")


def compile_decoder(schema: Any) -> Decoder:
    """A function ``decode(data, start)`` reading one value of writer ``schema`` from
    ``data[start:]`` (what :func:`fastavro.schemaless_reader` returns for it).  Raises
    :class:`NotCompiled` for a schema left to fastavro."""
    try:
        expanded = expand_schema(schema)
    except RecursionError:
        raise NotCompiled("a recursive schema") from None
    src = _Source()
    src.value(expanded, 1, "out")
    text = "def decode(b, i):\n" + "\n".join(src.lines) + "\n    return out\n"
    try:
        code = compile(text, f"<avro decoder of {schema_label(schema)}>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:  # too deep for the compiler
        raise NotCompiled(f"cannot compile: {exc}") from None
    namespace = dict(src.consts)
    exec(code, namespace)  # noqa: S102 - source written above from the schema's structure only
    inner = namespace["decode"]
    label = schema_label(schema)

    def decode(data: bytes, start: int = 0) -> Any:
        try:
            return inner(data, start)
        except (IndexError, ValueError, UnicodeDecodeError, struct.error, ArithmeticError) as exc:
            raise SerdeError(f"a record of schema {label} cannot be decoded: {type(exc).__name__}: {exc}") from None
    return decode


def schema_label(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)
