"""The binlog reader through python-mysql-replication's public API: the reference reader.

:class:`LibraryBinlogReader` gives the items :class:`producer.binlog.reader.BinlogReader`
gives (the same :class:`~producer.binlog.reader.ReaderCore`), reading the binlog with the
library's ``BinLogStreamReader`` (``fetchone`` through its iterator, the events' public
attributes): selected with ``CDC_BINLOG_CLIENT=library`` (:mod:`producer.binlog.readers`),
and the reference the project's own client is held to
(``tests/integration/producer/test_binlog_readers.py``).  The library reconnects by itself
after a lost connection.  Rows are decoded by :class:`~producer.binlog.row_decoder.RowDecoder`
where it reads them, else by the library (``ev.rows``: JSON, the pre-5.6 temporal types,
partial images).
"""

from __future__ import annotations

import functools
from typing import Iterator

from pymysqlreplication import BinLogStreamReader
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

from common.sql.sessions import source_tls
from common.sql.tls import connect_mysql
from producer.binlog.binlog_events import mysql_commit_ms
from producer.binlog.reader import (
    Idle,
    ReaderCore,
    RowChanges,
    SchemaChange,
    TransactionEnd,
    _TxnState,
    first_new_row,
)
from producer.binlog.row_decoder import EncodedImages, PackedRows, row_data, table_map_key
from producer.binlog.table_map import table_def_from_table_map
from producer.capture_filter import SYSTEM_DATABASES


class LibraryBinlogReader(ReaderCore):
    """Iterate positioned records from a resume point through python-mysql-replication; stop
    with :meth:`close`."""

    def __init__(self, *args, **kwargs) -> None:  # (ReaderCore's arguments)
        super().__init__(*args, **kwargs)
        cfg, resume, blocking, heartbeat_s = self.cfg, self.resume, self.blocking, self.heartbeat_s
        only_schemas = None if self.only_schemas is None else sorted(self.only_schemas)
        settings = {"host": cfg.host, "port": cfg.port, "user": cfg.user,
                    "password": cfg.password.get_secret_value(), "charset": "utf8mb4",
                    "connect_timeout": int(cfg.connect_timeout_s)}
        kwargs: dict = {}
        if resume.gtid_set:
            kwargs["auto_position"] = resume.gtid_set
        else:
            kwargs.update(log_file=resume.file, log_pos=resume.pos, resume_stream=True)
        self._stream = BinLogStreamReader(
            # is_mariadb switches the library to MariaDB's GTID connect, which ignores file/pos:
            # only set it when starting from a MariaDB GTID position.
            connection_settings=settings, server_id=cfg.server_id, blocking=blocking,
            pymysql_wrapper=functools.partial(connect_mysql, source_tls(cfg)),  # source.ssl
            is_mariadb=self.is_mariadb and bool(resume.gtid_set),
            only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, QueryEvent, XidEvent, RotateEvent,
                         GtidEvent, MariadbGtidEvent, HeartbeatLogEvent, FormatDescriptionEvent],
            ignored_schemas=sorted(SYSTEM_DATABASES), only_schemas=only_schemas,
            slave_heartbeat=heartbeat_s if blocking else None, enable_logging=False, **kwargs)

    def close(self) -> None:
        self._stream.close()

    def __iter__(self) -> Iterator[RowChanges | SchemaChange | TransactionEnd | Idle]:
        done = None
        for ev in self._stream:
            if done is not None:
                # The library's event and its packet wrapper refer to each other: a cycle per
                # event, which only the cyclic collector would free (with its tables, columns
                # and the packet's bytes); broken here, the event is freed when dropped.
                done.packet.event = None
            done = ev
            end_pos = ev.packet.log_pos
            if isinstance(ev, RotateEvent):
                self._file, self._next_pos = ev.next_binlog, ev.position
                if ev.timestamp:  # a file's end (the server's own rotate at a (re)connection has 0)
                    self._forget_table_ids()
                continue
            if isinstance(ev, HeartbeatLogEvent):
                ident = ev.ident.decode() if isinstance(ev.ident, bytes) else ev.ident
                yield self._heartbeat(ident, end_pos)
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
            if self._skip_before is not None and self._skipping(
                    isinstance(ev, (GtidEvent, MariadbGtidEvent))
                    or isinstance(ev, QueryEvent) and _query_text(ev).strip().upper() == "BEGIN",
                    ev.timestamp, end_pos):
                continue
            if isinstance(ev, TableMapEvent):
                self._take_table_map(ev.table_id, ev.schema, ev.table, table_map_key(ev), ev.null_bitmask, ev.columns,
                                     lambda: table_def_from_table_map(ev))
            elif isinstance(ev, (GtidEvent, MariadbGtidEvent)):  # (MySQL's: its commit time, from its body)
                body = ev.packet.packet.get_all_data()[20:]  # (the OK byte and the header off)
                self._txn = _TxnState(self._file, event_start, ev.gtid, None, 0, True,
                                      None if isinstance(ev, MariadbGtidEvent) else mysql_commit_ms(body))
            elif isinstance(ev, QueryEvent):
                db = ev.schema.decode() if isinstance(ev.schema, bytes) else ev.schema
                yield from self._query(_query_text(ev), db, ev.slave_proxy_id, ev.timestamp, end_pos, start,
                                       event_start, ev.event_size)
                continue
            elif isinstance(ev, XidEvent):
                self._next_pos = end_pos
                yield self._commit(end_pos, start)
                continue
            elif isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                yield from self._rows(ev, end_pos, event_start)
            if end_pos:
                self._next_pos = end_pos

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


def _query_text(ev) -> str:
    return ev.query if isinstance(ev.query, str) else ev.query.decode("utf-8", "replace")
