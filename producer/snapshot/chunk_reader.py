"""Chunk readers: OPEN marker row, the chunk's SELECT, CLOSE marker row, each on its own session.

In read-only mode (``snapshot.read_only``) a reader writes nothing: it reads the server's
executed GTID set, the chunk in a consistent-snapshot transaction, and the GTID set and
binlog end again (:class:`QuietRead`); the coordinator closes the window when the binlog
reader has passed them (:mod:`producer.snapshot.gtid_windows`).

Readers are the threads of a pool (``snapshot.parallelism``), each with its own sessions
(UTC, READ COMMITTED, autocommit: every statement commits on its own, no lock is held, no
long transaction): a read session (pymysql) writes the window markers and reads GTID sets
and the binlog position; a row session (the project's own connection, the same login, TLS
and timeouts: :func:`common.sql.sessions.row_session`) runs the chunk's SELECT, and in
read-only mode the consistent-snapshot transaction around it, its rows parsed by generated
code into pymysql's values.  The window markers are rows of the signal table
(:class:`MarkerRows`): their INSERTs land in the binlog exactly where the read began and
ended, which is what the DBLog rule needs.  A reader that could not write its CLOSE marker
raises :class:`Unclosed` with the row still to write, so the coordinator writes it when the
server is back and no window stays open downstream.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pymysql

from common.config import SourceConfig
from common.errors import CDCError, SourceUnavailable
from common.sql.quoting import quote_table
from common.sql.row_reads import RowSession
from common.sql.sessions import row_session
from contract.gtid import GtidSet
from contract.position import BinlogPosition
from contract.signals import WINDOW_CLOSE, WINDOW_OPEN
from producer.binlog.server import current_position, executed_gtids
from producer.events.builder import ReadEncoding
from producer.events.row_encoder import EncodedRows
from producer.snapshot.chunk_process import ChunkProcessGone, ChunkReadProcess
from producer.snapshot.state import KeyRange
from producer.snapshot.table_reader import read_chunk
from producer.table_schema import TableDef


class Unclosed(CDCError):
    """A chunk reader failed before its CLOSE marker was written; ``close``: the marker
    row still to insert (id, data) when its OPEN marker was written."""

    def __init__(self, cause: Exception, close: tuple[str, str] | None = None) -> None:
        super().__init__(str(cause))
        self.close = close


#: Tries of a read-only chunk read whose consistent snapshot does not yet hold everything
#: the binlog reader has passed (a commit binlogged, not yet visible), a few ms apart.
SNAPSHOT_TRIES = 200


@dataclass
class QuietRead:
    """A chunk read without writing: its rows, the executed GTID sets read just before and
    just after it, and the binlog's end (file, pos) read after the second set."""

    rows: list[dict]
    gtids_before: GtidSet
    gtids_after: GtidSet
    end: tuple[str, int]


def start_consistent_snapshot(session: RowSession, is_mariadb: bool, anchor: BinlogPosition, anchor_gtids: GtidSet,
                              before: GtidSet) -> bool:
    """Begin a consistent-snapshot transaction on ``session``; whether it holds every
    transaction before ``anchor`` (the caller ends the transaction either way; see
    :meth:`ChunkReader._snapshot_select` for how each server tells)."""
    session.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    session.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    if is_mariadb:
        seen = mariadb_snapshot_point(session)
        return (seen.file_index, seen.pos) >= (anchor.file_index, anchor.pos)
    return before.covers(anchor_gtids)


def mariadb_snapshot_point(session: RowSession) -> BinlogPosition:
    """The binlog coordinates a MariaDB consistent-snapshot transaction holds every transaction
    up to, and none after (``binlog_snapshot_file`` / ``binlog_snapshot_position``)."""
    status = {k.lower(): v for k, v in session.values("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")}
    return BinlogPosition.from_binlog(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


class MarkerRows:
    """The window marker rows of the signal table (Debezium's insert/delete strategy):
    ``<prefix>-open`` and ``<prefix>-close`` with the chunk's JSON as ``data``."""

    def __init__(self, signal_table: str) -> None:
        self.table = quote_table(signal_table)

    @staticmethod
    def close_id(open_id: str) -> str:
        return open_id[:-len("open")] + "close"

    @staticmethod
    def open_id(close_id: str) -> str:
        return close_id[:-len("close")] + "open"

    def insert(self, conn, row_id: str, kind: str, data: str) -> None:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.table} (id, type, data) VALUES (%s, %s, %s)", (row_id, kind, data))

    def insert_close(self, conn, row_id: str, data: str) -> None:
        """A CLOSE marker row owed by a reader that is gone (none when the chunk's own is there)."""
        try:
            self.insert(conn, row_id, WINDOW_CLOSE, data)
        except pymysql.err.IntegrityError:
            pass  # the chunk's own CLOSE row is there already: it closes the window

    def delete(self, conn, row_ids: list[str]) -> None:
        with conn.cursor() as cur:
            cur.execute(f"DELETE FROM {self.table} WHERE id IN ({', '.join(['%s'] * len(row_ids))})", row_ids)


