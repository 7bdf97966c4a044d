"""Table definitions read from the binlog's own TABLE_MAP events.

With ``binlog_row_metadata=FULL`` every TABLE_MAP event carries, next to the column
types, the column names, signedness, charsets, ENUM/SET members and the primary key.
So each row event is decoded with the schema *of its time*, whatever DDL happened
since: the binlog is its own schema history, and a restart at an old position decodes
it correctly without replaying DDL.  ``information_schema`` is not consulted.
"""

from __future__ import annotations

from pymysqlreplication.constants import FIELD_TYPE as T

from common.errors import UnsupportedType
from producer.binlog.binlog_events import VECTOR
from producer.table_schema import ColumnDef, TableDef

_INTS = {T.TINY: "tinyint", T.SHORT: "smallint", T.INT24: "mediumint", T.LONG: "int", T.LONGLONG: "bigint"}
_BLOB_SIZES = {1: ("tinyblob", "tinytext"), 2: ("blob", "text"), 3: ("mediumblob", "mediumtext"),
               4: ("longblob", "longtext")}
_GEOMETRY_TYPES = {0: "geometry", 1: "point", 2: "linestring", 3: "polygon", 4: "multipoint",
                   5: "multilinestring", 6: "multipolygon", 7: "geometrycollection"}


def _quote_members(values) -> str:
    return ",".join("'" + v.replace("'", "''") + "'" for v in values)


def column_def_from_binlog(col, ordinal: int, nullable: bool, geometry_type: int | None = None) -> ColumnDef:
    """One python-mysql-replication ``Column`` of a TABLE_MAP as a :class:`ColumnDef`."""
    t = col.type
    name = col.name if col.name is not None else f"col{ordinal}"
    charset = getattr(col, "character_set_name", None)
    unsigned = " unsigned" if getattr(col, "unsigned", False) else ""
    binary = (charset or "").lower() == "binary" or getattr(col, "collation_name", None) == "binary"
    prec = scale = dtp = None
    if t in _INTS:
        dt = _INTS[t]
        ct = dt + unsigned
    elif t == T.NEWDECIMAL:
        dt, prec, scale = "decimal", col.precision, col.decimals
        ct = f"decimal({prec},{scale}){unsigned}"
    elif t == T.FLOAT:
        dt, ct = "float", "float" + unsigned
    elif t == T.DOUBLE:
        dt, ct = "double", "double" + unsigned
    elif t == T.BIT:
        dt, ct = "bit", f"bit({col.bits})"
    elif t == T.YEAR:
        dt, ct = "year", "year"
    elif t in (T.DATE, T.NEWDATE):
        dt, ct = "date", "date"
    elif t in (T.TIME, T.TIME2):
        dtp = getattr(col, "fsp", 0) or 0
        dt, ct = "time", f"time({dtp})" if dtp else "time"
    elif t in (T.DATETIME, T.DATETIME2):
        dtp = getattr(col, "fsp", 0) or 0
        dt, ct = "datetime", f"datetime({dtp})" if dtp else "datetime"
    elif t in (T.TIMESTAMP, T.TIMESTAMP2):
        dtp = getattr(col, "fsp", 0) or 0
        dt, ct = "timestamp", f"timestamp({dtp})" if dtp else "timestamp"
    elif t == T.ENUM:
        members = [v for v in (col.enum_values or [])][1:] if (col.enum_values or [None])[0] == "" else list(col.enum_values or [])
        dt, ct = "enum", f"enum({_quote_members(members)})"
    elif t == T.SET:
        dt, ct = "set", f"set({_quote_members(col.set_values or [])})"
    elif t == T.JSON:
        dt, ct = "json", "json"
    elif t == VECTOR:
        dt = "vector"
        ct = dt
    elif t == T.GEOMETRY:
        dt = _GEOMETRY_TYPES.get(geometry_type or 0, "geometry")
        ct = dt
    elif t in (T.BLOB, T.TINY_BLOB, T.MEDIUM_BLOB, T.LONG_BLOB):
        blob, text = _BLOB_SIZES.get(getattr(col, "length_size", 2), ("blob", "text"))
        dt = blob if binary else text
        ct = dt
    elif t in (T.VARCHAR, T.VAR_STRING):
        dt = "varbinary" if binary else "varchar"
        ct = f"{dt}({col.max_length})"
    elif t == T.STRING:
        dt = "binary" if binary else "char"
        ct = f"{dt}({col.max_length})"
    else:
        raise UnsupportedType(f"column {name!r} has binlog type code {t}, which the producer does not map")
    chars = None
    if dt in ("char", "varchar"):  # (the map's length is in bytes; information_schema's in characters)
        chars = char_length(col.max_length, getattr(col, "collation_name", None))
    return ColumnDef(name=name, data_type=dt, column_type=ct, nullable=nullable, ordinal=ordinal,
                     numeric_precision=prec, numeric_scale=scale, datetime_precision=dtp,
                     character_set=None if binary else charset, char_max_length=chars)


#: Bytes per character of the character sets that take more than one, by the collation's prefix.
_MBMAXLEN = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2,
             "gbk": 2, "gb2312": 2, "sjis": 2, "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2, "gb18030": 4}


def char_length(max_bytes: int | None, collation: str | None) -> int | None:
    """A CHAR/VARCHAR's declared length in characters from a table map's length in bytes and
    the column's collation (``utf8mb4_general_ci``); None when the collation is not known."""
    if max_bytes is None or not collation:
        return None
    return max_bytes // _MBMAXLEN.get(collation.split("_", 1)[0].lower(), 1)


def _nullable(bitmap: bytes, i: int) -> bool:
    b = bitmap[i // 8]
    if isinstance(b, str):
        b = ord(b)
    return bool(b & (1 << (i % 8)))


def table_def_from_table_map(ev) -> TableDef:
    """A :class:`TableDef` from python-mysql-replication's ``TableMapEvent`` (needs
    ``binlog_row_metadata=FULL``)."""
    meta = ev.optional_metadata
    return table_def(ev.schema, ev.table, ev.columns, ev.null_bitmask, meta.geometry_type_list or [],
                     meta.simple_primary_key_list or [], meta.primary_keys_with_prefix or {})


def table_def_of(tm) -> TableDef:
    """A :class:`TableDef` from a :class:`producer.binlog.binlog_events.TableMap`."""
    return table_def(tm.schema, tm.table, tm.columns, tm.null_bitmask, tm.geometry_types, tm.simple_primary_key,
                     tm.primary_key_with_prefix)


def table_def(schema: str, table: str, columns: list, null_bitmask: bytes, geometry_types: list[int],
              simple_primary_key: list[int], primary_key_with_prefix: dict[int, int]) -> TableDef:
    """A :class:`TableDef` from a TABLE_MAP's parts: its columns (``Column`` objects of either
    reader), NULL bitmap, the real types of its geometry columns in column order, and its
    primary key (simple, or with prefixes)."""
    geo = iter(geometry_types)
    try:
        cols = [column_def_from_binlog(c, i + 1, _nullable(null_bitmask, i),
                                       next(geo, 0) if c.type == T.GEOMETRY else None)
                for i, c in enumerate(columns)]
    except UnsupportedType as exc:
        raise UnsupportedType(f"table {schema}.{table}: {exc}") from None
    pk_idx = list(simple_primary_key) or list(primary_key_with_prefix.keys())
    pk = [cols[i].name for i in pk_idx]
    return TableDef(db=schema, name=table, columns=cols, primary_key=pk)
