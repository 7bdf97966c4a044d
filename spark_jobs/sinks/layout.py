"""A sink table's layout: a table topic's Avro value schema walked into sink columns
(:class:`SinkColumn`, one *kind* each) and the table's key (:class:`TableLayout`).

Input
=====
The *value schema* of a table's topic as the producer writes it (``producer/events/builder.py``):
a Debezium envelope record whose ``after`` field is ``["null", <row record>]`` (the row
record is defined inside ``before`` and only referenced by name in ``after``).  The row
record itself, a JSON string of either, or a schema parsed by ``fastavro.parse_schema`` are
accepted too.  Values are what fastavro decodes: ``Decimal`` for decimals, ints for the
Debezium temporal types, ``bytes``, ``str``, dicts for the geometry records.

Column kinds
============
One :class:`SinkColumn` per row field, classified into a *kind* from the Avro type and its
Debezium semantic name (``connect.name``), see ``producer/events/avro_types.py and producer/events/values.py``; the kinds and
the column type each becomes are in the table of :mod:`spark_jobs.sinks.types`.

* Plain Avro logical types (``date``, ``time-millis``/``-micros``, ``timestamp-millis``/
  ``-micros``, ``decimal``, ``uuid``) map like their Debezium twins; an unknown
  ``connect.name`` falls back to its Avro primitive, except unknown ``io.debezium.time.*``
  names, which raise :class:`UnsupportedType` (a silently wrong time is worse).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import UnsupportedType
from contract import logical_types
from contract.type_table import RECORD_KINDS, sink_kind
from spark_jobs.errors import SinkError
from spark_jobs.sinks.naming import POSITION_COLUMN

__all__ = [
    "SinkColumn",
    "TableLayout",
    "row_record",
    "row_columns",
    "table_layout",
    "column_kind",
    "as_sink_column",
    "cached_layout",
    "record_namespace",
]


# =============================================================================== schema walking
_NAMED = {"record", "error", "enum", "fixed"}

GEOMETRY_NAME = logical_types.GEOMETRY
POINT_NAME = logical_types.POINT


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _collect_named(t: Any, ns: str | None, names: dict[str, dict]) -> None:
    if isinstance(t, list):
        for x in t:
            _collect_named(x, ns, names)
        return
    if not isinstance(t, dict):
        return
    typ = t.get("type")
    if typ in _NAMED and "name" in t:
        full = _fullname(t["name"], t.get("namespace", ns))
        names.setdefault(full, t)
        inner_ns = full.rpartition(".")[0] or None
        for f in t.get("fields", ()) if typ in ("record", "error") else ():
            _collect_named(f.get("type"), inner_ns, names)
    elif typ == "array":
        _collect_named(t.get("items"), ns, names)
    elif typ == "map":
        _collect_named(t.get("values"), ns, names)
    elif isinstance(typ, (dict, list)):
        _collect_named(typ, ns, names)


class _Schema:
    """A value schema with its named types indexed by full name."""

    def __init__(self, schema: Any) -> None:
        if isinstance(schema, (str, bytes)):
            schema = json.loads(schema)
        if not isinstance(schema, dict):
            raise SinkError(f"value schema must be an Avro record (dict or JSON), got {type(schema).__name__}")
        self.schema = schema
        self.names: dict[str, dict] = {}
        for full, t in (schema.get("__named_schemas") or {}).items():  # fastavro.parse_schema output
            self.names.setdefault(full, t)
        _collect_named(schema, None, self.names)

    def resolve(self, t: Any, ns: str | None) -> Any:
        """``t`` with a name reference replaced by the named type's definition."""
        if isinstance(t, str) and t not in logical_types.AVRO_PRIMITIVES:
            found = self.names.get(_fullname(t, ns)) or self.names.get(t)
            if found is None:
                if t in (GEOMETRY_NAME, POINT_NAME):  # well known, even when not defined here
                    return {"type": "record", "name": t, "fields": [], "connect.name": t}
                raise SinkError(f"unknown Avro type name {t!r}")
            return found
        if isinstance(t, dict) and set(t) == {"type"} and not isinstance(t["type"], list):
            return self.resolve(t["type"], ns)  # {"type": "long"} or {"type": {...}}
        return t


def record_namespace(record: dict, outer: str | None = None) -> str | None:
    """The namespace of an Avro ``record`` schema (its full name's, inherited from ``outer``), or None."""
    return _fullname(record["name"], record.get("namespace", outer)).rpartition(".")[0] or None


