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
from itertools import repeat
from typing import Any, Iterator, Protocol

from common.errors import CDCError
from contract.codecs.connect_json import ConnectJsonWriter
from contract.errors import SerdeError
from contract.envelope import (
    INCREMENTAL_SNAPSHOT,
    OPS,
    SNAPSHOT_OP,
    TRUNCATE_OP,
    envelope_schema,
    record_names,
    source_block,
)
from contract.position import ENCODED_WIDTH, EVENT_WIDTH, chunk_row_position, chunk_row_positions
from contract.topics import table_topic
from contract.type_table import DEFAULT_MODES, TypeModes
from producer.binlog.reader import RowChanges
from producer.binlog.row_decoder import EncodedImages, PackedRows
from producer.column_controls import NO_CONTROLS, ColumnControls
from producer.column_mappers import mapped_columns
from producer.events.avro_template import SMALL_VARINT_LIMIT, SMALL_VARINTS, RecordTemplate
from producer.events.avro_types import key_record_schema, row_record_schema
from producer.events.image_encoder import BinlogImageEncoder
from producer.events.row_encoder import EncodedRows, NotFast, RowEncoder
from producer.events.values import RowConverter
from producer.table_schema import TableDef

#: The envelope fields that differ between the rows of one binlog event, in schema order.
ENVELOPE_VARIABLE = ("before", "after", "source.row", "op", "position")

#: The envelope fields that differ between binlog events of one table (and ENVELOPE_VARIABLE's
#: between their rows), in schema order: :class:`EnvelopeBinder` encodes only these per event.
EVENT_VARIABLE = ("before", "after", "source.ts_ms", "source.gtid", "source.file", "source.pos", "source.row",
                  "source.thread", "op", "ts_ms", "position")

#: The row digits of a position (its last 10) of the sequences below this, looked up: formatting
#: them cost more than the rest of a record's envelope.
_SEQUENCES = 1 << 14
_SEQUENCE_TEXT = tuple(f"{seq:010d}" for seq in range(_SEQUENCES))
_SEQUENCE_BYTES = tuple(t.encode() for t in _SEQUENCE_TEXT)

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
    snapshot_record: str | None  # source.snapshot of its rows (None: "incremental")
    server_id: int | None  # source.server_id of its rows (None: the server's)


class RecordEncoding(Protocol):
    """What the builder needs from the writer: the record format (see ``KafkaWriter``)."""

    def encode(self, schema: dict | None, record: Any, topic: str, role: str) -> bytes | None: ...

    def header(self, schema: dict, topic: str, role: str) -> bytes | None:
        """The framing before a record's Avro body; None: records are not made from Avro bodies."""

    def json_writer(self, schema: dict, topic: str) -> ConnectJsonWriter | None:
        """debezium-json made from Avro bodies: the writer that transcodes them (``header`` is
        empty); None: records are the Avro bodies, framed."""


def type_modes(producer: Any) -> TypeModes:
    """The handling modes of a ``producer`` configuration section (``common.config.ProducerConfig``)."""
    return TypeModes(producer.decimal_handling_mode, producer.time_precision_mode,
                     producer.bigint_unsigned_handling_mode, producer.binary_handling_mode)


