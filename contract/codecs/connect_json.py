"""Kafka Connect's JsonConverter shape, as Debezium writes it by default (``debezium-json``).

With ``value.converter.schemas.enable=true`` (Kafka Connect's default) every key and value
is ``{"schema": <Connect schema>, "payload": <value>}``.  Consumers written for Debezium's
JSON output (Pathway's ``pw.io.debezium.read``, Flink's ``debezium-json`` format, Kafka
Connect sinks) read that shape.

Writing (:class:`ConnectJsonWriter`): the Connect schema is derived from the Avro schema the
producer already builds (:mod:`producer.events.avro_types` carries Debezium's semantic names
as ``connect.name`` / ``connect.version`` / ``connect.parameters``), so there is one type
mapping.  Avro -> Connect:

========================================  ==============================================
Avro                                      Connect (JsonConverter)
========================================  ==============================================
``["null", T]``                           T with ``"optional": true``
int / int with ``connect.type`` int16     int32 / int16 (int8 likewise)
long, float, double, boolean, string      int64, float, double, boolean, string
bytes                                     bytes (payload base64)
bytes decimal(p, s)                       bytes ``org.apache.kafka.connect.data.Decimal``,
                                          ``parameters {"scale", "connect.decimal.precision"}``,
                                          payload base64 of the unscaled two's complement
                                          big-endian number (Connect's ``Decimal.fromLogical``)
record                                    struct (``name``: ``connect.name`` or the full name)
``connect.name/version/parameters``       ``name`` / ``version`` / ``parameters``
field ``default`` (not null)              ``default`` (JsonConverter writes it for a null)
========================================  ==============================================

Keys of the JSON objects come in JsonConverter's order (``type``, ``fields``, ``optional``,
``name``, ``version``, ``doc``, ``parameters``, ``default``, ``field``).  ``doc`` is written for
Debezium's own structs (``io.debezium.data.*``: Geometry, Point) only, as Debezium does.
A field the producer renamed to make it a valid Avro name (the ``mysql.column`` property)
has its column's name here, as Debezium's default ``field.name.adjustment.mode=none``.

The change event envelope gets Debezium's field order (``before``, ``after``, ``source``,
``transaction``, ``op``, ``ts_ms``, ``ts_us``, ``ts_ns``, then ours: ``position``,
``snapshot_window``) and ``source`` gets ``ts_us`` / ``ts_ns`` after ``sequence``, both
derived from the ``ts_ms`` beside them (the binlog's and our clock's resolution is a
millisecond).

Reading (:class:`ConnectJsonReader`): any record of that shape, ours or Debezium's, is read
with its own schema into the values our Avro decoding gives (``Decimal`` for decimals,
``bytes`` for bytes, float32 values widened as Avro's ``float``, structs as dicts keyed by
Avro field names), and the schema is turned into an Avro view (:func:`avro_view`) for the
table sinks (:mod:`spark_jobs.sinks.layout`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import struct
from collections.abc import Callable
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import orjson

from contract import logical_types
from contract.envelope import avro_fullname, unique_avro_names
from contract.errors import SerdeError

try:  # contract/codecs/_avro_json.c, built by setup.py where a C compiler is
    from contract.codecs import _avro_json
except ImportError:  # pragma: no cover - no compiler at install time: records are made from dicts
    _avro_json = None

#: Set to 0 to make every debezium-json record from its dicts (orjson), as without the transcoder.
TRANSCODE_ENV = "CDC_JSON_TRANSCODE"
#: Whether records are made from Avro bodies here (:meth:`ConnectJsonWriter.transcode`).
TRANSCODES = _avro_json is not None and os.environ.get(TRANSCODE_ENV, "1") != "0"

__all__ = [
    "DECIMAL_NAME",
    "TRANSCODES",
    "ConnectJsonReader",
    "ConnectJsonWriter",
    "avro_view",
    "connect_schema",
]

DECIMAL_NAME = logical_types.DECIMAL
PRECISION_PARAMETER = logical_types.DECIMAL_PRECISION_PARAMETER
SCALE_PARAMETER = logical_types.DECIMAL_SCALE_PARAMETER
#: The prefix of every record this module writes (and of JsonConverter's).
RECORD_PREFIX = b'{"schema":'

#: Debezium's envelope fields, in its order (``Envelope`` + ``SchemaFactory.datatypeEnvelopeSchema``).
ENVELOPE_ORDER = ("before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns")
#: Fields Debezium has that our Avro records leave out, derived from ``ts_ms``: name -> factor.
_DERIVED_TIMES = {"ts_us": 1_000, "ts_ns": 1_000_000}

_PRIMITIVE = {"boolean": "boolean", "int": "int32", "long": "int64", "float": "float", "double": "double",
              "string": "string", "bytes": "bytes"}
_F32 = struct.Struct("<f")
_DECIMAL_CONTEXT = Context(prec=200)
_MISSING = object()

Encode = Callable[[Any], Any]


def _dumps(o: Any) -> str:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# =============================================================================== Avro -> Connect
def _fullname(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _unscaled(v: Decimal, scale: int, what: str) -> bytes:
    """Connect's Decimal payload: the unscaled value, two's complement, big-endian, shortest."""
    if type(v) is not Decimal:
        v = Decimal(str(v)) if isinstance(v, (int, str)) else v
        if type(v) is not Decimal:
            raise SerdeError(f"{what}: {v!r} is not a decimal")
    if v.as_tuple().exponent != -scale:
        q = v.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
        if q != v:
            raise SerdeError(f"{what}: {v} does not have scale {scale}")
        v = q
    n = int(v.scaleb(scale, context=_DECIMAL_CONTEXT))
    return n.to_bytes(((n if n >= 0 else ~n).bit_length() + 8) // 8, "big", signed=True)


def _b64(v: Any) -> str:
    return base64.b64encode(v).decode("ascii")


#: A transcoding program's parts (contract/codecs/avro_json.h): ``str`` is JSON text, ``bytes``
#: an op; None where a type has no op (the records of such a schema take the dict path).
Items = tuple[str | bytes, ...] | None
_SCALAR_OPS = {"boolean": b"B", "int": b"I\xff", "long": b"I\xff", "float": b"F", "double": b"D", "string": b"S",
               "bytes": b"Y"}
_NO_SLOT = 0xFF
_SLOTS = 16  # (AJ_SLOTS)


def float32_shortest(v: float) -> float:
    """A float32 value (widened to a double) as the double of its shortest decimal digits (6 to 9
    significant) that read back as the same float32: what Kafka Connect's JSON converter writes for a FLOAT32
    (``Float.toString``: ``0.1``, not the widened ``0.10000000149011612``)."""
    if v != v or v in (float("inf"), float("-inf")):
        return v
    f32 = _F32.pack(v)
    for digits in range(6, 10):  # (from 6, as the transcoder and producer.events.values._float32: the same text)
        shorter = float(f"{v:.{digits}g}")
        try:
            if _F32.pack(shorter) == f32:
                return shorter
        except OverflowError:  # (rounded past float32's largest)
            continue
    return v


#: The encoders of the primitives that are not written as they are: bytes as base64, a float32
#: with its shortest digits (the transcoder's 'F' writes the same).
_ENCODES: dict[str, Callable[[Any], Any]] = {"bytes": lambda v: _b64(v), "float": float32_shortest}


def _program(items: Items) -> bytes | None:
    """The program of ``items``: adjacent text joined into one literal op."""
    if items is None:
        return None
    out, text = [], []
    for item in (*items, b""):
        if isinstance(item, str):
            text.append(item)
            continue
        literal = "".join(text).encode()
        text.clear()
        for i in range(0, len(literal), 0xFFFF):
            piece = literal[i:i + 0xFFFF]
            out.append(b"L" + len(piece).to_bytes(2, "little") + piece)
        out.append(item)
    return b"".join(out)


def _u16_text(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise SerdeError("a field's name or default is too long for a transcoding program")
    return len(raw).to_bytes(2, "little") + raw


def _key(cname: str, first: bool) -> str:
    return ("{" if first else ",") + orjson.dumps(cname).decode() + ":"


class _AvroToConnect:
    """Walks one Avro schema into its Connect schema, a payload encoder (dicts: the dict path)
    and the transcoding program of its Avro bodies (:func:`_program` of the items)."""

    def __init__(self) -> None:
        self.named: dict[str, tuple[dict, Encode, Items]] = {}
        self.slots = 0  # slots of the program taken (ts_ms values kept for the derived times)

    def field_type(self, t: Any, ns: str | None, what: str, default: Any = _MISSING,
                   keep: bool = False) -> tuple[dict, Encode, Items]:
        """``keep``: the value (a long) is kept in a slot of the program: ``self.slots - 1``."""
        optional, null_branch = False, 0
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) != 1:
                raise SerdeError(f"{what}: Avro unions other than [null, T] have no Connect form: {t!r}")
            optional, null_branch, t = len(branches) != len(t), t.index("null") if "null" in t else 0, branches[0]
        schema, enc, items = self.type(t, ns, what)
        schema = dict(schema)
        schema["optional"] = optional
        _reorder(schema)
        if default is not _MISSING and default is not None:
            schema["default"] = enc(default)
        slot = _NO_SLOT
        if keep:
            if items != (b"I\xff",) or self.slots >= _SLOTS:
                items = None
            else:
                slot, self.slots = self.slots, self.slots + 1
                items = (b"I" + bytes([slot]),)
        if optional and items is not None:
            body = _program(items)
            null_text = orjson.dumps(schema["default"]).decode() if "default" in schema else "null"
            items = (b"U" + bytes([null_branch, slot]) + _u16_text(null_text) + len(body).to_bytes(4, "little")
                     + body,)
        return schema, enc, items

    def type(self, t: Any, ns: str | None, what: str) -> tuple[dict, Encode, Items]:
        if isinstance(t, str):
            if t in _PRIMITIVE:
                return {"type": _PRIMITIVE[t]}, _ENCODES.get(t, _same), (_SCALAR_OPS[t],)
            found = self.named.get(_fullname(t, ns)) or self.named.get(t)
            if found is None:
                raise SerdeError(f"{what}: unknown Avro type name {t!r}")
            return found
        if not isinstance(t, dict):
            raise SerdeError(f"{what}: unsupported Avro type {t!r}")
        prim = t.get("type")
        if prim == "record":
            return self.record(t, ns)
        if isinstance(prim, (dict, list)):
            return self.type(prim, ns, what)
        if prim == "array":  # (a VECTOR: Debezium's FloatVector, its name and version as its schema has them)
            items, enc_item, _ = self.field_type(t["items"], ns, what)
            array: dict[str, Any] = {"type": "array", "items": items}
            if "connect.name" in t:
                array.update(name=t["connect.name"], version=t.get("connect.version", 1))
            return array, lambda v: [enc_item(x) for x in v], None
        if prim not in _PRIMITIVE:
            raise SerdeError(f"{what}: Avro type {prim!r} has no Connect form")
        schema: dict[str, Any] = {"type": _PRIMITIVE[prim]}
        if prim == "int" and t.get("connect.type") in ("int8", "int16"):
            schema["type"] = t["connect.type"]
        enc: Encode = _ENCODES.get(prim, _same)
        op = _SCALAR_OPS[prim]
        params = t.get("connect.parameters")
        if t.get("logicalType") == "decimal" and prim == "bytes":
            scale = int(t.get("scale", 0))
            schema.update(name=DECIMAL_NAME, version=1)
            params = params or {SCALE_PARAMETER: str(scale), PRECISION_PARAMETER: str(t["precision"])}
            op = b"Z"

            def enc(v: Any, scale: int = scale) -> str:
                return _b64(_unscaled(v, scale, what))
        if t.get("connect.name"):
            schema["name"] = t["connect.name"]
        if t.get("connect.version") is not None:
            schema["version"] = t["connect.version"]
        if params:
            schema["parameters"] = dict(params)
        return schema, enc, (op,)

    def record(self, t: dict, ns: str | None) -> tuple[dict, Encode, Items]:
        full = _fullname(t["name"], t.get("namespace", ns))
        inner_ns = full.rpartition(".")[0] or None
        name = t.get("connect.name") or full
        fields = t.get("fields", [])
        names = [f["name"] for f in fields]
        is_envelope = "before" in names and "after" in names and "op" in names
        is_source = name.endswith(".Source") and "sequence" in names and "ts_ms" in names
        plan: list[tuple[str, str, Encode | None, bool, Any]] = []
        connect_fields: list[dict] = []
        # per plan entry: (Avro field index, items) of a field, or (None, (slot, factor, the ts_ms
        # field's index)) of a derived time
        ops: list[tuple[int | None, Any]] = []
        ts_slot: tuple[int, int] | None = None
        for i, f in enumerate(fields):
            column = f.get("mysql.column") or f["name"]
            keep = (is_envelope or is_source) and column == "ts_ms"
            fs, enc, items = self.field_type(f["type"], inner_ns, f"{name}.{column}", f.get("default", _MISSING),
                                             keep)
            if keep and items is not None:
                ts_slot = (self.slots - 1, i)
            if f.get("connect.parameters"):  # (a struct field's parameters: on the field, its type is shared)
                fs = {**fs, "parameters": {**fs.get("parameters", {}), **f["connect.parameters"]}}
                _reorder(fs)
            fs["field"] = column
            connect_fields.append(fs)
            default = fs.get("default", _MISSING)
            plan.append((f["name"], column, enc, fs["optional"] or default is not _MISSING, default))
            ops.append((i, items))
            if column == "sequence" and is_source:
                self._derived(plan, connect_fields, ops, ts_slot)
        if is_envelope:
            if "ts_ms" in names:
                self._derived(plan, connect_fields, ops, ts_slot)
            order = {n: i for i, n in enumerate(ENVELOPE_ORDER)}
            ranked = sorted(range(len(plan)), key=lambda i: (order.get(plan[i][1], len(order)), i))
            plan = [plan[i] for i in ranked]
            connect_fields = [connect_fields[i] for i in ranked]
            ops = [ops[i] for i in ranked]
        schema: dict[str, Any] = {"type": "struct", "fields": connect_fields, "name": name}
        if t.get("connect.version") is not None:
            schema["version"] = t["connect.version"]
        if t.get("doc") and name.startswith(logical_types.DATA_PREFIX):
            schema["doc"] = t["doc"]
        record_name = name

        def enc_record(v: Any) -> dict:
            out = {}
            for aname, cname, enc, nullable, default in plan:
                if enc is None:  # derived from ts_ms
                    ms = v.get("ts_ms")
                    out[cname] = None if ms is None else ms * _DERIVED_TIMES[cname]
                    continue
                x = v.get(aname)
                if x is None:
                    if default is not _MISSING:
                        out[cname] = default
                    elif nullable:
                        out[cname] = None
                    else:
                        raise SerdeError(f"{record_name}.{cname}: null, but the field is not optional")
                else:
                    out[cname] = enc(x)
            return out
        found = self.named[full] = (schema, enc_record, _record_items(plan, ops, len(fields)))
        return found

    @staticmethod
    def _derived(plan: list, connect_fields: list[dict], ops: list, ts_slot: tuple[int, int] | None) -> None:
        have = {p[1] for p in plan}
        for cname in _DERIVED_TIMES:
            if cname not in have:
                plan.append((cname, cname, None, True, _MISSING))
                connect_fields.append({"type": "int64", "optional": True, "field": cname})
                ops.append((None, None if ts_slot is None else (ts_slot[0], _DERIVED_TIMES[cname], ts_slot[1])))


def _record_items(plan: list, ops: list, n_fields: int) -> Items:
    """A record's program items: its fields inline where the JSON keeps the Avro order (and each
    derived time comes after the ts_ms it is made of), else an ``R`` op that orders them."""
    if any(x is None for _, x in ops) or n_fields > 255 or len(ops) > 255:
        return None
    fields_seen: list[int] = []
    inline = True
    for index, x in ops:
        if index is not None:
            inline = inline and (not fields_seen or index > fields_seen[-1])
            fields_seen.append(index)
        else:  # (a derived time inline: after the ts_ms it reads)
            inline = inline and x[2] in fields_seen
    if inline:
        items: list[str | bytes] = []
        for k, ((_, cname, *_rest), (index, x)) in enumerate(zip(plan, ops)):
            items.append(_key(cname, k == 0))
            if index is None:
                slot, factor, _ = x
                items.append(b"M" + bytes([slot]) + factor.to_bytes(4, "little"))
            else:
                items.extend(x)
        items.append("}" if plan else "{}")
        return tuple(items)
    by_index = dict(o for o in ops if o[0] is not None)
    op = [b"R", bytes([n_fields])]
    for i in range(n_fields):
        body = _program(by_index[i])
        op.append(len(body).to_bytes(4, "little") + body)
    op.append(bytes([len(ops)]))
    for k, ((_, cname, *_rest), (index, x)) in enumerate(zip(plan, ops)):
        text = _u16_text(_key(cname, k == 0))
        if index is None:
            slot, factor, _ = x
            op.append(b"\x01" + bytes([slot]) + factor.to_bytes(4, "little") + text)
        else:
            op.append(b"\x00" + bytes([index]) + text)
    return b"".join(op), "}"


def _same(v: Any) -> Any:
    return v


_KEY_ORDER = ("type", "items", "keys", "values", "fields", "optional", "name", "version", "doc", "parameters",
              "default", "field")


def _reorder(schema: dict) -> None:
    """JsonConverter's key order, in place."""
    items = sorted(schema.items(), key=lambda kv: _KEY_ORDER.index(kv[0]) if kv[0] in _KEY_ORDER else 99)
    schema.clear()
    schema.update(items)