class ChunkReader:
    """The pool of chunk readers and their sessions.

    With ``source`` and an ``encoding`` (set by the producer's session: how the event builder
    encodes a table's chunk rows, None for a table it encodes itself), each reader thread
    has the chunk's SELECT run and its rows encoded by a chunk read process of its own
    (:mod:`producer.snapshot.chunk_process`); otherwise it reads on its own row session (of
    ``source``, which chunk reads need)."""

    def __init__(self, connect: Callable[[], Any], markers: MarkerRows, chunk_size: int, parallelism: int,
                 source: SourceConfig | None = None) -> None:
        self._connect = connect
        self.markers = markers
        self.chunk_size = chunk_size
        self.parallelism = parallelism
        self.source = source
        self.encoding: Callable[[TableDef], ReadEncoding | None] | None = None
        self.on_read: Callable[[], None] | None = None  # called (in the reader thread) when a read is done
        self._local = threading.local()
        self._conns: list[Any] = []
        self._children: list[ChunkReadProcess] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, prefix: str, marker: str, tdef: TableDef, keys: list[str], rng: KeyRange,
               condition: str | None) -> Future:
        """Read the chunk ``rng`` of ``tdef`` in a reader thread: a future of its rows."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallelism, thread_name_prefix="cdc-chunk-reader")
        encoding = self.encoding(tdef) if self.encoding is not None and self.source is not None else None
        return self._done_call(self._pool.submit(self._read, prefix, marker, tdef, keys, rng, condition, encoding))

    def _done_call(self, future: Future) -> Future:
        if self.on_read is not None:
            on_read = self.on_read
            future.add_done_callback(lambda _: on_read())
        return future

    def submit_quiet(self, tdef: TableDef, keys: list[str], rng: KeyRange, condition: str | None, *,
                     is_mariadb: bool, anchor: BinlogPosition, anchor_gtids: GtidSet) -> Future:
        """Read the chunk ``rng`` without writing to the source (read-only mode): a future
        of a :class:`QuietRead`.  ``anchor``: the binlog point (real file index) the binlog
        reader had reached when the chunk was submitted, and ``anchor_gtids`` the GTIDs it
        had passed; the read sees at least everything before them."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallelism, thread_name_prefix="cdc-chunk-reader")
        return self._done_call(self._pool.submit(self._read_quiet, tdef, keys, rng, condition, is_mariadb, anchor,
                                                 anchor_gtids))

    def _read_quiet(self, tdef: TableDef, keys: list[str], rng: KeyRange, condition: str | None, is_mariadb: bool,
                    anchor: BinlogPosition, anchor_gtids: GtidSet) -> QuietRead:
        try:
            conn = self._session()
            session = self._row_session()
            for _ in range(SNAPSHOT_TRIES):
                before = executed_gtids(conn, is_mariadb)
                rows = self._snapshot_select(session, tdef, keys, rng, condition, is_mariadb, anchor, anchor_gtids,
                                             before)
                if rows is not None:
                    break
                time.sleep(0.005)
            else:
                raise SourceUnavailable(f"the server's snapshot did not reach the binlog point {anchor} the binlog "
                                        f"reader had passed in {SNAPSHOT_TRIES} tries")
            after = executed_gtids(conn, is_mariadb)
            end = current_position(conn)
        except Exception:
            self._drop_session()
            raise
        return QuietRead(rows, before, after, end)

    def _snapshot_select(self, session: RowSession, tdef: TableDef, keys: list[str], rng: KeyRange,
                         condition: str | None, is_mariadb: bool, anchor: BinlogPosition, anchor_gtids: GtidSet,
                         before: GtidSet) -> list[dict] | None:
        """The chunk's SELECT in a consistent-snapshot transaction of the row session, or None
        when the snapshot does not hold every transaction before ``anchor`` yet.  MariaDB tells
        the snapshot's exact binlog point (``binlog_snapshot_file/position``: its binlog is
        written before the engine commits, so a GTID set can name a transaction not yet
        visible); MySQL adds a GTID to ``gtid_executed`` once it is committed, so the set
        read before the snapshot (on the thread's read session, before this transaction
        began) must reach the anchor's."""
        try:
            ready = start_consistent_snapshot(session, is_mariadb, anchor, anchor_gtids, before)
            rows = read_chunk(session, tdef, keys, after=rng.lo, upto=rng.hi, condition=condition,
                              limit=self.chunk_size) if ready else None
        finally:
            if not session.closed:
                session.execute("COMMIT")
        return rows

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for c in self._conns:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
        self._conns = []
        for child in self._children:
            child.close()
        self._children = []

    def _read(self, prefix: str, marker: str, tdef: TableDef, keys: list[str], rng: KeyRange,
              condition: str | None, encoding: ReadEncoding | None = None) -> Sequence[dict]:
        """OPEN marker, the range's SELECT, CLOSE marker.  Raises :class:`Unclosed` when no
        CLOSE marker was written (so none will come through the binlog and the coordinator
        must take the chunk back itself)."""
        try:
            conn = self._session()
            self.markers.insert(conn, f"{prefix}-open", WINDOW_OPEN, marker)
        except Exception as exc:
            self._drop_session()
            raise Unclosed(exc) from exc
        error: Exception | None = None
        rows: Sequence[dict] = []
        try:
            if encoding is None:
                rows = self._read_rows(tdef, keys, rng, condition)
            else:
                rows = self._read_encoded(encoding, keys, rng, condition)
        except Exception as exc:  # noqa: BLE001 - reported through the CLOSE marker
            error = exc
        try:
            # Also after a failed read: an OPEN without CLOSE keeps the window open downstream.
            self.markers.insert(conn, f"{prefix}-close", WINDOW_CLOSE, marker)
        except Exception as exc:
            self._drop_session()
            raise Unclosed(error or exc, (f"{prefix}-close", marker)) from exc
        if error is not None:
            raise error
        return rows

    def _read_rows(self, tdef: TableDef, keys: list[str], rng: KeyRange, condition: str | None) -> list[dict]:
        """The chunk's rows read on this thread's row session (dropped when the read fails:
        the next read opens a new one)."""
        try:
            return read_chunk(self._row_session(), tdef, keys, after=rng.lo, upto=rng.hi, condition=condition,
                              limit=self.chunk_size)
        except Exception:
            self._drop("rows")
            raise

    def _read_encoded(self, encoding: ReadEncoding, keys: list[str], rng: KeyRange,
                      condition: str | None) -> EncodedRows:
        """The chunk read and encoded by this thread's chunk read process (started on first use,
        and again after one died)."""
        child = getattr(self._local, "child", None)
        if child is None:
            assert self.source is not None
            child = self._local.child = ChunkReadProcess(self.source)
            with self._lock:
                self._children.append(child)
        try:
            return child.read(encoding, keys, rng.lo, rng.hi, condition, self.chunk_size)
        except ChunkProcessGone:
            self._local.child = None
            with self._lock:
                if child in self._children:
                    self._children.remove(child)
            child.close()
            raise

    def _session(self):
        """This thread's read session (pymysql): the window markers, GTID sets, binlog position."""
        return self._thread_session("conn", self._connect)

    def _row_session(self) -> RowSession:
        """This thread's row session (the project's own connection, the same login, TLS and
        settings as the read session): the chunk's SELECT, and in read-only mode the
        consistent-snapshot transaction around it."""
        if self.source is None:
            raise CDCError("chunk reads need the source's configuration (ChunkReader's source)")
        source = self.source
        return self._thread_session("rows", lambda: row_session(source))

    def _thread_session(self, name: str, connect: Callable[[], Any]):
        c = getattr(self._local, name, None)
        if c is not None and getattr(c, "closed", False):  # (a row session the server dropped)
            self._drop(name)
            c = None
        if c is None:
            c = connect()
            setattr(self._local, name, c)
            with self._lock:
                self._conns.append(c)
        return c

    def _drop_session(self) -> None:
        """This thread's sessions closed (the next read opens new ones)."""
        self._drop("conn")
        self._drop("rows")

    def _drop(self, name: str) -> None:
        c = getattr(self._local, name, None)
        setattr(self._local, name, None)
        if c is not None:
            with self._lock:
                if c in self._conns:
                    self._conns.remove(c)
            try:
                c.close()
            except Exception:  # noqa: BLE001 - already dead
                pass
