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
Malformed input raises :class:`~contract.errors.SerdeError` instead of an ``IndexError``;
an array or map block that counts more items than the record's bytes left can hold is
refused before it is read (:func:`least_size`), so a poison record cannot make a worker
build items until memory runs out.  Where the native extension is built
(``contract/codecs/_avro_reader.c``), :func:`native_program` compiles what it can read for it
instead (same values, same errors: ``tests/unit/contract/test_avro_native.py``).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from decimal import Context, Decimal
from functools import partial
from typing import Any, Callable

from fastavro.schema import expand_schema

from common.generated_code import compile_generated
from contract.errors import NotCompiled, SerdeError
from contract.logical_types import AVRO_PRIMITIVES

try:  # the native reader (contract/codecs/_avro_reader.c, built by setup.py where a C compiler is)
    from contract.codecs import _avro_reader
except ImportError:  # pragma: no cover - a build without it: the generated Python reads
    _avro_reader = None

Decoder = Callable[[bytes, int], Any]

__all__ = ["OFFSET", "SCAN_FIELDS", "CodeWriter", "Decoder", "NotCompiled", "change_scan_program",
           "compile_change_header", "compile_change_reader", "compile_decoder", "read_long",
           "schema_label"]

#: In a projection (:func:`compile_decoder`'s ``fields``): the index where the field's encoded
#: value starts, in place of its value (the field is skipped; a decoder of its type reads it later).
OFFSET = "offset"



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


def least_size(t: Any) -> int:
    """The fewest bytes an item of array (or entry of map) ``t`` takes encoded (an expanded
    schema): a block that says it holds more items than the bytes left can hold is
    malformed, and is refused before it is read (a count of 2**62 would otherwise build
    items, or loop, until memory or time runs out).  0 for items of no bytes (nulls)."""
    if t.get("type") == "array":
        return _least(t["items"], 1)
    return 1 + _least(t["values"], 1)  # (a map's entry: its key's length too)


def _least(t: Any, depth: int) -> int:
    if depth > 64:
        raise NotCompiled("a schema nested deeper than 64 levels (recursive?)")
    if isinstance(t, list):
        return 1  # (the branch)
    if isinstance(t, dict):
        kind = t.get("type")
        if isinstance(kind, (dict, list)):
            return _least(kind, depth + 1)
        if kind == "record":
            return sum(_least(f["type"], depth + 1) for f in t["fields"])
        if kind == "fixed":
            return int(t["size"])
        return 1 if kind in ("enum", "array", "map") else _least(kind, depth + 1)
    return {"null": 0, "float": 4, "double": 8}.get(t, 1)


#: Items of no bytes (a null's) one block may hold when read (they cost memory, not bytes).
MAX_EMPTY_ITEMS = 1 << 20


