"""The type table: every MySQL/MariaDB column type's rules, declared once.

Two tables, read by every path that converts a value:

* :data:`SOURCE_TYPES`, per *family* of MySQL data types that convert alike (the spellings
  of ``information_schema.COLUMNS.DATA_TYPE`` it covers, whether zero dates make it always
  nullable, ``cdc verify``'s normalisation of its source values); with
  :data:`INTEGER_TYPES`, each integer's width and its Avro type signed and unsigned
  (Debezium's MySQL connector's mapping).  The producer's Avro types
  (:mod:`producer.events.avro_types`), value converters (:mod:`producer.events.values`)
  and ``cdc verify`` (:mod:`cdc.verify.spec`) dispatch on :func:`family_of`.
* :data:`SINK_KINDS`, per *kind* of sink column (what a column's Avro/Connect type says it
  holds: :data:`CONNECT_KINDS`, :data:`AVRO_LOGICAL_KINDS`, :data:`PRIMITIVE_KINDS`): its
  PostgreSQL and MySQL types, the bytes a MySQL key column of it takes, its Arrow type (the
  lake tables), whether it is text or binary, and its COPY text.  The sinks' layout
  (:mod:`spark_jobs.sinks.layout`), types (:mod:`spark_jobs.sinks.types`), lake types
  (:mod:`spark_jobs.sinks.lake_types`) and COPY encoder (:mod:`spark_jobs.sinks.copy_text`)
  read them from here.

The C paths take their codes from the same table: ``setup.py`` writes
``contract/type_codes.h`` from :func:`c_header` when it builds the extensions (the COPY text
codes of ``spark_jobs/sinks/_copy_text.c``), so the two languages cannot disagree.

Adding a type: a row here (and its :mod:`tests.all_types` column), then the converter of
its family where the family is new; ``tests/unit/contract/test_type_table.py`` fails for a
family or kind some path does not know.

Pure data and pure functions: no I/O, no imports beyond the contract's names.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract import logical_types

__all__ = [
    "SourceType",
    "SOURCE_TYPES",
    "INTEGER_TYPES",
    "IntegerType",
    "family_of",
    "data_types",
    "TypeModes",
    "DEFAULT_MODES",
    "DECIMAL_HANDLING_MODES",
    "TIME_PRECISION_MODES",
    "BIGINT_UNSIGNED_HANDLING_MODES",
    "BINARY_HANDLING_MODES",
    "SinkKind",
    "SINK_KINDS",
    "CONNECT_KINDS",
    "RECORD_KINDS",
    "AVRO_LOGICAL_KINDS",
    "PRIMITIVE_KINDS",
    "sink_kind",
    "COPY_TEXTS",
    "COPY_TEXT_NULL",
    "copy_text_code",
    "c_header",
    "markdown_tables",
]


# =============================================================================== source types
@dataclass(frozen=True)
class SourceType:
    """A family of MySQL data types that convert alike."""

    family: str
    data_types: tuple[str, ...]
    #: cdc verify's normalisation kind of its source values (cdc.verify.normalise).
    verify: str
    #: Its Avro field admits null even for a NOT NULL column: zero dates are emitted as null.
    always_nullable: bool = False


#: Per family; the order is the one the docs list them in.
SOURCE_TYPES: tuple[SourceType, ...] = (
    SourceType("integer", ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "bool", "boolean"), "int"),
    SourceType("decimal", ("decimal", "numeric", "dec", "fixed"), "decimal"),
    SourceType("float", ("float",), "float32"),
    SourceType("double", ("double", "real", "double precision", "float8"), "double"),
    SourceType("bit", ("bit",), "bit"),
    SourceType("string", ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "long", "long varchar",
                          "nchar", "nvarchar", "national char", "national varchar", "character",
                          "character varying"), "text"),
    SourceType("binary", ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "long varbinary"),
               "bytes"),
    SourceType("enum", ("enum",), "text"),
    SourceType("set", ("set",), "text"),
    SourceType("json", ("json",), "json"),
    SourceType("vector", ("vector",), "vector"),
    SourceType("date", ("date",), "date", always_nullable=True),
    SourceType("time", ("time",), "time"),
    SourceType("datetime", ("datetime",), "datetime", always_nullable=True),
    SourceType("timestamp", ("timestamp",), "timestamp", always_nullable=True),
    SourceType("year", ("year",), "int"),
    SourceType("point", ("point",), "geometry"),
    SourceType("geometry", ("geometry", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                            "geometrycollection", "geomcollection"), "geometry"),
    SourceType("uuid", ("uuid",), "text"),
    SourceType("inet4", ("inet4",), "text"),
    SourceType("inet6", ("inet6",), "text"),
)

_FAMILY_OF = {dt: s.family for s in SOURCE_TYPES for dt in s.data_types}
_BY_FAMILY = {s.family: s for s in SOURCE_TYPES}


def family_of(data_type: str) -> str | None:
    """The family of a ``DATA_TYPE`` (any case), None for a type the table does not have."""
    return _FAMILY_OF.get(data_type.lower())


def source_type(family: str) -> SourceType:
    """The row of ``family``."""
    return _BY_FAMILY[family]


def data_types(*families: str) -> frozenset[str]:
    """Every ``DATA_TYPE`` spelling of ``families``."""
    return frozenset(dt for f in families for dt in _BY_FAMILY[f].data_types)


#: The Avro type of Kafka Connect's INT16 (Debezium's SMALLINT and TINYINT).
INT16 = "int16"
#: BIGINT UNSIGNED's Avro type: Connect's decimal of 20 digits (bigint.unsigned.handling.mode=precise).
DECIMAL20 = "decimal20"


@dataclass(frozen=True)
class IntegerType:
    """An integer type's width and its Avro type signed and unsigned (``int``, ``long``,
    :data:`INT16`, :data:`DECIMAL20`)."""

    bits: int
    signed: str
    unsigned: str


INTEGER_TYPES: dict[str, IntegerType] = {
    "tinyint": IntegerType(8, INT16, INT16),
    "bool": IntegerType(8, INT16, INT16),
    "boolean": IntegerType(8, INT16, INT16),
    "smallint": IntegerType(16, INT16, "int"),
    "mediumint": IntegerType(24, "int", "int"),
    "int": IntegerType(32, "int", "long"),
    "integer": IntegerType(32, "int", "long"),
    "bigint": IntegerType(64, "long", DECIMAL20),
}


# =============================================================================== handling modes
#: Debezium's handling modes (its setting names, its values), each the first its default here.
#: ``bigint.unsigned.handling.mode``'s default is ``precise`` here (Debezium's: ``long``, which
#: wraps values above 2**63-1): a Debezium user who set ``long`` sets it here too.
DECIMAL_HANDLING_MODES = ("precise", "double", "string")
TIME_PRECISION_MODES = ("adaptive_time_microseconds", "connect")
BIGINT_UNSIGNED_HANDLING_MODES = ("precise", "long")
BINARY_HANDLING_MODES = ("bytes", "base64", "base64-url-safe", "hex")


@dataclass(frozen=True)
class TypeModes:
    """The handling modes a table's events are written with (``producer.*_handling_mode``,
    ``producer.time_precision_mode``): what DECIMAL, the temporal types, BIGINT UNSIGNED and the
    binary types become, as Debezium's settings of the same names make them."""

    decimal: str = DECIMAL_HANDLING_MODES[0]
    time_precision: str = TIME_PRECISION_MODES[0]
    bigint_unsigned: str = BIGINT_UNSIGNED_HANDLING_MODES[0]
    binary: str = BINARY_HANDLING_MODES[0]

    def __post_init__(self) -> None:
        for name, value, allowed in (("decimal.handling.mode", self.decimal, DECIMAL_HANDLING_MODES),
                                     ("time.precision.mode", self.time_precision, TIME_PRECISION_MODES),
                                     ("bigint.unsigned.handling.mode", self.bigint_unsigned,
                                      BIGINT_UNSIGNED_HANDLING_MODES),
                                     ("binary.handling.mode", self.binary, BINARY_HANDLING_MODES)):
            if value not in allowed:
                raise ValueError(f"{name}: {value!r} is not one of {', '.join(allowed)}")


