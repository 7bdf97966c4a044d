"""Table definitions read from the binlog's own TABLE_MAP events.

With ``binlog_row_metadata=FULL`` every TABLE_MAP event carries, next to the column
types, the column names, signedness, charsets, ENUM/SET members and the primary key.
So each row event is decoded with the schema *of its time*, whatever DDL happened
since: the binlog is its own schema history, and a restart at an old position decodes
it correctly without replaying DDL.  ``information_schema`` is not consulted.
"""

from __future__ import annotations

from pymysqlreplication.constants import FIELD_TYPE as T
from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

from common.errors import UnsupportedType
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
    return ColumnDef(name=name, data_type=dt, column_type=ct, nullable=nullable, ordinal=ordinal,
                     numeric_precision=prec, numeric_scale=scale, datetime_precision=dtp,
                     character_set=None if binary else charset)


def _nullable(bitmap: bytes, i: int) -> bool:
    b = bitmap[i // 8]
    if isinstance(b, str):
        b = ord(b)
    return bool(b & (1 << (i % 8)))


def table_def_from_table_map(ev) -> TableDef:
    """A :class:`TableDef` from a ``TableMapEvent`` (needs ``binlog_row_metadata=FULL``)."""
    meta = ev.optional_metadata
    # GEOMETRY_TYPE metadata lists the real type of each geometry column, in column order.
    geo = iter(meta.geometry_type_list or [])
    cols = [column_def_from_binlog(c, i + 1, _nullable(ev.null_bitmask, i),
                                   next(geo, 0) if c.type == T.GEOMETRY else None)
            for i, c in enumerate(ev.columns)]
    pk_idx = list(meta.simple_primary_key_list or []) or list((meta.primary_keys_with_prefix or {}).keys())
    pk = [cols[i].name for i in pk_idx]
    return TableDef(db=ev.schema, name=ev.table, columns=cols, primary_key=pk)


# --- parsed once per distinct TABLE_MAP ------------------------------------------------------

#: The per-event attributes of a parsed ``TableMapEvent`` (its packet, time, connection): not
#: shared between events with the same body.
_PER_EVENT = frozenset({"packet", "table_map", "timestamp", "event_type", "event_size", "_post_header_lengths",
                        "_ctl_connection", "mysql_version", "_ignore_decode_errors", "_verify_checksum",
                        "_is_event_valid", "complete"})
#: Distinct TABLE_MAP bodies kept (cleared when full; rebuilt on demand).
TABLE_MAP_CACHE_SIZE = 1024


class TableMapCache:
    """python-mysql-replication parses every TABLE_MAP event in full -- its columns, their
    metadata, names and charsets, a ``Table`` -- although a server writes the same one before
    every statement on a table: a third of the reader's time on single-row transactions.
    With it installed (:func:`install_table_map_cache`), an event whose body (table id
    included) and parse settings were seen before takes that parse's result instead: the same
    columns, ``Table`` and optional metadata, which nothing changes once parsed.  The settings
    where the library asks the server for column names (no ``binlog_row_metadata=FULL``, or
    its column name cache), freezes schemas or verifies checksums parse every time as before."""

    def __init__(self, parse, size: int = TABLE_MAP_CACHE_SIZE) -> None:
        self.parse = parse  # TableMapEvent.__init__ as the library has it
        self.size = size
        self.parsed: dict[tuple, dict] = {}
        self.hits = self.misses = 0
        self.enabled = True  # (False: every event parsed, as without the cache)

    def init(self, event, from_packet, event_size, table_map, ctl_connection, **kwargs) -> None:
        """``TableMapEvent.__init__``, from this cache where it can."""
        key = self.key(from_packet, event_size, ctl_connection, kwargs)
        if key is None:
            self.parse(event, from_packet, event_size, table_map, ctl_connection, **kwargs)
            return
        state = self.parsed.get(key)
        if state is None:
            self.misses += 1
            self.parse(event, from_packet, event_size, table_map, ctl_connection, **kwargs)
            if len(self.parsed) >= self.size:
                self.parsed.clear()
            self.parsed[key] = {k: v for k, v in event.__dict__.items() if k not in _PER_EVENT}
            return
        BinLogEvent.__init__(event, from_packet, event_size, table_map, ctl_connection, **kwargs)
        self.restore(event, state, table_map)

    def key(self, from_packet, event_size: int, ctl_connection, settings: dict) -> tuple | None:
        """What a parse depends on: the event's body and the parse settings (the constructor's
        keyword arguments); None where every event is parsed."""
        g = settings.get
        return self.key_of(from_packet.packet.get_all_data(), event_size, ctl_connection, g("optional_meta_data"),
                           g("use_column_name_cache"), g("freeze_schema"), g("verify_checksum"),
                           g("post_header_lengths"), g("only_tables"), g("ignored_tables"), g("only_schemas"),
                           g("ignored_schemas"))

    def key_of(self, data: bytes, event_size: int, ctl_connection, optional_meta_data, use_column_name_cache,
               freeze_schema, verify_checksum, lengths, *filters) -> tuple | None:
        """:meth:`key` from the packet's bytes (header included) and the settings one by one."""
        if not self.enabled or not optional_meta_data or use_column_name_cache or freeze_schema or verify_checksum:
            return None
        return (data[20:20 + event_size], ctl_connection._get_dbms(), tuple(lengths) if lengths else None,
                *(None if f is None else tuple(f) for f in filters))

    def restore(self, event, state: dict, table_map: dict) -> None:
        """``event`` (its per-event attributes set) completed from an earlier parse."""
        self.hits += 1
        event.__dict__.update(state)
        table = state.get("table_obj")
        if table is not None:
            table_map[event.table_id] = table  # (as the parse does)


_installed: TableMapCache | None = None


def install_table_map_cache() -> TableMapCache:
    """Parse each distinct TABLE_MAP once in this process (:class:`TableMapCache`); idempotent."""
    global _installed
    if _installed is None:
        cache = TableMapCache(TableMapEvent.__init__)

        def __init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
            cache.init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)

        TableMapEvent.__init__ = __init__
        _installed = cache
    return _installed
