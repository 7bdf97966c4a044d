"""The binlog reader: python-mysql-replication's stream turned into positioned records.

Every row gets a :class:`BinlogPosition` ``(file index, event start, 2*row)``: unique,
rising in log order and comparable across file rotation (the odd sequence numbers are
left for the create half of a primary-key-changing update, see ``event_builder``).

Resuming: the reader is started at a :class:`ResumePoint`, the start of the transaction
that holds the first change not yet stored (a row event cannot be decoded without the
table map before it), and drops every change at or before ``last``.  So a restart in the
middle of a multi-row event or of a transaction emits each change once.

Rows come one :class:`RowChanges` per binlog rows event (not one object per row: the
per-row cost here is python-mysql-replication's decoding only).  Every item tells where
to restart once it has been handled (``resume``), so whoever consumes the items -- in
this process or another (``producer.binlog.process``) -- knows the resume point without asking
the reader.
"""

from __future__ import annotations

import functools
import logging
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication import constants
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from common.config import SourceConfig
from common.sql.sessions import source_tls
from common.sql.tls import connect_mysql
from common.tested_versions import tested
from contract.position import BinlogPosition, based
from producer.binlog.hot_events import install_hot_events
from producer.binlog.packet_lane import HEADER, PacketLane
from producer.binlog.row_decoder import EncodedImages, PackedRows, RowDecoder, row_data, table_map_key
from producer.binlog.table_map import install_table_map_cache, table_def_from_table_map
from producer.capture_filter import SYSTEM_DATABASES
from producer.table_schema import TableDef

log = logging.getLogger(__name__)



class ImageEncoding(Protocol):
    """Encodes the row images of captured tables where they are read (the producer's Avro fast
    path, :class:`producer.events.builder.StreamEncoding`): given to the reader, which asks it
    once per table map."""

    def image_encoder(self, table: TableDef, columns: list) -> Any:
        """None, or an object whose ``encode(row data, update)`` gives :class:`EncodedImages`
        (raising for rows it does not take)."""


@dataclass(frozen=True)
class ResumePoint:
    """Where to (re)start reading: a transaction boundary, and the last change already out."""

    file: str
    pos: int
    last: str | None = None  # encoded BinlogPosition of the last change stored, if any
    gtid_set: str | None = None  # start by GTID instead of file/pos (first start only)
    skip_to_timestamp: int | None = None

    def to_json(self) -> dict:
        out = {"file": self.file, "pos": self.pos, "last": self.last}
        if self.gtid_set and not self.file:  # started by GTID, no event read yet
            out["gtid_set"] = self.gtid_set
        return out

    def position(self, file_base: int = 0) -> BinlogPosition:
        """This point as a position (row 0): the first byte of the next event, so below
        that event's own position and above every event before it."""
        return based(BinlogPosition.from_binlog(self.file, self.pos), file_base)


@dataclass
class RowChanges:
    """The changed rows of one binlog rows event, from the first one not yet out.

    Row ``i`` (``first <= i < len(rows)``) has position ``base`` with sequence ``2*i``;
    ``2*i + 1`` is left for the create half of a primary-key-changing update."""

    kind: str  # "insert" | "update" | "delete"
    db: str
    table: str
    table_def: TableDef  # from the binlog's table map: the schema of the event's time
    base: BinlogPosition  # the event's position, sequence 0
    # The rows: EncodedImages when the reader encoded them (no values: see ImageEncoding),
    # PackedRows when it decoded them, else python-mysql-replication's row dicts (``rows[i]``
    # is such a dict for the last two).
    rows: EncodedImages | PackedRows | list[dict]
    first: int  # index of the first row not out yet
    ts_ms: int
    gtid: str | None
    thread: int | None
    file: str
    resume_file: str  # where a restart reads this event again: its transaction's start
    resume_pos: int
    size: int = 0  # of the rows event in the binlog, bytes
    # The rows event's first byte in its file: ``source.pos`` as Debezium reports it
    # (``base`` places the event among positions past its header; None: ``base.pos``).
    event_pos: int | None = None

    @property
    def pos(self) -> int:
        return self.base.pos if self.event_pos is None else self.event_pos

    def images(self, i: int) -> tuple[dict | None, dict | None, dict | None, dict | None]:
        """``(before, after, before_none_sources, after_none_sources)`` of row ``i``."""
        row = self.rows[i]
        if self.kind == "update":
            return row["before_values"], row["after_values"], row.get("before_none_sources"), row.get("after_none_sources")
        if self.kind == "insert":
            return None, row["values"], None, row.get("none_sources")
        return row["values"], None, row.get("none_sources"), None

    def packed_images(self, i: int) -> tuple[tuple | None, tuple | None, dict | None, dict | None]:
        """``(before, after, before_odd, after_odd)`` of row ``i`` of :class:`PackedRows`:
        value tuples in column order, and the images' ``none_sources`` where a value is
        None for another reason than NULL (else None)."""
        rows = self.rows
        images, odd = rows.images, rows.odd
        if self.kind == "update":
            j = 2 * i
            return images[j], images[j + 1], odd and odd.get(j), odd and odd.get(j + 1)
        if self.kind == "insert":
            return None, images[i], None, odd and odd.get(i)
        return images[i], None, odd and odd.get(i), None

    def position(self, seq: int) -> str:
        """The encoded position of sequence ``seq`` (``2*row`` or ``2*row + 1``) of this event."""
        return self.base.encode_row(seq)

    def resume_after(self, i: int) -> ResumePoint:
        """Where to restart once rows up to ``i`` are out."""
        return ResumePoint(self.resume_file, self.resume_pos, self.position(2 * i + 1))

    @property
    def resume(self) -> ResumePoint:
        return self.resume_after(len(self.rows) - 1)