#: Debezium's defaults but ``bigint.unsigned.handling.mode: precise`` (see above).
DEFAULT_MODES = TypeModes()


# =============================================================================== sink kinds
@dataclass(frozen=True)
class SinkKind:
    """A kind of sink column: what its values are, and how each sink stores them.  None where
    the type has parameters (a decimal's precision and scale, a BIT's length): the sink
    writes those itself."""

    kind: str
    postgres: str | None
    mysql: str | None
    #: Bytes a MySQL key column of it takes (None: variable, text or binary, or parameterised).
    mysql_key_bytes: int | None
    #: The Arrow type of a lake column, as ``pyarrow``'s factory and its arguments.
    arrow: tuple | None
    #: ``text`` or ``binary`` for the variable-length kinds (a MySQL key makes them VARCHAR/VARBINARY).
    variable: str | None = None


SINK_KINDS: dict[str, SinkKind] = {k.kind: k for k in (
    SinkKind("smallint", "smallint", "SMALLINT", 2, ("int16",)),
    SinkKind("int", "integer", "INT", 4, ("int32",)),
    SinkKind("long", "bigint", "BIGINT", 8, ("int64",)),
    SinkKind("decimal", None, None, None, None),
    SinkKind("float", "real", "FLOAT", 4, ("float32",)),
    SinkKind("double", "double precision", "DOUBLE", 8, ("float64",)),
    SinkKind("boolean", "boolean", "BIT(1)", 1, ("bool_",)),
    SinkKind("bits", None, None, None, None),
    SinkKind("string", "text", "LONGTEXT", None, ("string",), "text"),
    SinkKind("enum", "text", "LONGTEXT", None, ("string",), "text"),
    SinkKind("set", "text", "LONGTEXT", None, ("string",), "text"),
    SinkKind("json", "jsonb", "JSON", None, ("string",)),
    SinkKind("bytes", "bytea", "LONGBLOB", None, ("binary",), "binary"),
    SinkKind("date", "date", "DATE", 3, ("date32",)),
    SinkKind("time", "interval", "TIME(6)", 6, ("int64",)),
    SinkKind("time_ms", "interval", "TIME(3)", 5, ("int64",)),
    SinkKind("timestamp_ms", "timestamp(3) without time zone", "DATETIME(3)", 7, ("timestamp", "us")),
    SinkKind("timestamp_us", "timestamp(6) without time zone", "DATETIME(6)", 8, ("timestamp", "us")),
    SinkKind("zoned_timestamp", "timestamp(6) with time zone", "TIMESTAMP(6)", 7, ("timestamp", "us", "UTC")),
    SinkKind("year", "smallint", "YEAR", 1, ("int16",)),
    SinkKind("geometry", "bytea", "LONGBLOB", None, ("binary",), "binary"),
    SinkKind("point", "bytea", "LONGBLOB", None, ("binary",), "binary"),
    # MySQL 9's VECTOR, Debezium's FloatVector: an array of float32 (as JSON in MySQL/MariaDB, whose
    # VECTOR types differ; pgvector's vector is not in PostgreSQL itself)
    SinkKind("float_vector", "real[]", "JSON", None, ("list_", ("float32",))),
)}

