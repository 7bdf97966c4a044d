"""Debezium-shaped change events from binlog row changes, as records ready to write.

One :class:`TableEvents` per table *version* (per table definition fingerprint) holds the
converters, the key/value Avro schemas and the envelope's :class:`RecordTemplate`, built
once.  A row change becomes one event, or two for an UPDATE that changes the primary key:
a delete of the old key (position ``2*row``) and a create of the new one (position
``2*row + 1``), as Debezium does.

The envelope fields shared by every row of a binlog event (``source`` but its ``row``,
``ts_ms``, ...) are built once per event; in Avro they are encoded once per event too, and
each row only adds its own fields (``ENVELOPE_VARIABLE``).

With ``tombstones`` (Debezium's ``tombstones.on.delete``) every delete, the delete half of a
key-changing update included, is followed by a tombstone: the same key, no value, the
delete's position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from contract.avro_template import RecordTemplate
from contract.envelope import (
    INCREMENTAL_SNAPSHOT,
    OPS,
    SNAPSHOT_OP,
    TRUNCATE_OP,
    envelope_schema,
    record_names,
    source_block,
)
from contract.position import chunk_row_position
from contract.topics import table_topic
from producer.binlog.reader import RowChanges
from producer.events.avro_types import key_record_schema, row_record_schema
from producer.events.values import RowConverter
from producer.table_schema import TableDef

#: The envelope fields that differ between the rows of one binlog event, in schema order.
ENVELOPE_VARIABLE = ("before", "after", "source.row", "op", "position")

#: One record to write: topic, key, value (None: a tombstone), encoded position.
Record = tuple[str, "bytes | None", "bytes | None", str]


class ChunkOut(Protocol):
    """A released snapshot chunk (``producer.snapshot.coordinator.ReleasedChunk``)."""

    snapshot_id: str
    chunk_id: int
    table_def: TableDef
    rows: list[dict]
    open_position: Any
    close_position: Any


class RecordEncoding(Protocol):
    """What the builder needs from the writer: the record format (see ``KafkaWriter``)."""

    def encode(self, schema: dict | None, record: Any, topic: str, role: str) -> bytes | None: ...

    def header(self, schema: dict, topic: str, role: str) -> bytes | None: ...


@dataclass
class TableEvents:
    """Converters and schemas of one version of one table."""

    prefix: str
    table: TableDef
    key_columns: list[str]
    binlog: bool = True  # values as the binlog decoder gives them (False: as a SELECT gives them)
    topic: str = ""
    converter: RowConverter = field(init=False)
    value_schema: dict = field(init=False)
    key_schema: dict | None = field(init=False)
    template: RecordTemplate = field(init=False)

    def __post_init__(self) -> None:
        self.topic = table_topic(self.prefix, self.table.db, self.table.name)
        self.converter = RowConverter(self.table, binlog=self.binlog, key_columns=self.key_columns)
        key_name, row_name, envelope_name = record_names(self.prefix, self.table.db, self.table.name)
        self.key_schema = key_record_schema(self.table, self.key_columns, name=key_name) if self.key_columns else None
        self.value_schema = envelope_schema(row_record_schema(self.table, row_name), envelope_name)
        self.template = RecordTemplate(self.value_schema, ENVELOPE_VARIABLE)


class EventBuilder:
    def __init__(self, prefix: str, name: str, server_id: int, key_columns: dict[str, list[str]] | None = None,
                 excluded_columns: dict[str, list[str]] | None = None, tombstones: bool = False) -> None:
        self.prefix = prefix
        self.tombstones = tombstones
        self.name = name
        self.server_id = server_id
        self.key_columns = key_columns or {}
        self.excluded = {k: set(v) for k, v in (excluded_columns or {}).items()}
        # By id() of the reader's TableDef, which is kept here so the id stays its own.
        self._tables: dict[int, tuple[TableDef, TableEvents]] = {}
        # Snapshot reads: by table definition fingerprint (each chunk reads the definition).
        self._read_tables: dict[str, TableEvents] = {}

    def table_events(self, table: TableDef) -> TableEvents:
        cached = self._tables.get(id(table))
        if cached is None or cached[0] is not table:
            # (TableEvents.table is not the reader's TableDef when columns are excluded.)
            cached = self._tables[id(table)] = (table, self._make(table))
        return cached[1]

    def read_table_events(self, table: TableDef) -> TableEvents:
        """The events of rows read by a SELECT (snapshot chunks) of this table version."""
        fp = f"{table.qualified_name}/{table.fingerprint()}"
        te = self._read_tables.get(fp)
        if te is None:
            te = self._read_tables[fp] = self._make(table, binlog=False)
        return te

    def _make(self, table: TableDef, *, binlog: bool = True) -> TableEvents:
        qualified = table.qualified_name
        drop = self.excluded.get(qualified, set())
        if drop:
            table = TableDef(table.db, table.name, [c for c in table.columns if c.name not in drop],
                             [k for k in table.primary_key if k not in drop])
        keys = list(table.primary_key) or list(self.key_columns.get(qualified, []))
        return TableEvents(self.prefix, table, keys, binlog)

    def _source(self, ch: RowChanges) -> dict:
        return source_block(self.name, self.server_id, db=ch.db, table=ch.table, ts_ms=ch.ts_ms, file=ch.file,
                            pos=ch.pos, gtid=ch.gtid, thread=ch.thread)

    def records(self, ch: RowChanges, start: int, stop: int, writer: RecordEncoding,
                skip_up_to: str | None = None) -> list[Record]:
        """The records of rows ``start`` to ``stop - 1`` of ``ch``, in order, leaving out
        those at or before the encoded position ``skip_up_to`` (written before a restart)."""
        te = self.table_events(ch.table_def)
        topic, template = te.topic, te.template
        shared = self._value(None, None, self._source(ch), "", int(time.time() * 1000), "")
        header = writer.header(te.value_schema, topic, "value")
        bound = template.bind(shared, header) if header is not None else None
        out: list[Record] = []
        for i in range(start, stop):
            for key, before, after, op, seq in self._changes(te, ch, i):
                position = ch.position(seq)
                if skip_up_to is not None and position <= skip_up_to:
                    continue
                values = (before, after, i, op, position)
                value = (template.encode(bound, values) if bound is not None else
                         writer.encode(te.value_schema, template.record(shared, values), topic, "value"))
                key_bytes = writer.encode(te.key_schema, key, topic, "key")
                out.append((topic, key_bytes, value, position))
                if op == "d" and self.tombstones:
                    out.append((topic, key_bytes, None, position))
        return out

    def chunk_records(self, chunk: ChunkOut, writer: RecordEncoding) -> list[Record]:
        """The records of a released snapshot chunk: op ``r``, ``source.snapshot``
        "incremental", the window in ``snapshot_window``, row ``i`` at position
        ``close.row + 1 + i`` (after the CLOSE marker, before the next binlog event)."""
        te = self.read_table_events(chunk.table_def)
        topic, template, conv = te.topic, te.template, te.converter
        close = chunk.close_position
        source = source_block(self.name, self.server_id, db=te.table.db, table=te.table.name,
                              ts_ms=int(time.time() * 1000), file=close.file_name, pos=close.pos,
                              snapshot=INCREMENTAL_SNAPSHOT)
        shared = self._value(None, None, source, SNAPSHOT_OP, int(time.time() * 1000), "")
        shared["snapshot_window"] = {"snapshot_id": chunk.snapshot_id, "chunk_id": chunk.chunk_id,
                                     "open_position": chunk.open_position.encode(), "close_position": close.encode()}
        header = writer.header(te.value_schema, topic, "value")
        bound = template.bind(shared, header) if header is not None else None
        out: list[Record] = []
        close_pos = close.encode()
        for i, values in enumerate(chunk.rows):
            position = chunk_row_position(close_pos, i)
            after = self._row(te, values, None)
            key = conv.convert_key(values) if te.key_columns else None
            fields = (None, after, 0, "r", position)
            value = (template.encode(bound, fields) if bound is not None else
                     writer.encode(te.value_schema, template.record(shared, fields), topic, "value"))
            out.append((topic, writer.encode(te.key_schema, key, topic, "key"), value, position))
        return out

    def truncate_record(self, table: TableDef, source: dict, position: str, writer: RecordEncoding) -> Record:
        """Debezium's truncate event of ``table``: op ``t``, no key, ``before`` and ``after``
        null, with the table's value schema."""
        te = self.read_table_events(table)
        value = self._value(None, None, source, TRUNCATE_OP, int(time.time() * 1000), position)
        return te.topic, None, writer.encode(te.value_schema, value, te.topic, "value"), position

    def _changes(self, te: TableEvents, ch: RowChanges, i: int) -> list[tuple[dict | None, Any, Any, str, int]]:
        """``(key, before, after, op, sequence)`` of each event of row ``i``."""
        before_values, after_values, before_none, after_none = ch.images(i)
        conv = te.converter
        before = self._row(te, before_values, before_none)
        after = self._row(te, after_values, after_none)
        if te.key_columns:
            key_b = conv.convert_key(before_values, before_none) if before_values is not None else None
            key_a = conv.convert_key(after_values, after_none) if after_values is not None else None
        else:
            key_b = key_a = None
        if ch.kind == "update" and te.key_columns and key_b != key_a:
            return [(key_b, before, None, "d", 2 * i), (key_a, None, after, "c", 2 * i + 1)]
        return [(key_a if key_a is not None else key_b, before, after, OPS[ch.kind], 2 * i)]

    def _row(self, te: TableEvents, values: dict | None, none_sources: dict | None) -> dict | None:
        if values is None:
            return None
        drop = self.excluded.get(te.table.qualified_name)
        if drop:
            values = {k: v for k, v in values.items() if k not in drop}
        return te.converter.convert(values, none_sources)

    @staticmethod
    def _value(before: Any, after: Any, source: dict, op: str, now: int, position: str) -> dict:
        return {"before": before, "after": after, "source": source, "op": op, "ts_ms": now, "transaction": None,
                "position": position, "snapshot_window": None}
