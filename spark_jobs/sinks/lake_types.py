"""The lake tables' column types: each column kind's Arrow type (what Delta Lake and Iceberg
tables store) and the conversion of its Avro values, without loss.

=================  =========================================  ===========================  =======================
kind               Avro (connect.name)                         Arrow                        Delta / Iceberg
=================  =========================================  ===========================  =======================
smallint           int, connect.type int16/int8                int16 (Iceberg: int32)       short / int
int                int                                         int32                        integer / int
long               long                                        int64                        long / long
decimal            bytes decimal(p,s) (BIGINT UNSIGNED =       decimal128(p,s); p > 38:     decimal(p,s); string
                   decimal(20,0))                              string (exact text)
float              float                                       float32                      float
double             double                                      float64                      double
boolean            boolean (BIT(1))                            bool                         boolean
bits               bytes io.debezium.data.Bits (length n)      int64 (n <= 63);             long; decimal(20,0)
                                                               decimal128(20,0) (n = 64)
string             string (also UUID/INET text)                string                       string
bytes              bytes / fixed                               binary                       binary
enum, set, json    string io.debezium.data.Enum/EnumSet/Json   string                       string
date               int io.debezium.time.Date (days)            date32                       date
time, time_ms      io.debezium.time.MicroTime (us), time-ms    int64 (microseconds, may be  long
                                                               negative or over 24 h)
timestamp_ms/_us   io.debezium.time.Timestamp/MicroTimestamp   timestamp[us] (no zone: the  timestamp_ntz /
                                                               DATETIME's wall clock)       timestamp
zoned_timestamp    string io.debezium.time.ZonedTimestamp      timestamp[us, UTC]           timestamp / timestamptz
year               int io.debezium.time.Year                   int16 (Iceberg: int32)       short / int
geometry, point    record Geometry {wkb, srid} / Point         binary (the WKB)             binary
=================  =========================================  ===========================  =======================

Every lake column is nullable (Delta's change data feed writes its rows through the same
check, and rows of a schema that lacks a column must fit); the tables also carry
``__cdc_position`` (string, the 30-digit position) and, with ``soft_delete``,
``__cdc_deleted`` (boolean).  MySQL's TIME spans +-838:59:59, which neither format's time
type holds: it is kept as Debezium's MicroTime, microseconds.  Iceberg has no 16-bit
integers, so SMALLINT and YEAR are int there (:func:`arrow_type`'s ``small_ints``);
:func:`iceberg_type` gives the Iceberg type of each Arrow type (the last column above) where
the Iceberg sink adds or widens a column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from functools import partial
from typing import Any

import pyarrow as pa

from common.errors import UnsupportedType
from contract.type_table import SINK_KINDS
from spark_jobs.sinks.layout import SinkColumn, TableLayout
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.values import geometry_wkb, parse_zoned_timestamp, temporal_number

__all__ = [
    "DELETED_COLUMN",
    "OP_COLUMN",
    "MAX_DECIMAL_PRECISION",
    "arrow_type",
    "is_list_type",
    "iceberg_type",
    "lake_converter",
    "lake_schema",
    "changes_table",
]

#: The soft-delete flag column (``soft_delete: true``).
DELETED_COLUMN = "__cdc_deleted"
#: The op of a staged change (``c u r d``): in the staged parts only, never in a lake table.
OP_COLUMN = "__cdc_op"
#: Decimal128's precision: a wider DECIMAL (MySQL allows 65) is stored as its exact text.
MAX_DECIMAL_PRECISION = 38

_UTC = timezone.utc


def _arrow(spec: tuple) -> pa.DataType:
    """The Arrow type of a type table's ``arrow`` entry (a pyarrow factory and its arguments)."""
    factory, *args = spec
    return getattr(pa, factory)(*(_arrow(a) if isinstance(a, tuple) else a for a in args))


_FIXED = {k.kind: _arrow(k.arrow) for k in SINK_KINDS.values() if k.arrow is not None}


def arrow_type(col: SinkColumn, *, small_ints: bool = True) -> pa.DataType:
    """The Arrow type of a lake column (``small_ints``: whether the format has 16-bit
    integers; Iceberg has not, so SMALLINT and YEAR become int32)."""
    if col.kind == "decimal":
        p, s = col.precision or 10, col.scale or 0
        return pa.decimal128(p, s) if p <= MAX_DECIMAL_PRECISION else pa.string()
    if col.kind == "bits":
        n = col.length or 64
        if not 1 <= n <= 64:
            raise UnsupportedType(f"column {col.name!r}: BIT({n}) exceeds MySQL's limit of 64")
        return pa.int64() if n <= 63 else pa.decimal128(20, 0)
    t = _FIXED.get(col.kind)
    if t is None:
        raise UnsupportedType(f"column {col.name!r}: no lake type for kind {col.kind!r}")
    if not small_ints and t == pa.int16():
        return pa.int32()
    return t


