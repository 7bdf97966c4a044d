"""The binlog reader in a child process, so decoding overlaps encoding and producing.

Reading and decoding the binlog takes about as long per row as everything else the producer
does.  :class:`ReaderProcess` runs the binlog reader (:func:`producer.binlog.readers.open_reader`:
the own client's :class:`BinlogReader`, or the library's by ``CDC_BINLOG_CLIENT``) in a child
process and hands its items to this one, in order, through a pipe:

* bounded: the child sends a batch once it holds ``batch_rows`` rows or ``BATCH_BYTES``
  of rows events, at a transaction end or schema change when ``FLUSH_S`` has passed since
  its last batch, and at every server heartbeat -- which comes after ``QUIET_S`` without
  events, so the last transactions before a pause wait no longer than that; sending
  blocks while the pipe is full, so whatever the volume at most one pipe's worth
  (``PIPE_BYTES``) plus one batch on each side is in flight;
* errors: an exception in the child is sent after the items read before it and raised
  here again, same type (a lost source connection is retried as before) with the child's
  traceback as a note; a child that dies without a word raises :class:`ConnectionError`;
* no orphans (:mod:`producer.child_process`): a Ctrl-C or a stop sent to this process's
  group stops this process only, which commits and then ends the child
  (:meth:`ReaderProcess.close` kills it); the child exits when the pipe breaks, and dies
  with this process.  The child only reads the binlog: it never writes to Kafka.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import subprocess
import time
from multiprocessing.connection import Connection, wait
from typing import Iterator

from common.config import SourceConfig
from common.errors import CDCError
from common.gc_tuning import STREAMING_THRESHOLDS, tune_gc
from producer import child_process
from producer.binlog.reader import (
    Idle,
    ImageEncoding,
    ResumePoint,
    RowChanges,
    SchemaChange,
    TransactionEnd,
)
from producer.binlog.readers import open_reader
from producer.capture_filter import CaptureFilter
from producer.table_schema import TableDef

log = logging.getLogger(__name__)

Item = RowChanges | SchemaChange | TransactionEnd | Idle


class Wake:
    """Not a binlog item: something else this process waits for is ready (:meth:`ReaderProcess.wake`)."""


WAKE = Wake()

#: A transaction end waits in the child for more items while its last batch is younger.
FLUSH_S = 0.01
#: The server's heartbeat period: the longest it stays silent, so a pause in the stream
#: flushes the child's batch (and reaches the parent as an ``Idle``) after this long.
QUIET_S = 0.1
#: Pipe capacity asked for (Linux caps it at /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_BYTES = 1 << 20
#: A batch is sent once its rows events add up to this (rows can be large: BLOBs).
BATCH_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031
#: The cyclic garbage collector's thresholds while streaming (Python's default: 700, 10, 10).
#: Every row allocates containers (tuples of values, lists, records) that reference counting
#: frees, but each 700 of them started a collection: the young generation is scanned 70 times
#: less often, the old ones a little less.  The reader's are the same now that it breaks the
#: cycle of python-mysql-replication's event and packet wrapper (LibraryBinlogReader; the own
#: client's reader makes none): before, each
#: binlog event was freed only by a collection, so the reader collected every 5,000 (at 50,000
#: its peak RSS doubled, 52 -> 101 MB, in the benchmark), and the collections cost a quarter of
#: its time per row (12.0 against 8.9 us per row in `cdc bench stream`).
GC_THRESHOLDS = STREAMING_THRESHOLDS
READER_GC_THRESHOLDS = STREAMING_THRESHOLDS


class ReaderProcess:
    """Iterate a :class:`BinlogReader`'s items; the reader runs in a child process."""

    def __init__(self, cfg: SourceConfig, resume: ResumePoint, *, is_mariadb: bool, batch_rows: int,
                 file_base: int = 0, images: ImageEncoding | None = None) -> None:
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # not Linux, or above the system's limit: the default size only means smaller steps
        try:
            self._process = child_process.spawn("producer.binlog.process:_child_main", (write_fd,),
                                                (write_fd, cfg, resume, is_mariadb, max(1, batch_rows), file_base, images))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the child holds the write end now: EOF here when it exits
        self._conn = Connection(read_fd, writable=False)
        self._tables: dict[tuple[str, str, str], TableDef] = {}
        # (wake): a pipe of this process's own, waited on beside the child's
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        log.debug("binlog reader process %d started", self._process.pid)

    @property
    def pid(self) -> int:
        return self._process.pid

    def wake(self) -> None:
        """Have the iteration yield :data:`WAKE` soon, even while the binlog is quiet (a
        snapshot chunk's read is done: callable from any thread)."""
        fd = self._wake_w
        if fd >= 0:
            with contextlib.suppress(BlockingIOError):  # full: a wake is pending anyway
                os.write(fd, b"w")

    def __iter__(self) -> Iterator[Item | Wake]:
        while True:
            if self._conn not in wait([self._conn, self._wake_r]):
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
                yield WAKE
                continue
            try:
                data = self._conn.recv_bytes()
            except EOFError:
                try:
                    code = self._process.wait(5)
                except subprocess.TimeoutExpired:
                    code = None
                raise ConnectionError(f"the binlog reader process exited unexpectedly (exit code {code})") from None
            kind, payload = pickle.loads(data)
            if kind == "end":
                return
            if kind == "error":
                raise payload
            seen: dict[int, TableDef] = {}
            for item in payload:
                if type(item) is RowChanges:
                    item.table_def = self._table(item.table_def, seen)
                yield item

    def _table(self, table: TableDef, seen: dict[int, TableDef]) -> TableDef:
        """One object per table version across batches (each batch brings its own copy)."""
        same = seen.get(id(table))
        if same is None:
            key = (table.db, table.name, table.fingerprint())
            same = seen[id(table)] = self._tables.setdefault(key, table)
        return same

    def close(self) -> None:
        """End the child (it holds nothing worth a graceful stop) and wait for it."""
        self._conn.close()
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class _ParentGone(CDCError):
    """The pipe to the parent is broken: it closed it or died."""