def connect_schema(avro_schema: dict) -> dict:
    """The Connect schema (JsonConverter's JSON form) of records of ``avro_schema``: a
    required struct."""
    schema, _, _ = _AvroToConnect().field_type(avro_schema, None, avro_schema.get("name", "record"))
    return schema


class ConnectJsonWriter:
    """Encodes records of one Avro schema as ``{"schema": ..., "payload": ...}`` (the schema
    text made once)."""

    __slots__ = ("_encode", "connect", "prefix", "program", "schema")

    def __init__(self, avro_schema: dict) -> None:
        self.schema = avro_schema
        # (a record's schema, or any Avro type: a column's, for the outbox router's keys and values)
        what = avro_schema.get("name", "record") if isinstance(avro_schema, dict) else "value"
        self.connect, self._encode, items = _AvroToConnect().field_type(avro_schema, None, what)
        self.prefix = RECORD_PREFIX + _dumps(self.connect).encode() + b',"payload":'
        #: The program that turns an Avro body of the schema into the payload (avro_json.h):
        #: None where the transcoder is not built or is off, or the schema has a type without an op.
        self.program = _program(items) if TRANSCODES else None

    def payload(self, record: Any) -> Any:
        """The JSON value of ``record`` (what goes under ``payload``)."""
        if record is None:
            raise SerdeError(f"{self.connect.get('name')}: a null record has no payload (write no value instead)")
        try:
            return self._encode(record)
        except (AttributeError, TypeError, ValueError, OverflowError) as exc:
            raise SerdeError(f"record does not fit schema {self.connect.get('name')}: {exc}") from exc

    def encode(self, record: Any) -> bytes:
        # (orjson: the payload's JSON as UTF-8 in one call, a twentieth of the json module's time
        # per record, which was a third of the producer's time in the peers' race; its
        # JSONEncodeError is a TypeError.  NaN and infinities, which no MySQL column holds, it
        # writes as null.)
        try:
            return self.prefix + orjson.dumps(self.payload(record)) + b"}"
        except (TypeError, ValueError) as exc:
            raise SerdeError(f"record does not fit schema {self.connect.get('name')}: {exc}") from exc

    def encode_optional(self, value: Any) -> bytes:
        """:meth:`encode`, a None written as ``"payload": null`` (JsonConverter's record of a
        null value with an optional schema) where :meth:`encode` refuses it."""
        if value is None:
            if not self.connect.get("optional"):
                raise SerdeError(f"{self.connect.get('name') or self.connect['type']}: null, but not optional")
            return self.prefix + b"null}"
        return self.encode(value)

    def transcode(self, body: bytes) -> bytes:
        """The record of the Avro ``body`` (unframed) of a record of the schema: the bytes
        :meth:`encode` gives for that record, made in C without its dicts (needs :attr:`program`)."""
        if self.program is None:
            raise SerdeError(f"{self.connect.get('name')}: records of this schema are not transcoded from Avro")
        try:
            return _avro_json.transcode(self.program, self.prefix, b"}", body)
        except ValueError as exc:
            raise SerdeError(f"record does not fit schema {self.connect.get('name')}: {exc}") from exc


