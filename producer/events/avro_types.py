"""MySQL/MariaDB column types -> Avro types and values, following Debezium's MySQL connector.

Debezium settings reproduced: ``decimal.handling.mode=precise``,
``time.precision.mode=adaptive_time_microseconds``, ``bigint.unsigned.handling.mode=precise``,
``binary.handling.mode=bytes``.  Debezium's semantic type names are carried as the Avro
property ``connect.name`` (with ``connect.version`` and ``connect.parameters`` where
Debezium has parameters), the way Confluent's AvroConverter writes them, so a consumer
written for Debezium + Avro reads our records.

==========================  =====================================  ===========================================
MySQL type                  Avro type                              value
==========================  =====================================  ===========================================
TINYINT[(1)], BOOL          int (connect.type int16)               int (TINYINT(1) stays an int, as Debezium)
TINYINT UNSIGNED            int (connect.type int16)               0..255
SMALLINT                    int (connect.type int16)
SMALLINT UNSIGNED,          int
MEDIUMINT [UNSIGNED], INT
INT UNSIGNED, BIGINT        long
BIGINT UNSIGNED             bytes decimal(20,0)                    decimal.Decimal, up to 2**64-1
                            (org.apache.kafka.connect.data.Decimal)
DECIMAL(p,s), NUMERIC       bytes decimal(p,s) (same connect.name) decimal.Decimal quantized to scale s
FLOAT                       float                                  the float32 value (shortest decimal form)
FLOAT(M,D), DOUBLE, REAL    double                                 FLOAT(M,D)/DOUBLE(M,D) rounded to D places
BIT(1)                      boolean
BIT(n>1)                    bytes io.debezium.data.Bits            little-endian, ceil(n/8) bytes
                            (connect.parameters.length = n)
CHAR, VARCHAR, *TEXT        string                                 decoded with the column's character set
BINARY, VARBINARY, *BLOB    bytes                                  BINARY(n) right-padded with 0x00 to n
ENUM                        string io.debezium.data.Enum           (connect.parameters.allowed = "a,b,c")
SET                         string io.debezium.data.EnumSet        members comma-joined in definition order
JSON                        string io.debezium.data.Json           canonical JSON text (see below)
DATE                        int io.debezium.time.Date              days since 1970-01-01
TIME[(fsp)]                 long io.debezium.time.MicroTime        microseconds, negative allowed
DATETIME(0..3)              long io.debezium.time.Timestamp        ms since epoch, wall clock read as UTC
DATETIME(4..6)              long io.debezium.time.MicroTimestamp   us since epoch, wall clock read as UTC
TIMESTAMP[(fsp)]            string io.debezium.time.ZonedTimestamp "2024-01-02T03:04:05.120Z": UTC, fsp digits
YEAR                        int io.debezium.time.Year
POINT                       record io.debezium.data.geometry.Point {x, y, wkb, srid}   (as Debezium does)
GEOMETRY, LINESTRING, ...   record io.debezium.data.geometry.Geometry {wkb, srid}
UUID, INET4, INET6 (MariaDB) string                                canonical text form
==========================  =====================================  ===========================================

Nullable columns become ``["null", T]`` with ``"default": null``.  DATE, DATETIME and
TIMESTAMP fields are *always* nullable: MySQL's zero dates (``0000-00-00``, and any date
with a zero year, month or day) are emitted as null, as Debezium does for optional
columns (Debezium emits epoch for NOT NULL ones; we keep null for both so that snapshot
and binlog agree -- the binlog library cannot decode those dates at all).

Deliberate differences from Debezium, each to keep snapshot and binlog values equal:
``YEAR 0000`` is emitted as 0 (Debezium: 2000); JSON text is canonicalised (see
:func:`canonical_json`); FLOAT(M,D) is rounded to D places.

Avro names: a column name that is not a valid Avro name (``[A-Za-z_][A-Za-z0-9_]*``)
gets every invalid character replaced by ``_`` and a leading ``_`` if it starts with a
digit (``9 weird-col`` -> ``_9_weird_col``), Debezium's ``field.name.adjustment.mode=avro``
rule; the original name is kept in the field property ``"mysql.column"``.  If two
columns end up with the same name, later ones (in ordinal order) get ``_2``, ``_3``...;
names that were valid to start with are never changed.  :func:`field_names` gives the
mapping.

The values themselves are converted in :mod:`producer.events.values`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from common.errors import UnsupportedType
from contract import logical_types
from contract.type_table import DEFAULT_MODES, DECIMAL20, INT16, INTEGER_TYPES, TypeModes, family_of, source_type
from contract.envelope import avro_fullname, avro_name, unique_avro_names  # noqa: F401 - avro_fullname: part of this module's names
from producer.table_schema import ColumnDef, TableDef

__all__ = [
    "avro_name",
    "avro_fullname",
    "field_names",
    "avro_type",
    "avro_field",
    "is_nullable",
    "row_record_schema",
    "key_record_schema",
    "decimal_precision_scale",
]


# =============================================================================== names
# (avro_name, avro_fullname: contract.envelope, where the table records' names are made)


def field_names(table: TableDef, columns: Iterable[ColumnDef] | None = None) -> dict[str, str]:
    """Column name -> unique Avro field name, for ``columns`` (default: all, in order)."""
    return unique_avro_names([c.name for c in (table.columns if columns is None else columns)])


# =============================================================================== types
_INT16 = {"type": "int", "connect.type": "int16"}

GEOMETRY_RECORD_NAME = logical_types.GEOMETRY
POINT_RECORD_NAME = logical_types.POINT


def _semantic(base: str, name: str, params: dict[str, str] | None = None) -> dict:
    t: dict[str, Any] = {"type": base, "connect.version": 1, "connect.name": name}
    if params:
        t["connect.parameters"] = params
    return t


def _decimal_type(precision: int, scale: int) -> dict:
    return {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": precision,
        "scale": scale,
        "connect.version": 1,
        "connect.name": logical_types.DECIMAL,
        "connect.parameters": {logical_types.DECIMAL_SCALE_PARAMETER: str(scale),
                               logical_types.DECIMAL_PRECISION_PARAMETER: str(precision)},
    }


def _geometry_record() -> dict:
    return {
        "type": "record",
        "name": "Geometry",
        "namespace": logical_types.GEOMETRY_NAMESPACE,
        "doc": "Geometry",
        "fields": [
            {"name": "wkb", "type": "bytes"},
            {"name": "srid", "type": ["null", "int"], "default": None},
        ],
        "connect.version": 1,
        "connect.name": GEOMETRY_RECORD_NAME,
    }


def _point_record() -> dict:
    return {
        "type": "record",
        "name": "Point",
        "namespace": logical_types.GEOMETRY_NAMESPACE,
        "doc": "Geometry (POINT)",
        "fields": [
            {"name": "x", "type": "double"},
            {"name": "y", "type": "double"},
            {"name": "wkb", "type": ["null", "bytes"], "default": None},
            {"name": "srid", "type": ["null", "int"], "default": None},
        ],
        "connect.version": 1,
        "connect.name": POINT_RECORD_NAME,
    }


def decimal_precision_scale(col: ColumnDef) -> tuple[int, int]:
    p = col.precision if col.precision is not None else 10  # MySQL's default DECIMAL = (10,0)
    s = col.scale if col.scale is not None else 0
    if not 1 <= p <= 65 or not 0 <= s <= min(p, 30):
        raise UnsupportedType(f"column {col.name!r}: bad DECIMAL precision/scale ({p},{s}) in {col.column_type!r}")
    return p, s


def _integer_type(col: ColumnDef, modes: TypeModes) -> Any:
    rule = INTEGER_TYPES[col.data_type.lower()]
    t = rule.unsigned if col.unsigned else rule.signed
    if t == INT16:
        return dict(_INT16)
    if t == DECIMAL20:
        return "long" if modes.bigint_unsigned == "long" else _decimal_type(20, 0)
    return t


def _bit_type(col: ColumnDef, modes: TypeModes) -> Any:
    n = col.bit_length or 1
    if n == 1:
        return "boolean"
    t = _semantic("bytes", logical_types.BITS, {"length": str(n)})
    t["length"] = n
    return t


def _decimal_column(col: ColumnDef, modes: TypeModes) -> Any:
    precision_scale = decimal_precision_scale(col)
    if modes.decimal == "double":
        return "double"
    if modes.decimal == "string":
        return "string"
    return _decimal_type(*precision_scale)


def _binary_type(col: ColumnDef, modes: TypeModes) -> Any:
    return "bytes" if modes.binary == "bytes" else "string"


def _connect(base: str, name: str, logical: str) -> dict:
    """A Kafka Connect temporal type as Confluent's AvroConverter writes it."""
    return {"type": base, "connect.version": 1, "connect.name": name, "logicalType": logical}