def first_new_row(base: BinlogPosition, last: BinlogPosition | None) -> int | None:
    """Index of the first row of the event at ``base`` with a change after ``last``
    (both halves of row ``i``, sequences ``2i`` and ``2i+1``, must be at or before
    ``last`` for it to be skipped); None when the whole event is at or before ``last``."""
    if last is None or (last.file_index, last.pos) < (base.file_index, base.pos):
        return 0
    if (last.file_index, last.pos) > (base.file_index, base.pos):
        return None
    return (last.row + 1) // 2


@dataclass
class SchemaChange:
    db: str
    ddl: str
    position: BinlogPosition
    ts_ms: int
    gtid: str | None
    file: str
    pos: int  # the statement's first byte in its file (``source.pos``)
    resume: ResumePoint  # reading from here starts after this statement


@dataclass
class TransactionEnd:
    """A commit: everything up to here is a complete transaction."""

    position: BinlogPosition
    gtid: str | None
    resume: ResumePoint  # reading from here starts with the next transaction
    event_count: int


@dataclass
class Idle:
    """A heartbeat from the server: nothing new for a while."""

    resume: ResumePoint | None


@dataclass
class _TxnState:
    start_file: str = ""
    start_pos: int = 0
    gtid: str | None = None
    thread: int | None = None
    events: int = 0
    open: bool = False


