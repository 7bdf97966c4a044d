"""The fingerprint of a writer schema: what a single-object record's header and the
``<prefix>._schemas`` topic know the schema by.

Avro's own fingerprint (CRC-64-AVRO of the schema's Parsing Canonical Form) strips every
attribute but a type's name, type, fields, symbols, items, values and size.  Two schemas
that read the same bytes as different values then share one fingerprint, and a reader
cannot tell which one a record was written with:

* ``DATETIME(3)`` and ``DATETIME(6)``: both ``long``, Debezium's ``io.debezium.time.Timestamp``
  (milliseconds) and ``MicroTimestamp`` (microseconds);
* ``DECIMAL(10,2)`` and ``DECIMAL(12,4)``: both ``bytes``, scale 2 and scale 4 (the unscaled
  number 125 is 1.25 or 0.0125);
* an ``ENUM`` or ``SET`` whose allowed values changed, a ``TIME``'s or ``BIT``'s parameters.

The producer publishes a table's schema after each DDL, so the ``_schemas`` topic (compacted
by fingerprint) would keep only the last of them, and every record written before it would
be read with it.  The fingerprint here is CRC-64-AVRO of the Parsing Canonical Form with
the attributes that give the bytes their meaning kept: ``logicalType``, ``precision``,
``scale`` and the ``connect.*`` properties (Kafka Connect's and Debezium's semantic types and
their parameters) of a type, and ``mysql.column`` (the source column a field holds) of a
field; each kept attribute follows the canonical ones, in name order.  A schema without any
of them has Avro's canonical form, and so Avro's fingerprint.
"""

from __future__ import annotations

import json
from typing import Any

from fastavro.schema import fingerprint as _crc

from contract.logical_types import AVRO_PRIMITIVES

__all__ = ["canonical_form", "schema_fingerprint"]

_NAMED = {"record", "error", "enum", "fixed"}
#: The canonical attributes of a type, in the Parsing Canonical Form's order.
_ORDER = ("name", "type", "fields", "symbols", "items", "values", "size")


def _kept(key: str) -> bool:
    """Whether a type's attribute ``key`` is kept: it changes what the bytes mean."""
    return key in ("logicalType", "precision", "scale") or key.startswith("connect.")


def _text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _form(schema: Any, namespace: str | None) -> str:
    if isinstance(schema, str):
        return _text(schema if schema in AVRO_PRIMITIVES else _full(schema, namespace))
    if isinstance(schema, list):
        return "[" + ",".join(_form(s, namespace) for s in schema) + "]"
    if not isinstance(schema, dict):
        raise TypeError(f"not an Avro schema: {schema!r}")
    t = schema.get("type")
    extra = [(k, schema[k]) for k in sorted(schema) if _kept(k)]
    if not isinstance(t, str):  # {"type": {...}}: the inner type's form
        return _form(t, namespace)
    parts: list[tuple[str, str]] = []
    if t in _NAMED:
        name = _full(str(schema["name"]), schema.get("namespace", namespace))
        inner = name.rpartition(".")[0] or None
        parts.append(("name", _text(name)))
        parts.append(("type", _text(t)))
        if t in ("record", "error"):
            parts.append(("fields", "[" + ",".join(_field(f, inner) for f in schema.get("fields", [])) + "]"))
        elif t == "enum":
            parts.append(("symbols", _text(list(schema.get("symbols", [])))))
        else:
            parts.append(("size", _text(int(schema["size"]))))
    elif t == "array":
        parts += [("type", _text(t)), ("items", _form(schema["items"], namespace))]
    elif t == "map":
        parts += [("type", _text(t)), ("values", _form(schema["values"], namespace))]
    elif t in AVRO_PRIMITIVES and not extra:
        return _text(t)
    else:
        parts.append(("type", _text(t if t in AVRO_PRIMITIVES else _full(t, namespace))))
    parts.sort(key=lambda p: _ORDER.index(p[0]))
    parts += [(k, _text(v)) for k, v in extra]
    return "{" + ",".join(f"{_text(k)}:{v}" for k, v in parts) + "}"


def _field(f: dict, namespace: str | None) -> str:
    out = f'{{"name":{_text(f["name"])},"type":{_form(f["type"], namespace)}'
    if "mysql.column" in f:
        out += f',"mysql.column":{_text(f["mysql.column"])}'
    return out + "}"


def canonical_form(schema: Any) -> str:
    """The schema's Parsing Canonical Form with its logical attributes kept (module doc)."""
    return _form(schema, None)


def schema_fingerprint(schema: Any) -> str:
    """CRC-64-AVRO of :func:`canonical_form`, as 16 hex digits (Avro's own fingerprint for a
    schema without logical attributes)."""
    return _crc(canonical_form(schema), "CRC-64-AVRO")
