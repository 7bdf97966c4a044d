"""Chunk read processes: a snapshot chunk's SELECT and its rows' Avro encoding in a child.

A chunk reader thread (:mod:`producer.snapshot.chunk_reader`) writes the OPEN marker, has
the chunk read, and writes the CLOSE marker.  Reading the SELECT's result (in Python) and
encoding each row image and key to Avro cost several times what joining a record's envelope
and producing it do; in a thread they would hold the producer's GIL and share its core.
:class:`ChunkReadProcess` does both in a child process of its own, on its own session over
the project's own connection (:func:`~common.sql.sessions.row_session`: UTC, READ COMMITTED,
autocommit, as the threads' sessions; the rows as the server sent them), and hands back
:class:`~producer.events.row_encoder.EncodedRows`: per row the key and row bodies, as
the producer's own :class:`~producer.events.row_encoder.RowEncoder` for that table version
encodes them (the child builds it from the same :class:`~producer.events.builder.ReadEncoding`),
and the rows from the first one the encoder does not take as values, for the general path.

The read is the same statement at the same point of the window: it starts after the OPEN
marker's INSERT committed and ends before the CLOSE marker's INSERT, whichever session runs
it.  An error of the read (the server gone, a query refused) comes back as that exception
and is handled as a failed read; a child that died raises :class:`ChunkProcessGone`, and
the next read starts a new one.  Memory: one chunk's rows at a time per child.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import subprocess
from multiprocessing.connection import Connection
from typing import Any, Sequence

from common.config import SourceConfig
from common.errors import SourceUnavailable
from common.gc_tuning import STREAMING_THRESHOLDS, tune_gc
from common.sql.row_parser import values_reader
from common.sql.row_reads import RowSession
from common.sql.sessions import row_session
from producer import child_process
from producer.events.builder import ReadEncoding, TableEvents
from producer.events.row_encoder import EncodedRows, encode_rows
from producer.events.select_encoder import SelectRowEncoder
from producer.snapshot.table_reader import chunk_statement
from producer.table_schema import TableDef


class ChunkProcessGone(SourceUnavailable):
    """The chunk read process exited before it answered."""


class ChunkReadProcess:
    """One child that reads and encodes chunks, one at a time (one per reader thread)."""

    def __init__(self, source: SourceConfig) -> None:
        mine, theirs = socket.socketpair()
        try:
            self._process = child_process.spawn("producer.snapshot.chunk_process:_child_main", (theirs.fileno(),),
                                                (theirs.fileno(), source))
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._conn = Connection(mine.detach())

    @property
    def pid(self) -> int:
        return self._process.pid

    def read(self, encoding: ReadEncoding, keys: Sequence[str], after: Sequence[Any] | None,
             upto: Sequence[Any] | None, condition: str | None, limit: int) -> EncodedRows:
        """The chunk of ``encoding.table`` after key ``after`` up to ``upto`` (``limit`` rows
        at most), encoded; raises the read's error."""
        try:
            self._conn.send_bytes(pickle.dumps((encoding, list(keys), after, upto, condition, limit),
                                               pickle.HIGHEST_PROTOCOL))
            data = self._conn.recv_bytes()
        except (EOFError, OSError) as exc:
            raise ChunkProcessGone(f"the chunk read process exited ({self._exit_code()})") from exc
        kind, payload = pickle.loads(data)
        if kind == "error":
            raise payload
        return payload

    def _exit_code(self) -> str:
        try:
            return f"exit code {self._process.wait(5)}"
        except subprocess.TimeoutExpired:
            return "still running"

    def close(self) -> None:
        """End the child (it holds nothing worth a graceful stop) and wait for it."""
        self._conn.close()
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()


def read_encoded(session: RowSession, encoding: ReadEncoding, table_events: TableEvents, keys: Sequence[str],
                 after: Sequence[Any] | None, upto: Sequence[Any] | None, condition: str | None,
                 limit: int, encoders: dict | None = None) -> EncodedRows:
    """One chunk read on ``session`` and encoded by ``table_events``' encoders (the child's work):
    each row straight from its bytes (:class:`SelectRowEncoder`, kept in ``encoders`` per table
    version and result layout) until one it does not take, the rest from their values."""
    table: TableDef = encoding.table
    sql, params = chunk_statement(table, keys, after=after, upto=upto, condition=condition, limit=limit)
    names = tuple(table.column_names)
    payloads, readings = session.rows(sql, params)
    values = values_reader(readings)
    encoder = _select_encoder(table_events, readings, {} if encoders is None else encoders)
    bodies: list[tuple[bytes | None, bytes]] = []
    if encoder is not None:
        row, append = encoder.row, bodies.append
        for payload in payloads:
            try:
                append(row(payload))
            except Exception:  # noqa: BLE001 - this row and the next ones: their values' way
                break
    last = dict(zip(names, values(payloads[-1]))) if payloads else None
    if table_events.encoder is None:  # (a mapped table: the rest as values, for the general path)
        return EncodedRows(encoding.ident, bodies, [dict(zip(names, values(p))) for p in payloads[len(bodies):]], last)
    rest = encode_rows(table_events.encoder, encoding.ident, names, [values(p) for p in payloads[len(bodies):]])
    return EncodedRows(encoding.ident, bodies + rest.bodies, rest.rest, last)


def _select_encoder(te: TableEvents, readings: list, encoders: dict) -> SelectRowEncoder | None:
    """The SELECT row encoder of a table version and result layout (None: its rows take their
    values' way), made once."""
    key = (te.ident, tuple(readings))
    if key not in encoders:
        if len(encoders) >= 256:
            encoders.clear()  # bounded: made again on demand
        try:
            encoders[key] = SelectRowEncoder(te, readings)
        except Exception:  # noqa: BLE001 - NotFast, or a table the values' way reports on
            encoders[key] = None
    return encoders[key]


def _child_main() -> None:
    """The child: answer read requests until the parent closes the socket or dies."""
    fd, source = child_process.child_args()
    tune_gc(STREAMING_THRESHOLDS, freeze=True)  # (a chunk's rows: containers that reference counting frees)
    conn = Connection(fd)
    session = None
    tables: dict[tuple, TableEvents] = {}
    encoders: dict[tuple, SelectRowEncoder | None] = {}
    try:
        while True:
            try:
                encoding, keys, after, upto, condition, limit = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return  # the parent is gone or done
            try:
                te = tables.get(encoding.ident)
                if te is None:
                    te = tables[encoding.ident] = encoding.table_events()
                if session is None:
                    session = row_session(source)
                answer = pickle.dumps(("rows", read_encoded(session, encoding, te, keys, after, upto, condition,
                                                            limit, encoders)), pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # noqa: BLE001 - every error goes to the parent
                if session is not None:  # a new session for the next read, whatever went wrong
                    with contextlib.suppress(Exception):
                        session.close()
                    session = None
                answer = child_process.pickled_error(exc, "chunk read")
            try:
                conn.send_bytes(answer)
            except OSError:
                return
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()
        conn.close()
