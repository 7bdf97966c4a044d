"""Blocking snapshots: Debezium's ``execute-snapshot`` with ``"type": "blocking"``.

The stream pauses at a transaction boundary (the *pause point*, stored as the producer's
position while the snapshot runs); each listed table is read whole in one consistent-snapshot
transaction that holds every transaction before that point (:func:`start_consistent_snapshot`,
as read-only chunks are read); its rows are written as Debezium writes a blocking snapshot's
(op ``r``, ``source.snapshot`` ``first`` / ``first_in_data_collection`` / ``true`` /
``last_in_data_collection`` / ``last``, Debezium's ``SnapshotRecord``), then the stream goes on
from the pause point: every change up to it lies before the rows in Kafka, every change after
it after them, nothing is skipped or written twice.

The rows are read in key order, ``snapshot.chunk_size`` at a time inside that transaction (the
table's key, or the signal's ``surrogate-key``); a table without either is read as Debezium
reads it, one full SELECT (read unbuffered, ``snapshot.chunk_size`` rows held at a time), its
records keyed as its streamed changes are (no key).  They are written as windows placed at the pause
point (:class:`~producer.snapshot.gtid_windows.MarkerSlots`: OPEN and CLOSE markers, then the
rows, at positions between the events before the point and those after it), so the merge job
and every consumer read them as any snapshot chunk: an empty window, every row kept.  A
transaction committed right after the pause point may show in the read as well; its change
events come after the rows and carry the same or a newer row, so the sinks end the same.

Debezium's ``additional-conditions`` of a blocking snapshot are whole statements (``SELECT *
FROM db.t WHERE ...``, as ``snapshot.select.statement.overrides``); their condition is checked
and applied as an incremental snapshot's filter is (:mod:`producer.snapshot.select_overrides`,
:mod:`producer.snapshot.filter`).  A producer killed or disconnected mid-snapshot keeps the
request in its stored state and takes the snapshot again, from its first table, at the first
boundary after the restart (the rows already written stay: they are a correct older copy; a
keyless table's rows, which no key replaces, are then in the topic twice: at least once, as
Debezium delivers).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from common.config import SourceConfig
from common.errors import SourceUnavailable
from common.sql.sessions import READ_TIMEOUT_S, read_session, row_session
from contract.errors import BadSignal
from contract.gtid import GtidSet
from contract.position import BinlogPosition
from contract.signals import Signal
from producer.binlog.server import executed_gtids
from producer.snapshot.actions import resolve_tables, table_jobs
from producer.snapshot.chunk_reader import SNAPSHOT_TRIES, mariadb_snapshot_point, start_consistent_snapshot
from producer.snapshot.gtid_windows import Boundary
from producer.snapshot.select_overrides import OverrideError, override_condition
from producer.snapshot.state import TableJob
from producer.snapshot.table_reader import read_chunk, read_whole
from producer.table_schema import TableDef

log = logging.getLogger(__name__)

#: Debezium's notifications of a blocking snapshot are its initial snapshot's.
AGGREGATE_TYPE = "Initial Snapshot"


@dataclass
class BlockingRequest:
    """A blocking snapshot asked for and not done yet: its id and table jobs (filters checked)."""

    snapshot_id: str
    jobs: list[TableJob] = field(default_factory=list)
    #: Debezium's initial snapshot of a first start (its rows' source.server_id is 0, as Debezium's)
    first_start: bool = False
    #: reads the server refused so far (a query error, not a lost connection): aborted at MAX_READ_FAILURES
    failures: int = 0

    @property
    def tables(self) -> list[str]:
        return [j.table for j in self.jobs]

    @property
    def exact(self) -> bool:
        """Whether its read must hold exactly the transactions up to the pause point, no later
        one: a keyless table's rows, which no key makes idempotent (:meth:`BlockingRead.where`)."""
        return any(j.keyless for j in self.jobs)

    def to_state(self) -> dict:
        return {"snapshot_id": self.snapshot_id, "jobs": [j.to_state() for j in self.jobs],
                "first_start": self.first_start, "failures": self.failures}

    @classmethod
    def from_state(cls, st: dict) -> "BlockingRequest":
        return cls(str(st["snapshot_id"]), [TableJob.from_state(j) for j in st.get("jobs") or []],
                   bool(st.get("first_start")), int(st.get("failures", 0)))


def blocking_request(conn, captures: Callable[[str, str], bool], sig: Signal, *,
                     resolve: Callable[[TableDef], TableDef] | None, overrides: dict | None,
                     include_tables: list[str], skipped: Callable[[str, str], None]) -> BlockingRequest:
    """The request of a blocking ``execute-snapshot`` signal, its tables in Debezium's order
    (:func:`debezium_order`); :class:`BadSignal` when a table is unknown or cannot be read in key
    order, or a filter is refused."""
    tables, matched = resolve_tables(conn, captures, sig)
    conditions = {}
    for table, text in sig.conditions.items():
        try:
            conditions[table] = override_condition(table, text)
        except OverrideError as exc:
            raise BadSignal(sig.id, "additional-conditions of a blocking snapshot: " +
                            str(exc).split(": ", 1)[1].replace("snapshots read the table in key-range chunks, so ",
                                                               "")) from None
    jobs, left_out = table_jobs(conn, tables, sig.id, resolve=resolve, surrogate_key=sig.surrogate_key,
                                conditions={t: c for t, c in conditions.items() if c is not None},
                                skippable=matched, overrides=overrides, keyless=True)
    for name, reason in left_out:
        log.warning("blocking snapshot %r: %s; the table is skipped", sig.id, reason)
        skipped(name, reason)
    order = debezium_order([j.table for j in jobs], include_tables)
    return BlockingRequest(sig.id, sorted(jobs, key=lambda j: order.index(j.table)))


