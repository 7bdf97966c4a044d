"""The write path of a table's rows: how a rows event's rows become records in Kafka.

One interface, :class:`WritePath` (``write(item, start, stop, skip_up_to) -> (records, change
events)``), three ways through it:

* :class:`OutboxPath`: rows of the outbox table, routed by :mod:`producer.events.outbox`;
* :class:`EmitterPath`: rows encoded in the binlog reader process, joined and produced by the
  native row emitter (:meth:`producer.events.builder.EventBuilder.emit_encoded`): no record is
  built in Python; rows it does not take (not encoded where read, a table version it does not
  emit) and rows whose keys a read-only chunk window must see go the records path;
* :class:`RecordsPath`: records built in Python (:meth:`EventBuilder.records`), their keys
  added to the read-only chunk windows of their table in flight, a transaction's BEGIN
  written before its first change event (``producer.transaction_metadata``).

:class:`WritePaths` chooses a table's path once, on its first rows event.  The choice depends
on the settings and the table's name only (the outbox table is named in the settings; the
native emitter and transaction metadata are the session's), never on a table version: a
schema change keeps it, and what a table version changes (whether its rows are encoded where
read, whether the emitter takes them) is decided per rows event on the emitter path, which
hands the rest to the records path.  What changes while the session runs (a read-only chunk
window of the table opening or closing) is looked at on every write, in the path that
depends on it.
"""

from __future__ import annotations

from typing import Any, Protocol

from producer.binlog.reader import RowChanges
from producer.events.builder import EventBuilder
from producer.events.outbox import OutboxRouter
from producer.kafka_writer import KafkaWriter
from producer.record_encoder import RecordEncoder
from producer.transaction_metadata import TransactionMetadata

#: Tables whose path is kept at most (then chosen again: a long run renames tables).
MAX_TABLES = 4096


class KeyWindows(Protocol):
    """What a path uses of the snapshot coordinator in read-only mode
    (:class:`producer.snapshot.coordinator.SnapshotCoordinator`): its chunks in flight."""

    inflight: dict[int, Any]

    def tracking(self, db: str, table: str) -> list[set]: ...


class WritePath(Protocol):
    def write(self, item: RowChanges, start: int, stop: int, skip_up_to: str | None) -> tuple[int, int]:
        """Write the records of rows ``start`` to ``stop - 1`` of ``item``, leaving out those at
        or before the encoded position ``skip_up_to`` (written before a restart):
        ``(records, change events)`` written (tombstones are records, not change events)."""
        ...


class RecordsPath:
    """Records built in Python and produced by the writer; in read-only mode (``windows``) their
    keys go into the changed-key sets of their table's chunks in flight (dropped from the
    chunks at the close: the DBLog rule, :mod:`producer.snapshot.gtid_windows`); with
    ``txn`` (transaction metadata) a BEGIN record opens each transaction."""

    def __init__(self, builder: EventBuilder, encoder: RecordEncoder, writer: KafkaWriter,
                 windows: KeyWindows | None, txn: TransactionMetadata | None) -> None:
        self.builder, self.encoder, self.writer, self.windows, self.txn = builder, encoder, writer, windows, txn

    def write(self, item: RowChanges, start: int, stop: int, skip_up_to: str | None) -> tuple[int, int]:
        records = self.builder.records(item, start, stop, self.encoder, skip_up_to=skip_up_to)
        if not records:
            return 0, 0
        if self.windows is not None and self.windows.inflight:
            for keys in self.windows.tracking(item.db, item.table):
                keys.update(r[1] for r in records)
        events = sum(1 for r in records if r[2] is not None)
        if self.txn is not None:
            self.txn.begin(item, events)
        self.writer.produce_all(records)
        return len(records), events


class EmitterPath:
    """Rows encoded in the binlog reader process, produced by the native row emitter; the rows
    it does not take go ``fallback`` (the records path), and so do, in read-only mode
    (``windows``), the rows of a table with a chunk window in flight (the records' keys are
    needed: the emitter builds none here)."""

    def __init__(self, builder: EventBuilder, encoder: RecordEncoder, writer: KafkaWriter,
                 windows: KeyWindows | None, fallback: RecordsPath) -> None:
        self.builder, self.encoder, self.writer, self.windows, self.fallback = \
            builder, encoder, writer, windows, fallback

    def write(self, item: RowChanges, start: int, stop: int, skip_up_to: str | None) -> tuple[int, int]:
        if self.windows is not None and self.windows.inflight and self.windows.tracking(item.db, item.table):
            return self.fallback.write(item, start, stop, skip_up_to)
        counts = self.builder.emit_encoded(item, start, stop, self.encoder, self.writer, skip_up_to=skip_up_to)
        return counts if counts is not None else self.fallback.write(item, start, stop, skip_up_to)


class OutboxPath:
    """Rows of the outbox table, routed (:meth:`producer.events.outbox.OutboxRouter.write_rows`:
    each routed record is a change event)."""

    def __init__(self, outbox: OutboxRouter, builder: EventBuilder, encoder: RecordEncoder,
                 writer: KafkaWriter) -> None:
        self.outbox, self.builder, self.encoder, self.writer = outbox, builder, encoder, writer  # (RoutingParts)

    def write(self, item: RowChanges, start: int, stop: int, skip_up_to: str | None) -> tuple[int, int]:
        n = self.outbox.write_rows(self, item, start, stop, skip_up_to)
        return n, n


class WritePaths(dict):
    """Each table's :class:`WritePath` by ``(db, table)``, chosen by :meth:`choose` on the
    table's first rows event (``paths.get(key) or paths.choose(key)``)."""

    def __init__(self, builder: EventBuilder, encoder: RecordEncoder, writer: KafkaWriter, *,
                 outbox: OutboxRouter | None, windows: KeyWindows | None, txn: TransactionMetadata | None) -> None:
        super().__init__()
        self.records = RecordsPath(builder, encoder, writer, windows, txn)
        # (transaction metadata: records built here, the BEGIN goes before the first change event)
        self.default: WritePath = self.records if writer.emitter is None or txn is not None else \
            EmitterPath(builder, encoder, writer, windows, self.records)
        self.outbox = None if outbox is None else OutboxPath(outbox, builder, encoder, writer)
        self.routes = outbox.routes if outbox is not None else None

    def choose(self, key: tuple[str, str]) -> WritePath:
        """The path of the rows of table ``key`` (``(db, table)``), kept."""
        path = self.outbox if self.routes is not None and self.routes(*key) else self.default
        if len(self) >= MAX_TABLES:
            self.clear()
        self[key] = path
        return path
