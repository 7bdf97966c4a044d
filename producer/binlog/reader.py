"""The binlog reader: a server's binlog turned into positioned records.

:class:`BinlogReader` reads it over the project's own client (:mod:`common.sql.wire`,
:class:`~producer.binlog.binlog_stream.BinlogStream`, the events parsed by
:mod:`producer.binlog.binlog_events`); ``producer.binlog.library_reader`` reads it through
python-mysql-replication's public API, the reference, selected with
``CDC_BINLOG_CLIENT=library`` (:func:`producer.binlog.readers.open_reader`).  Both give the
same items from the same binlog (``tests/integration/producer/test_binlog_readers.py``).

Every row gets a :class:`BinlogPosition` ``(file index, event start, 2*row)``: unique,
rising in log order and comparable across file rotation (the odd sequence numbers are
left for the create half of a primary-key-changing update, see ``event_builder``).

Resuming: the reader is started at a :class:`ResumePoint`, the start of the transaction
that holds the first change not yet stored (a row event cannot be decoded without the
table map before it), and drops every change at or before ``last``.  So a restart in the
middle of a multi-row event or of a transaction emits each change once.

Rows come one :class:`RowChanges` per binlog rows event (not one object per row).  Every
item tells where to restart once it has been handled (``resume``), so whoever consumes the
items -- in this process or another (``producer.binlog.process``) -- knows the resume point
without asking the reader.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from common.config import SourceConfig
from common.errors import ServerGone, UnsupportedType
from common.sql import wire
from common.sql.sessions import source_tls
from contract.position import BinlogPosition, based
from producer.binlog.binlog_events import (
    DELETE_ROWS_V1,
    DELETE_ROWS_V2,
    GTID_EVENT,
    GTID_TAGGED_LOG_EVENT,
    HEARTBEAT_EVENT,
    HEARTBEAT_EVENT_V2,
    MARIADB_GTID_EVENT,
    QUERY_EVENT,
    ROWS_KINDS,
    TABLE_MAP_EVENT,
    TRANSACTION_PAYLOAD_EVENT,
    UPDATE_ROWS_V1,
    UPDATE_ROWS_V2,
    UPDATE_TYPES,
    WRITE_ROWS_V1,
    WRITE_ROWS_V2,
    XID_EVENT,
    heartbeat_file,
    mariadb_gtid,
    mysql_commit_ms,
    mysql_gtid,
    mysql_tagged_gtid,
    payload_events,
    query,
    refusal,
    rows_header,
    table_id,
    table_map,
)
from producer.binlog.binlog_stream import FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT, BinlogStream
from producer.binlog.row_decoder import EncodedImages, PackedRows, RowDecoder, column_reader
from producer.binlog.table_map import table_def_of
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
    #: The transaction's commit time in ms from its MySQL GTID event (None: the events' own
    #: header time, in seconds, as on MariaDB): its rows' ``source.ts_ms``, as Debezium's.
    commit_ms: int | None = None


class ReaderCore:
    """What both binlog readers share: the position of each item, the open transaction, the
    tables by table id with their row decoders and image encoders, the resume point."""

    def __init__(self, cfg: SourceConfig, resume: ResumePoint, *, is_mariadb: bool, blocking: bool = True,
                 heartbeat_s: float = 1.0, only_schemas: list[str] | None = None,
                 wants: Callable[[str, str], bool] = lambda db, table: True, file_base: int = 0,
                 images: ImageEncoding | None = None) -> None:
        self.cfg = cfg
        self.file_base = file_base
        self.resume = resume
        self.is_mariadb = is_mariadb
        self.blocking, self.heartbeat_s = blocking, heartbeat_s
        self.only_schemas = None if only_schemas is None else frozenset(only_schemas)
        self._last = BinlogPosition.decode(resume.last) if resume.last else None
        # Changes before this time are skipped here (the server's heartbeats carry timestamp 0).
        self._skip_before = resume.skip_to_timestamp
        self._wants = wants
        self._tables: dict[int, TableDef | None] = {}
        self._table_keys: dict[int, tuple] = {}
        self._map_keys: dict[int, bytes] = {}  # the body of each table id's last table map (table_map_key)
        # Row decoders by table id (None: not decoded here), and by table map content.
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

    def _captured_schema(self, schema: str) -> bool:
        """Whether tables of ``schema`` are read at all (not a system database; in
        ``only_schemas`` when given)."""
        return schema not in SYSTEM_DATABASES and (self.only_schemas is None or schema in self.only_schemas)

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

    def _skipping(self, starts_transaction: bool, timestamp: int, end_pos: int) -> bool:
        """Whether the event is skipped: whole transactions that began before the start time."""
        if starts_transaction and timestamp >= self._skip_before:
            self._skip_before = None  # from here on everything is newer
            return False
        if end_pos:
            self._next_pos = end_pos
        return True

    def _heartbeat(self, ident: str, end_pos: int) -> Idle:
        """The server sends a heartbeat when it has sent everything it holds: its position is
        the binlog's end (events the reader filters included), so an idle binlog does not hold a
        resume point (or a read-only window) behind."""
        if not self._txn.open and end_pos and ident == self._file:
            self._next_pos = max(self._next_pos, end_pos)
        return Idle(None if self._txn.open else self.current_resume())

    def _query(self, query: str, schema: str, thread: int, ts: int, end_pos: int, start: int,
               event_start: int, body_size: int) -> Iterator[SchemaChange | TransactionEnd]:
        """A QUERY event: BEGIN (or XA START) opens a transaction, COMMIT (or XA COMMIT) ends
        it, anything else is DDL, its own transaction."""
        q = query.strip().upper()
        if q == "BEGIN" or q.startswith("XA START"):
            if not self._txn.open:
                self._txn = _TxnState(self._file, event_start, None, None, 0, True)
            self._txn.thread = thread
            if end_pos:
                self._next_pos = end_pos
            return
        if q == "COMMIT" or q.startswith("XA COMMIT"):
            self._next_pos = end_pos
            yield self._commit(end_pos, start)
            return
        pos = self._file_position(end_pos, body_size)
        self._next_pos = end_pos
        # DDL commits implicitly: it is its own transaction.
        was_open, self._txn.open = self._txn.open, False
        if self._last is None or pos > self._last:
            self._last = pos
            yield SchemaChange(schema or "", query, pos, ts * 1000, self._txn.gtid, self._file, event_start,
                               self.current_resume())
        if was_open:
            yield self._commit(end_pos, start)

    def _commit(self, end_pos: int, start: int) -> TransactionEnd:
        txn = self._txn
        self._txn = _TxnState()
        return TransactionEnd(self._at(start), txn.gtid,
                              ResumePoint(self._file, end_pos, self._last.encode() if self._last else None),
                              txn.events)

    def _forget_table_ids(self) -> None:
        """A binlog file ended: what was kept per table id goes (as python-mysql-replication's
        table map does, on the same rotate events: not on the one a server sends when a
        connection starts, which may resume inside a transaction whose table maps came before).
        No transaction spans files and each statement's rows follow their own TABLE_MAP, so
        nothing read later needs an id of the file before; the server hands out a new id
        whenever it reopens a table, so kept for ever these would grow with the uptime."""
        for kept in (self._tables, self._table_keys, self._map_keys, self._decoders, self._encoders):
            kept.clear()

    def _take_table_map(self, table_id: int, schema: str, table: str, map_key: bytes, null_bitmask: bytes,
                        columns: list, table_def: Callable[[], TableDef]) -> None:
        """A TABLE_MAP: its table's definition (``table_def()``, built when it changed), row
        decoder and image encoder, kept by table id (and by the map's content: ``map_key``)."""
        if self._map_keys.get(table_id) == map_key:
            return  # this table id's last table map again (a server writes one per statement): all stands
        self._map_keys[table_id] = map_key
        if not self._wants(schema, table):
            self._tables[table_id] = None
            return
        key = (schema, table, bytes(null_bitmask), tuple((c.type, c.name) for c in columns))
        if self._table_keys.get(table_id) != key or self._tables.get(table_id) is None:
            self._tables[table_id] = table_def()
            self._table_keys[table_id] = key
        if map_key not in self._decoder_cache:
            if len(self._decoder_cache) >= 1024:
                self._decoder_cache.clear()  # bounded: rebuilt on demand
                self._encoder_cache.clear()
            decoder = self._decoder_cache[map_key] = RowDecoder.for_columns(columns)
            self._encoder_cache[map_key] = (None if decoder is None or self._images is None else
                                            self._images.image_encoder(self._tables[table_id], columns))
        self._decoders[table_id] = self._decoder_cache[map_key]
        self._encoders[table_id] = self._encoder_cache[map_key]

    def _changes(self, kind: str, db: str, table: str, table_def: TableDef, base: BinlogPosition, rows, first: int,
                 timestamp: int, size: int, event_start: int) -> RowChanges:
        """The item of a rows event's rows from ``first`` on, counted in the open transaction
        (before ``_next_pos`` moves past it)."""
        txn = self._txn
        txn.events += len(rows) - first
        self._last = base.with_row(2 * len(rows) - 1)
        resume_file, resume_pos = (txn.start_file, txn.start_pos) if txn.open else (self._file, self._next_pos)
        ts_ms = timestamp * 1000 if txn.commit_ms is None else txn.commit_ms
        return RowChanges(kind, db, table, table_def, base, rows, first, ts_ms, txn.gtid, txn.thread,
                          self._file, resume_file, resume_pos, size, event_start)


class BinlogReader(ReaderCore):
    """Iterate positioned records from a resume point over the project's own binlog client
    (:class:`~producer.binlog.binlog_stream.BinlogStream` on a :mod:`common.sql.wire`
    connection, every event parsed by :mod:`producer.binlog.binlog_events`); stop with
    :meth:`close`.  A lost connection (:class:`~common.errors.ServerGone`: closed, reset, or
    silent for ``READ_TIMEOUT_HEARTBEATS`` heartbeat periods) that had read events is read
    again from :meth:`current_resume`, retried with a growing pause for up to
    ``connect_timeout_s`` (a source restarting); past that, or when the first connection
    fails, it is raised (a ``ConnectionError``: the producer restarts from its stored
    position)."""

    def __init__(self, *args, **kwargs) -> None:  # (ReaderCore's arguments)
        super().__init__(*args, **kwargs)
        self._stream: BinlogStream | None = None
        self._closed = False
        self.reconnects = 0
        self._post: dict[int, int] = dict(_POST_HEADER_LENGTHS)
        self._why_not: dict[int, str] = {}  # table id -> why its rows are not decoded here

    def _open_stream(self) -> BinlogStream:
        """A connection logged in and a binlog stream from the resume point (the first one, or
        :meth:`current_resume` once a file is known)."""
        cfg = self.cfg
        read_timeout = (max(READ_TIMEOUT_HEARTBEATS * self.heartbeat_s, MIN_READ_TIMEOUT_S) if self.blocking
                        else NON_BLOCKING_READ_TIMEOUT_S)
        conn = wire.connect(cfg.host, cfg.port, cfg.user, cfg.password.get_secret_value(), tls=source_tls(cfg),
                            connect_timeout=cfg.connect_timeout_s, read_timeout=read_timeout)
        kw: dict = {}
        if not self._file and self.resume.gtid_set:
            kw["mariadb_gtid" if self.is_mariadb else "gtid_set"] = self.resume.gtid_set
        else:
            r = self.current_resume()
            kw.update(file=r.file, pos=r.pos)
        try:
            return BinlogStream(conn, server_id=cfg.server_id, blocking=self.blocking,
                                heartbeat_s=self.heartbeat_s if self.blocking else None, **kw).start()
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.close()

    def __iter__(self) -> Iterator[RowChanges | SchemaChange | TransactionEnd | Idle]:
        lost_at: float | None = None  # when the connection that last read events was lost
        delay = RECONNECT_FIRST_DELAY_S
        while True:
            read = [0]
            try:
                yield from self._read(read)
                return
            except ServerGone as exc:
                if read[0]:
                    lost_at, delay = time.monotonic(), RECONNECT_FIRST_DELAY_S
                if self._closed or lost_at is None or (
                        time.monotonic() - lost_at + delay > max(self.cfg.connect_timeout_s, MIN_READ_TIMEOUT_S)):
                    raise
                self.reconnects += 1
                log.warning("binlog connection lost (%s); reading again from %s in %.2fs", exc, self.current_resume(),
                            delay)
                with contextlib.suppress(Exception):
                    self._stream.close()
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _read(self, read: list[int]) -> Iterator[RowChanges | SchemaChange | TransactionEnd | Idle]:
        """The items of one connection's stream (``read[0]``: the events it gave)."""
        stream = self._stream = self._open_stream()
        if self._txn.open:  # (reconnected inside a transaction: read again from its start)
            self._txn = _TxnState()
        for ts, etype, server_id, size, log_pos, _flags, body in stream:
            read[0] += 1
            if self._skip_before is not None and etype in _HANDLED:
                q = etype == QUERY_EVENT and query(body, self._post[QUERY_EVENT]).query.strip().upper() == "BEGIN"
                if self._skipping(etype in _GTID_EVENTS or q, ts, log_pos):
                    continue
            if etype in ROWS_KINDS:
                item = self._rows_event(etype, ts, size, log_pos, body)
                if log_pos:
                    self._next_pos = log_pos
                if item is not None:
                    yield item
            elif etype == TABLE_MAP_EVENT:
                self._table_map_event(body)
                if log_pos:
                    self._next_pos = log_pos
            elif etype == XID_EVENT:
                self._next_pos = log_pos
                yield self._commit(log_pos, log_pos - len(body))
            elif etype in _GTID_EVENTS:
                gtid = (mariadb_gtid(body, server_id) if etype == MARIADB_GTID_EVENT else
                        mysql_tagged_gtid(body) if etype == GTID_TAGGED_LOG_EVENT else mysql_gtid(body))
                self._txn = _TxnState(self._file, log_pos - size if log_pos else self._next_pos, gtid, None, 0, True,
                                      None if etype in (MARIADB_GTID_EVENT, GTID_TAGGED_LOG_EVENT) else
                                      mysql_commit_ms(body))
                if log_pos:
                    self._next_pos = log_pos
            elif etype == QUERY_EVENT:
                q = query(body, self._post[QUERY_EVENT])
                n = len(body)
                yield from self._query(q.query, q.schema, q.thread_id, ts, log_pos,
                                       log_pos - n if log_pos else self._next_pos,
                                       log_pos - size if log_pos else self._next_pos, n)
            elif etype == TRANSACTION_PAYLOAD_EVENT:
                yield from self._payload_event(size, log_pos, body)
            else:
                item = self._position_event(stream, etype, ts, log_pos, body)
                if item is not None:
                    yield item

    def _payload_event(self, size: int, log_pos: int, body: bytes) -> Iterator[RowChanges | TransactionEnd]:
        """A compressed transaction (``binlog_transaction_compression=ON``): MySQL writes the
        transaction's GTID event, then one TRANSACTION_PAYLOAD holding its other events
        (BEGIN, table maps, rows events, XID), compressed, each without a place in the file.

        Every event inside gets one of the payload's own positions: the ``k``-th event is at
        the payload event's own position (its end less its body, as for any event) plus ``k``.  So the positions of its rows rise in log
        order, lie after the GTID event and before the next event, and are the same on every
        read (a restart inside the transaction reads it again from its GTID event and skips
        what is out, as for any transaction).  ``source.pos`` is the payload event's first
        byte.  A transaction of more events than its payload has bytes (zstd can shrink
        repeated events below a byte each) has not enough positions: refused, naming it."""
        if self._skip_before is not None:  # (its transaction began before the start time)
            if log_pos:
                self._next_pos = log_pos
            return
        events = payload_events(body)
        first = log_pos - len(body) if log_pos else self._next_pos
        event_start = log_pos - size if log_pos else self._next_pos
        if len(events) > len(body):
            raise UnsupportedType(
                f"a compressed transaction at {self._file}:{event_start} of {self.cfg.host}:{self.cfg.port} holds "
                f"{len(events)} events in a payload of {len(body)} bytes: more than the positions it has (one per "
                "byte); write such transactions with binlog_transaction_compression=OFF (a session setting)")
        for k, (ts, etype, _server_id, inner_size, _lp, _flags, inner) in enumerate(events):
            at = first + k  # (the event's position; as for an event in the file: the end minus the body)
            if etype in ROWS_KINDS:
                item = self._rows_event(etype, ts, inner_size, at + len(inner), inner, event_pos=event_start)
                if item is not None:
                    yield item
            elif etype == TABLE_MAP_EVENT:
                self._table_map_event(inner)
            elif etype == XID_EVENT:
                self._next_pos = log_pos
                yield self._commit(log_pos, at)
            elif etype == QUERY_EVENT:
                q = query(inner, self._post[QUERY_EVENT])
                word = q.query.strip().upper()
                if not (word in ("BEGIN", "COMMIT") or word.startswith(("XA START", "XA COMMIT"))):
                    raise UnsupportedType(f"a compressed transaction at {self._file}:{event_start} holds a statement "
                                          f"({q.query[:80]!r}): only DML transactions are compressed")
                # (BEGIN opens the transaction its GTID event opened already; COMMIT ends it
                # where the payload event ends, as XID does)
                yield from self._query(q.query, q.schema, q.thread_id, ts, log_pos if word != "BEGIN" else 0, at, at,
                                       len(inner))
            else:
                why = refusal(etype)
                if why is not None:
                    raise UnsupportedType(f"{why} (in the compressed transaction at {self._file}:{event_start} of "
                                          f"{self.cfg.host}:{self.cfg.port})")
        if log_pos:
            self._next_pos = log_pos

    def _position_event(self, stream: BinlogStream, etype: int, ts: int, log_pos: int, body: bytes) -> Idle | None:
        """ROTATE, FORMAT_DESCRIPTION and heartbeats; an event the reader cannot read refused
        (:func:`refusal`); any other skipped."""
        if etype == ROTATE_EVENT:
            self._file, self._next_pos = stream.file, stream.position
            if ts:  # a file's end (the server's own rotate at a (re)connection has 0)
                self._forget_table_ids()
        elif etype == FORMAT_DESCRIPTION_EVENT:
            for t in self._post:
                self._post[t] = stream.format.post_header_length(t) or _POST_HEADER_LENGTHS[t]
            if log_pos:
                self._next_pos = max(self._next_pos, log_pos)
        elif etype in (HEARTBEAT_EVENT, HEARTBEAT_EVENT_V2):
            ident, pos = heartbeat_file(etype, body)
            return self._heartbeat(ident, log_pos if pos is None else pos)
        else:
            why = refusal(etype)
            if why is not None:
                raise UnsupportedType(f"{why} (at {self._file}:{self._next_pos} of {self.cfg.host}:{self.cfg.port})")
        return None

    def _forget_table_ids(self) -> None:
        super()._forget_table_ids()
        self._why_not.clear()

    def _table_map_event(self, body: bytes) -> None:
        """A TABLE_MAP: parsed when its table id's last one differed, kept when its table is captured."""
        post = self._post[TABLE_MAP_EVENT]
        tid = table_id(body, post)
        key = body[post:]
        if self._map_keys.get(tid) == key:
            return  # this table id's last table map again: all stands
        tm = table_map(body, mariadb=self.is_mariadb, post_header_length=post)
        if not self._captured_schema(tm.schema):
            self._map_keys[tid], self._tables[tid] = key, None
            return
        self._take_table_map(tid, tm.schema, tm.table, key, tm.null_bitmask, tm.columns, lambda: table_def_of(tm))
        if self._decoders.get(tid) is None and self._tables.get(tid) is not None:
            self._why_not[tid] = _why_not_decoded(tm.columns)

    def _rows_event(self, etype: int, ts: int, size: int, log_pos: int, body: bytes,
                    event_pos: int | None = None) -> RowChanges | None:
        """The item of a rows event of a captured table (None: not captured, or nothing new);
        encoded by the table's image encoder where it takes every row, else decoded as values.
        ``event_pos``: its ``source.pos`` (None: its first byte, ``log_pos - size``)."""
        hdr = rows_header(etype, body, self._post[etype])
        tid = hdr.table_id
        table_def = self._tables.get(tid)
        if table_def is None:
            return None  # not captured
        n = len(body)
        base = self._at(log_pos - n) if log_pos else self._at(self._next_pos)
        first = first_new_row(base, self._last)
        if first is None:
            return None  # cannot hold anything new (checked before decoding rows)
        decoder = self._decoders.get(tid)
        where = f"{table_def.db}.{table_def.name}"
        if decoder is None:
            raise UnsupportedType(f"the rows of {where} are not decoded by the project's binlog client: "
                                  f"{self._why_not.get(tid, 'no table map')} (CDC_BINLOG_CLIENT=library reads "
                                  f"them through python-mysql-replication)")
        update = etype in UPDATE_TYPES
        if hdr.columns != len(decoder.names) or not decoder.full(hdr.present) or (
                update and not decoder.full(hdr.present_after)):
            raise UnsupportedType(f"a rows event of {where} at {self._file}:{log_pos - size} has partial row images: "
                                  f"binlog_row_image must be FULL")
        data = body[hdr.data:]
        rows: EncodedImages | PackedRows | None = None
        encoder = self._encoders.get(tid)
        if encoder is not None:
            try:
                rows = encoder.encode(data, update)
            except Exception:  # noqa: BLE001 - a row it does not take: every row as values
                rows = None
        if rows is None:
            rows = decoder.decode_packed(data, update)
        if first >= len(rows):
            return None
        return self._changes(ROWS_KINDS[etype], table_def.db, table_def.name, table_def, base, rows, first, ts, size,
                             log_pos - size if event_pos is None else event_pos)


def _why_not_decoded(columns: list) -> str:
    """The first column of a table map that :class:`RowDecoder` does not read, and why."""
    for c in columns:
        try:
            column_reader(c)
        except UnsupportedType as exc:
            return f"column {c.name!r} (binlog type {c.type}): {exc}"
    try:
        RowDecoder(columns)
    except UnsupportedType as exc:
        return str(exc)
    return "its columns"


#: A read waits this many heartbeat periods (at least MIN_READ_TIMEOUT_S) before the
#: connection counts as lost; a non-blocking read (to the binlog's end) NON_BLOCKING_READ_TIMEOUT_S.
READ_TIMEOUT_HEARTBEATS = 5
MIN_READ_TIMEOUT_S = 2.0
NON_BLOCKING_READ_TIMEOUT_S = 60.0
#: The first pause before reading again after a lost connection (doubled to 2 s per failure).
RECONNECT_FIRST_DELAY_S = 0.25
#: Post-header lengths until a FORMAT_DESCRIPTION says (binlog v4's).
_POST_HEADER_LENGTHS = {QUERY_EVENT: 13, TABLE_MAP_EVENT: 8, WRITE_ROWS_V1: 8, UPDATE_ROWS_V1: 8, DELETE_ROWS_V1: 8,
                        WRITE_ROWS_V2: 10, UPDATE_ROWS_V2: 10, DELETE_ROWS_V2: 10}
_GTID_EVENTS = frozenset({GTID_EVENT, GTID_TAGGED_LOG_EVENT, MARIADB_GTID_EVENT})
#: The events the reader acts on (the others are skipped; the skip by start time ignores them).
_HANDLED = frozenset({QUERY_EVENT, XID_EVENT, TABLE_MAP_EVENT, *_GTID_EVENTS, *ROWS_KINDS})
