"""The DBLog decide stage of a partition's merge: its records, in offset order (which is
position order), decoded and merged by position with their table's window markers; the DBLog
rule (:class:`spark_jobs.task.dblog.WindowBuffer`) drops the chunk rows that lose to a change
logged inside their window, and the copies.  What it keeps goes on to the clean changelog
and the sinks as :class:`~spark_jobs.task.kept.Kept` records.

Records are decoded with their table's newest schema (:mod:`contract.schema_resolution`):
stream changes of Avro single-object framing by their header only (the row image is decoded
where a sink needs it), and runs of plain stream changes while no window is open by the
native scan (:func:`scan_plain`).  Markers beyond the partition's last record stay pending,
since records below them may still come.  A record that cannot be decoded or decided is a
dead letter; the rest goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.codecs.avro_decoder import native_enabled
from contract.codecs.connect_json import RECORD_PREFIX
from contract.codecs.serde import SINGLE_OBJECT_MAGIC
from contract.debezium import debezium_position, not_connect_shape
from contract.envelope import TRUNCATE_OP, record_names
from contract.errors import SerdeError
from contract.markers import window_of
from contract.position import ENCODED_WIDTH
from spark_jobs.task.dblog import ChunkRow, Marker, Window, WindowBuffer
from spark_jobs.errors import DBLogError
from spark_jobs.task.envelope_decoder import EnvelopeDecoder
from spark_jobs.task.kept import KEPT_MEMBERS, LAZY, Kept, row_of
from spark_jobs.task.settings import MergeSettings

try:  # spark_jobs/task/_change_scan.c, built by setup.py where a C compiler is
    from spark_jobs.task._change_scan import scan_changes as native_scan
except ImportError:  # pragma: no cover - a build without it: the loop decides every record
    native_scan = None

#: After a native scan that took no record, the records decided by the loop before the next scan
SCAN_BACKOFF = 32
#: What makes a record a dead letter in the decide stage (anything else fails the task)
_BAD_RECORD = (SerdeError, DBLogError, KeyError, TypeError, ValueError)


def merge_markers(pending: list[dict], new: list[dict]) -> list[dict]:
    """Pending and new markers of a table in position order, each position once."""
    seen: dict[str, dict] = {}
    for m in [*pending, *new]:
        seen.setdefault(m["position"], m)
    return [seen[p] for p in sorted(seen)]


@dataclass
class Decision:
    """What the decide stage leaves: the kept records, the dead letters ``(offset, key, value,
    reason)``, each table's key columns (of its newest key schema), Debezium's truncate
    events (the highest position per table) and the markers still pending."""

    kept: list[Kept] = field(default_factory=list)
    dead: list[tuple[int, bytes | None, bytes | None, str]] = field(default_factory=list)
    key_columns: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    truncates: dict[tuple[str, str], str] = field(default_factory=dict)
    pending: list[dict] = field(default_factory=list)


class _Framings:
    """Per key / value writer schema (raw fingerprint), while the schema store stays put:
    the change reader (``RecordDecoder.change_reader_of`` or ``change_header_of``), the key's
    names, the value's schema and the native scan's program."""

    def __init__(self, dec: EnvelopeDecoder, native: bool) -> None:
        self.dec = dec
        self.readers: dict[bytes, Any] = {}
        self.key_info: dict[bytes, tuple[list[str], bool]] = {}
        self.schema_info: dict[bytes, tuple[str, Any]] = {}
        self.scans: dict[bytes, Any] | None = {} if native else None
        self.generation = dec.store.generation

    def fresh(self) -> None:
        """Forget what was worked out when a lookup read new schemas."""
        if self.dec.store.generation != self.generation:
            self.readers.clear()
            self.key_info.clear()
            self.schema_info.clear()
            if self.scans is not None:
                self.scans.clear()
            self.generation = self.dec.store.generation

    def key(self, key_b: bytes) -> tuple[list[str], bool]:
        """The key record's fields, in key order; False: keyed before the table's primary key changed."""
        found = self.key_info.get(key_b[:10])
        if found is None:
            found = self.dec.key_names(key_b)
            if key_b[:2] == SINGLE_OBJECT_MAGIC:
                self.key_info[key_b[:10]] = found
        return found

    def schema(self, value_b: bytes) -> tuple[str, Any]:
        """The value's schema id and the reader schema the sinks lay its table out by."""
        found = self.schema_info.get(value_b[2:10]) if value_b[:2] == SINGLE_OBJECT_MAGIC else None
        if found is None:
            found = self.dec.schema_of(value_b)
            if value_b[:2] == SINGLE_OBJECT_MAGIC:
                self.schema_info[value_b[2:10]] = found
        return found