class _PacketEvents:
    """The events :class:`BinlogReader` takes from its packets' bytes (:class:`PacketLane`):
    MariaDB's GTID, the XID, a table id's repeated TABLE_MAP and the rows events of the tables
    whose rows it encodes, each made into the items the library's event would have given
    (``tests/integration/producer/test_packet_lane.py`` holds both ways to each other).  Each
    handler reads and checks everything first and changes the reader's state only once it takes
    the event: when it gives the packet back (``_GIVE_BACK``) everything is as it was, and the
    library builds the event."""

    def _events(self) -> Iterator:
        """The library's events, and the items of the events the reader handled from their
        packets' bytes (:class:`PacketLane`: GTID, XID, repeated TABLE_MAP, encoded rows)."""
        lane = self.lane
        while True:
            if self._skip_before is None:
                packet = lane.packet()
                if packet is not None:
                    out = self._from_packet(packet._data)
                    if out is not _GIVE_BACK:
                        if out is not None:
                            yield out
                        continue
                    lane.give_back(packet)
            ev = lane.next_event()
            if ev is None:
                return
            yield ev

    def _from_packet(self, data: bytes):
        """The item of the event in ``data`` (None: handled, nothing to yield), or
        ``_GIVE_BACK``: the library builds the event (nothing here has changed then)."""
        if len(data) <= 20 or data[0]:
            return _GIVE_BACK  # (an EOF or error packet, or too short for an event)
        etype = data[5]
        handler = _LANE_EVENTS.get(etype)
        if handler is None:
            return _GIVE_BACK
        crc = self.lane.checksum()
        ts, _, server_id, size, log_pos, _flags = HEADER.unpack_from(data)
        if crc is None or not log_pos or len(data) < size + 1:
            return _GIVE_BACK
        try:
            return handler(self, data, etype, ts, server_id, size, log_pos, size - 19 - crc)
        except (IndexError, ValueError, struct.error):  # (read before anything changes: the library reports it)
            return _GIVE_BACK

    def _lane_xid(self, data: bytes, etype, ts, server_id, size, log_pos: int, event_size: int):
        self._next_pos = log_pos
        self.lane.handled(log_pos)
        return self._commit(log_pos, log_pos - event_size)

    def _lane_gtid(self, data: bytes, etype, ts, server_id: int, size: int, log_pos: int, event_size: int):
        if event_size < 13:
            return _GIVE_BACK
        seq, domain = _MARIADB_GTID.unpack_from(data, 20)
        self._txn = _TxnState(self._file, log_pos - size, f"{domain}-{server_id}-{seq}", None, 0, True)
        self.lane.handled(log_pos)
        self._next_pos = log_pos
        return None

    def _lane_table_map(self, data: bytes, etype, ts, server_id, size, log_pos: int, event_size: int):
        """A table id's TABLE_MAP the same as its last one (a server writes one per statement):
        all stands (see _table_map); any other goes through the library."""
        table_id = int.from_bytes(data[20:26], "little")
        if self._map_keys.get(table_id) != data[28:20 + event_size] or self.lane.table(table_id) is None:
            return _GIVE_BACK
        self.lane.handled(log_pos)
        self._next_pos = log_pos
        return None

    def _lane_rows(self, data: bytes, etype: int, ts: int, server_id, size: int, log_pos: int, event_size: int):
        """A rows event of a table whose rows are encoded here, full images of the table map's
        columns, without extra data: the ``RowChanges`` that :meth:`_rows` makes of the library's."""
        table_id = int.from_bytes(data[20:26], "little")
        encoder = self._encoders.get(table_id)
        table_def = self._tables.get(table_id)
        table = self.lane.table(table_id)
        if encoder is None or table_def is None or table is None:
            return _GIVE_BACK
        v2 = etype >= constants.WRITE_ROWS_EVENT_V2
        if self.lane.post_header_length(etype) not in (None, 10 if v2 else 8):
            return _GIVE_BACK
        p = 28
        if v2:
            if data[28] | data[29] << 8 != 2:
                return _GIVE_BACK  # extra data (NDB, partitions)
            p = 30
        columns = data[p]
        decoder = self._decoders[table_id]
        if columns >= 251 or columns != len(decoder.names):
            return _GIVE_BACK
        width = (columns + 7) >> 3
        update = etype in _UPDATES
        p += 1
        if not decoder.full(data[p:p + width]) or update and not decoder.full(data[p + width:p + 2 * width]):
            return _GIVE_BACK
        p += 2 * width if update else width
        base = self._at(log_pos - event_size)
        first = first_new_row(base, self._last)
        if first is not None:
            try:
                rows = encoder.encode(data[p:20 + event_size], update)
            except Exception:  # noqa: BLE001 - a row it does not take: the library's way, as values
                return _GIVE_BACK
        lane = self.lane
        if first is None or first >= len(rows):
            lane.handled(log_pos)
            self._next_pos = log_pos
            return None  # nothing new in it
        item = self._changes(_KINDS[etype], table.schema, table.table, table_def, base, rows, first, ts, size,
                             log_pos - size)
        lane.handled(log_pos)
        self._next_pos = log_pos
        return item


