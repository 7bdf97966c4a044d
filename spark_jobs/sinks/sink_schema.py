"""What the table sinks share: Avro row schema -> sink columns, value conversion, batch reduction.

Pure (no I/O, no Spark): the PostgreSQL and MySQL writers build on it, and so do the tests.

Input
=====
The *value schema* of a table's topic as the producer writes it (``producer/event_builder.py``):
a Debezium envelope record whose ``after`` field is ``["null", <row record>]`` (the row
record is defined inside ``before`` and only referenced by name in ``after``).  The row
record itself, a JSON string of either, or a schema parsed by ``fastavro.parse_schema`` are
accepted too.  Values are what fastavro decodes: ``Decimal`` for decimals, ints for the
Debezium temporal types, ``bytes``, ``str``, dicts for the geometry records.

Column types
============
One :class:`SinkColumn` per row field, classified into a *kind* from the Avro type and its
Debezium semantic name (``connect.name``), see ``producer/type_mapping.py``:

=================  =======================================  ==========================  =======================
kind               Avro (connect.name)                       PostgreSQL                  MySQL / MariaDB
=================  =======================================  ==========================  =======================
smallint           int, connect.type int16/int8              smallint                    SMALLINT
int                int                                       integer                     INT
long               long                                      bigint                      BIGINT
decimal            bytes decimal(p,s) (BIGINT UNSIGNED =     numeric(p,s)                DECIMAL(p,s)
                   decimal(20,0))
float              float                                     real                        FLOAT
double             double                                    double precision            DOUBLE
boolean            boolean (BIT(1))                          boolean                     BIT(1)
bits               bytes io.debezium.data.Bits (length n)    bit(n)                      BIT(n)
string             string (also UUID/INET text)              text                        LONGTEXT / VARCHAR(k)
bytes              bytes / fixed                             bytea                       LONGBLOB / VARBINARY(k)
enum, set          string io.debezium.data.Enum / EnumSet    text                        LONGTEXT / VARCHAR(k)
json               string io.debezium.data.Json              jsonb                       JSON
date               int io.debezium.time.Date (days)          date                        DATE
time               long io.debezium.time.MicroTime (us)      interval                    TIME(6)
timestamp_ms       long io.debezium.time.Timestamp (ms)      timestamp(3) without tz     DATETIME(3)
timestamp_us       long io.debezium.time.MicroTimestamp      timestamp(6) without tz     DATETIME(6)
zoned_timestamp    string io.debezium.time.ZonedTimestamp    timestamp(6) with tz        TIMESTAMP(6) NULL
year               int io.debezium.time.Year                 smallint                    YEAR
geometry, point    record Geometry {wkb, srid} / Point       bytea (the WKB)             LONGBLOB (the WKB)
=================  =======================================  ==========================  =======================

Notes:

* ``MicroTime`` may be negative or above 24 h (MySQL TIME spans +-838:59:59), hence
  ``interval`` in PostgreSQL.  Values are written as ``[-]H:MM:SS.ffffff`` text, which both
  servers read exactly (pymysql's own ``timedelta`` literal is wrong for negative values).
* ``Timestamp``/``MicroTimestamp`` carry the DATETIME wall clock read as UTC: they become
  naive datetimes.  ``ZonedTimestamp`` is an instant: an aware UTC datetime for PostgreSQL;
  for MySQL a naive UTC datetime written on a ``time_zone = '+00:00'`` session.
* Plain Avro logical types (``date``, ``time-millis``/``-micros``, ``timestamp-millis``/
  ``-micros``, ``decimal``, ``uuid``) map like their Debezium twins; an unknown
  ``connect.name`` falls back to its Avro primitive, except unknown ``io.debezium.time.*``
  names, which raise :class:`UnsupportedType` (a silently wrong time is worse).
* Geometry keeps the WKB only (the SRID is not stored).  A ``Point`` without WKB gets one
  built from ``x``/``y``.
* The MySQL string/binary types of *key* columns are ``VARCHAR``/``VARBINARY`` sized to fit
  InnoDB's 3072-byte key limit (the Avro schema carries no lengths), see :func:`mysql_type`.

Records and batch reduction
===========================
A change is ``(key, op, row, position)``: ``key`` a dict of key column -> Avro value (or a
tuple of the key values in key order), ``op`` one of ``c u r d``, ``row`` the after image
(``None`` for ``d``), ``position`` the 30-digit position string (string order = log order).
:func:`reduce_batch` keeps, per key, the record with the highest position, which is the
DBLog upsert rule of ``docs/DESIGN.md`` section 4.  Two records with the same key and the
same position are copies of one event (the producer never gives two events one position).
"""