class CodeWriter:
    """The function being written: lines, fresh variable names, the constants it uses (also
    used by :mod:`spark_jobs.sinks.copy_text`, which writes COPY text instead of values)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names = 0
        self.consts: dict[str, Any] = {"_unpack_d": struct.Struct("<d").unpack_from,
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
        # one- and two-byte varints (|n| < 8192: lengths, small numbers) inline, longer
        # ones (timestamps, binlog offsets) by a loop, inline too (a call costs more)
        self.emit(d, "x = b[i]")
        self.emit(d, "if x < 128:")
        self.emit(d + 1, f"i += 1; {target} = (x >> 1) ^ -(x & 1)")
        self.emit(d, "elif b[i + 1] < 128:")
        self.emit(d + 1, f"x = (x & 127) | (b[i + 1] << 7); i += 2; {target} = (x >> 1) ^ -(x & 1)")
        self.emit(d, "else:")
        self.emit(d + 1, "z = (x & 127) | ((b[i + 1] & 127) << 7); s = 14; i += 2")
        self.emit(d + 1, "while True:")
        self.emit(d + 2, "x = b[i]; i += 1; z |= (x & 127) << s")
        self.emit(d + 2, "if x < 128: break")
        self.emit(d + 2, "s += 7")
        self.emit(d + 2, "if s > 63: raise ValueError('an Avro long longer than 10 bytes')")
        self.emit(d + 1, f"{target} = (z >> 1) ^ -(z & 1)")

    def branch(self, d: int, target: str, count: int) -> None:
        """A union's branch index: one byte for the first 64 branches (zig-zag ``2k``),
        ``target`` left zig-zag encoded (branch ``k`` is ``2 * k``); :meth:`long`'s value
        doubled for a union this wide or wider."""
        if count <= 64:
            self.emit(d, f"{target} = b[i]; i += 1")
        else:
            self.long(d, target)
            self.emit(d, f"{target} = 2 * {target}")

    def blob(self, d: int, target: str, size: str | int) -> None:
        """``size`` bytes at ``i`` into ``target`` (a negative size is an error; a short
        record is found at the end, :func:`compile_decoder`)."""
        if isinstance(size, str):
            self.emit(d, f"if {size} < 0: raise ValueError('negative length')")
        self.emit(d, f"{target} = b[i:i + {size}]")
        self.emit(d, f"i += {size}")

    def union(self, d: int, t: list, body: Callable[[Any, int], None]) -> None:
        """A union: its branch read, then ``body(branch type, depth)`` under each branch's
        test (an unknown branch is an error)."""
        branch = self.var()
        self.branch(d, branch, len(t))
        for k, bt in enumerate(t):
            self.emit(d, f"{'if' if k == 0 else 'elif'} {branch} == {2 * k}:")
            self.emit(d + 1, "pass")  # (a null branch emits nothing)
            body(bt, d + 1)
        self.emit(d, "else:")
        self.emit(d + 1, f"raise ValueError('union branch (zig-zag) ' + str({branch}) + ' out of range')")

    def value(self, t: Any, d: int, target: str, depth: int = 0, project: dict | None = None) -> None:
        """Read a value of type ``t`` into ``target``; ``project``: of a record (or of the
        record branches of a union), the fields to read (see :func:`compile_decoder`)."""
        if depth > 64:
            raise NotCompiled("a schema nested deeper than 64 levels (recursive?)")
        if isinstance(t, list):
            self.union(d, t, lambda bt, bd: self.value(bt, bd, target, depth + 1, project))
            return
        if isinstance(t, dict):
            kind = t.get("type")
            logical = t.get("logicalType")
            if isinstance(kind, (dict, list)):
                return self.value(kind, d, target, depth + 1, project)
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
                    want = True if project is None else project.get(f["name"])
                    if not want:
                        self.skip(f["type"], d, depth + 1)
                        continue
                    v = self.var()
                    if want == OFFSET:
                        self.emit(d, f"{v} = i")
                        self.skip(f["type"], d, depth + 1)
                    else:
                        self.value(f["type"], d, v, depth + 1, want if isinstance(want, dict) else None)
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
            if kind in AVRO_PRIMITIVES:
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

    def skip(self, t: Any, d: int, depth: int = 0) -> None:
        """Move ``i`` past a value of type ``t`` without building it (lengths are checked
        once, at the end: :func:`compile_decoder`)."""
        if depth > 64:
            raise NotCompiled("a schema nested deeper than 64 levels (recursive?)")
        if isinstance(t, list):
            self.union(d, t, lambda bt, bd: self.skip(bt, bd, depth + 1))
            return
        if isinstance(t, dict):
            kind = t.get("type")
            if isinstance(kind, (dict, list)):
                return self.skip(kind, d, depth + 1)
            logical = t.get("logicalType")
            if logical is not None and not (logical == "decimal" and kind in ("bytes", "fixed")):
                raise NotCompiled(f"logical type {logical!r}")
            if kind == "record":
                for f in t["fields"]:
                    self.skip(f["type"], d, depth + 1)
            elif kind == "fixed":
                self.emit(d, f"i += {int(t['size'])}")
            elif kind == "enum":
                self.skip("long", d, depth + 1)
            elif kind in ("array", "map"):
                n = self.var()
                self.emit(d, "while True:")
                self.long(d + 1, n)
                self.emit(d + 1, f"if {n} == 0: break")
                self.emit(d + 1, f"if {n} < 0:")  # the block's size in bytes follows: jump
                self.long(d + 2, n)
                self.emit(d + 2, f"if {n} < 0: raise ValueError('negative block size')")
                self.emit(d + 2, f"i += {n}")
                self.emit(d + 2, "continue")
                least = least_size(t)
                if least == 0:  # items of no bytes: nothing to skip
                    self.emit(d + 1, "continue")
                    return
                self.emit(d + 1, f"if {n} > (len(b) - i) // {least}: "
                                 "raise ValueError('a block of more items than the bytes left hold')")
                self.emit(d + 1, f"for _ in range({n}):")
                self.emit(d + 2, "pass")
                if kind == "map":
                    self.skip("string", d + 2, depth + 1)
                self.skip(t["values"] if kind == "map" else t["items"], d + 2, depth + 1)
            elif kind in AVRO_PRIMITIVES:
                self.skip(kind, d, depth + 1)
            else:
                raise NotCompiled(f"type {kind!r}")
            return
        if t in ("int", "long"):
            self.emit(d, "if b[i] < 128: i += 1")
            self.emit(d, "else:")
            self.emit(d + 1, "z = i + 10; i += 1")
            self.emit(d + 1, "while b[i] > 127:")
            self.emit(d + 2, "i += 1")
            self.emit(d + 2, "if i >= z: raise ValueError('an Avro long longer than 10 bytes')")
            self.emit(d + 1, "i += 1")
        elif t in ("string", "bytes"):
            n = self.var()
            self.long(d, n)
            self.emit(d, f"if {n} < 0: raise ValueError('negative length')")
            self.emit(d, f"i += {n}")
        elif t == "boolean":
            self.emit(d, "i += 1")
        elif t == "double":
            self.emit(d, "i += 8")
        elif t == "float":
            self.emit(d, "i += 4")
        elif t != "null":
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
        least = least_size(t)
        if least:
            self.emit(d + 1, f"if {n} > (len(b) - i) // {least}: "
                             "raise ValueError('a block of more items than the bytes left hold')")
        else:
            self.emit(d + 1, f"if {n} > {MAX_EMPTY_ITEMS}: raise ValueError('a block of more than "
                             f"{MAX_EMPTY_ITEMS} items of no bytes')")
        self.emit(d + 1, f"for _ in range({n}):")
        if kind == "map":
            self.value("string", d + 2, key, depth + 1)
            self.value(t["values"], d + 2, item, depth + 1)
            self.emit(d + 2, f"{target}[{key}] = {item}")
        else:
            self.value(t["items"], d + 2, item, depth + 1)
            self.emit(d + 2, f"{target}.append({item})")


# -- the native reader's programs ----------------------------------------------------------------
# Node codes and field actions of contract/codecs/_avro_reader.c.
(_N_NULL, _N_BOOL, _N_LONG, _N_FLOAT, _N_DOUBLE, _N_BYTES, _N_STRING, _N_FIXED, _N_ENUM, _N_RECORD, _N_UNION,
 _N_ARRAY, _N_MAP) = range(13)
_A_SKIP, _A_VALUE, _A_OFFSET = range(3)
_N_PRIMITIVE = {"null": _N_NULL, "boolean": _N_BOOL, "int": _N_LONG, "long": _N_LONG, "float": _N_FLOAT,
                "double": _N_DOUBLE, "bytes": _N_BYTES, "string": _N_STRING}
#: Set to ``0`` in the environment: every record read by the generated Python (benchmarks,
#: tests of the fallback); read when a decoder is compiled.
NATIVE_ENV = "CDC_AVRO_NATIVE"


def native_enabled() -> bool:
    """Whether decoders are compiled for the native reader where they can be."""
    return _avro_reader is not None and sys.byteorder == "little" and os.environ.get(NATIVE_ENV, "1") != "0"


def native_program(schema: Any, fields: dict | None = None) -> tuple[bytes, tuple[str, ...]]:
    """``(program, names)`` of the native reader (``contract/codecs/_avro_reader.c``) for a value of
    expanded writer ``schema`` read as :func:`compile_decoder` reads it with projection
    ``fields``.  Raises :class:`NotCompiled` for what the native reader does not read (it
    skips every type; it reads null, booleans, ints and longs, floats, doubles, strings,
    bytes, fixed, records and unions of those: an enum, an array, a map or a decimal that is
    read is left to the generated Python)."""
    words: list[int] = []
    names: dict[str, int] = {}
    _program_node(schema, words, names, 0, True, fields)
    return array("i", words).tobytes(), tuple(names)


def _program_node(t: Any, words: list[int], names: dict[str, int], depth: int, read: bool,
                  project: dict | None) -> None:
    """``t``'s node appended to ``words`` (``read``: its value is read, else only skipped)."""
    if depth > 64:
        raise NotCompiled("a schema nested deeper than 64 levels (recursive?)")
    if isinstance(t, list):
        words += [_N_UNION, len(t)]
        for bt in t:
            sub: list[int] = []
            _program_node(bt, sub, names, depth + 1, read, project)
            words += [len(sub), *sub]
        return
    if isinstance(t, dict):
        kind = t.get("type")
        if isinstance(kind, (dict, list)):
            return _program_node(kind, words, names, depth + 1, read, project)
        logical = t.get("logicalType")
        if logical is not None and not (logical == "decimal" and kind in ("bytes", "fixed")):
            raise NotCompiled(f"logical type {logical!r}")
        if logical == "decimal" or kind in ("enum", "array", "map"):
            if read:
                raise NotCompiled(f"the native reader does not read {logical or kind}")
            if kind in ("array", "map"):
                sub = []
                _program_node(t["items"] if kind == "array" else t["values"], sub, names, depth + 1, False, None)
                words += [_N_ARRAY if kind == "array" else _N_MAP, len(sub), least_size(t), *sub]
                return
            if kind == "enum":
                words.append(_N_ENUM)
                return
            # a decimal skipped: as the fixed or bytes it is encoded in (below)
        if kind == "record":
            words += [_N_RECORD, len(t["fields"])]
            for f in t["fields"]:
                want = (True if project is None else project.get(f["name"])) if read else None
                action = _A_SKIP if not want else _A_OFFSET if want == OFFSET else _A_VALUE
                words += [action, names.setdefault(f["name"], len(names))]
                _program_node(f["type"], words, names, depth + 1, action == _A_VALUE,
                              want if isinstance(want, dict) else None)
            return
        if kind == "fixed":
            words += [_N_FIXED, int(t["size"])]
            return
        if kind in AVRO_PRIMITIVES:
            return _program_node(kind, words, names, depth + 1, read, None)
        raise NotCompiled(f"type {kind!r}")
    if t not in _N_PRIMITIVE:
        raise NotCompiled(f"type {t!r}")
    words.append(_N_PRIMITIVE[t])