# =============================================================================== Connect -> values
Decode = Callable[[Any], Any]
_INTS = {"int8", "int16", "int32", "int64"}


def _bad(what: str, v: Any, expected: str) -> SerdeError:
    return SerdeError(f"{what}: {v!r} is not {expected}")


def _scalar_decoder(typ: str, name: Any, params: dict, what: str) -> Decode | None:
    """The decoder of a scalar Connect type's payload values (None: not a scalar type)."""
    inner: Decode
    if typ in _INTS:
        def inner(v: Any) -> Any:
            if type(v) is not int:
                raise _bad(what, v, f"an {typ}")
            return v
    elif typ == "float":
        def inner(v: Any) -> Any:
            if type(v) not in (int, float):
                raise _bad(what, v, "a float")
            return _F32.unpack(_F32.pack(v))[0]  # as Avro's float reads back
    elif typ == "double":
        def inner(v: Any) -> Any:
            if type(v) not in (int, float):
                raise _bad(what, v, "a double")
            return float(v)
    elif typ == "boolean":
        def inner(v: Any) -> Any:
            if type(v) is not bool:
                raise _bad(what, v, "a boolean")
            return v
    elif typ == "string":
        def inner(v: Any) -> Any:
            if type(v) is not str:
                raise _bad(what, v, "a string")
            return v
    elif typ == "bytes" and name == DECIMAL_NAME:
        try:
            scale = int(params.get(SCALE_PARAMETER, 0))
        except ValueError:
            raise SerdeError(f"{what}: Decimal scale {params.get(SCALE_PARAMETER)!r} is not a number") from None

        def inner(v: Any) -> Any:
            if type(v) is str:
                n = int.from_bytes(_unbase64(v, what), "big", signed=True)
                return Decimal(n).scaleb(-scale, context=_DECIMAL_CONTEXT)
            if type(v) in (int, float):  # JsonConverter's decimal.format=NUMERIC
                try:
                    return Decimal(repr(v)).quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
                except InvalidOperation:
                    raise _bad(what, v, f"a decimal of scale {scale}") from None
            raise _bad(what, v, "a Decimal (base64 or number)")
    elif typ == "bytes":
        def inner(v: Any) -> Any:
            if type(v) is not str:
                raise _bad(what, v, "base64 bytes")
            return _unbase64(v, what)
    else:
        return None
    return inner