from __future__ import annotations

import hashlib
import json
import operator
import struct
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from common.errors import UnsupportedType
from spark_jobs.errors import SinkError

__all__ = [
    "POSITION_COLUMN",
    "POSITION_WIDTH",
    "SinkColumn",
    "TableLayout",
    "Change",
    "Reduced",
    "ApplyResult",
    "row_record",
    "row_columns",
    "table_layout",
    "column_kind",
    "postgres_type",
    "mysql_type",
    "mysql_key_types",
    "postgres_converter",
    "mysql_converter",
    "is_pass_through",
    "days_to_date",
    "micros_to_timedelta",
    "millis_to_datetime",
    "micros_to_datetime",
    "parse_zoned_timestamp",
    "format_time_micros",
    "bits_to_int",
    "bits_to_text",
    "geometry_wkb",
    "check_position",
    "reduce_batch",
    "row_getter",
    "row_error",
    "reduce_for_layout",
    "KeyedReduced",
    "key_json",
    "key_hash",
    "key_json_and_hash",
    "freeze_key",
    "sink_identifier",
    "sink_table_name",
]

#: The column every sink table carries next to the source columns.
POSITION_COLUMN = "__cdc_position"
POSITION_WIDTH = 30

_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
_UTC = timezone.utc


# =============================================================================== schema walking
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_NAMED = {"record", "error", "enum", "fixed"}

GEOMETRY_NAME = "io.debezium.data.geometry.Geometry"
POINT_NAME = "io.debezium.data.geometry.Point"


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
        if isinstance(t, str) and t not in _PRIMITIVES:
            found = self.names.get(_fullname(t, ns)) or self.names.get(t)
            if found is None:
                if t in (GEOMETRY_NAME, POINT_NAME):  # well known, even when not defined here
                    return {"type": "record", "name": t, "fields": [], "connect.name": t}
                raise SinkError(f"unknown Avro type name {t!r}")
            return found
        if isinstance(t, dict) and set(t) == {"type"} and not isinstance(t["type"], list):
            return self.resolve(t["type"], ns)  # {"type": "long"} or {"type": {...}}
        return t


def _record_ns(record: dict, outer: str | None = None) -> str | None:
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
        ns = _record_ns(top)
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


_TIME_NAMES = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.Timestamp": "timestamp_ms",
    "io.debezium.time.MicroTimestamp": "timestamp_us",
    "io.debezium.time.ZonedTimestamp": "zoned_timestamp",
    "io.debezium.time.Year": "year",
}
_STRING_NAMES = {
    "io.debezium.data.Enum": "enum",
    "io.debezium.data.EnumSet": "set",
    "io.debezium.data.Json": "json",
}
_LOGICAL = {
    ("int", "date"): "date",
    ("int", "time-millis"): "time_ms",
    ("long", "time-micros"): "time",
    ("long", "timestamp-millis"): "timestamp_ms",
    ("long", "timestamp-micros"): "timestamp_us",
    ("long", "local-timestamp-millis"): "timestamp_ms",
    ("long", "local-timestamp-micros"): "timestamp_us",
    ("string", "uuid"): "string",
}
_PRIMITIVE_KIND = {
    "int": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean",
    "string": "string", "bytes": "bytes",
}