def native_skip_words(t: Any) -> list[int]:
    """The native reader's node that skips a value of expanded type ``t`` (for programs of
    other native functions that skip fields: :mod:`spark_jobs.sinks.copy_text`)."""
    words: list[int] = []
    _program_node(t, words, {}, 0, False, None)
    return words


def _native_reader(schema: Any, fields: dict | None) -> Decoder | None:
    """The native reader of expanded ``schema`` with projection ``fields``, its errors as they
    come; None where it is off or does not read the schema (:func:`native_program`)."""
    if not native_enabled():
        return None
    try:
        program, names = native_program(schema, fields)
    except NotCompiled:
        return None
    return partial(_avro_reader.read, program, names)  # read(data, start), no Python frame between


def compile_decoder(schema: Any, fields: dict | None = None) -> Decoder:
    """A function ``decode(data, start)`` reading one value of writer ``schema`` from
    ``data[start:]`` (what :func:`fastavro.schemaless_reader` returns for it).  Raises
    :class:`NotCompiled` for a schema left to fastavro.

    ``fields``: a projection of a record schema, for a reader that needs a few of its
    fields: per field name ``True`` (its value), a projection of its own (a record, or a
    union's record branches) or :data:`OFFSET` (where its encoded value starts); the
    fields not named are skipped over without being built, and left out of the result."""
    return _checked(_compile(schema, fields), schema)