def _container_decoder(cs: dict, typ: str, what: str) -> Decode | None:
    """The decoder of a struct's, an array's or a map's payload values (None: none of them)."""
    inner: Decode
    if typ == "struct":
        fields = cs.get("fields")
        if not isinstance(fields, list):
            raise SerdeError(f"{what}: a struct schema without a list of fields")
        columns = [f.get("field") for f in fields]
        if not all(isinstance(c, str) for c in columns):
            raise SerdeError(f"{what}: a struct field without a name")
        names = unique_avro_names(columns)
        plan = [(c, names[c], _decoder(f, f"{what}.{c}")) for c, f in zip(columns, fields)]

        def inner(v: Any) -> Any:
            if type(v) is not dict:
                raise _bad(what, v, "a struct (JSON object)")
            return {aname: dec(v.get(c)) for c, aname, dec in plan}
    elif typ == "array":
        item = _decoder(cs.get("items"), f"{what}[]")

        def inner(v: Any) -> Any:
            if type(v) is not list:
                raise _bad(what, v, "an array")
            return [item(x) for x in v]
    elif typ == "map":
        key, value = _decoder(cs.get("keys"), f"{what} key"), _decoder(cs.get("values"), f"{what} value")

        def inner(v: Any) -> Any:
            if type(v) is dict:
                return {key(k): value(x) for k, x in v.items()}
            if type(v) is list:
                return {key(k): value(x) for k, x in v}
            raise _bad(what, v, "a map")
    else:
        return None
    return inner