def debezium_order(tables: list[str], include_tables: list[str]) -> list[str]:
    """``tables`` in the order Debezium's snapshot reads them (whatever the signal's order): by
    the table include list's patterns in turn (``source.include_tables``, its
    ``table.include.list``), each pattern's tables by name; by name without a list."""
    out: list[str] = []
    for pattern in include_tables:
        rx = re.compile(pattern, re.IGNORECASE)
        out += [t for t in sorted(tables) if rx.fullmatch(t) and t not in out]
    return out + [t for t in sorted(tables) if t not in out]


def snapshot_record(first: bool, last: bool, first_in_table: bool, last_in_table: bool) -> str:
    """``source.snapshot`` of a blocking snapshot's row, as Debezium's snapshot marks it: the
    first and last rows of the whole snapshot, of each table, and ``true`` between."""
    if last:
        return "last"
    if first:
        return "first"
    if last_in_table:
        return "last_in_data_collection"
    if first_in_table:
        return "first_in_data_collection"
    return "true"


class BlockingRead:
    """The consistent-snapshot transaction of one blocking snapshot, and its tables read in it."""

    def __init__(self, source: SourceConfig, chunk_size: int, is_mariadb: bool) -> None:
        self.source, self.chunk_size, self.is_mariadb = source, chunk_size, is_mariadb
        self._rows: Any = None
        #: the snapshot's own point, where known: MariaDB its binlog coordinates, MySQL its GTID set
        #: (the executed set alike before and after the transaction began)
        self.point: BinlogPosition | GtidSet | None = None

    def open(self, at: Boundary) -> None:
        """Begin the transaction, once the server's snapshot holds every transaction before ``at``."""
        conn = read_session(self.source)
        try:
            self._rows = row_session(self.source)
            for _ in range(SNAPSHOT_TRIES):
                before = executed_gtids(conn, self.is_mariadb)
                if start_consistent_snapshot(self._rows, self.is_mariadb, at.point, at.gtids, before):
                    self.point = self._snapshot_point(conn, before)
                    return
                self._rows.execute("COMMIT")
                time.sleep(0.005)
        finally:
            conn.close()
        raise SourceUnavailable(f"the server's snapshot did not reach the pause point {at.point} of the blocking "
                                f"snapshot in {SNAPSHOT_TRIES} tries")

    def _snapshot_point(self, conn, before: GtidSet) -> BinlogPosition | GtidSet | None:
        if self.is_mariadb:  # (the server tells it)
            return mariadb_snapshot_point(self._rows)
        after = executed_gtids(conn, False)
        return before if after.covers(before) and before.covers(after) else None

    def where(self, at: Boundary) -> int | None:
        """Where the snapshot lies from the stream's boundary ``at``: 0 there exactly (it holds
        every transaction up to ``at`` and no other), 1 further on (the stream has to reach it),
        -1 behind (the stream passed it without a boundary there), None not known (MySQL: a
        transaction committed while it began)."""
        p = self.point
        if isinstance(p, BinlogPosition):
            here, there = (at.point.file_index, at.point.pos), (p.file_index, p.pos)
            return 0 if here == there else 1 if there > here else -1
        if p is None:
            return None
        if p.covers(at.gtids):
            return 0 if at.gtids.covers(p) else 1
        return -1

    def batches(self, tdef: TableDef, keys: list[str], condition: str | None) -> Iterator[tuple[list[dict], bool]]:
        """The table's rows, ``chunk_size`` at a time, each batch with whether it is the table's
        last (read one batch ahead): in key order, a keyset chunk a batch; without ``keys`` (a
        table without a key, Debezium's full SELECT of it) in the server's order, one SELECT read
        unbuffered (:func:`read_whole`: two batches held at most, whatever the table's size)."""
        if keys:
            return _with_last(self._keyset(tdef, keys, condition))
        # (the server waits on the socket while a batch is written to Kafka: give it the reads' patience)
        self._rows.execute(f"SET SESSION net_write_timeout = {READ_TIMEOUT_S}")
        return _with_last(read_whole(self._rows, tdef, condition=condition, batch=self.chunk_size))

    def _keyset(self, tdef: TableDef, keys: list[str], condition: str | None) -> Iterator[list[dict]]:
        after = None
        while True:
            batch = read_chunk(self._rows, tdef, keys, after=after, upto=None, condition=condition,
                               limit=self.chunk_size)
            if batch:
                yield batch
            if len(batch) < self.chunk_size:
                return
            after = [batch[-1][k] for k in keys]

    def close(self) -> None:
        if self._rows is None:
            return
        try:
            if not self._rows.closed and not self._rows.streaming:  # (mid-result: dropped, which ends it too)
                self._rows.execute("COMMIT")
            self._rows.close()
        except Exception:  # noqa: BLE001 - the server went away: nothing to end
            pass
        self._rows = None