_NAMED = ("record", "error", "enum", "fixed")


def collapse_named(t: Any, namespace: str | None = None, seen: dict[str, Any] | None = None) -> Any:
    """``t`` with each named type defined once: a later definition of a name already defined,
    the same as the first (as an expanded schema has one wherever the type is used: a table's
    second POINT or GEOMETRY column), becomes a reference to it, so that the schema parses
    again.  A different one stays, for the parser to refuse."""
    seen = {} if seen is None else seen
    if isinstance(t, list):
        return [collapse_named(x, namespace, seen) for x in t]
    if not isinstance(t, dict):
        return t
    kind = t.get("type")
    if kind in _NAMED and isinstance(t.get("name"), str):
        name = t["name"]
        ns = t.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        if full in seen:
            return full if seen[full] == t else t
        seen[full] = t
        inner = full.rpartition(".")[0] or None
        if kind in ("record", "error"):
            return {**t, "fields": [{**f, "type": collapse_named(f["type"], inner, seen)} for f in t["fields"]]}
        return t
    if kind == "array":
        return {**t, "items": collapse_named(t["items"], namespace, seen)}
    if kind == "map":
        return {**t, "values": collapse_named(t["values"], namespace, seen)}
    if isinstance(kind, (dict, list)):
        return {**t, "type": collapse_named(kind, namespace, seen)}
    return t