def _decoder(cs: dict, what: str) -> Decode:
    """The decoder of payload values of Connect schema ``cs`` into our Avro values."""
    if not isinstance(cs, dict) or not isinstance(cs.get("type"), str):
        raise SerdeError(f"{what}: not a Connect schema: {cs!r}")
    typ, name = cs["type"], cs.get("name")
    params = cs.get("parameters") or {}
    inner = _scalar_decoder(typ, name, params, what) or _container_decoder(cs, typ, what)
    if inner is None:
        raise SerdeError(f"{what}: unknown Connect schema type {typ!r}")
    optional = bool(cs.get("optional"))
    default = inner(cs["default"]) if cs.get("default") is not None else None

    def decode(v: Any) -> Any:
        if v is None:
            if default is not None:
                return default
            if optional:
                return None
            raise SerdeError(f"{what}: null, but the field is not optional")
        return inner(v)
    return decode


def _unbase64(v: str, what: str) -> bytes:
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise SerdeError(f"{what}: {v[:40]!r} is not base64") from None


def avro_view(cs: dict) -> dict:
    """An Avro schema with the fields, types and Debezium names of Connect schema ``cs`` (a
    struct): what the table sinks lay tables out by.  Field names are made valid Avro names
    (the column's name kept as ``mysql.column``), each named struct is defined once."""
    if not isinstance(cs, dict) or cs.get("type") != "struct":
        raise SerdeError(f"a record schema must be a Connect struct, got {cs.get('type') if isinstance(cs, dict) else cs!r}")
    return _avro_type(cs, set(), "record")