#: The kind of a column by its Avro type's ``connect.name`` (Debezium's semantic types).
CONNECT_KINDS: dict[str, str] = {
    logical_types.DATE: "date",
    logical_types.MICRO_TIME: "time",
    logical_types.TIMESTAMP: "timestamp_ms",
    logical_types.MICRO_TIMESTAMP: "timestamp_us",
    logical_types.ZONED_TIMESTAMP: "zoned_timestamp",
    logical_types.YEAR: "year",
    logical_types.ENUM: "enum",
    logical_types.ENUM_SET: "set",
    logical_types.JSON: "json",
    logical_types.BITS: "bits",
    logical_types.CONNECT_DATE: "date",
    logical_types.CONNECT_TIME: "time_ms",
    logical_types.CONNECT_TIMESTAMP: "timestamp_ms",
    logical_types.FLOAT_VECTOR: "float_vector",
}
#: The kind of a record type by its ``connect.name`` (or full name): Debezium's spatial records.
RECORD_KINDS: dict[str, str] = {logical_types.GEOMETRY: "geometry", logical_types.POINT: "point"}
#: The kind by an Avro type's ``(type, logicalType)`` (Avro's own logical types).
AVRO_LOGICAL_KINDS: dict[tuple[str, str], str] = {
    ("int", "date"): "date",
    ("int", "time-millis"): "time_ms",
    ("long", "time-micros"): "time",
    ("long", "timestamp-millis"): "timestamp_ms",
    ("long", "timestamp-micros"): "timestamp_us",
    ("long", "local-timestamp-millis"): "timestamp_ms",
    ("long", "local-timestamp-micros"): "timestamp_us",
    ("string", "uuid"): "string",
    ("bytes", "decimal"): "decimal",
    ("fixed", "decimal"): "decimal",
}
#: The kind of a plain Avro primitive (Connect's int8/int16 ints are smallint: see sink_kind).
PRIMITIVE_KINDS: dict[str, str] = {
    "int": "int", "long": "long", "float": "float", "double": "double", "boolean": "boolean",
    "string": "string", "bytes": "bytes", "fixed": "bytes", "enum": "string",
}