def _compile(schema: Any, fields: dict | None = None, tail: tuple[str, ...] = (),
             consts: dict[str, Any] | None = None) -> Decoder:
    """:func:`compile_decoder`'s function, its errors as they come (``IndexError``, ...);
    ``tail``: lines run on ``out`` before it is returned, with ``consts`` in scope.  ``schema``
    may be a part of an expanded one (:func:`collapse_named`)."""
    try:
        expanded = expand_schema(collapse_named(schema))
    except RecursionError:
        raise NotCompiled("a recursive schema") from None
    native = None if tail else _native_reader(expanded, fields)
    if native is not None:
        return native
    src = CodeWriter()
    src.value(expanded, 1, "out", project=fields)
    # Lengths are not checked where they are read or skipped: a record shorter than they
    # say ends past its last byte.
    src.emit(1, "if i > len(b): raise IndexError('record too short')")
    for line in tail:
        src.emit(1, line)
    text = "def decode(b, i):\n" + "\n".join(src.lines) + "\n    return out\n"
    try:
        code = compile_generated(text, f"avro decoder of {schema_label(schema)}")
    except (SyntaxError, RecursionError, MemoryError) as exc:  # too deep for the compiler
        raise NotCompiled(f"cannot compile: {exc}") from None
    namespace = {**src.consts, **(consts or {})}
    exec(code, namespace)  # noqa: S102 - source written above from the schema's structure only
    return namespace["decode"]


def _checked(inner: Decoder, schema: Any) -> Decoder:
    """``inner`` with its errors as :class:`~contract.errors.SerdeError`."""
    label = schema_label(schema)

    def decode(data: bytes, start: int = 0) -> Any:
        try:
            return inner(data, start)
        except (IndexError, ValueError, UnicodeDecodeError, struct.error, ArithmeticError) as exc:
            raise SerdeError(f"a record of schema {label} cannot be decoded: {type(exc).__name__}: {exc}") from None
    return decode


#: What the merge job reads of a change event (:func:`compile_change_reader`): ``after`` is
#: read in passing (null for a delete), ``before`` only for a delete.
_CHANGE_FIELDS = {"before": OFFSET, "after": True, "source": {"ts_ms": True, "db": True, "table": True},
                  "op": True, "position": True, "snapshot_window": True}
_CHANGE_TAIL = ("out['row'] = _before(b, out['before']) if out['op'] == 'd' else out['after']",
                "del out['before'], out['after']")


def _envelope_types(schema: Any) -> dict[str, Any]:
    """The field types (expanded) of change-event envelope ``schema``; :class:`NotCompiled`
    for a schema that is not one."""
    try:
        expanded = expand_schema(schema)
    except RecursionError:
        raise NotCompiled("a recursive schema") from None
    if not isinstance(expanded, dict) or expanded.get("type") != "record":
        raise NotCompiled("not a record")
    types = {f["name"]: f["type"] for f in expanded["fields"]}
    if not {"before", "after", "op", "position"} <= types.keys():
        raise NotCompiled("not a change-event envelope")
    return types


