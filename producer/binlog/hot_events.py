"""The events every transaction brings, built without python-mysql-replication's generic path.

The library wraps each binlog packet in a ``BinLogPacketWrapper`` whose constructor passes
seventeen settings by keyword through two or three levels of event constructors, for every
event.  On single-row transactions -- a GTID, a TABLE_MAP, one rows event and an XID per
transaction, as OLTP applications write them -- that generic path took a third of the binlog
reader's time (the TABLE_MAP is :class:`producer.binlog.table_map.TableMapCache`'s).

:func:`install_hot_events` replaces the wrapper's constructor (process-wide, as the table map
cache does) with one that builds MariaDB's GTID event, the XID event and the v1/v2 write,
update and delete rows events directly: the same classes, the same attributes with the same
values, the packet read to the same point (``tests/integration/producer/test_hot_events.py``
holds both ways to each other over a real binlog range).  Every other event, and these where
anything is out of the ordinary -- checksums verified, a post-header length other than the
one known, a rows event's extra data (NDB or partition information), a column name cache --
goes through the library's constructor as before.
"""

from __future__ import annotations

import struct

from pymysqlreplication import constants
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from producer.binlog.table_map import TableMapCache, install_table_map_cache

_HEADER = struct.Struct("<xIBIIIH")  # (the OK byte) timestamp, type, server id, event size, log pos, flags
_GTID = struct.Struct("<QIB")  # MariaDB: sequence number, domain id, flags
_XID = struct.Struct("<Q")
_V2_FLAGS = struct.Struct("<HH")  # flags, extra data length
_V1_FLAGS = struct.Struct("<H")

_ROWS_V1 = {constants.WRITE_ROWS_EVENT_V1: WriteRowsEvent, constants.UPDATE_ROWS_EVENT_V1: UpdateRowsEvent,
            constants.DELETE_ROWS_EVENT_V1: DeleteRowsEvent}
_ROWS_V2 = {constants.WRITE_ROWS_EVENT_V2: WriteRowsEvent, constants.UPDATE_ROWS_EVENT_V2: UpdateRowsEvent,
            constants.DELETE_ROWS_EVENT_V2: DeleteRowsEvent}
#: Event types built here, by the post-header length they are read with.
_POST_HEADER = {constants.XID_EVENT: 0, constants.MARIADB_GTID_EVENT: 0,
                **{t: 8 for t in _ROWS_V1}, **{t: 10 for t in _ROWS_V2}}


class HotEvents:
    """The replacement of ``BinLogPacketWrapper.__init__`` (see the module's docstring)."""

    def __init__(self, wrap, tables: TableMapCache | None = None) -> None:
        self.wrap = wrap  # BinLogPacketWrapper.__init__ as the library has it
        self.tables = tables  # TABLE_MAP events: built here from an earlier parse the cache holds
        self.enabled = True  # (False: every event through the library, as without it)
        self.built = 0  # events built here (the rest went through the library)

    def init(self, w, from_packet, table_map, ctl_connection, mysql_version, use_checksum, allowed_events,
             only_tables, ignored_tables, only_schemas, ignored_schemas, freeze_schema, ignore_decode_errors,
             verify_checksum, optional_meta_data, enable_logging, use_column_name_cache=False,
             post_header_lengths=None) -> None:
        data = from_packet._data
        etype = data[5] if len(data) > 20 else -1
        if etype == constants.TABLE_MAP_EVENT and not (verify_checksum and use_checksum) and self.enabled:
            state = self._table_map(data, use_checksum, ctl_connection, optional_meta_data, use_column_name_cache,
                                    freeze_schema, verify_checksum, post_header_lengths, only_tables, ignored_tables,
                                    only_schemas, ignored_schemas)
            if state is not None:
                ev = self._start(w, from_packet, TableMapEvent, etype, table_map, ctl_connection, mysql_version,
                                 use_checksum, allowed_events, ignore_decode_errors, verify_checksum, enable_logging,
                                 use_column_name_cache, post_header_lengths)
                if ev is not None:
                    self.tables.restore(ev, state, table_map)
                    if ev._processed:  # (not a table the settings filter out)
                        w.event = ev
                    self.built += 1
                return
        known = _POST_HEADER.get(etype)
        if known is None or not self.enabled or verify_checksum and use_checksum or use_column_name_cache or \
                (known and not _declared(post_header_lengths, etype, known)) or \
                (etype in _ROWS_V2 and _V2_FLAGS.unpack_from(data, 26)[1] > 2):
            self.wrap(w, from_packet, table_map, ctl_connection, mysql_version, use_checksum, allowed_events,
                      only_tables, ignored_tables, only_schemas, ignored_schemas, freeze_schema,
                      ignore_decode_errors, verify_checksum, optional_meta_data, enable_logging,
                      use_column_name_cache, post_header_lengths)
            return
        cls = XidEvent if etype == constants.XID_EVENT else MariadbGtidEvent if etype == constants.MARIADB_GTID_EVENT \
            else _ROWS_V1.get(etype) or _ROWS_V2[etype]
        ev = self._start(w, from_packet, cls, etype, table_map, ctl_connection, mysql_version, use_checksum,
                         allowed_events, ignore_decode_errors, verify_checksum, enable_logging, use_column_name_cache,
                         post_header_lengths)
        if ev is None:
            return
        d = ev.__dict__
        if cls is XidEvent:
            ev.xid = _XID.unpack(w.read(8))[0]
        elif cls is MariadbGtidEvent:
            seq, domain, gflags = _GTID.unpack(w.read(13))
            server_id = w.server_id
            d.update(server_id=server_id, gtid_seq_no=seq, domain_id=domain, flags=gflags,
                     gtid=f"{domain}-{server_id}-{seq}")
        else:
            _rows_event(ev, d, w, table_map, only_tables, ignored_tables, only_schemas, ignored_schemas,
                        enable_logging, use_column_name_cache, etype)
            if not ev._processed:
                return
        w.event = ev
        self.built += 1

    def _table_map(self, data: bytes, use_checksum, ctl_connection, *settings) -> dict | None:
        """An earlier parse of this TABLE_MAP event with these settings, if the cache holds one."""
        tables = self.tables
        if tables is None:
            return None
        event_size = int.from_bytes(data[10:14], "little") - (23 if use_checksum else 19)
        key = tables.key_of(data, event_size, ctl_connection, *settings)
        return None if key is None else tables.parsed.get(key)

    @staticmethod
    def _start(w, from_packet, cls, etype: int, table_map, ctl_connection, mysql_version, use_checksum, allowed_events,
               ignore_decode_errors, verify_checksum, enable_logging, use_column_name_cache, post_header_lengths):
        """``BinLogPacketWrapper.__init__`` up to the event's construction, and ``BinLogEvent.__init__``
        (no checksum to verify: see :meth:`init`): the event, or None when not asked for."""
        w.read_bytes = 0
        w._BinLogPacketWrapper__data_buffer = b""
        w.packet = from_packet
        w.charset = ctl_connection.charset
        w.enable_logging = enable_logging
        w.use_column_name_cache = use_column_name_cache
        ts, _, server_id, event_size, log_pos, flags = _HEADER.unpack(from_packet.read(20))
        w.timestamp, w.event_type, w.server_id, w.event_size, w.log_pos, w.flags = \
            ts, etype, server_id, event_size, log_pos, flags
        w.event = None
        if cls not in allowed_events:
            return None
        ev = cls.__new__(cls)
        ev.__dict__.update(packet=w, table_map=table_map, event_type=etype, timestamp=ts,
                           event_size=event_size - (23 if use_checksum else 19),
                           _post_header_lengths=post_header_lengths, _ctl_connection=ctl_connection,
                           mysql_version=mysql_version, _ignore_decode_errors=ignore_decode_errors,
                           _verify_checksum=verify_checksum if use_checksum else False, _is_event_valid=None,
                           _processed=True, complete=True, dbms=ctl_connection._get_dbms())
        return ev