def _avro_type(cs: dict, defined: set[str], path: str) -> Any:
    typ, name = cs.get("type"), cs.get("name")
    params = cs.get("parameters") or {}
    if typ == "struct":
        full = avro_fullname(name or path.replace(".", "_"))
        if full in defined:
            return full
        defined.add(full)
        columns = [f["field"] for f in cs["fields"]]
        names = unique_avro_names(columns)
        fields = []
        for c, f in zip(columns, cs["fields"]):
            t = _avro_type(f, defined, f"{full}.{names[c]}")
            field: dict[str, Any] = {"name": names[c], "type": ["null", t] if f.get("optional") else t}
            if f.get("optional"):
                field["default"] = None
            if names[c] != c:
                field["mysql.column"] = c
            fields.append(field)
        out: dict[str, Any] = {"type": "record", "name": full, "fields": fields}
        if cs.get("doc"):
            out["doc"] = cs["doc"]
    elif typ == "array":
        return {"type": "array", "items": _avro_type(cs["items"], defined, f"{path}_item")}
    elif typ == "map":
        return {"type": "map", "values": _avro_type(cs["values"], defined, f"{path}_value")}
    elif typ in ("int8", "int16"):
        out = {"type": "int", "connect.type": typ}
    elif typ == "bytes" and name == DECIMAL_NAME:
        scale = int(params.get(SCALE_PARAMETER, 0))
        precision = int(params.get(PRECISION_PARAMETER, 0)) or max(65, scale + 1)  # (no precision: the widest)
        out = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    else:
        avro = {v: k for k, v in _PRIMITIVE.items()}.get(typ)
        if avro is None:
            raise SerdeError(f"{path}: Connect type {typ!r} has no Avro form")
        out = {"type": avro}
    if name:
        out["connect.name"] = name
    if cs.get("version") is not None:
        out["connect.version"] = cs["version"]
    if params:
        out["connect.parameters"] = dict(params)
    return out if len(out) > 1 else out["type"]