def sink_kind(primitive: str, logical: str | None = None, connect_name: str | None = None,
              connect_type: str | None = None) -> str | None:
    """The kind of a non-record Avro type from its primitive, ``logicalType``, ``connect.name``
    and ``connect.type``; None where the table has none (an unknown Debezium time type)."""
    if logical is not None and (primitive, logical) in AVRO_LOGICAL_KINDS:
        return AVRO_LOGICAL_KINDS[(primitive, logical)]
    if connect_name in CONNECT_KINDS:
        return CONNECT_KINDS[connect_name]
    if isinstance(connect_name, str) and connect_name.startswith(logical_types.TIME_PREFIX):
        return None
    if primitive == "int" and connect_type in ("int16", "int8"):
        return "smallint"
    return PRIMITIVE_KINDS.get(primitive)


# =============================================================================== COPY text
#: The COPY text of a value (spark_jobs.sinks.copy_text, and copy_line in _copy_text.c): a
#: long's digits, a date (days), a time (microseconds; milliseconds), an escaped string, a
#: decimal's unscaled digits (bytes; fixed of a size), bytes as hex (bytes; fixed), a
#: boolean, a double, a float, and a union of these.
COPY_TEXTS: tuple[str, ...] = ("digits", "date", "time", "time_ms", "string", "decimal", "decimal_fixed", "hex",
                               "hex_fixed", "bool", "double", "float", "union")
#: The code of a null branch's text (\N); the texts' codes follow it.
COPY_TEXT_NULL = 100


def copy_text_code(how: str) -> int:
    """The code of a COPY text in the native encoder's program."""
    return COPY_TEXT_NULL + 1 + COPY_TEXTS.index(how)


def c_header() -> str:
    """``contract/type_codes.h``: the codes of this table the C paths use."""
    names = ["T_NULL = %d" % COPY_TEXT_NULL] + [f"T_{h.upper()} = {copy_text_code(h)}" for h in COPY_TEXTS]
    return ("/* Generated by setup.py from contract/type_table.py: do not edit (edit the table). */\n"
            "#ifndef CDC_TYPE_CODES_H\n#define CDC_TYPE_CODES_H\n\n"
            "/* The COPY text of a value (contract.type_table.COPY_TEXTS). */\n"
            "enum { " + ", ".join(names) + " };\n\n#endif\n")


# =============================================================================== the docs' tables
def _arrow_text(spec: tuple) -> str:
    """A type table's ``arrow`` entry as the pyarrow call it names (``list_(float32())``)."""
    return f"{spec[0]}({', '.join(_arrow_text(a) if isinstance(a, tuple) else a for a in spec[1:])})"


def markdown_tables() -> str:
    """The two tables as docs/types.md shows them (tests/unit/contract/test_type_table.py keeps the
    page equal to this)."""
    lines = ["| family | MySQL/MariaDB DATA_TYPE | always nullable | cdc verify compares as |",
             "| --- | --- | --- | --- |"]
    for s in SOURCE_TYPES:
        lines.append(f"| {s.family} | {', '.join(s.data_types)} | {'yes' if s.always_nullable else ''} | {s.verify} |")
    lines += ["", "| integer | bits | Avro signed | Avro unsigned |", "| --- | --- | --- | --- |"]
    lines += [f"| {dt} | {r.bits} | {r.signed} | {r.unsigned} |" for dt, r in INTEGER_TYPES.items()]
    by_kind: dict[str, list[str]] = {"smallint": ["int with `connect.type` int16 or int8"]}
    for name, kind in [*CONNECT_KINDS.items(), *RECORD_KINDS.items()]:
        by_kind.setdefault(kind, []).append(f"`{name}`")
    for (prim, logical), kind in AVRO_LOGICAL_KINDS.items():
        by_kind.setdefault(kind, []).append(f"{prim} `{logical}`")
    lines += ["", "| sink kind | Avro / Connect | PostgreSQL | MySQL | MySQL key bytes | Arrow |",
              "| --- | --- | --- | --- | --- | --- |"]
    for k in SINK_KINDS.values():
        arrow = "(parameters)" if k.arrow is None else _arrow_text(k.arrow)
        key = k.variable or ("(parameters)" if k.postgres is None else k.mysql_key_bytes or "")
        lines.append(f"| {k.kind} | {', '.join(by_kind.get(k.kind, [])) or 'primitive'} | "
                     f"{k.postgres or '(parameters)'} | {k.mysql or '(parameters)'} | {key} | {arrow} |")
    return "\n".join(lines) + "\n"