@dataclass
class TableEvents:
    """Converters and schemas of one version of one table."""

    prefix: str
    table: TableDef
    key_columns: list[str]
    binlog: bool = True  # values as the binlog decoder gives them (False: as a SELECT gives them)
    modes: TypeModes = DEFAULT_MODES  # the handling modes (producer.*_handling_mode)
    topic: str = ""
    # Columns of the table read (a binlog table map, a SELECT of the whole table) that ``table``
    # leaves out (the column controls): rows carrying them take the values' way, filtered.
    dropped: frozenset[str] = frozenset()
    converter: RowConverter = field(init=False)
    row_schema: dict = field(init=False)
    value_schema: dict = field(init=False)
    key_schema: dict | None = field(init=False)
    template: RecordTemplate = field(init=False)
    binder: EnvelopeBinder | None = field(init=False, default=None)  # (built on first use)
    encoder: RowEncoder | None = field(init=False)  # row images straight to Avro (the Avro format's fast path)
    # (qualified name, definition fingerprint, key columns): what rows encoded elsewhere were encoded for
    ident: tuple[str, str, tuple[str, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self.ident = (self.table.qualified_name, self.table.fingerprint(), tuple(self.key_columns))
        self.topic = table_topic(self.prefix, self.table.db, self.table.name)
        self.converter = RowConverter(self.table, binlog=self.binlog, key_columns=self.key_columns, modes=self.modes)
        key_name, row_name, envelope_name = record_names(self.prefix, self.table.db, self.table.name)
        self.key_schema = key_record_schema(self.table, self.key_columns, name=key_name, modes=self.modes) \
            if self.key_columns else None
        self.row_schema = row_record_schema(self.table, row_name, self.modes)
        self.value_schema = envelope_schema(self.row_schema, envelope_name)
        self.template = RecordTemplate(self.value_schema, ENVELOPE_VARIABLE)
        if mapped_columns(self.table.columns):
            # A masked, hashed or truncated column (producer/column_mappers.py): the fast encoders
            # (row_encoder, image_encoder, select_encoder and their C twins) encode a NULL as NULL
            # where a mask is not; the table's rows take the converters' way.
            self.encoder = None
            return
        try:
            self.encoder = RowEncoder(self.converter, self.row_schema, self.key_schema)
        except NotFast:  # (not expected: the schemas are the converter's) every row the general way
            self.encoder = None


@dataclass(frozen=True)
class ReadEncoding:
    """What encodes the rows of a table version's snapshot chunks where they are read (a
    chunk read process builds the same :class:`TableEvents` from it): plain data."""

    prefix: str
    table: TableDef
    key_columns: tuple[str, ...]
    modes: TypeModes = DEFAULT_MODES

    @property
    def ident(self) -> tuple[str, str, tuple[str, ...]]:
        return self.table.qualified_name, self.table.fingerprint(), self.key_columns

    def table_events(self) -> TableEvents:
        return TableEvents(self.prefix, self.table, list(self.key_columns), binlog=False, modes=self.modes)


def table_events(prefix: str, table: TableDef, controls: ColumnControls = NO_CONTROLS, *,
                 binlog: bool = True, modes: TypeModes = DEFAULT_MODES) -> TableEvents:
    """The :class:`TableEvents` of a table version as ``controls`` resolve it: the columns they
    leave out absent (from the events and their schemas), keyed by the key they give it (the
    primary key, ``message_key_columns``, or ``key_columns`` for a table without one), its
    values as the handling ``modes`` make them."""
    resolved = controls.resolve(table)
    dropped = frozenset(table.column_names) - frozenset(resolved.column_names) if resolved is not table else frozenset()
    return TableEvents(prefix, resolved, list(resolved.primary_key), binlog, modes, dropped=dropped)


@dataclass(frozen=True)
class StreamEncoding:
    """How the binlog reader process encodes the row images of captured tables for
    :meth:`EventBuilder.records` (records made from Avro bodies: Avro, and debezium-json where
    transcoded): plain data, sent to the process, which asks :meth:`image_encoder` for each
    table map."""

    prefix: str
    controls: ColumnControls
    keep_values: frozenset[str]  # qualified tables whose rows the producer reads (the signal table)
    modes: TypeModes = DEFAULT_MODES
    #: Records made by the Connect JSON transcoder (debezium-json): a table whose value schema it
    #: has no program for (an array: a VECTOR column) crosses as values, its records made from dicts.
    transcoded: bool = False

    def image_encoder(self, table: TableDef, columns: list) -> BinlogImageEncoder | None:
        """The image encoder of a table map's rows events (``columns``: the map's columns, from
        which ``table`` was read); None when they cross as values.  The column controls keep
        the fast path: a column left out (``source.column_*_list``) is read past, a masked,
        hashed or truncated one converted by its mapper, a key from ``message_key_columns`` picked
        from the row's encodings."""
        if table.qualified_name in self.keep_values:
            return None
        try:
            te = table_events(self.prefix, table, self.controls, modes=self.modes)
            if self.transcoded and ConnectJsonWriter(te.value_schema).program is None:
                return None
            return BinlogImageEncoder(columns, te)
        except Exception:  # noqa: BLE001 - NotFast, or a table the general path reports on
            return None


class RowsOut(Protocol):
    """Produces the records of encoded rows (:meth:`producer.kafka_writer.KafkaWriter.produce_rows`)."""

    def produce_rows(self, topic: str, key_header: bytes | None, parts: tuple[bytes, ...], bodies: list,
                     kind: str, keyed: bool, start: int, stop: int, skip_up_to: bytes | None,
                     tombstones: bool, first_sequence: int = 0,
                     json: tuple[bytes, bytes, bytes | None, bytes | None] | None = None) -> tuple[int, int]: ...


@dataclass(frozen=True)
class EnvelopeParts:
    """The constant bytes of the records of one binlog event around their variable fields
    (``ENVELOPE_VARIABLE``): a record's value is ``before`` (or ``before_absent``) + the before
    body + ``after`` (or ``after_absent``) + the after body + ``middle`` + source.row +
    ``ops[op]`` + the position's last 10 digits + ``end``; ``event``, the position's first 20
    digits (the event's; a row's position is this plus its sequence's 10)."""

    before_absent: bytes
    before: bytes  # (each with the union's branch)
    after_absent: bytes
    after: bytes
    middle: bytes
    ops: dict[str, bytes]  # the op's encoding, then the position's length and its first 20 digits
    end: bytes
    event: str

    def native(self, ops: tuple[str, str, str] = ("c", "u", "d")) -> tuple[bytes, ...]:
        """These parts as the native row emitter takes them (``producer/_native_producer.c``): the
        parts of ``ops`` in the places of its c, u and d."""
        return (self.before_absent, self.before, self.after_absent, self.after, self.middle,
                *(self.ops[op] for op in ops), self.end, self.event.encode())


def envelope_parts(template: RecordTemplate, bound: tuple[bytes, ...], event: str,
                   ops: tuple[str, ...] = ("c", "u", "d")) -> EnvelopeParts:
    """The :class:`EnvelopeParts` of the records of one binlog event (its position's first 20
    digits: ``event``) with ``ops``, from the template's ``bound`` parts."""
    null_tag, before_tag = template.union_tags("before")
    after_null, after_tag = template.union_tags("after")
    encode_op, encode_position = (template.field_encoder(p) for p in ENVELOPE_VARIABLE[3:])
    b0, b1, b2, b3, b4, b5 = bound  # the constant parts around the 5 variable fields
    position_head = encode_position(event + "0" * 10)[:-10]  # the 30 digits' length, then the first 20
    return EnvelopeParts(b0 + null_tag, b0 + before_tag, b1 + after_null, b1 + after_tag, b2,
                         {op: b"".join((b3, encode_op(op), b4, position_head)) for op in ops}, b5, event)


class EnvelopeBinder:
    """The envelope parts of a table version's binlog events (``EnvelopeParts.native()``), the
    envelope's fixed fields (the connector's name and version, the database and table, the
    server id, the nulls...) encoded once per value header: per event only ``source.ts_ms``,
    ``gtid``, ``file``, ``pos``, ``thread`` and the envelope's ``ts_ms`` are encoded
    (``EVENT_VARIABLE``; the file's name and the timestamps again only when they change).  The
    same bytes as ``envelope_parts(template, template.bind(example, header), event).native()``
    for an example with those values (property-tested); a transaction of one row pays this per
    row."""

    #: Headers and tables kept (cleared when full): a table version has one of each, unless its
    #: schema is registered again.
    SIZE = 16

    def __init__(self, template: RecordTemplate, value_schema: dict) -> None:
        self.fine = RecordTemplate(value_schema, EVENT_VARIABLE)
        self.fixed: dict[tuple, tuple[bytes, ...]] = {}
        null_tag, before_tag = template.union_tags("before")
        after_null, after_tag = template.union_tags("after")
        self._tags = (null_tag, before_tag, after_null, after_tag)
        self._op_bytes = tuple(template.field_encoder("op")(op) for op in ("c", "u", "d"))
        # (a position is 30 digits: its encoding is this prefix, then the digits)
        self._position_prefix = template.field_encoder("position")("0" * ENCODED_WIDTH)[:-ENCODED_WIDTH]
        self._file: object = None  # the last event's binlog file name, and its encoding
        self._file_bytes = b""
        self._ts: object = None  # its source.ts_ms and ts_ms, and theirs
        self._ts_bytes = b""
        self._now: object = None
        self._now_bytes = b""
        enc = dict(zip(EVENT_VARIABLE, self.fine._encoders, strict=True))
        self._encoders = tuple(enc[f] for f in ("source.ts_ms", "source.gtid", "source.file", "source.pos",
                                                "source.thread", "ts_ms"))

    def fix(self, key: tuple, example: dict, header: bytes) -> tuple[bytes, ...]:
        """The fixed parts of the events ``key`` stands for (whose envelopes are like ``example``,
        the variable fields aside), kept under ``key``."""
        if len(self.fixed) >= self.SIZE:
            self.fixed.clear()
        bound = self.fixed[key] = self.fine.bind(example, header)
        return bound

    def native(self, fixed: tuple[bytes, ...], ts_ms, gtid, file, pos, thread, now, event: str) -> tuple[bytes, ...]:
        """The event's parts as the native row emitter takes them (``EnvelopeParts.native()``),
        from :meth:`fix`'s ``fixed`` and its variable fields: no EnvelopeParts built per event."""
        c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11 = fixed
        e_ts, e_gtid, e_file, e_pos, e_thread, e_now = self._encoders
        null_tag, before_tag, after_null, after_tag = self._tags
        try:
            # (the last event's file name, binlog timestamp and time, encoded again only when they
            # change: the timestamp is in seconds, many events share a millisecond)
            if file != self._file:
                self._file, self._file_bytes = file, e_file(file)
            if ts_ms != self._ts:
                self._ts, self._ts_bytes = ts_ms, e_ts(ts_ms)
            if now != self._now:
                self._now, self._now_bytes = now, e_now(now)
            middle = b"".join((c2, self._ts_bytes, c3, e_gtid(gtid), c4, self._file_bytes, c5, e_pos(pos), c6))
            b3, b4 = c7 + e_thread(thread) + c8, c9 + self._now_bytes + c10
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise SerdeError(f"record does not fit schema {self.fine.name}: {exc}") from exc
        event_bytes = event.encode()
        tail = b4 + self._position_prefix + event_bytes
        c, u, d = self._op_bytes
        return (c0 + null_tag, c0 + before_tag, c1 + after_null, c1 + after_tag, middle, b3 + c + tail,
                b3 + u + tail, b3 + d + tail, c11, event_bytes)


def _check_encoded_for(te: TableEvents, ch: RowChanges) -> None:
    """Rows encoded in the binlog reader process are for ``te``'s table version and key, or refused."""
    if ch.rows.ident != te.ident:
        raise CDCError(f"rows of {te.table.qualified_name} were encoded for {ch.rows.ident}, not for this table "
                       "version")


def envelope_value(before: Any, after: Any, source: dict, op: str, now: int, position: str) -> dict:
    """A change event's envelope as a dict (the general path's record, and the fields every
    record of an event shares)."""
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": now, "transaction": None,
            "position": position, "snapshot_window": None}


class TableVersions:
    """The :class:`TableEvents` of each version of each table, as the column ``controls`` and
    handling ``modes`` make them: for the stream (by the reader's TableDef) and for snapshot
    reads (by the definition's fingerprint), and how the reader and chunk read processes
    encode rows where they are read."""

    def __init__(self, prefix: str, controls: ColumnControls, modes: TypeModes) -> None:
        self.prefix, self.controls, self.modes = prefix, controls, modes
        # By id() of the reader's TableDef, which is kept here so the id stays its own.
        self._tables: dict[int, tuple[TableDef, TableEvents]] = {}
        # Snapshot reads: by table definition fingerprint (each chunk reads the definition).
        self._read_tables: dict[str, TableEvents] = {}
        #: Records made by the Connect JSON transcoder (debezium-json): rows of a table it has no
        #: program for (a VECTOR's array) are encoded by no reader process (read_encoding, stream_encoding).
        self.transcoded = False

    def table_events(self, table: TableDef) -> TableEvents:
        cached = self._tables.get(id(table))
        if cached is None or cached[0] is not table:
            # (TableEvents.table is not the reader's TableDef when the column controls change it.)
            cached = self._tables[id(table)] = (table, self._make(table))
        return cached[1]

    def read_table_events(self, table: TableDef) -> TableEvents:
        """The events of rows read by a SELECT (snapshot chunks) of this table version."""
        fp = f"{table.qualified_name}/{table.fingerprint()}"
        te = self._read_tables.get(fp)
        if te is None:
            te = self._read_tables[fp] = self._make(table, binlog=False)
        return te

    def read_encoding(self, table: TableDef) -> ReadEncoding | None:
        """How a chunk read process encodes the rows of ``table``'s snapshot chunks for
        :meth:`EventBuilder.chunk_records` (records made from Avro bodies); None when they take the
        general path there (``table`` has columns its events leave out: a chunk SELECTs ``table``'s
        columns, and the snapshot gives the table as the column controls resolve it, so its SELECTs
        read only the captured columns and keep this path).  A masked, hashed or truncated column
        keeps it too (its mapper's converter in the SELECT row encoder)."""
        te = self.read_table_events(table)
        if te.table.column_names != table.column_names:
            return None
        if self.transcoded and ConnectJsonWriter(te.value_schema).program is None:
            return None
        return ReadEncoding(self.prefix, table, tuple(te.key_columns), self.modes)

    def _make(self, table: TableDef, *, binlog: bool = True) -> TableEvents:
        return table_events(self.prefix, table, self.controls, binlog=binlog, modes=self.modes)

    def stream_encoding(self, keep_values: set[str]) -> StreamEncoding:
        """What the binlog reader process needs to encode row images as :meth:`EventBuilder.records`
        would (records made from Avro bodies); ``keep_values``: tables whose rows cross as values."""
        return StreamEncoding(self.prefix, self.controls, frozenset(keep_values), self.modes, self.transcoded)


class EventBuilder:
    def __init__(self, prefix: str, name: str, server_id: int, tombstones: bool = False,
                 controls: ColumnControls = NO_CONTROLS, modes: TypeModes = DEFAULT_MODES) -> None:
        self.prefix = prefix
        self.modes = modes
        self.tombstones = tombstones
        self.name = name
        self.server_id = server_id
        self.controls = controls  # which columns the events carry, and their keys
        # The events of each table version (the stream's and the snapshot reads'), and what the
        # reader process and the chunk read processes encode with: TableVersions'.
        self.versions = TableVersions(prefix, controls, modes)
        self.table_events = self.versions.table_events
        self.read_table_events = self.versions.read_table_events
        self.read_encoding = self.versions.read_encoding
        self.stream_encoding = self.versions.stream_encoding

    def _source(self, ch: RowChanges) -> dict:
        return source_block(self.name, self.server_id, db=ch.db, table=ch.table, ts_ms=ch.ts_ms, file=ch.file,
                            pos=ch.pos, gtid=ch.gtid, thread=ch.thread)

    def records(self, ch: RowChanges, start: int, stop: int, writer: RecordEncoding,
                skip_up_to: str | None = None) -> list[Record]:
        """The records of rows ``start`` to ``stop - 1`` of ``ch``, in order, leaving out
        those at or before the encoded position ``skip_up_to`` (written before a restart)."""
        te = self.table_events(ch.table_def)
        topic, template = te.topic, te.template
        shared = envelope_value(None, None, self._source(ch), "", int(time.time() * 1000), "")
        header = writer.header(te.value_schema, topic, "value")
        bound = template.bind(shared, header) if header is not None else None
        out: list[Record] = []
        if bound is not None and (type(ch.rows) is EncodedImages or (te.encoder is not None and not te.dropped)):
            # Avro: rows encoded in the binlog reader process, or that fit the fast path from
            # their values, in one pass; the others (and their errors) come back here.
            start = self._fast_records(te, ch, start, stop, bound, writer, skip_up_to, out)
            _from_bodies(out, writer, te)
        elif type(ch.rows) is EncodedImages:
            raise CDCError(f"rows of {te.table.qualified_name} were encoded in the binlog reader process, but "
                           "this producer does not write them on the Avro fast path")
        general = bound if writer.json_writer(te.value_schema, topic) is None else None  # (JSON: from dicts)
        for i in range(start, stop):
            for key, before, after, op, seq in self._changes(te, ch, i):
                position = ch.position(seq)
                if skip_up_to is not None and position <= skip_up_to:
                    continue
                values = (before, after, i, op, position)
                value = (template.encode(general, values) if general is not None else
                         writer.encode(te.value_schema, template.record(shared, values), topic, "value"))
                key_bytes = writer.encode(te.key_schema, key, topic, "key")
                out.append((topic, key_bytes, value, position))
                if op == "d" and self.tombstones:
                    out.append((topic, key_bytes, None, position))
        return out

    def _fast_records(self, te: TableEvents, ch: RowChanges, start: int, stop: int, bound: tuple[bytes, ...],
                      writer: RecordEncoding, skip_up_to: str | None, out: list[Record]) -> int:
        """:meth:`records` of rows ``start`` to ``stop - 1`` in Avro by ``te.encoder``, into
        ``out``, until a row that does not fit it: that row's index (``stop`` when all fit).
        Byte for byte the records of the general path (its converters and encoders, without
        the intermediate dicts).  Rows encoded in the binlog reader process
        (:class:`EncodedImages`) only have their envelopes joined here."""
        template, topic = te.template, te.topic
        encode_row = template.field_encoder("source.row")
        parts = envelope_parts(template, bound, ch.position(0)[:-10])
        before_part = {False: parts.before_absent, True: parts.before}
        after_part = {False: parts.after_absent, True: parts.after}
        b2, op_part, b5, event = parts.middle, parts.ops, parts.end, parts.event
        keyed, kind, tombstones = bool(te.key_columns), ch.kind, self.tombstones
        op_of = OPS[kind]
        if type(ch.rows) is EncodedImages:
            images = _encoded_images(te, ch, start, stop)
        else:
            images = _value_images(te, ch, start, stop)
        key_header: bytes | None = None
        # source.row, an Avro int: looked up below 2**13 (its varint, zig-zagged)
        small, row_limit = (SMALL_VARINTS, SMALL_VARINT_LIMIT >> 1) if template.field_type("source.row") == "int" \
            else ((), 0)
        done = start
        for i, key_b, before, key_a, after in images:
            done = i + 1
            row = small[i << 1] if i < row_limit else encode_row(i)
            if kind == "update" and keyed and key_b != key_a:
                changes = ((key_b, before, None, "d", 2 * i), (key_a, None, after, "c", 2 * i + 1))
            else:
                changes = ((key_a if key_a is not None else key_b, before, after, op_of, 2 * i),)
            for key, before, after, op, seq in changes:
                if seq < _SEQUENCES:
                    digits, digit_bytes = _SEQUENCE_TEXT[seq], _SEQUENCE_BYTES[seq]
                else:
                    digit_bytes = b"%010d" % seq
                    digits = digit_bytes.decode()
                position = event + digits
                if skip_up_to is not None and position <= skip_up_to:
                    continue
                if key is not None:
                    if key_header is None:
                        key_header = writer.header(te.key_schema, topic, "key")
                    key = key_header + key
                value = b"".join((before_part[before is not None], before or b"", after_part[after is not None],
                                  after or b"", b2, row, op_part[op], digit_bytes, b5))
                out.append((topic, key, value, position))
                if op == "d" and tombstones:
                    out.append((topic, key, None, position))
        return done

    def _event_parts(self, te: TableEvents, ch: RowChanges, header: bytes) -> tuple[bytes, ...]:
        """The envelope parts of the records of ``ch`` as the native row emitter takes them
        (:class:`EnvelopeBinder`)."""
        binder = te.binder
        if binder is None:
            binder = te.binder = EnvelopeBinder(te.template, te.value_schema)
        key = (header, ch.db, ch.table)
        fixed = binder.fixed.get(key)
        if fixed is None:
            fixed = binder.fix(key, envelope_value(None, None, self._source(ch), "", 0, ""), header)
        return binder.native(fixed, ch.ts_ms, ch.gtid, ch.file, ch.pos, ch.thread, int(time.time() * 1000),
                             ch.position(0)[:-10])

    def _emits(self, te: TableEvents) -> bool:
        """Whether ``te``'s records of encoded rows can be joined by the native row emitter:
        ``source.row`` a plain int."""
        return te.template.field_type("source.row") in ("int", "long")

    def emit_encoded(self, ch: RowChanges, start: int, stop: int, writer: RecordEncoding, out: RowsOut,
                     skip_up_to: str | None = None) -> tuple[int, int] | None:
        """:meth:`records` of rows ``start`` to ``stop - 1`` of rows encoded in the binlog reader
        process, produced by ``out`` (the native row emitter, :mod:`producer.native_producer`) instead
        of returned: the same records, none built here.  ``(records, change events)``; None when
        these rows are not for it (then :meth:`records` gives them)."""
        te = self.table_events(ch.table_def)
        if type(ch.rows) is not EncodedImages or not self._emits(te):
            return None
        _check_encoded_for(te, ch)
        topic = te.topic
        header = writer.header(te.value_schema, topic, "value")
        if header is None:  # (JSON from dicts: never encoded in the reader process)
            return None
        parts = self._event_parts(te, ch, header)
        key_header = writer.header(te.key_schema, topic, "key") if te.key_schema is not None else None
        return out.produce_rows(topic, key_header, parts, ch.rows.bodies, ch.kind, bool(te.key_columns),
                                start, stop, None if skip_up_to is None else skip_up_to.encode(), self.tombstones,
                                json=_json_programs(writer, te))

    def chunk_records(self, chunk: ChunkOut, writer: RecordEncoding) -> list[Record]:
        """The records of a released snapshot chunk: op ``r``, ``source.snapshot``
        "incremental", the window in ``snapshot_window``, row ``i`` at position
        ``close.row + 1 + i`` (after the CLOSE marker, before the next binlog event)."""
        te = self.read_table_events(chunk.table_def)
        topic, template, conv = te.topic, te.template, te.converter
        close = chunk.close_position
        shared = self._chunk_value(chunk, te)
        header = writer.header(te.value_schema, topic, "value")
        bound = template.bind(shared, header) if header is not None else None
        out: list[Record] = []
        close_pos = close.encode()
        start = 0
        if bound is not None and (type(chunk.rows) is EncodedRows or (te.encoder is not None and not te.dropped)):
            start = self._fast_chunk_records(te, chunk.rows, close_pos, bound, writer, out)
            _from_bodies(out, writer, te)
        general = bound if writer.json_writer(te.value_schema, topic) is None else None  # (JSON: from dicts)
        for i in range(start, len(chunk.rows)):
            values = chunk.rows[i]
            position = chunk_row_position(close_pos, i)
            after = self._row(te, values, None)
            key = conv.convert_key(values) if te.key_columns else None
            fields = (None, after, 0, "r", position)
            value = (template.encode(general, fields) if general is not None else
                     writer.encode(te.value_schema, template.record(shared, fields), topic, "value"))
            out.append((topic, writer.encode(te.key_schema, key, topic, "key"), value, position))
        return out

    def _fast_chunk_records(self, te: TableEvents, rows: list[dict], close_pos: str, bound: tuple[bytes, ...],
                            writer: RecordEncoding, out: list[Record]) -> int:
        """:meth:`chunk_records` of ``rows`` in Avro by ``te.encoder``, into ``out``, until a
        row that does not fit it: that row's index (``len(rows)`` when all fit).  Byte for
        byte the general path's records."""
        enc, template, topic = te.encoder, te.template, te.topic
        before_null, _ = template.union_tags("before")
        _, after_tag = template.union_tags("after")
        encode_row, encode_op, encode_position = (template.field_encoder(p) for p in ENVELOPE_VARIABLE[2:])
        b0, b1, b2, b3, b4, b5 = bound
        head = b"".join((b0, before_null, b1, after_tag))  # before: null; after: the row
        middle = b"".join((b2, encode_row(0), b3, encode_op(SNAPSHOT_OP), b4))
        key_header = writer.header(te.key_schema, topic, "key") if te.key_columns else None
        if type(rows) is EncodedRows:  # encoded where they were read
            if rows.table != te.ident:
                raise CDCError(f"snapshot chunk of {te.table.qualified_name}: its rows were encoded for "
                               f"{rows.table}, not for this table version")
            positions = chunk_row_positions(close_pos, len(rows.bodies))
            digits = ENCODED_WIDTH - EVENT_WIDTH  # a position's Avro string: length, event part, row digits
            tail = b"".join((middle, encode_position(positions[0])[:-digits])) if positions else b""
            for (key, after), position in zip(rows.bodies, positions):
                out.append((topic, None if key_header is None else key_header + key,
                            b"".join((head, after, tail, position[EVENT_WIDTH:].encode(), b5)), position))
            return len(rows.bodies)
        for i, values in enumerate(rows):
            try:
                after = enc.row(values)
                key = None if key_header is None else key_header + enc.key(values)
            except Exception:  # noqa: BLE001 - the general path gives the value or the error
                return i
            position = chunk_row_position(close_pos, i)
            out.append((topic, key, b"".join((head, after, middle, encode_position(position), b5)), position))
        return len(rows)

    def _chunk_value(self, chunk: ChunkOut, te: TableEvents) -> dict:
        """The envelope fields shared by a chunk's records (its rows' fields empty)."""
        close = chunk.close_position
        server_id = getattr(chunk, "server_id", None)
        source = source_block(self.name, self.server_id if server_id is None else server_id, db=te.table.db,
                              table=te.table.name,
                              ts_ms=int(time.time() * 1000), file=close.file_name, pos=close.pos,
                              snapshot=getattr(chunk, "snapshot_record", None) or INCREMENTAL_SNAPSHOT)
        shared = envelope_value(None, None, source, SNAPSHOT_OP, int(time.time() * 1000), "")
        shared["snapshot_window"] = {"snapshot_id": chunk.snapshot_id, "chunk_id": chunk.chunk_id,
                                     "open_position": chunk.open_position.encode(), "close_position": close.encode()}
        return shared

    def emit_chunk(self, chunk: ChunkOut, writer: RecordEncoding, out: RowsOut) -> int | None:
        """:meth:`chunk_records` of a chunk whose rows were all encoded where they were read,
        produced by ``out`` (the native row emitter) instead of returned: the same records.
        Their number; None when the chunk is not for it (then :meth:`chunk_records` gives them)."""
        te = self.read_table_events(chunk.table_def)
        rows = chunk.rows
        if type(rows) is not EncodedRows or rows.rest or not self._emits(te):
            return None
        if rows.table != te.ident:
            raise CDCError(f"snapshot chunk of {te.table.qualified_name}: its rows were encoded for {rows.table}, "
                           "not for this table version")
        topic, close = te.topic, chunk.close_position.encode()
        header = writer.header(te.value_schema, topic, "value")
        if header is None or not rows.bodies:
            return None
        chunk_row_position(close, len(rows.bodies) - 1)  # (the checks: every row's sequence has its 10 digits)
        parts = envelope_parts(te.template, te.template.bind(self._chunk_value(chunk, te), header), close[:EVENT_WIDTH],
                               (SNAPSHOT_OP,))
        key_header = writer.header(te.key_schema, topic, "key") if te.key_columns else None
        records, _ = out.produce_rows(topic, key_header, parts.native((SNAPSHOT_OP,) * 3), rows.bodies, SNAPSHOT_OP,
                                      bool(te.key_columns), 0, len(rows.bodies), None, False,
                                      first_sequence=int(close[EVENT_WIDTH:]) + 1, json=_json_programs(writer, te))
        return records

    def truncate_record(self, table: TableDef, source: dict, position: str, writer: RecordEncoding) -> Record:
        """Debezium's truncate event of ``table``: op ``t``, no key, ``before`` and ``after``
        null, with the table's value schema."""
        te = self.read_table_events(table)
        value = envelope_value(None, None, source, TRUNCATE_OP, int(time.time() * 1000), position)
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
        drop = te.dropped
        if drop:
            values = {k: v for k, v in values.items() if k not in drop}
        return te.converter.convert(values, none_sources)


def _from_bodies(out: list[Record], writer: RecordEncoding, te: TableEvents) -> None:
    """debezium-json made from Avro bodies (:meth:`RecordEncoding.json_writer`): the records of
    ``out`` (their keys and values Avro bodies) transcoded, in place; Avro: nothing to do."""
    values = writer.json_writer(te.value_schema, te.topic)
    if values is None:
        return
    value_of = values.transcode
    key_of = writer.json_writer(te.key_schema, te.topic).transcode if te.key_schema is not None else None
    for i, (topic, key, value, position) in enumerate(out):
        out[i] = (topic, None if key is None else key_of(key), None if value is None else value_of(value), position)


def _json_programs(writer: RecordEncoding, te: TableEvents) -> tuple[bytes, bytes, bytes | None, bytes | None] | None:
    """debezium-json from Avro bodies: what the native row emitter transcodes the records with
    (the value's program and record prefix, the key's), else None."""
    values = writer.json_writer(te.value_schema, te.topic)
    if values is None:
        return None
    keys = writer.json_writer(te.key_schema, te.topic) if te.key_schema is not None else None
    return values.program, values.prefix, None if keys is None else keys.program, None if keys is None else keys.prefix


def _encoded_images(te: TableEvents, ch: RowChanges, start: int, stop: int) -> Iterator[tuple]:
    """``(row index, key before, before, key after, after)`` of rows ``start`` to ``stop - 1``
    of rows encoded in the binlog reader process (bodies; None where an image or key is not)."""
    rows = ch.rows
    _check_encoded_for(te, ch)
    b, none = rows.bodies, repeat(None)
    if ch.kind == "update":
        s, e = 4 * start, 4 * stop
        return zip(range(start, stop), b[s:e:4], b[s + 1:e:4], b[s + 2:e:4], b[s + 3:e:4])
    s, e = 2 * start, 2 * stop
    if ch.kind == "insert":
        return zip(range(start, stop), none, none, b[s:e:2], b[s + 1:e:2])
    return zip(range(start, stop), b[s:e:2], b[s + 1:e:2], none, none)


def _value_images(te: TableEvents, ch: RowChanges, start: int, stop: int) -> Iterator[tuple]:
    """The same from the rows' values, encoded by ``te.encoder``; it ends early at the first
    row that does not fit it (its values or its key change take the general path)."""
    enc, keyed = te.encoder, bool(te.key_columns)
    if type(ch.rows) is PackedRows and ch.rows.names == enc.names:  # value tuples in column order
        images, row_of, key_of = ch.packed_images, enc.row_tuple, enc.key_tuple
    else:  # row dicts
        images, row_of, key_of = ch.images, enc.row, enc.key
    for i in range(start, stop):
        try:
            before_values, after_values, before_none, after_none = images(i)
            if enc.has_sets and (enc.empty_set(before_none) or enc.empty_set(after_none)):
                return  # an empty SET is told by its none_sources reason
            before = None if before_values is None else row_of(before_values)
            after = None if after_values is None else row_of(after_values)
            if keyed:
                key_b = None if before_values is None else key_of(before_values)
                key_a = None if after_values is None else key_of(after_values)
            else:
                key_b = key_a = None
        except Exception:  # noqa: BLE001 - the general path gives the value or the error
            return
        if key_b != key_a and ch.kind == "update" and keyed and not enc.keys_comparable:
            return  # (-0.0 and 0.0: equal keys, different bytes)
        yield i, key_b, before, key_a, after