class PartitionDecider:
    """The decide stage of one partition of table topic ``topic_names`` (its ``(db, table)``):
    :meth:`run` over the records with the window buffer ``buf`` and the table's ``markers``
    in position order (the pending ones first)."""

    def __init__(self, s: MergeSettings, dec: EnvelopeDecoder, buf: WindowBuffer, markers: list[dict],
                 topic_names: tuple[str, str], *, ignore_columns: bool) -> None:
        self.s, self.dec, self.buf, self.markers = s, dec, buf, markers
        self.topic_names = topic_names
        self.ignore_columns = ignore_columns
        # What a record's sinks need (``decode_change``: the row image, op, position, source),
        # unless the record itself travels on (routes: the merged changelog; ``columns:
        # ignore``: read again with the table's first schema; Debezium's JSON).
        self.whole = s.debezium or bool(s.routes) or ignore_columns
        self.framings = _Framings(dec, not self.whole and native_enabled() and bool(native_scan))
        self.out = Decision()
        self._mi = 0
        self._next_marker = markers[0]["position"] if markers else None

    def run(self, records: list[tuple[int, bytes | None, bytes | None]]) -> Decision:
        """Decide ``records`` (``(offset, key, value)``, in offset order).  The plain stream
        changes (no window open, the topic's own table, one key and value writer schema, read
        by their header) are decided by the native scan, a run at a time (:func:`scan_plain`);
        the loop decides the record a scan stops at, and all the others.  After a scan that
        took nothing the next is tried a few records later."""
        out, buf, framings = self.out, self.buf, self.framings
        scans = framings.scans
        i, n, scan_at = 0, len(records), 0
        while i < n:
            if scans is not None and i >= scan_at and buf.is_empty:
                got = scan_plain(self.dec, records, i, scans, framings.key_info, framings.schema_info, buf, out.kept,
                                 self.topic_names, self._next_marker, out.key_columns)
                scan_at = got + (1 if got > i else SCAN_BACKOFF)
                i = got
                framings.fresh()  # (a lookup read new schemas)
                if i >= n:
                    break
            offset, key_b, value_b = records[i]
            i += 1
            if value_b is None:  # a tombstone (after a delete): for log compaction, not a change
                continue
            try:
                emitted = self._record(offset, key_b, value_b)
            except _BAD_RECORD as exc:
                out.dead.append((int(offset), key_b, value_b, f"{type(exc).__name__}: {exc}"))
                continue
            if emitted is not None:  # (outside the dead letters' net: a failure here fails the task)
                self._keep(*emitted)
        out.pending = self.markers[self._mi:]
        return out

    def _change(self, offset: int, value_b: bytes) -> tuple[dict, str, str, Any]:
        """``(value, op, position, row reader)`` of a record's value; the row reader is set
        where only the header was read (the row image is decoded where it is needed)."""
        s, dec = self.s, self.dec
        if s.debezium:
            if value_b[:10] != RECORD_PREFIX and dec.decoder.connect_schema(value_b) is None:
                raise not_connect_shape(value_b)  # (JsonConverter's own records start with RECORD_PREFIX)
            value = dec.decode(value_b)
            return value, value["op"], debezium_position(value, int(offset)), None
        if self.whole:
            value = dec.decode(value_b)
            return value, value["op"], value["position"], None
        if value_b[:2] == SINGLE_OBJECT_MAGIC:  # (magic + writer fingerprint: the first 10 bytes)
            readers = self.framings.readers
            read = readers.get(value_b[:10])
            if read is None:  # (header, row image) readers, or the change reader and None
                read = readers[value_b[:10]] = (dec.decoder.change_header_of(value_b)
                                                or (dec.decoder.change_reader_of(value_b), None))
            value = read[0](value_b, 10)
            return value, value["op"], value["position"], read[1]
        value = dec.decoder.decode_change(value_b)  # a registry's or JSON record
        return value, value["op"], value["position"], None

    def _push_markers_below(self, position: str) -> None:
        """The table's window markers below ``position`` into the buffer."""
        markers, buf = self.markers, self.buf
        while self._next_marker is not None and self._next_marker < position:
            buf.push(Marker(*window_of(markers[self._mi])))
            self._mi += 1
            self._next_marker = markers[self._mi]["position"] if self._mi < len(markers) else None

    def _record(self, offset: int, key_b: bytes | None, value_b: bytes) -> tuple | None:
        """Decide one record: the arguments of :meth:`_keep` when the DBLog rule lets it
        through, None when it is dropped (or a truncate, kept here), or (raising) a dead letter."""
        s, buf, topic_names = self.s, self.buf, self.topic_names
        value, op, position, row_reader = self._change(offset, value_b)
        self.framings.fresh()  # (a lookup read new schemas)
        knames, newest_key = (None, True) if key_b is None else self.framings.key(key_b)
        self._push_markers_below(position)
        src = value.get("source") or {}
        db_name, table_name = src.get("db"), src.get("table")
        names = (topic_names if db_name == topic_names[0] and table_name == topic_names[1]
                 else (str(db_name or topic_names[0]), str(table_name or topic_names[1])))
        if buf.is_empty and op != "r" and op != TRUNCATE_OP:
            k = ""  # (no window open: the DBLog rule keeps no key of a change, and only markers open one)
        else:
            k = key_b.hex() if key_b is not None else ""
            if names != topic_names:  # a table whose name is not its topic's: keys apart
                k = f"{names[0]}.{names[1]}|{k}"
        if op == TRUNCATE_OP:
            self._truncate(k, value, position, src, offset, key_b, value_b, names)
            return None
        row_at = 0
        if row_reader is not None:  # only the header was read: the image where it is needed
            row_at = value["row_at"]
            if row_at is None:
                row = row_reader = None
                row_at = 0
            else:  # (the window buffer keeps no image, a chunk row's neither: it decides by key)
                row = LAZY
        else:
            row = value["row"] if not self.whole else row_of(value, op)
        if op == "r" and s.debezium:  # deduplicated by Debezium, as of its chunk's window close
            emit = buf.push_change(k, "c", row, position)
        elif op == "r":
            window = Window.from_dict(value["snapshot_window"])
            emit = buf.push(ChunkRow(k, row, window, position)) is not None
        else:
            emit = buf.push_change(k, op, row if op != "d" else None, position)
        if not emit:
            return None
        return op, row, value, position, src, offset, key_b, value_b, names, knames, newest_key, row_reader, row_at

    def _truncate(self, k: str, value: dict, position: str, src: dict, offset: int, key_b: bytes | None,
                  value_b: bytes, names: tuple[str, str]) -> None:
        """A truncate event (``op: t``): to the clean changelog only; the sinks follow the
        table's TRUNCATE marker (the driver's :mod:`spark_jobs.commit.table_markers`), and the
        producer reads again every chunk whose window it was in.  (Debezium writes no marker:
        the driver deletes the sink rows below its truncate after the batch,
        :func:`spark_jobs.commit.table_markers.debezium_truncates`.)"""
        s, out = self.s, self.out
        if s.debezium:
            if not self.buf.push_change(k, "d", None, position):
                return  # a copy
            out.truncates[names] = max(out.truncates.get(names, ""), position)
        if s.changelog:
            out.kept.append(Kept(TRUNCATE_OP, None, position, "", None, int(src.get("ts_ms") or 0), int(offset), key_b,
                                 value_b, names, envelope=value if s.routes else None))

    def _keep(self, op: str, row: Any, value: dict, position: str, src: dict, offset: int, key_b: bytes | None,
              value_b: bytes, names: tuple[str, str], knames: list[str] | None, newest_key: bool, row_reader: Any,
              row_at: int) -> None:
        """A record the DBLog rule let through, as a :class:`Kept` record (``columns: ignore``:
        as its table's first schema has it)."""
        s, out = self.s, self.out
        if knames is not None and newest_key and names not in out.key_columns:
            out.key_columns[names] = knames
        sid, schema = self.framings.schema(value_b)
        if self.ignore_columns:  # sinks and changelog keep the table's first schema
            first = self.dec.as_first(value_b, record_names(s.prefix, *names)[2])
            if first is not None:
                value, value_b, sid, schema = first
                row = row_of(value, op)
        # The key is not decoded per record: the sinks take the key columns from the row
        # (``before`` for a delete).
        lazy = row_reader is not None  # (then no route: ``whole``)
        out.kept.append(Kept(op, None if lazy else row, position, sid, schema, int(src.get("ts_ms") or 0),
                             int(offset), key_b, value_b, names, not newest_key, value if s.routes else None,
                             row_reader, row_at if lazy else 0))