def _with_last(batches: Iterator[list[dict]]) -> Iterator[tuple[list[dict], bool]]:
    """Each batch with whether it is the last (the next one read before it is handed over)."""
    batch = next(batches, None)
    while batch is not None:
        following = next(batches, None)
        yield batch, following is None
        batch = following


class ReadSpans:
    """The binlog span of each table a blocking snapshot read, until the stream passes it.

    A blocking read sees its tables as of the pause point, but finds them by name at the time
    of the read: a table renamed into place meanwhile (gh-ost's or pt-osc's cut-over, ``RENAME
    TABLE t TO _t_del, _t_gho TO t``) is read as *that* table was at the pause point, a copy
    still being filled.  So each table's span runs from the pause point to the binlog's end
    read after its rows (binlog coordinates, ``(file index, pos)``); DDL of the table the
    stream then reads inside the span means the read may not be the table's, and the producer
    snapshots the table again (:meth:`crossed`).  Pure."""

    def __init__(self, state: dict | None = None) -> None:
        self._spans: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
            str(t): ((int(p[0][0]), int(p[0][1])), (int(p[1][0]), int(p[1][1]))) for t, p in (state or {}).items()}

    def __len__(self) -> int:
        return len(self._spans)

    def state(self) -> dict | None:
        """What the offset record keeps (a restart before the stream passed a span keeps it)."""
        return {t: [list(p), list(e)] for t, (p, e) in self._spans.items()} or None

    def read(self, table: str, point: tuple[int, int], end: tuple[int, int]) -> None:
        """``table`` read at the pause point ``point``, the binlog's end ``end`` after it."""
        self._spans[table] = (point, end)

    def passed(self, at: tuple[int, int]) -> None:
        """The stream stands at ``at``: the spans ending before it are forgotten."""
        if self._spans:
            self._spans = {t: s for t, s in self._spans.items() if s[1] > at}

    def crossed(self, table: str, at: tuple[int, int]) -> bool:
        """Whether DDL of ``table`` whose first event starts at ``at`` lies in the span of its
        last blocking read, from the pause point to before the end (then the span is forgotten:
        the table is snapshotted again once)."""
        span = self._spans.get(table)
        if span is None:
            return False
        if at >= span[1]:  # (written after the read: the stream passed the span)
            del self._spans[table]
            return False
        if at < span[0]:
            return False
        del self._spans[table]
        return True


class BlockingQueue:
    """The blocking snapshots asked for and not done yet, in order (stored with the position),
    and the spans of the tables they read (:class:`ReadSpans`)."""

    def __init__(self, state: list | None = None, include_tables: list[str] | None = None,
                 spans: dict | None = None) -> None:
        self.requests = [BlockingRequest.from_state(r) for r in state or []]
        self.include_tables = list(include_tables or [])  # (source.include_tables: Debezium's table order)
        self.spans = ReadSpans(spans)

    def request(self, conn, captures: Callable[[str, str], bool], sig: Signal, *,
                resolve: Callable[[TableDef], TableDef] | None, overrides: dict | None,
                skipped: Callable[[str, str], None]) -> None:
        """Queue the blocking snapshot ``sig`` asks for (``skipped``: told each table left out)."""
        req = blocking_request(conn, captures, sig, resolve=resolve, overrides=overrides,
                               include_tables=self.include_tables, skipped=skipped)
        self.requests.append(req)
        log.info("blocking snapshot %s of %s: the stream pauses at the next transaction boundary", req.snapshot_id,
                 ", ".join(req.tables))

    def startup(self, conn, tables: list[str], snapshot_id: str, *, resolve: Callable[[TableDef], TableDef] | None,
                overrides: dict | None, skipped: Callable[[str, str], None], first_start: bool) -> None:
        """The blocking snapshot of a start's captured ``tables`` (``snapshot.mode``: Debezium's
        initial snapshot); a table that cannot be read in key order is left out (``skipped``)."""
        try:
            jobs, left_out = table_jobs(conn, tables, snapshot_id, resolve=resolve, skippable=set(tables),
                                        overrides=overrides, keyless=True)
        except BadSignal as exc:  # (no table can be read in key order)
            jobs, left_out = [], [("", exc.reason)]
        for name, reason in left_out:
            log.warning("snapshot %s: %s; the table is skipped", snapshot_id, reason)
            skipped(name, reason)
        order = debezium_order([j.table for j in jobs], self.include_tables)
        if jobs:
            self.requests.append(BlockingRequest(snapshot_id, sorted(jobs, key=lambda j: order.index(j.table)),
                                                 first_start))

    def state(self) -> list | None:
        return [r.to_state() for r in self.requests] or None