def is_list_type(t: pa.DataType) -> bool:
    """A list column's Arrow type, either form (pyiceberg reads a list column back as a large list)."""
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def iceberg_type(t: pa.DataType) -> Any:
    """The Iceberg type (a ``pyiceberg.types`` instance) of a lake column's Arrow type: the
    types :func:`arrow_type` gives (16-bit and 8-bit integers as int: Iceberg has none;
    the large string and binary types as string and binary); the same as pyiceberg gives when
    it creates a table of an Arrow schema (``tests/unit/spark_jobs/sinks/test_lake_types.py``
    compares them type by type)."""
    from pyiceberg import types as it
    simple = {pa.int8(): it.IntegerType, pa.int16(): it.IntegerType, pa.int32(): it.IntegerType,
              pa.int64(): it.LongType, pa.float32(): it.FloatType, pa.float64(): it.DoubleType,
              pa.bool_(): it.BooleanType, pa.string(): it.StringType, pa.large_string(): it.StringType,
              pa.binary(): it.BinaryType, pa.large_binary(): it.BinaryType, pa.date32(): it.DateType}
    if t in simple:
        return simple[t]()
    if pa.types.is_decimal(t) and t.precision <= MAX_DECIMAL_PRECISION:
        return it.DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t) and t.unit == "us" and t.tz in (None, "UTC", "+00:00", "Etc/UTC", "Z"):
        return it.TimestampType() if t.tz is None else it.TimestamptzType()
    if is_list_type(t) and pa.types.is_float32(t.value_type):  # a float vector
        # (the element's field id: pyiceberg's schema update gives a fresh one)
        return it.ListType(element_id=0, element_type=it.FloatType(), element_required=False)
    raise UnsupportedType(f"no Iceberg type for the Arrow type {t} (not a lake column type)")


def _bits(v: bytes) -> int:
    return int.from_bytes(v, "little")


def _bits64(v: bytes) -> Decimal:
    return Decimal(int.from_bytes(v, "little"))


def _micros_of(kind: str, v: Any) -> Any:
    """A millisecond kind's value in microseconds (a time or datetime object a converting reader
    made of it too)."""
    v = temporal_number(kind, v)
    return None if v is None else v * 1000


def _zoned(v: str) -> datetime:
    return parse_zoned_timestamp(v)


def _wide_decimal(v: Any) -> str:
    return format(v, "f") if isinstance(v, Decimal) else str(v)


def _bytes(v: Any) -> bytes:
    return bytes(v)


def lake_converter(col: SinkColumn) -> Callable[[Any], Any] | None:
    """The conversion of a column's Avro value (as fastavro decodes it) into the Python
    value ``pyarrow.array`` takes for :func:`arrow_type`; None where none is needed."""
    k = col.kind
    if k == "decimal":
        return _wide_decimal if (col.precision or 10) > MAX_DECIMAL_PRECISION else None
    if k == "bits":
        return _bits if (col.length or 64) <= 63 else _bits64
    if k in ("time_ms", "timestamp_ms"):  # (the Arrow column is in microseconds)
        return partial(_micros_of, k)
    if k == "time":
        return partial(temporal_number, k)
    if k == "zoned_timestamp":
        return _zoned
    if k in ("geometry", "point"):
        return geometry_wkb
    if k == "bytes":
        return _bytes
    return None


def lake_schema(layout: TableLayout, *, soft_delete: bool = False, small_ints: bool = True,
                with_op: bool = False) -> pa.Schema:
    """The Arrow schema of a lake table of ``layout``: its columns (nullable), the position,
    the soft-delete flag where on, and (``with_op``: the staged parts) the op."""
    fields = [pa.field(c.name, arrow_type(c, small_ints=small_ints), nullable=True) for c in layout.columns]
    fields.append(pa.field(POSITION_COLUMN, pa.string(), nullable=True))
    if soft_delete:
        fields.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=True))
    if with_op:
        fields.append(pa.field(OP_COLUMN, pa.string(), nullable=True))
    return pa.schema(fields)


def lake_schema_of(changes: pa.Schema, soft_delete: bool) -> pa.Schema:
    """The lake table's schema for the staged changes' columns (the op left out, the flag in)."""
    fields = [pa.field(f.name, f.type, nullable=True) for f in changes if f.name != OP_COLUMN]
    if soft_delete:
        fields.append(pa.field(DELETED_COLUMN, pa.bool_(), nullable=True))
    return pa.schema(fields)


def changes_table(layout: TableLayout, changes: Sequence[Any], *, small_ints: bool = True) -> pa.Table:
    """The changes ``(key, op, row, position)`` as an Arrow table of :func:`lake_schema`
    with the op (``with_op``): a delete's row holds its key columns only (the key from the
    change's key, or else its row)."""
    schema = lake_schema(layout, small_ints=small_ints, with_op=True)
    key_names = {c.name for c in layout.key}
    columns: list[list[Any]] = [[] for _ in layout.columns]
    positions, ops = [], []
    getters = [(c.field, lake_converter(c), c.name in key_names, i) for i, c in enumerate(layout.columns)]
    key_index = {c.name: i for i, c in enumerate(layout.key)}
    for key, op, row, position in changes:
        if op == "d" or row is None:
            kv = layout.key_values(key, row)
            for fname, conv, is_key, i in getters:
                if is_key:
                    v = kv[key_index[layout.columns[i].name]]
                    columns[i].append(None if v is None else (conv(v) if conv else v))
                else:
                    columns[i].append(None)
        else:
            for fname, conv, _, i in getters:
                v = row.get(fname)
                columns[i].append(None if v is None else (conv(v) if conv else v))
        positions.append(position)
        ops.append(op)
    arrays = []
    for (c, values), f in zip(zip(layout.columns, columns), schema):
        try:
            arrays.append(pa.array(values, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError) as exc:
            raise UnsupportedType(f"column {c.name!r} ({c.kind}): a value does not fit {f.type}: {exc}") from None
    arrays.append(pa.array(positions, type=pa.string()))
    arrays.append(pa.array(ops, type=pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)