class BinlogReader(_PacketEvents):
    """Iterate positioned records from a resume point; stop with :meth:`close`."""

    def __init__(self, cfg: SourceConfig, resume: ResumePoint, *, is_mariadb: bool, blocking: bool = True,
                 heartbeat_s: float = 1.0, only_schemas: list[str] | None = None,
                 wants: Callable[[str, str], bool] = lambda db, table: True, file_base: int = 0,
                 images: ImageEncoding | None = None) -> None:
        self.cfg = cfg
        self.file_base = file_base
        self.resume = resume
        self.is_mariadb = is_mariadb
        self._last = BinlogPosition.decode(resume.last) if resume.last else None
        settings = {"host": cfg.host, "port": cfg.port, "user": cfg.user,
                    "password": cfg.password.get_secret_value(), "charset": "utf8mb4",
                    "connect_timeout": int(cfg.connect_timeout_s)}
        kwargs: dict = {}
        if resume.gtid_set:
            kwargs["auto_position"] = resume.gtid_set
        else:
            kwargs.update(log_file=resume.file, log_pos=resume.pos, resume_stream=True)
        # Changes before this time are skipped here, not by the library (whose filter
        # also swallows the server's heartbeats, which carry timestamp 0).
        self._skip_before = resume.skip_to_timestamp
        if tested("mysql-replication", "the binlog reader's TABLE_MAP cache and per-transaction events"):
            install_table_map_cache()  # (each distinct TABLE_MAP parsed once: see TableMapCache)
            install_hot_events()  # (GTID, XID and rows events built directly: see HotEvents)
        self._stream = BinLogStreamReader(
            # is_mariadb switches the library to MariaDB's GTID connect, which ignores file/pos:
            # only set it when starting from a MariaDB GTID position.
            connection_settings=settings, server_id=cfg.server_id, blocking=blocking,
            pymysql_wrapper=functools.partial(connect_mysql, source_tls(cfg)),  # source.ssl
            is_mariadb=is_mariadb and bool(resume.gtid_set),
            only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, QueryEvent, XidEvent, RotateEvent,
                         GtidEvent, MariadbGtidEvent, HeartbeatLogEvent, FormatDescriptionEvent],
            ignored_schemas=sorted(SYSTEM_DATABASES), only_schemas=only_schemas,
            slave_heartbeat=heartbeat_s if blocking else None, enable_logging=False, **kwargs)
        # The reader reads the packets of the common events itself (see PacketLane).
        self.lane = PacketLane(self._stream)
        self._wants = wants
        self._tables: dict[int, TableDef | None] = {}
        self._table_keys: dict[int, tuple] = {}
        self._map_keys: dict[int, bytes] = {}  # the body of each table id's last table map (table_map_key)
        # Row decoders by table id (None: the library decodes), and by table map content.
        self._decoders: dict[int, RowDecoder | None] = {}
        self._decoder_cache: dict[bytes, RowDecoder | None] = {}
        # Image encoders by table id and by table map content (None: the rows cross as values).
        self._images = images
        self._encoders: dict[int, Any] = {}
        self._encoder_cache: dict[bytes, Any] = {}
        self._file = resume.file
        self._at_file: tuple = (None,)  # (file name, file index with the base, stem) for _at
        self._txn = _TxnState()
        # Position right after the last event handled: where a reader would continue.
        self._next_pos = resume.pos

    # -- helpers ----------------------------------------------------------------------
    def _file_position(self, end_pos: int, size: int) -> BinlogPosition:
        return self._at(max(end_pos - size, 0))

    def _at(self, pos: int) -> BinlogPosition:
        """The position of byte ``pos`` of the current file (its name parsed once per file)."""
        file = self._at_file
        if file[0] != self._file:
            p = based(BinlogPosition.from_binlog(self._file, 0), self.file_base)
            file = self._at_file = (self._file, p.file_index, p.stem)
        return BinlogPosition(file[1], pos, 0, file[2])

    def current_resume(self) -> ResumePoint:
        """Where to restart to lose nothing of what has been yielded so far."""
        last = self._last.encode() if self._last else None
        if self._txn.open:
            return ResumePoint(self._txn.start_file, self._txn.start_pos, last)
        return ResumePoint(self._file, self._next_pos, last)

    def close(self) -> None:
        self._stream.close()

    def __iter__(self) -> Iterator[RowChanges | SchemaChange | TransactionEnd | Idle]:
        done = None
        for ev in self._events():
            if type(ev) in _LANE_ITEMS:
                yield ev  # (from the packet lane)
                continue
            if done is not None:
                # python-mysql-replication's event and its packet wrapper refer to each other: a
                # cycle per event, which only the cyclic collector would free (with its tables,
                # columns and the packet's bytes); broken here, the event is freed when dropped.
                done.packet.event = None
            done = ev
            end_pos = ev.packet.log_pos
            if isinstance(ev, RotateEvent):
                self._file, self._next_pos = ev.next_binlog, ev.position
                if ev.timestamp:  # a file's end (the server's own rotate at a (re)connection has 0)
                    self._forget_table_ids()
                continue
            if isinstance(ev, HeartbeatLogEvent):
                yield self._heartbeat(ev, end_pos)
                continue
            if isinstance(ev, FormatDescriptionEvent):
                if end_pos:
                    self._next_pos = max(self._next_pos, end_pos)
                continue
            # ``start`` places the event in positions (consistently, not at its first byte:
            # ev.event_size leaves the header out); ``event_start`` is its first byte, where a
            # reader can begin -- the start of a transaction to resume from.
            start = end_pos - ev.event_size if end_pos else self._next_pos
            event_start = end_pos - ev.packet.event_size if end_pos else self._next_pos
            if self._skip_before is not None:
                # Skip whole transactions that began before the start time.
                if isinstance(ev, (GtidEvent, MariadbGtidEvent)) or (
                        isinstance(ev, QueryEvent) and _query_text(ev).strip().upper() == "BEGIN"):
                    if ev.timestamp >= self._skip_before:
                        self._skip_before = None  # from here on everything is newer
                if self._skip_before is not None:
                    if end_pos:
                        self._next_pos = end_pos
                    continue
            if isinstance(ev, TableMapEvent):
                self._table_map(ev)
            elif isinstance(ev, (GtidEvent, MariadbGtidEvent)):
                self._txn = _TxnState(self._file, event_start, ev.gtid, None, 0, True)
            elif isinstance(ev, QueryEvent):
                query = _query_text(ev)
                q = query.strip().upper()
                if q == "BEGIN" or q.startswith("XA START"):
                    if not self._txn.open:
                        self._txn = _TxnState(self._file, event_start, None, None, 0, True)
                    self._txn.thread = ev.slave_proxy_id
                elif q == "COMMIT" or q.startswith("XA COMMIT"):
                    self._next_pos = end_pos
                    yield self._commit(end_pos, start)
                    continue
                else:
                    pos = self._file_position(end_pos, ev.event_size)
                    db = ev.schema.decode() if isinstance(ev.schema, bytes) else ev.schema
                    self._next_pos = end_pos
                    # DDL commits implicitly: it is its own transaction.
                    was_open, self._txn.open = self._txn.open, False
                    if self._last is None or pos > self._last:
                        self._last = pos
                        yield SchemaChange(db or "", query, pos, ev.timestamp * 1000, self._txn.gtid,
                                           self._file, event_start, self.current_resume())
                    if was_open:
                        yield self._commit(end_pos, start)
                    continue
            elif isinstance(ev, XidEvent):
                self._next_pos = end_pos
                yield self._commit(end_pos, start)
                continue
            elif isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                yield from self._rows(ev, end_pos, event_start)
            if end_pos:
                self._next_pos = end_pos

    def _heartbeat(self, ev: HeartbeatLogEvent, end_pos: int) -> Idle:
        """The server sends a heartbeat when it has sent everything it holds: its position is
        the binlog's end (events the reader filters included), so an idle binlog does not hold a
        resume point (or a read-only window) behind."""
        ident = ev.ident.decode() if isinstance(ev.ident, bytes) else ev.ident
        if not self._txn.open and end_pos and ident == self._file:
            self._next_pos = max(self._next_pos, end_pos)
        return Idle(None if self._txn.open else self.current_resume())

    def _commit(self, end_pos: int, start: int) -> TransactionEnd:
        txn = self._txn
        self._txn = _TxnState()
        return TransactionEnd(self._at(start), txn.gtid,
                              ResumePoint(self._file, end_pos, self._last.encode() if self._last else None),
                              txn.events)

    def _forget_table_ids(self) -> None:
        """A binlog file ended: what was kept per table id goes (as the library's table map does,
        on the same rotate events: not on the one a server sends when a connection starts, which
        may resume inside a transaction whose table maps came before).  No transaction spans
        files and each statement's rows follow their own TABLE_MAP, so nothing read later needs
        an id of the file before; the server hands out a new id whenever it reopens a table, so
        kept for ever these would grow with the uptime."""
        for kept in (self._tables, self._table_keys, self._map_keys, self._decoders, self._encoders):
            kept.clear()

    def _table_map(self, ev) -> None:
        map_key = table_map_key(ev)
        if self._map_keys.get(ev.table_id) == map_key:
            return  # this table id's last table map again (a server writes one per statement): all stands
        self._map_keys[ev.table_id] = map_key
        if not self._wants(ev.schema, ev.table):
            self._tables[ev.table_id] = None
            return
        key = (ev.schema, ev.table, bytes(ev.null_bitmask), tuple((c.type, c.name) for c in ev.columns))
        if self._table_keys.get(ev.table_id) != key or self._tables.get(ev.table_id) is None:
            self._tables[ev.table_id] = table_def_from_table_map(ev)
            self._table_keys[ev.table_id] = key
        if map_key not in self._decoder_cache:
            if len(self._decoder_cache) >= 1024:
                self._decoder_cache.clear()  # bounded: rebuilt on demand
                self._encoder_cache.clear()
            decoder = self._decoder_cache[map_key] = RowDecoder.for_columns(ev.columns)
            self._encoder_cache[map_key] = (None if decoder is None or self._images is None else
                                            self._images.image_encoder(self._tables[ev.table_id], ev.columns))
        self._decoders[ev.table_id] = self._decoder_cache[map_key]
        self._encoders[ev.table_id] = self._encoder_cache[map_key]

    def _rows(self, ev, end_pos: int, event_start: int) -> Iterator[RowChanges]:
        table_def = self._tables.get(ev.table_id)
        if table_def is None:
            return  # not captured
        base = self._file_position(end_pos, ev.event_size)
        first = first_new_row(base, self._last)
        if first is None:
            return  # cannot hold anything new (checked before decoding rows)
        decoder = self._decoders.get(ev.table_id)
        encoder = self._encoders.get(ev.table_id)
        rows: EncodedImages | PackedRows | list[dict]
        if encoder is not None and decoder.fits(ev):
            try:
                rows = encoder.encode(row_data(ev), isinstance(ev, UpdateRowsEvent))
            except Exception:  # noqa: BLE001 - a row it does not take: every row as values
                rows = decoder.packed_rows(ev)
        else:
            rows = decoder.packed_rows(ev) if decoder is not None else ev.rows
        if first >= len(rows):
            return
        kind = "insert" if isinstance(ev, WriteRowsEvent) else "update" if isinstance(ev, UpdateRowsEvent) else "delete"
        yield self._changes(kind, ev.schema, ev.table, table_def, base, rows, first, ev.timestamp,
                            ev.packet.event_size, event_start)

    def _changes(self, kind: str, db: str, table: str, table_def: TableDef, base: BinlogPosition, rows, first: int,
                 timestamp: int, size: int, event_start: int) -> RowChanges:
        """The item of a rows event's rows from ``first`` on, counted in the open transaction
        (the library's event or the packet lane's, before ``_next_pos`` moves past it)."""
        txn = self._txn
        txn.events += len(rows) - first
        self._last = base.with_row(2 * len(rows) - 1)
        resume_file, resume_pos = (txn.start_file, txn.start_pos) if txn.open else (self._file, self._next_pos)
        return RowChanges(kind, db, table, table_def, base, rows, first, timestamp * 1000, txn.gtid, txn.thread,
                          self._file, resume_file, resume_pos, size, event_start)


_GIVE_BACK = object()
_LANE_ITEMS = frozenset({RowChanges, TransactionEnd})
_MARIADB_GTID = struct.Struct("<QI")  # sequence number, domain id
_UPDATES = frozenset({constants.UPDATE_ROWS_EVENT_V1, constants.UPDATE_ROWS_EVENT_V2})
_KINDS = {constants.WRITE_ROWS_EVENT_V1: "insert", constants.WRITE_ROWS_EVENT_V2: "insert",
          constants.UPDATE_ROWS_EVENT_V1: "update", constants.UPDATE_ROWS_EVENT_V2: "update",
          constants.DELETE_ROWS_EVENT_V1: "delete", constants.DELETE_ROWS_EVENT_V2: "delete"}
#: The events the packet lane handles, by type.
_LANE_EVENTS = {constants.XID_EVENT: _PacketEvents._lane_xid, constants.MARIADB_GTID_EVENT: _PacketEvents._lane_gtid,
                constants.TABLE_MAP_EVENT: _PacketEvents._lane_table_map,
                **{t: _PacketEvents._lane_rows for t in _KINDS}}


def _query_text(ev) -> str:
    return ev.query if isinstance(ev.query, str) else ev.query.decode("utf-8", "replace")