def scan_plain(dec: EnvelopeDecoder, records: list, i: int, scans: dict, key_info: dict, schema_info: dict,
                buf: WindowBuffer, kept: list[Kept], topic_names: tuple[str, str], limit: str | None,
                key_columns: dict) -> int:
    """The plain stream changes from ``records[i]`` on, decided by the native scan
    (``scan_changes`` in ``spark_jobs/task/_change_scan.c``) as :class:`PartitionDecider`'s loop
    decides them, appended to ``kept`` as the loop would append them; the index of the first
    record it did not take.  It takes the records framed like ``records[i]`` (its key's and
    value's writer schemas), stream changes (op c, u or d) of the topic's own table read by
    their header, below ``limit`` (the next window marker), while no window is open (the
    caller's check): the DBLog rule then keeps no key, and a change is emitted unless it is
    a copy.  Anything else, malformed or not, is left to the loop, which decides it with its
    usual checks and errors.  The caches are the loop's (``key_info``, ``schema_info``)."""
    _, key_b, value_b = records[i]
    if (value_b is None or key_b is None or len(value_b) < 10 or len(key_b) < 10
            or value_b[:2] != SINGLE_OBJECT_MAGIC or key_b[:2] != SINGLE_OBJECT_MAGIC):
        return i
    try:
        found = scans.get(value_b[:10])
        if found is None:  # (program, field indices, the header's row reader), or False: not scanned
            scan, header = dec.decoder.change_scan_of(value_b), dec.decoder.change_header_of(value_b)
            found = scans[value_b[:10]] = (*scan, header[1]) if scan and header else False
        if not found:
            return i
        program, indices, row_reader = found
        knames, newest_key = key_info.get(key_b[:10]) or key_info.setdefault(key_b[:10], dec.key_names(key_b))
        sid, schema = schema_info.get(value_b[2:10]) or schema_info.setdefault(value_b[2:10], dec.schema_of(value_b))
    except (SerdeError, KeyError, TypeError, ValueError):
        return i  # (the loop makes it a dead letter)
    data_high, marker_high = buf.highs()
    before = len(kept)
    end, data_high, changes, copies = native_scan(
        program, indices, records, i, value_b[:10], key_b[:10], topic_names[0].encode(), topic_names[1].encode(),
        ENCODED_WIDTH, data_high, marker_high, limit, kept, KEPT_MEMBERS,
        (sid, schema, topic_names, not newest_key, row_reader))
    buf.took_changes(data_high, changes, copies)
    if len(kept) > before and newest_key and topic_names not in key_columns:
        key_columns[topic_names] = knames
    return end