def row_record(value_schema: Any) -> tuple[dict, "_Schema"]:
    """The row record of an envelope (its ``after`` branch), or the record itself."""
    s = _Schema(value_schema)
    top = s.schema
    if top.get("type") not in ("record", "error"):
        raise SinkError(f"value schema must be a record, got type {top.get('type')!r}")
    fields = {f["name"]: f for f in top.get("fields", [])}
    if "after" in fields and "op" in fields:
        branches = fields["after"]["type"]
        branches = branches if isinstance(branches, list) else [branches]
        ns = record_namespace(top)
        records = [s.resolve(b, ns) for b in branches if b != "null"]
        if len(records) != 1 or not isinstance(records[0], dict) or records[0].get("type") != "record":
            raise SinkError(f"envelope field 'after' is not a nullable record: {fields['after']['type']!r}")
        return records[0], s
    return top, s


# =============================================================================== columns
@dataclass(frozen=True)
class SinkColumn:
    """One sink column: ``name`` in the database, ``field`` in the decoded row dict."""

    name: str
    field: str
    kind: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    length: int | None = None  # BIT(n) length

    def signature(self) -> tuple:
        return (self.name, self.field, self.kind, self.nullable, self.precision, self.scale, self.length)


def _kind_of(t: Any, what: str) -> tuple[str, dict]:
    """(kind, extra attributes) of a resolved non-null Avro type: its kind by the type table
    (:func:`contract.type_table.sink_kind`), with a decimal's precision and scale and a BIT's
    length."""
    if isinstance(t, str):
        t = {"type": t}
    if not isinstance(t, dict):
        raise UnsupportedType(f"{what}: unsupported Avro type {t!r}")
    prim = t.get("type")
    cname = t.get("connect.name")
    if prim in ("record", "error"):
        marker = cname or _fullname(t.get("name", ""), t.get("namespace"))
        if marker in RECORD_KINDS:
            return RECORD_KINDS[marker], {}
        raise UnsupportedType(f"{what}: unsupported record type {marker!r}")
    kind = sink_kind(prim, t.get("logicalType"), cname, t.get("connect.type")) if isinstance(prim, str) else None
    if kind is None:
        if isinstance(cname, str) and cname.startswith(logical_types.TIME_PREFIX):
            raise UnsupportedType(f"{what}: unsupported temporal type {cname!r}")
        raise UnsupportedType(f"{what}: unsupported Avro type {prim!r}" + (f" ({cname}: no sink stores it yet)"
                                                                           if isinstance(cname, str) else ""))
    if kind == "decimal":
        return kind, {"precision": int(t["precision"]), "scale": int(t.get("scale", 0))}
    if kind == "bits":
        params = t.get("connect.parameters") or {}
        n = t.get("length", params.get("length"))
        if n is None:
            raise UnsupportedType(f"{what}: {logical_types.BITS} without a length")
        return kind, {"length": int(n)}
    return kind, {}


def column_kind(field_type: Any, names: Mapping[str, dict] | None = None, *, what: str = "field") -> tuple[str, bool, dict]:
    """(kind, nullable, attributes) of an Avro field type (a union with null is nullable)."""
    s = _Schema.__new__(_Schema)
    s.schema, s.names = {}, dict(names or {})
    if isinstance(field_type, list):
        branches = [b for b in field_type if b != "null"]
        if len(branches) != 1:
            raise UnsupportedType(f"{what}: unions other than [null, T] are not supported: {field_type!r}")
        kind, attrs = _kind_of(s.resolve(branches[0], None), what)
        return kind, len(branches) != len(field_type), attrs
    kind, attrs = _kind_of(s.resolve(field_type, None), what)
    return kind, False, attrs


def row_columns(value_schema: Any) -> list[SinkColumn]:
    """The sink columns of a value schema, in field order.

    A column is named after the source column (the field's ``mysql.column`` property when
    the producer had to rename the field), and reads the field's value from the row.
    """
    record, s = row_record(value_schema)
    ns = record_namespace(record)
    cols: list[SinkColumn] = []
    seen: set[str] = set()
    for f in record.get("fields", []):
        fname = f["name"]
        name = f.get("mysql.column") or fname
        t = f["type"]
        what = f"column {name!r}"
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) != 1:
                raise UnsupportedType(f"{what}: unions other than [null, T] are not supported: {t!r}")
            kind, attrs = _kind_of(s.resolve(branches[0], ns), what)
            nullable = len(branches) != len(t)
        else:
            kind, attrs = _kind_of(s.resolve(t, ns), what)
            nullable = False
        if name == POSITION_COLUMN:
            raise SinkError(f"the source has a column named {POSITION_COLUMN!r}, which the sink reserves")
        if name.lower() in seen:
            raise SinkError(f"two columns are both named {name!r} (case-insensitively)")
        seen.add(name.lower())
        cols.append(SinkColumn(name, fname, kind, nullable, attrs.get("precision"), attrs.get("scale"),
                               attrs.get("length")))
    if not cols:
        raise SinkError("the row record has no fields")
    return cols