def _kind_of(t: Any, what: str) -> tuple[str, dict]:
    """(kind, extra attributes) of a resolved non-null Avro type."""
    if isinstance(t, str):
        if t in _PRIMITIVE_KIND:
            return _PRIMITIVE_KIND[t], {}
        raise UnsupportedType(f"{what}: unsupported Avro type {t!r}")
    if not isinstance(t, dict):
        raise UnsupportedType(f"{what}: unsupported Avro type {t!r}")
    prim = t.get("type")
    cname = t.get("connect.name")
    logical = t.get("logicalType")
    if prim in ("record", "error"):
        full = _fullname(t.get("name", ""), t.get("namespace"))
        marker = cname or full
        if marker == POINT_NAME:
            return "point", {}
        if marker == GEOMETRY_NAME:
            return "geometry", {}
        raise UnsupportedType(f"{what}: unsupported record type {marker!r}")
    if prim == "enum":
        return "string", {}
    if prim == "fixed":
        if logical == "decimal":
            return "decimal", {"precision": int(t["precision"]), "scale": int(t.get("scale", 0))}
        return "bytes", {}
    if prim not in _PRIMITIVE_KIND:
        raise UnsupportedType(f"{what}: unsupported Avro type {prim!r}")
    if logical == "decimal" and prim == "bytes":
        return "decimal", {"precision": int(t["precision"]), "scale": int(t.get("scale", 0))}
    if cname in _TIME_NAMES:
        return _TIME_NAMES[cname], {}
    if cname in _STRING_NAMES:
        return _STRING_NAMES[cname], {}
    if cname == "io.debezium.data.Bits":
        params = t.get("connect.parameters") or {}
        n = t.get("length", params.get("length"))
        if n is None:
            raise UnsupportedType(f"{what}: io.debezium.data.Bits without a length")
        return "bits", {"length": int(n)}
    if isinstance(cname, str) and cname.startswith("io.debezium.time."):
        raise UnsupportedType(f"{what}: unsupported temporal type {cname!r}")
    if (prim, logical) in _LOGICAL:
        return _LOGICAL[(prim, logical)], {}
    if prim == "int" and t.get("connect.type") in ("int16", "int8"):
        return "smallint", {}
    return _PRIMITIVE_KIND[prim], {}


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
    ns = _record_ns(record)
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


# =============================================================================== DDL types
def _as_column(col: Any) -> SinkColumn:
    """A SinkColumn from a SinkColumn or an Avro field dict ``{"name", "type", ...}``."""
    if isinstance(col, SinkColumn):
        return col
    if isinstance(col, Mapping) and "type" in col:
        name = col.get("mysql.column") or col.get("name") or "field"
        kind, nullable, attrs = column_kind(col["type"], what=f"column {name!r}")
        return SinkColumn(name, col.get("name", name), kind, nullable, attrs.get("precision"), attrs.get("scale"),
                          attrs.get("length"))
    raise TypeError(f"expected a SinkColumn or an Avro field dict, got {col!r}")


_PG_TYPES = {
    "smallint": "smallint", "int": "integer", "long": "bigint", "float": "real", "double": "double precision",
    "boolean": "boolean", "string": "text", "enum": "text", "set": "text", "bytes": "bytea", "json": "jsonb",
    "date": "date", "time": "interval", "time_ms": "interval", "timestamp_ms": "timestamp(3) without time zone",
    "timestamp_us": "timestamp(6) without time zone", "zoned_timestamp": "timestamp(6) with time zone",
    "year": "smallint", "geometry": "bytea", "point": "bytea",
}


def postgres_type(col: Any) -> str:
    """PostgreSQL column type (in ``format_type`` spelling) of a SinkColumn or Avro field."""
    c = _as_column(col)
    if c.kind == "decimal":
        return f"numeric({c.precision},{c.scale})"
    if c.kind == "bits":
        return f"bit({c.length})"
    try:
        return _PG_TYPES[c.kind]
    except KeyError:
        raise UnsupportedType(f"column {c.name!r}: no PostgreSQL type for kind {c.kind!r}") from None