def compile_change_reader(schema: Any) -> Decoder:
    """A function ``read(data, start)`` reading of a change-event envelope of writer
    ``schema`` (:func:`contract.envelope.envelope_schema`) what applying it takes:
    ``{"source": {"ts_ms", "db", "table"}, "op", "position", "snapshot_window", "row"}``,
    ``row`` being ``before`` for a delete and ``after`` otherwise.  The other fields, and
    ``before`` but for a delete, are skipped over without being built (about a quarter less
    work than decoding the whole record).  Raises :class:`NotCompiled` for a schema that is
    not an envelope or that :func:`compile_decoder` leaves to fastavro."""
    types = _envelope_types(schema)
    fields = {k: v for k, v in _CHANGE_FIELDS.items() if k in types}
    return _checked(_compile(schema, fields, _CHANGE_TAIL, {"_before": _compile(types["before"])}), schema)


#: What the merge job reads of a change event before it knows the record is applied
#: (:func:`compile_change_header`): the row image's place, not the image.
_HEADER_FIELDS = {"before": OFFSET, "after": OFFSET, "source": {"ts_ms": True, "db": True, "table": True},
                  "op": True, "position": True, "snapshot_window": True}
_HEADER_TAIL = ("at = out['before'] if out['op'] == 'd' else out['after']",
                "out['row_at'] = at if b[at] != 0 else None",  # (branch 0: null, checked when compiled)
                "del out['before'], out['after']")


def compile_change_header(schema: Any) -> tuple[Decoder, Decoder]:
    """``(read, row)`` for change-event envelopes of writer ``schema``: ``read(data, start)``
    gives what :func:`compile_change_reader`'s reader gives but the row image, and in its
    place ``row_at``: where the image (``before`` for a delete, else ``after``; its union's
    branch first) starts in ``data``, None when it is null; ``row(data, row_at)`` decodes
    that image when it is needed.  The merge job decides on the header and decodes (or
    writes straight to a sink, :mod:`spark_jobs.sinks.copy_text`) only the images it
    applies.  Raises :class:`NotCompiled` as :func:`compile_change_reader` does, and for an
    envelope whose images are not ``["null", row]``."""
    types = _envelope_types(schema)
    for name in ("before", "after"):
        t = types[name]
        if not (isinstance(t, list) and len(t) == 2 and t[0] == "null"):
            raise NotCompiled(f"envelope field {name!r} is not a [null, row] union")
    fields = {k: v for k, v in _HEADER_FIELDS.items() if k in types}
    native = _native_reader(expand_schema(schema), fields)
    if native is None:
        header = _compile(schema, fields, _HEADER_TAIL)
    else:
        def header(b: bytes, i: int) -> Any:  # (the native reader, then _HEADER_TAIL)
            out = native(b, i)
            at = out["before"] if out["op"] == "d" else out["after"]
            out["row_at"] = at if b[at] != 0 else None
            del out["before"], out["after"]
            return out
    return _checked(header, schema), _checked(_compile(types["before"]), schema)


#: The fields whose name indices :func:`change_scan_program` gives, in the native change
#: scan's order (``scan_changes`` in ``spark_jobs/task/_change_scan.c``): the envelope's, then ``source``'s.
SCAN_FIELDS = ("before", "after", "source", "op", "position", "snapshot_window", "ts_ms", "db", "table")


def change_scan_program(schema: Any) -> tuple[bytes, tuple[int, ...]] | None:
    """``(program, indices)`` of the native change scan for change-event envelopes of writer
    ``schema``: the header program of :func:`compile_change_header` and the name indices of
    :data:`SCAN_FIELDS` in it (-1: ``source`` has no ``ts_ms``).  None where the native reader
    is off or does not read the header, or the envelope lacks one of the other fields."""
    if not native_enabled():
        return None
    try:
        types = _envelope_types(schema)
        if not all(isinstance(t, list) and len(t) == 2 and t[0] == "null" for t in (types["before"], types["after"])):
            return None
        program, names = native_program(expand_schema(schema),
                                        {k: v for k, v in _HEADER_FIELDS.items() if k in types})
    except NotCompiled:
        return None
    index = {name: i for i, name in enumerate(names)}
    indices = tuple(index.get(name, -1) for name in SCAN_FIELDS)
    if any(i < 0 for name, i in zip(SCAN_FIELDS, indices) if name != "ts_ms") or len(names) > 128:
        return None
    return program, indices


def schema_label(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)