@dataclass(frozen=True)
class TableLayout:
    """A sink table's columns and key, with the field lookups the writers need."""

    columns: tuple[SinkColumn, ...]
    key: tuple[SinkColumn, ...]
    #: For each key column, the names a key dict may use for it (field name first).
    key_lookup: tuple[tuple[str, ...], ...] = field(repr=False, default=())

    @property
    def key_names(self) -> list[str]:
        return [c.name for c in self.key]

    @property
    def non_key(self) -> list[SinkColumn]:
        keys = {c.name for c in self.key}
        return [c for c in self.columns if c.name not in keys]

    def signature(self) -> tuple:
        return (tuple(c.signature() for c in self.columns), tuple(c.name for c in self.key))

    def key_values(self, key: Any, row: Mapping[str, Any] | None) -> tuple:
        """The key values (Avro values, key order) of a change: from ``key`` if given, else the row."""
        if key is None:
            if row is None:
                raise SinkError("a change has neither a key nor a row")
            key, what = row, "row"
        else:
            what = "key"
        if type(key) is dict or isinstance(key, Mapping):
            try:
                return tuple([key[names[0]] for names in self.key_lookup])
            except KeyError:
                return tuple([_lookup(key, names, what) for names in self.key_lookup])
        if isinstance(key, (tuple, list)):
            if len(key) != len(self.key):
                raise SinkError(f"key {key!r} has {len(key)} values, the table's key has {len(self.key)} columns")
            return tuple(key)
        if len(self.key) == 1:
            return (key,)
        raise SinkError(f"cannot read key values from {key!r}")


def _lookup(d: Mapping[str, Any], names: tuple[str, ...], what: str) -> Any:
    for n in names:
        if n in d:
            return d[n]
    raise SinkError(f"{what} {dict(d)!r} has no value for key column {names[-1]!r}")


def table_layout(value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
    """Columns of ``value_schema`` and the key columns (named by column or field name)."""
    cols = row_columns(value_schema)
    if not key_columns:
        raise SinkError("a sink table needs key columns (the source primary key or surrogate key)")
    by_name = {c.name: c for c in cols}
    by_field = {c.field: c for c in cols}
    by_lower = {c.name.lower(): c for c in cols}
    key: list[SinkColumn] = []
    for k in key_columns:
        c = by_name.get(k) or by_field.get(k) or by_lower.get(str(k).lower())
        if c is None:
            raise SinkError(f"key column {k!r} is not a column of the row schema ({', '.join(by_name)})")
        if c in key:
            raise SinkError(f"key column {k!r} given twice")
        if c.kind == "json":
            raise UnsupportedType(f"key column {c.name!r}: a JSON column cannot be part of a key")
        key.append(c)
    key_cols = tuple(SinkColumn(c.name, c.field, c.kind, False, c.precision, c.scale, c.length) for c in key)
    key_set = {c.name for c in key_cols}
    columns = tuple(next(k for k in key_cols if k.name == c.name) if c.name in key_set else c for c in cols)
    lookup = tuple(tuple(dict.fromkeys((c.field, c.name))) for c in key_cols)
    return TableLayout(columns, key_cols, lookup)


def cached_layout(cache: dict, value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
    """:func:`table_layout`, kept in ``cache`` (a sink's own, by schema text and key; at most
    a few hundred layouts)."""
    text = value_schema if isinstance(value_schema, str) else json.dumps(value_schema, sort_keys=True, default=str)
    ck = (text, tuple(key_columns))
    layout = cache.get(ck)
    if layout is None:
        if len(cache) > 256:
            cache.clear()
        layout = cache[ck] = table_layout(value_schema, key_columns)
    return layout


def as_sink_column(col: Any) -> SinkColumn:
    """A SinkColumn from a SinkColumn or an Avro field dict ``{"name", "type", ...}``."""
    if isinstance(col, SinkColumn):
        return col
    if isinstance(col, Mapping) and "type" in col:
        name = col.get("mysql.column") or col.get("name") or "field"
        kind, nullable, attrs = column_kind(col["type"], what=f"column {name!r}")
        return SinkColumn(name, col.get("name", name), kind, nullable, attrs.get("precision"), attrs.get("scale"),
                          attrs.get("length"))
    raise TypeError(f"expected a SinkColumn or an Avro field dict, got {col!r}")