def _date_type(col: ColumnDef, modes: TypeModes) -> Any:
    if modes.time_precision == "connect":
        return _connect("int", logical_types.CONNECT_DATE, "date")
    return _semantic("int", logical_types.DATE)


def _time_type(col: ColumnDef, modes: TypeModes) -> Any:
    if modes.time_precision == "connect":
        return _connect("int", logical_types.CONNECT_TIME, "time-millis")
    return _semantic("long", logical_types.MICRO_TIME)


def _datetime_type(col: ColumnDef, modes: TypeModes) -> Any:
    if modes.time_precision == "connect":
        return _connect("long", logical_types.CONNECT_TIMESTAMP, "timestamp-millis")
    return _semantic("long", logical_types.TIMESTAMP if col.fsp <= 3 else logical_types.MICRO_TIMESTAMP)


#: The non-null Avro type of a column, by its family (contract.type_table.SOURCE_TYPES):
#: ``make(col, modes)``.
_AVRO_TYPES: dict[str, Any] = {
    "integer": _integer_type,
    "decimal": _decimal_column,
    "float": lambda col, modes: "float" if col.scale is None else "double",
    "double": lambda col, modes: "double",
    "bit": _bit_type,
    "string": lambda col, modes: "string",
    "uuid": lambda col, modes: "string",
    "inet4": lambda col, modes: "string",
    "inet6": lambda col, modes: "string",
    "binary": _binary_type,
    "enum": lambda col, modes: _semantic("string", logical_types.ENUM, {"allowed": allowed_members(col.enum_values)}),
    "set": lambda col, modes: _semantic("string", logical_types.ENUM_SET, {"allowed": ",".join(col.enum_values)}),
    "json": lambda col, modes: _semantic("string", logical_types.JSON),
    "date": _date_type,
    "time": _time_type,
    "datetime": _datetime_type,
    "timestamp": lambda col, modes: _semantic("string", logical_types.ZONED_TIMESTAMP),
    "year": lambda col, modes: _semantic("int", logical_types.YEAR),
    "point": lambda col, modes: _point_record(),
    "geometry": lambda col, modes: _geometry_record(),
    "vector": lambda col, modes: {"type": "array", "items": "float", "connect.version": 1,
                                  "connect.name": logical_types.FLOAT_VECTOR},
}