# =============================================================================== reading records
class _Known:
    """One Connect schema seen in records: its text (the record prefix), decoder, Avro view."""

    __slots__ = ("_view", "decode", "id", "prefix", "schema")

    def __init__(self, prefix: bytes, schema: dict | None) -> None:
        self.prefix = prefix
        self.schema = schema
        self.decode = _decoder(schema, schema.get("name") or "record") if schema is not None else _same
        self.id = "connect-" + hashlib.sha1(prefix).hexdigest()[:16]
        self._view: dict | None = None

    def view(self) -> dict | None:
        if self._view is None and self.schema is not None and self.schema.get("type") == "struct":
            self._view = avro_view(self.schema)
        return self._view


class ConnectJsonReader:
    """Reads ``{"schema", "payload"}`` records, each with its own schema (schemas seen are
    kept: the payload of a record whose schema text was seen before is all that is parsed)."""

    def __init__(self, keep: int = 64) -> None:
        self._known: dict[bytes, _Known] = {}  # by prefix (the record up to the payload)
        self._recent: list[_Known] = []
        self._keep = keep
        self._json = json.JSONDecoder()
        # The records last read by :meth:`read` (a value and its key) and their schemas:
        # :meth:`schema_of` of the same bytes object (the merge job asks for both) parses
        # nothing again.
        self._last: list[tuple[bytes, _Known]] = []

    def _find(self, data: bytes) -> tuple[_Known, Any] | None:
        """The record's schema and its (raw) payload; None when ``data`` is not of the shape."""
        for known in self._recent:
            if data.startswith(known.prefix) and data.endswith(b"}"):
                try:
                    return known, json.loads(data[len(known.prefix):-1])
                except ValueError:
                    break
        try:
            text = data.decode("utf-8")
            obj = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise SerdeError(f"not a JSON record: {exc}") from None
        if not isinstance(obj, dict) or set(obj) != {"schema", "payload"}:
            return None
        prefix = b""
        if text.startswith('{"schema":{'):  # our writer's and JsonConverter's compact form
            _, end = self._json.raw_decode(text, 10)
            if text.startswith(',"payload":', end):
                prefix = text[:end + 11].encode("utf-8")
        key = prefix or RECORD_PREFIX + _dumps(obj["schema"]).encode()
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= 4096:
                self._known.clear()
            known = self._known[key] = _Known(key, obj["schema"])
        if prefix:
            if known in self._recent:
                self._recent.remove(known)
            self._recent.insert(0, known)
            del self._recent[self._keep:]
        return known, obj["payload"]

    def read(self, data: bytes) -> tuple[bool, Any]:
        """``(True, value)`` for a record of the shape (its payload as our Avro values),
        ``(False, None)`` for other JSON."""
        found = self._find(data)
        if found is None:
            return False, None
        known, payload = found
        self._last = [(data, known), *self._last[:1]]
        return True, known.decode(payload)

    def schema_of(self, data: bytes) -> tuple[str, dict | None] | None:
        """``(schema id, Avro view)`` of a record of the shape (the id names its Connect
        schema), or None for other records."""
        for seen, known in self._last:
            if seen is data:
                return known.id, known.view()
        if not data or data[:1] != b"{" or b'"schema"' not in data[:32]:
            return None
        found = self._find(data)
        if found is None:
            return None
        return found[0].id, found[0].view()