def _declared(lengths, etype: int, known: int) -> bool:
    """Whether the format description declares the post-header length this module reads."""
    return not lengths or not 0 <= etype - 1 < len(lengths) or lengths[etype - 1] == known


def _rows_event(ev, d: dict, w, table_map: dict, only_tables, ignored_tables, only_schemas, ignored_schemas,
                enable_logging, use_column_name_cache, etype: int) -> None:
    """``RowsEvent.__init__`` and its subclass's, for an event without extra data (read through
    the wrapper ``w``, which counts what is read: the rows start there)."""
    d.update(_RowsEvent__rows=None, _RowsEvent__only_tables=only_tables, _RowsEvent__ignored_tables=ignored_tables,
             _RowsEvent__only_schemas=only_schemas, _RowsEvent__ignored_schemas=ignored_schemas,
             _RowsEvent__use_column_name_cache=use_column_name_cache, _RowsEvent__enable_logging=enable_logging,
             _RowsEvent__none_sources={})
    table_id = int.from_bytes(w.read(6), "little")
    ev.table_id = table_id
    table = table_map.get(table_id)
    if table is None:  # (a filtered table map)
        ev._processed = False
        return
    d.update(primary_key=table.primary_key, schema=table.schema, table=table.table)  # (Table.data's)
    if (only_tables is not None and ev.table not in only_tables) or \
            (ignored_tables is not None and ev.table in ignored_tables) or \
            (only_schemas is not None and ev.schema not in only_schemas) or \
            (ignored_schemas is not None and ev.schema in ignored_schemas):
        ev._processed = False
        return
    if etype in _ROWS_V2:
        ev.flags, ev.extra_data_length = _V2_FLAGS.unpack(w.read(4))
    else:
        ev.flags = _V1_FLAGS.unpack(w.read(2))[0]
    ev.number_of_columns = w.read_length_coded_binary()
    ev.columns = table.columns
    width = (ev.number_of_columns + 7) // 8
    ev.columns_present_bitmap = w.read(width)
    if type(ev) is UpdateRowsEvent:
        ev.columns_present_bitmap2 = w.read(width)


_installed: HotEvents | None = None


def install_hot_events() -> HotEvents:
    """Build the per-transaction events directly in this process (:class:`HotEvents`); idempotent."""
    global _installed
    if _installed is None:
        hot = HotEvents(BinLogPacketWrapper.__init__, install_table_map_cache())

        def __init__(self, *args, **kwargs):
            hot.init(self, *args, **kwargs)

        BinLogPacketWrapper.__init__ = __init__
        _installed = hot
    return _installed