_MYSQL_TYPES = {
    "smallint": "SMALLINT", "int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
    "boolean": "BIT(1)", "string": "LONGTEXT", "enum": "LONGTEXT", "set": "LONGTEXT", "bytes": "LONGBLOB",
    "json": "JSON", "date": "DATE", "time": "TIME(6)", "time_ms": "TIME(3)", "timestamp_ms": "DATETIME(3)",
    "timestamp_us": "DATETIME(6)", "zoned_timestamp": "TIMESTAMP(6)", "year": "YEAR",
    "geometry": "LONGBLOB", "point": "LONGBLOB",
}
_TEXT_KINDS = {"string", "enum", "set"}
_BINARY_KINDS = {"bytes", "geometry", "point"}
#: Bytes an InnoDB index entry may use (3072 with the DYNAMIC row format), with some room left.
MYSQL_KEY_BYTES = 3000
_MYSQL_FIXED_KEY_BYTES = {
    "smallint": 2, "int": 4, "long": 8, "float": 4, "double": 8, "boolean": 1, "date": 3, "time": 6, "time_ms": 5,
    "timestamp_ms": 7, "timestamp_us": 8, "zoned_timestamp": 7, "year": 1,
}


def mysql_key_types(key: Sequence[Any]) -> dict[str, str]:
    """MySQL types of key columns: variable-length ones share what InnoDB's key limit leaves.

    ``VARCHAR(n)`` counts 4 bytes a character (utf8mb4).  With one string key column that is
    ``VARCHAR(750)``; longer source keys cannot be stored (the Avro schema has no lengths).
    """
    cols = [_as_column(c) for c in key]
    fixed = 0
    variable = []
    for c in cols:
        if c.kind in _TEXT_KINDS or c.kind in _BINARY_KINDS:
            variable.append(c)
        elif c.kind == "decimal":
            fixed += (c.precision or 10) // 2 + 1
        elif c.kind == "bits":
            fixed += ((c.length or 1) + 7) // 8
        else:
            fixed += _MYSQL_FIXED_KEY_BYTES.get(c.kind, 8)
    out = {c.name: mysql_type(c) for c in cols if c not in variable}
    if variable:
        share = max(1, (MYSQL_KEY_BYTES - fixed - 2 * len(variable)) // len(variable))
        for c in variable:
            out[c.name] = f"VARCHAR({max(1, share // 4)})" if c.kind in _TEXT_KINDS else f"VARBINARY({share})"
    return out


def mysql_type(col: Any) -> str:
    """MySQL/MariaDB column type of a SinkColumn or Avro field (non-key form, see :func:`mysql_key_types`)."""
    c = _as_column(col)
    if c.kind == "decimal":
        if not 1 <= (c.precision or 0) <= 65 or not 0 <= (c.scale or 0) <= 30:
            raise UnsupportedType(f"column {c.name!r}: DECIMAL({c.precision},{c.scale}) exceeds MySQL's limits")
        return f"DECIMAL({c.precision},{c.scale})"
    if c.kind == "bits":
        if not 1 <= (c.length or 0) <= 64:
            raise UnsupportedType(f"column {c.name!r}: BIT({c.length}) exceeds MySQL's limit of 64")
        return f"BIT({c.length})"
    try:
        return _MYSQL_TYPES[c.kind]
    except KeyError:
        raise UnsupportedType(f"column {c.name!r}: no MySQL type for kind {c.kind!r}") from None


# =============================================================================== values
def days_to_date(days: int) -> date:
    """io.debezium.time.Date (days since 1970-01-01) -> date."""
    try:
        return _EPOCH_DATE + timedelta(days=days)
    except OverflowError:
        raise ValueError(f"date {days} days from 1970-01-01 is outside years 1..9999") from None


def micros_to_timedelta(us: int) -> timedelta:
    """io.debezium.time.MicroTime -> timedelta (negative and > 24 h allowed)."""
    return timedelta(microseconds=us)


def millis_to_datetime(ms: int) -> datetime:
    """io.debezium.time.Timestamp (ms since epoch, wall clock as UTC) -> naive datetime."""
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        raise ValueError(f"timestamp {ms} ms is outside years 1..9999") from None


def micros_to_datetime(us: int) -> datetime:
    """io.debezium.time.MicroTimestamp (us since epoch, wall clock as UTC) -> naive datetime."""
    try:
        return _EPOCH + timedelta(microseconds=us)
    except OverflowError:
        raise ValueError(f"timestamp {us} us is outside years 1..9999") from None


def parse_zoned_timestamp(text: str) -> datetime:
    """io.debezium.time.ZonedTimestamp (ISO-8601 with offset or ``Z``) -> aware datetime in UTC."""
    try:
        v = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO-8601 timestamp: {text!r}") from None
    if v.tzinfo is None:
        v = v.replace(tzinfo=_UTC)
    return v.astimezone(_UTC)


def format_time_micros(us: int) -> str:
    """Microseconds as ``[-]H:MM:SS.ffffff``: the exact TIME literal (and interval input)."""
    sign = "-" if us < 0 else ""
    us = -us if us < 0 else us
    s, frac = divmod(us, 1_000_000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}.{frac:06d}"


def bits_to_int(b: bytes) -> int:
    """io.debezium.data.Bits (little-endian bytes) -> the unsigned number."""
    return int.from_bytes(b, "little")


def bits_to_text(b: bytes, n: int) -> str:
    """io.debezium.data.Bits -> PostgreSQL bit(n) text, most significant bit first."""
    v = int.from_bytes(b, "little")
    if v >> n:
        raise ValueError(f"bit value {b!r} does not fit in {n} bits")
    return format(v, f"0{n}b")


def geometry_wkb(v: Mapping[str, Any]) -> bytes:
    """The WKB of a Debezium Geometry/Point record (a Point without WKB gets one from x/y)."""
    wkb = v.get("wkb")
    if wkb is not None:
        return bytes(wkb)
    if "x" in v and "y" in v:
        return struct.pack("<BIdd", 1, 1, float(v["x"]), float(v["y"]))
    raise ValueError(f"geometry value without WKB: {v!r}")


def _nullable(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        return None if v is None else fn(v)
    conv.__name__ = getattr(fn, "__name__", "conv")
    return conv


def _identity(v: Any) -> Any:
    return v


def is_pass_through(conv: Callable[[Any], Any]) -> bool:
    """Whether a converter returns its input unchanged (callers may skip calling it)."""
    return conv is _identity


def _time_ms_text(ms: int) -> str:
    return format_time_micros(ms * 1000)


def _common_converter(c: SinkColumn) -> Callable[[Any], Any] | None:
    k = c.kind
    if k in ("smallint", "int", "long", "year", "float", "double", "boolean", "string", "enum", "set", "json",
             "decimal"):
        return _identity
    if k == "bytes":
        return _nullable(bytes)
    if k == "date":
        return _nullable(days_to_date)
    if k == "time":
        return _nullable(format_time_micros)
    if k == "time_ms":
        return _nullable(_time_ms_text)
    if k == "timestamp_ms":
        return _nullable(millis_to_datetime)
    if k == "timestamp_us":
        return _nullable(micros_to_datetime)
    if k in ("geometry", "point"):
        return _nullable(geometry_wkb)
    return None


def postgres_converter(col: Any) -> Callable[[Any], Any]:
    """Avro value -> PostgreSQL parameter (``None`` stays ``None``)."""
    c = _as_column(col)
    if c.kind == "bits":
        n = c.length or 1
        return _nullable(lambda b: bits_to_text(b, n))
    if c.kind == "zoned_timestamp":
        return _nullable(parse_zoned_timestamp)
    conv = _common_converter(c)
    if conv is None:
        raise UnsupportedType(f"column {c.name!r}: no converter for kind {c.kind!r}")
    return conv


def _naive_utc(text: str) -> datetime:
    return parse_zoned_timestamp(text).replace(tzinfo=None)


def mysql_converter(col: Any) -> Callable[[Any], Any]:
    """Avro value -> MySQL parameter (``None`` stays ``None``); the session is on UTC."""
    c = _as_column(col)
    if c.kind == "bits":
        return _nullable(bits_to_int)
    if c.kind == "zoned_timestamp":
        return _nullable(_naive_utc)
    conv = _common_converter(c)
    if conv is None:
        raise UnsupportedType(f"column {c.name!r}: no converter for kind {c.kind!r}")
    return conv


# =============================================================================== batches
_OPS = frozenset(("c", "u", "r", "d"))


def check_position(p: Any) -> str:
    if type(p) is not str or len(p) != POSITION_WIDTH or not p.isascii() or not p.isdigit():
        raise SinkError(f"a position must be a string of {POSITION_WIDTH} ASCII digits, got {p!r}")
    return p


class Change(NamedTuple):
    """One change of one row: the input of the sinks."""

    key: Any
    op: str
    row: Mapping[str, Any] | None
    position: str


class Reduced(NamedTuple):
    """A batch reduced to one record per key: the upserts, the deletes, how many were dropped."""

    upserts: list[Change]
    deletes: list[Change]
    superseded: int


_SCALARS = frozenset({int, str, bytes, bool, Decimal, type(None)})


def freeze_key(v: Any) -> Any:
    """A hashable form of a key (dicts, lists, bytearrays frozen; -0.0 is 0.0)."""
    t = type(v)
    if t in _SCALARS:
        return v
    if t is tuple:
        for x in v:
            if type(x) not in _SCALARS:
                return tuple([freeze_key(x) for x in v])
        return v
    if isinstance(v, Mapping):
        return tuple(sorted((k, freeze_key(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple([freeze_key(x) for x in v])
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, float) and v == 0.0:
        return 0.0  # -0.0 and 0.0 are one key
    return v


def _as_change(rec: Any) -> Change:
    if isinstance(rec, Change):
        return rec
    if isinstance(rec, (tuple, list)):
        if len(rec) != 4:
            raise SinkError(f"a change is (key, op, row, position), got {len(rec)} items: {rec!r}")
        return Change(*rec)
    try:
        return Change(rec.key, rec.op, rec.row, rec.position)
    except AttributeError:
        raise SinkError(f"not a change record: {rec!r}") from None


def _reduce(records: Iterable[Any], keyer: Callable[[Change], tuple[Any, Any]]) -> tuple[list, list, int]:
    best: dict[Any, tuple[Change, Any]] = {}
    n = 0
    ops = _OPS
    for rec in records:
        n += 1
        if type(rec) is not Change:
            rec = _as_change(rec)
        _, op, row, pos = rec
        if op not in ops:
            raise SinkError(f"unknown op {op!r} (expected c, u, r or d)")
        if type(pos) is not str or len(pos) != POSITION_WIDTH or not pos.isdigit() or not pos.isascii():
            check_position(pos)
        if row is None and op != "d":
            raise SinkError(f"a {op!r} change without a row image at position {pos}")
        k, payload = keyer(rec)
        cur = best.get(k)
        if cur is None or cur[0][3] < pos:
            best[k] = (rec, payload)
    upserts: list = []
    deletes: list = []
    for item in sorted(best.values(), key=lambda it: it[0][3]):
        (deletes if item[0][1] == "d" else upserts).append(item)
    return upserts, deletes, n - len(best)


def reduce_batch(records: Iterable[Any], key_of: Callable[[Change], Any] | None = None) -> Reduced:
    """Per key, the record with the highest position; split into upserts and deletes.

    ``records`` are :class:`Change` or ``(key, op, row, position)`` tuples (or objects with
    those attributes) in any order, copies included.  ``key_of`` maps a change to a
    hashable key (default: the change's ``key``, dicts and lists frozen).  Ops ``c``, ``u``
    and ``r`` are upserts (``row`` required), ``d`` a delete.  Output order: rising position.
    """
    if key_of is None:
        def keyer(ch: Change) -> tuple[Any, Any]:
            return freeze_key(ch.key), None
    else:
        def keyer(ch: Change) -> tuple[Any, Any]:
            return key_of(ch), None
    ups, dels, superseded = _reduce(records, keyer)
    return Reduced([u[0] for u in ups], [d[0] for d in dels], superseded)


class KeyedReduced(NamedTuple):
    """:func:`reduce_for_layout`'s result: ``(change, key values)`` pairs."""

    upserts: list[tuple[Change, tuple]]
    deletes: list[tuple[Change, tuple]]
    superseded: int


def reduce_for_layout(records: Iterable[Any], layout: TableLayout) -> KeyedReduced:
    """:func:`reduce_batch` keyed by the layout's key columns, keeping each winner's key values.

    The key values are the Avro values in key order (:meth:`TableLayout.key_values`: from
    the change's key, else from its row).
    """
    key_values = layout.key_values

    def keyer(ch: Change) -> tuple[Any, Any]:
        kv = key_values(ch.key, ch.row)
        return freeze_key(kv), kv
    return KeyedReduced(*_reduce(records, keyer))


@dataclass
class ApplyResult:
    """What one ``apply`` did, counted in input records.

    ``upserted`` rows inserted or updated; ``deleted`` deletes applied (the row removed, or
    remembered as a tombstone when the sink did not hold it); ``skipped`` records the sink
    already had at the same or a newer position (replays, late older records);
    ``superseded`` records dropped because the batch held a newer record of the same key.
    The four add up to the number of records given.
    """

    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    superseded: int = 0

    @property
    def total(self) -> int:
        return self.upserted + self.deleted + self.skipped + self.superseded

    def __iter__(self):  # (upserted, deleted, skipped) = result
        return iter((self.upserted, self.deleted, self.skipped))


# =============================================================================== rows
def row_getter(fields: list[str]):
    """A function row dict -> tuple of the ``fields``' values (operator.itemgetter, C speed)."""
    if len(fields) == 1:
        f = fields[0]
        return lambda row: (row[f],)
    return operator.itemgetter(*fields)


def row_error(table: str, layout: TableLayout, converters: list, ch: Any, exc: Exception) -> SinkError:
    """The error for a row that could not be converted, naming the column."""
    row = ch.row
    for conv, c in zip(converters, layout.columns):
        if not hasattr(row, "__contains__") or c.field not in row:
            return SinkError(f"{table}: the row at {ch.position} has no field {c.field!r}")
        try:
            conv(row[c.field])
        except Exception as inner:
            return SinkError(f"{table}.{c.name}: cannot write {row[c.field]!r} (position {ch.position}): {inner}")
    return SinkError(f"{table}: cannot write the row at {ch.position}: {exc}")


# =============================================================================== tombstone keys
def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return 0.0 if v == 0.0 else v
    if isinstance(v, Decimal):
        return "0" if v == 0 else format(v.normalize(), "f")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, Mapping):
        return {k: _json_value(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return str(v)


def key_json(values: Sequence[Any]) -> str:
    """Canonical JSON text of a key's Avro values (key order): equal keys, equal text."""
    return json.dumps([_json_value(v) for v in values], ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def key_hash(values: Sequence[Any]) -> bytes:
    """16-byte BLAKE2b of :func:`key_json`: the tombstone table's key."""
    return key_json_and_hash(values)[1]


def key_json_and_hash(values: Sequence[Any]) -> tuple[str, bytes]:
    """(:func:`key_json`, :func:`key_hash`) of a key."""
    text = key_json(values)
    return text, hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


# =============================================================================== names
def sink_identifier(name: str, max_bytes: int) -> str:
    """``name`` if it fits in ``max_bytes`` UTF-8 bytes, else a prefix + ``_`` + 8 hex of its hash."""
    if not name or "\0" in name:
        raise SinkError(f"invalid identifier {name!r}")
    raw = name.encode("utf-8")
    if len(raw) <= max_bytes:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:8]
    cut = raw[: max_bytes - 9].decode("utf-8", "ignore")
    return f"{cut}_{digest}"


def sink_table_name(db: str, table: str, max_bytes: int = 63) -> str:
    """The sink table of source table ``db.table``: ``<db>__<table>`` (shortened to fit)."""
    if not db or not table:
        raise SinkError(f"source database and table must be non-empty, got {db!r}.{table!r}")
    return sink_identifier(f"{db}__{table}", max_bytes)