def allowed_members(members: list[str]) -> str:
    """An ENUM's ``allowed`` parameter as Debezium writes it: the members joined by commas, a
    comma inside a member escaped (``'x,y'`` is ``x\\,y``), so the list splits back into them."""
    return ",".join(m.replace(",", "\\,") for m in members)


def _base_type(col: ColumnDef, modes: TypeModes = DEFAULT_MODES) -> Any:
    """The non-null Avro type of ``col`` under ``modes``."""
    family = family_of(col.data_type)
    if family is None:
        raise UnsupportedType(
            f"column {col.name!r}: no Avro mapping for data type {col.data_type!r} ({col.column_type!r})"
        )
    return _AVRO_TYPES[family](col, modes)


def is_nullable(col: ColumnDef, modes: TypeModes = DEFAULT_MODES) -> bool:
    """Whether the Avro field of ``col`` admits null (zero dates force it for temporal types;
    so does ``time.precision.mode: connect`` for TIME, whose values outside a day are null)."""
    family = family_of(col.data_type)
    if family == "time" and modes.time_precision == "connect":
        return True
    return col.nullable or (family is not None and source_type(family).always_nullable)


def avro_type(col: ColumnDef, modes: TypeModes = DEFAULT_MODES) -> Any:
    """The Avro type of ``col`` (under ``modes``): ``["null", T]`` when nullable, else ``T``."""
    t = _base_type(col, modes)
    return ["null", t] if is_nullable(col, modes) else t