class _Batcher:
    """The child's side of the pipe: items, batched."""

    def __init__(self, conn, batch_rows: int) -> None:
        self.conn = conn
        self.batch_rows = batch_rows
        self.items: list[Item] = []
        self.rows = self.bytes = 0
        self.sent = time.monotonic()

    def add(self, item: Item) -> None:
        self.items.append(item)
        if type(item) is RowChanges:
            self.rows += len(item.rows) - item.first
            self.bytes += item.size
            if self.rows >= self.batch_rows or self.bytes >= BATCH_BYTES:
                self.flush()
        elif type(item) is Idle:
            self._send_items()  # the stream paused: nothing to wait for
        elif time.monotonic() - self.sent >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Send the pending items; a transaction end now waits up to FLUSH_S for more."""
        self._send_items()
        self.sent = time.monotonic()

    def _send_items(self) -> None:
        if self.items:
            self._send(("items", self.items))
            self.items, self.rows, self.bytes = [], 0, 0

    def end(self) -> None:
        self._send(("end", None))

    def error(self, exc: BaseException) -> None:
        """Send ``exc`` (after the items before it): raised again in the parent."""
        self._send(child_process.pickled_error(exc, "binlog reader"))

    def _send(self, message) -> None:
        data = message if isinstance(message, bytes) else pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        try:
            self.conn.send_bytes(data)
        except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
            raise _ParentGone() from exc


def _child_main() -> None:
    """The child process: read the binlog, send its items to the parent (arguments on stdin)."""
    fd, cfg, resume, is_mariadb, batch_rows, file_base, images = child_process.child_args()
    tune_gc(READER_GC_THRESHOLDS, freeze=True)
    conn = Connection(fd, readable=False)
    batcher = _Batcher(conn, batch_rows)
    reader = None
    try:
        reader = open_reader(cfg, resume, is_mariadb=is_mariadb, wants=CaptureFilter(cfg).wants,
                             heartbeat_s=QUIET_S, file_base=file_base, images=images)
        for item in reader:
            batcher.add(item)
        batcher.flush()
        batcher.end()
    except _ParentGone:
        pass  # nobody left to read: just exit
    except BaseException as exc:  # noqa: BLE001 - every error goes to the parent
        with contextlib.suppress(_ParentGone):
            batcher.flush()
            batcher.error(exc)
    finally:
        if reader is not None:
            reader.close()
        conn.close()