def avro_field(col: ColumnDef, name: str | None = None, modes: TypeModes = DEFAULT_MODES) -> dict:
    """The Avro record field for ``col`` (``name`` overrides the sanitised column name)."""
    fname = name if name is not None else avro_name(col.name)
    f: dict[str, Any] = {"name": fname, "type": avro_type(col, modes)}
    if is_nullable(col, modes):
        f["default"] = None
    if fname != col.name:
        f["mysql.column"] = col.name
    return f


def _dedupe_named_types(t: Any, defined: set[str]) -> Any:
    """Replace repeated definitions of named records by a reference to their full name."""
    if isinstance(t, list):
        return [_dedupe_named_types(x, defined) for x in t]
    if isinstance(t, dict) and t.get("type") == "record":
        full = t["name"] if "." in t["name"] or not t.get("namespace") else f"{t['namespace']}.{t['name']}"
        if full in defined:
            return full
        defined.add(full)
    return t


def _is_record(t: Any) -> bool:
    if isinstance(t, list):
        return any(_is_record(x) for x in t)
    return isinstance(t, dict) and t.get("type") == "record"


def _with_parameters(t: Any, params: dict[str, str]) -> Any:
    """``t`` with the Connect ``params`` added (a column mapper's, producer/column_mappers.py)."""
    if not params:
        return t
    if isinstance(t, list):
        return [x if x == "null" else _with_parameters(x, params) for x in t]
    out = dict(t) if isinstance(t, dict) else {"type": t}
    out["connect.parameters"] = {**out.get("connect.parameters", {}), **params}
    return out


def _record_schema(table: TableDef, cols: Sequence[ColumnDef], name: str, doc: str | None,
                   modes: TypeModes = DEFAULT_MODES, mapped: bool = False) -> dict:
    names = field_names(table, cols)
    defined: set[str] = set()
    fields = []
    for c in cols:
        f = avro_field(c, names[c.name], modes)
        if mapped and c.mapping is not None:
            params = c.mapping.parameters(c)
            if _is_record(f["type"]):  # (a named record is shared by its columns: the field holds them)
                if params:
                    f["connect.parameters"] = params
            else:
                f["type"] = _with_parameters(f["type"], params)
        f["type"] = _dedupe_named_types(f["type"], defined)
        fields.append(f)
    schema: dict[str, Any] = {"type": "record", "name": avro_fullname(name), "fields": fields}
    if doc:
        schema["doc"] = doc
    schema["connect.name"] = schema["name"]
    return schema


def row_record_schema(table: TableDef, name: str, modes: TypeModes = DEFAULT_MODES) -> dict:
    """Avro record schema of a whole row (Debezium's ``<prefix>.<db>.<table>.Value``).

    Named types (the geometry records) are defined at their first use and referenced
    by full name afterwards.  A schema that embeds this one twice (``before`` and
    ``after`` of an envelope) must likewise reference the second occurrence by name.
    """
    return _record_schema(table, table.columns, name, f"row of {table.qualified_name}", modes, mapped=True)


def key_record_schema(table: TableDef, key_columns: Sequence[str] | None = None, name: str | None = None,
                      modes: TypeModes = DEFAULT_MODES) -> dict:
    """Avro record schema of the record key (default: the primary key columns)."""
    cols = table.key_columns(key_columns)
    if not cols:
        raise ValueError(f"table {table.qualified_name} has no primary key and no key columns were given")
    return _record_schema(table, cols, name or f"{table.db}.{table.name}.Key", f"key of {table.qualified_name}",
                          modes)
