"""One micro-batch of one Kafka partition of a table topic: the merge job's executor work.

Runs on the executors: in a task of :func:`range_function`, which reads the batch's
Kafka ranges itself, or (Spark's JVM ``kafka`` source) inside ``mapInArrow`` over the
micro-batch, where records of several Kafka partitions in one task are separated
(:func:`arrow_function`); records in offset order, which is position order:

1. decode each record (Avro writer schemas from ``<prefix>._schemas`` or the registry,
   or JSON), read with its table's newest schema (:mod:`contract.schema_resolution`);
2. the DBLog rule with copies removed (:class:`spark_jobs.dblog.WindowBuffer`): the
   partition's records merged by position with the table's window markers (those of
   this batch plus those still pending from earlier ones); markers beyond the
   partition's last record stay pending, since records below them may still come.  The
   state (buffer + pending markers) comes from the previous micro-batch and goes back
   as a ``state`` row;
3. the kept records, original bytes unchanged, to the clean changelog partition
   (:mod:`spark_jobs.clean_changelog`, idempotent by position); a truncate event
   (``op: t``) goes there only: the sinks follow the table's TRUNCATE marker;
4. the kept records upserted/deleted into the PostgreSQL and MySQL sink tables (position
   guarded, so a replay never moves a row backwards);
5. records that cannot be decoded, decided or applied to the dead-letter topic with the
   reason and their coordinates; the rest goes on.

The output rows are small: the partition's new deduper state and its statistics.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any, Callable, Iterator

from common.config import SinksConfig
from common.gc_tuning import STREAMING_THRESHOLDS, gc_paused, tune_gc
from common.kafka.partitioner import in_partition
from contract.codecs.avro_decoder import native_enabled, native_scan
from contract.codecs.connect_json import RECORD_PREFIX
from contract.debezium import debezium_position, not_connect_shape
from contract.envelope import TRUNCATE_OP, record_names
from contract.errors import SerdeError
from contract.markers import window_of
from contract.position import ENCODED_WIDTH
from contract.schema_store import SchemaStore
from contract.codecs.serde import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC, AvroWriter, ConfluentRegistry, RecordDecoder
from contract.topics import clean_topic, table_of_topic
from spark_jobs.batch_latency import TS_MS, latency_counts
from spark_jobs.clean_changelog import CleanPartitionWriter, MergedPartitionWriter
from spark_jobs.dblog import ChunkRow, Marker, Window, WindowBuffer
from spark_jobs.errors import DBLogError, RouteError, SinkUnavailable
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import target_fields, target_key, target_row
from spark_jobs.sinks.batch import Change, EncodedChange
from spark_jobs.sinks.configured import configured_sinks

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = "kind string, topic string, partition int, payload string"


@dataclass
class MergeSettings:
    """What an executor needs (plain data: shipped with the task)."""

    bootstrap: str
    prefix: str
    client: dict = field(default_factory=dict)
    registry_url: str | None = None
    changelog: bool = True
    sinks: SinksConfig = field(default_factory=SinksConfig)  # the table sinks (configured_sinks)
    dlq_topic: str = ""
    # Table routing (docs/sharding.md): the source's name (the ``__source`` origin value),
    # the configured routes, and per batch each route's target (``{"schema", "key"}`` by
    # route name, :func:`spark_jobs.sharding.target.target_schema`, planned on the driver).
    source_name: str = ""
    routes: list = field(default_factory=list)
    targets: dict = field(default_factory=dict)
    clean_prefix: str = ""  # kafka.topic_prefix: the merged clean topics' (default: ``prefix``)
    # kafka.input: debezium: the table topics are Debezium's (positions from ``source`` and the
    # Kafka offset, :mod:`contract.debezium`; no markers: its snapshot rows come deduplicated)
    debezium: bool = False
    # Per batch, ``{topic: (partition count, key fingerprint)}`` of the table topics whose
    # tasks may write PostgreSQL under their partition's turn
    # (:func:`spark_jobs.partition_turns.partition_turn_keys`, :func:`owns_keys`); a topic absent:
    # the table's whole turn.
    key_partitions: dict = field(default_factory=dict)


# -- per worker process caches (Spark reuses Python workers between tasks) ---------------------
_cache: dict[Any, Any] = {}
_cache_lock = threading.Lock()


def _cached(key: Any, make):
    with _cache_lock:
        obj = _cache.get(key)
        if obj is None:
            obj = _cache[key] = make()
        return obj


def _tune_worker_gc() -> None:
    """Once per Spark Python worker process: the collector's streaming thresholds, and what
    is alive before the first task (PySpark's and the project's modules) out of every later
    collection.

    A partition's records stay alive until its sinks are written, so with Python's default
    thresholds every few thousand records started a collection of the older generations over
    all of them (a fifth of the tasks' samples in a py-spy profile of ``cdc bench merge``, at
    the lines that allocate).  The merge of a partition itself runs with the collector paused
    (``gc_paused``): it makes no reference cycles (a collection after merging 600,000 of the
    benchmark's records found no garbage), so a collection there would only walk live records
    (another 8-10% of the tasks' CPU); garbage without cycles is freed as always, and a batch
    is bounded by ``max_offsets_per_trigger``."""
    _cached(("gc",), lambda: tune_gc(STREAMING_THRESHOLDS, freeze=True) or True)


def warm_worker(items: Iterator) -> Iterator:
    """The task of :func:`~spark_jobs.merge_job.warm_workers`: unpickling it makes
    a Spark Python worker import this module (and what it imports); it then tunes the
    worker's collector (:func:`_tune_worker_gc`) and yields nothing."""
    for _ in items:
        pass
    _tune_worker_gc()
    return iter(())


class EnvelopeDecoder:
    """Decodes a record with its table's newest schema (:mod:`contract.schema_resolution`)
    and tells that schema (the sinks build tables from it)."""

    def __init__(self, s: MergeSettings) -> None:
        self.store = SchemaStore(s.bootstrap, s.prefix, s.client or None)
        self.registry = ConfluentRegistry(s.registry_url) if s.registry_url else None
        self.decoder = RecordDecoder.resolving(self.store, self.registry)
        self._first_writers: dict[str, AvroWriter] = {}
        # Per fingerprint (raw bytes), worked out once while the store's schemas stay put:
        self._schemas: dict[bytes, tuple[str, Any]] = {}
        self._keys: dict[bytes, tuple[list[str], bool]] = {}
        self._at = -1

    def _fresh(self) -> None:
        if self.store.generation != self._at:
            self._schemas.clear()
            self._keys.clear()
            self._at = self.store.generation

    def schema_of(self, data: bytes) -> tuple[str, Any]:
        if data[:2] == SINGLE_OBJECT_MAGIC:
            self._fresh()
            found = self._schemas.get(data[2:10])
            if found is None:
                fp = data[2:10].hex()
                writer = self.store.get(fp)
                found = (fp, None) if writer is None else self.decoder.reader_schema(fp) or (fp, writer)
                self._fresh()  # (the lookup may have read new schemas)
                self._schemas[data[2:10]] = found
            return found
        if data[:1] == CONFLUENT_MAGIC and self.registry is not None:
            sid = int.from_bytes(data[1:5], "big")
            return f"registry-{sid}", self.registry.schema(sid)
        return self.decoder.connect_schema(data) or ("json", None)  # debezium-json: the record's own schema

    def decode(self, data: bytes | None) -> Any:
        return self.decoder.decode(data)

    def key_names(self, data: bytes) -> tuple[list[str], bool]:
        """The field names of a key record, and whether its schema is its table's newest key
        schema (False: written before the table's primary key changed)."""
        if data[:2] != SINGLE_OBJECT_MAGIC:
            return list(self.decoder.decode(data)), True
        self._fresh()
        found = self._keys.get(data[2:10])
        if found is None:
            names = list(self.decoder.decode(data))
            newest = self.store.newest(data[2:10].hex())
            self._fresh()
            found = self._keys[data[2:10]] = (names, newest is None or newest[0] == data[2:10].hex())
        return found

    def as_first(self, data: bytes, envelope_name: str) -> tuple[Any, bytes, str, dict] | None:
        """``columns: ignore``: the record as its table's first schema has it (columns added
        since left out): ``(value, bytes framed with that schema, its id, the reader schema
        the sinks lay tables out by)``; None when the record has that schema already or that
        schema cannot read it (a column renamed)."""
        first = self.store.first(envelope_name)
        if first is None or data[:2] != SINGLE_OBJECT_MAGIC or data[2:10].hex() == first[0]:
            return None
        value = self.decoder.decode_as(data, first[1])
        if value is None:
            return None
        writer = self._first_writers.get(first[0])
        if writer is None:
            writer = self._first_writers[first[0]] = AvroWriter(first[1])
        return value, writer.encode(value), first[0], self.decoder.view_of(first[0], first[1])[0]


def sinks_of(s: MergeSettings) -> list[tuple[str, Any]]:
    """The table sinks of the job, built once per worker process."""
    return configured_sinks(s.sinks)


def _dlq_producer(s: MergeSettings):
    from confluent_kafka import Producer
    return _cached(("dlq", s.bootstrap), lambda: Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 5,
                                                           **(s.client or {})}))


@dataclass(slots=True)
class _Kept:
    op: str
    row: dict | None
    position: str
    schema_id: str
    schema: Any
    ts_ms: int
    offset: int
    key_bytes: bytes | None
    value_bytes: bytes | None
    table: tuple[str, str] = ("", "")  # the source's (db, table), from ``source``
    old_key: bool = False  # keyed as before the table's primary key changed: changelog only
    envelope: dict | None = None  # the decoded record (a routed table's: for the merged clean changelog)
    # For a record read by its header: where its (non-null) row image starts in
    # ``value_bytes`` (0: not so read), and while the image is not decoded (``row`` None
    # then) the writer schema's row reader; :func:`_row_of_kept` decodes it.  The sinks
    # decode only the images they apply, or write them from their bytes (decoded or not).
    row_reader: Any = None
    row_at: int = 0


#: The window buffer's row for a record whose image is not decoded (it only tells it is not null)
_LAZY = object()
#: A record's Kafka offset (``(offset, key, value)``)
_OFFSET = itemgetter(0)
_ROW_AT = attrgetter("row_at")
#: ``EncodedChange(k.op, k.position, k.value_bytes, k.row_at)`` of a :class:`_Kept` ``k``, as
#: ``_ENCODED(_ENCODED_FIELDS(k))``: built in C (a NamedTuple's constructor is a Python function)
_ENCODED_FIELDS = attrgetter("op", "position", "value_bytes", "row_at")
_ENCODED = partial(tuple.__new__, EncodedChange)


def _row_of_kept(k: _Kept) -> dict | None:
    """``k``'s row image, decoded now if it was not (once: kept for the next sink)."""
    if k.row_reader is not None:
        k.row, k.row_reader = k.row_reader(k.value_bytes, k.row_at), None
    return k.row


def merge_partition(topic: str, partition: int, records: list[tuple[int, bytes | None, bytes | None]],
                    s: MergeSettings, state: dict | None, new_markers: list[dict], schemas_end: int = 0,
                    sink_epoch: int = 0) -> tuple[dict, dict]:
    """The work of one partition (see the module docstring): ``records`` are
    ``(offset, key, value)``; ``schemas_end`` the schemas topic's end when the batch was
    planned (its records are read with the newest schemas up to there); ``sink_epoch``
    counts the sink tables the driver dropped or renamed (the sinks forget what they
    prepared when it moves); returns (new state, stats)."""
    t0, c0 = time.monotonic(), time.thread_time()
    records.sort(key=_OFFSET)
    state = state or {}
    buf = WindowBuffer.from_state(state["buffer"]) if state.get("buffer") else WindowBuffer()
    markers = merge_markers(state.get("pending", []), new_markers)
    mi = 0
    dec: EnvelopeDecoder = _cached(("dec", s.bootstrap, s.prefix, s.registry_url), lambda: EnvelopeDecoder(s))
    if schemas_end:
        dec.store.refresh_until(schemas_end)
    if _cached(("epoch",), lambda: [sink_epoch])[0] != sink_epoch:
        for _, sink in sinks_of(s):
            sink.forget_plans()
        _cache[("epoch",)] = [sink_epoch]
    # The topic names the table with Kafka's characters only (contract.topics): the
    # true names come from each record's ``source``, and so may be two tables' sharing it.
    topic_db, topic_table = table_of_topic(s.prefix, topic)
    ignore_columns = s.sinks.schema_rule(topic_db, topic_table).columns == "ignore"
    stats = {"topic": topic, "partition": partition, "input": len(records), "emitted": 0, "dropped": 0, "copies": 0,
             "dead": 0, "upserted": 0, "deleted": 0, "sink_skipped": 0, "from_bytes": 0, "inserted": 0,
             "fresh_refused": 0, "partition_turns": 0, "whole_turns": 0}
    kept: list[_Kept] = []
    dead: list[tuple[int, bytes | None, bytes | None, str]] = []
    dropped_before, copies_before = buf.stats["rows_dropped"], buf.stats["copies"]
    key_columns: dict[tuple[str, str], list[str]] = {}
    truncates: dict[tuple[str, str], str] = {}  # Debezium's truncate events (op t): the highest position per table
    # What a record's sinks need (``decode_change``: the row image, op, position, source),
    # unless the record itself travels on (routes: the merged changelog; ``columns:
    # ignore``: read again with the table's first schema; Debezium's JSON).
    whole = s.debezium or bool(s.routes) or ignore_columns
    push_change = buf.push_change
    topic_names = (topic_db, topic_table)
    # Per key / value writer schema (raw fingerprint), while the schema store stays put:
    # the change reader (RecordDecoder.change_reader_of), the key's names, the value's schema.
    readers: dict[bytes, Any] = {}
    key_info: dict[bytes, tuple[list[str], bool]] = {}
    schema_info: dict[bytes, tuple[str, Any]] = {}
    generation = dec.store.generation
    next_marker = markers[0]["position"] if markers else None
    # The plain stream changes (no window open, the topic's own table, one key and value
    # writer schema, read by their header) are decided by the native scan, a run at a
    # time (_scan_plain); the loop below decides the record a scan stops at, and all the
    # others.  After a scan that took nothing the next is tried a few records later.
    scans: dict[bytes, Any] | None = {} if not whole and native_enabled() and native_scan else None
    i, n, scan_at = 0, len(records), 0
    while i < n:
        if scans is not None and i >= scan_at and buf.is_empty:
            got = _scan_plain(dec, records, i, scans, key_info, schema_info, buf, kept, topic_names,
                              next_marker, key_columns)
            scan_at = got + (1 if got > i else _SCAN_BACKOFF)
            i = got
            if dec.store.generation != generation:  # (a lookup read new schemas)
                readers.clear()
                key_info.clear()
                schema_info.clear()
                scans.clear()
                generation = dec.store.generation
            if i >= n:
                break
        offset, key_b, value_b = records[i]
        i += 1
        row_reader = None  # (set: the record's row image is not decoded yet, see _Kept)
        try:
            if value_b is None:  # a tombstone (after a delete): for log compaction, not a change
                continue
            if s.debezium:
                if value_b[:10] != RECORD_PREFIX and dec.decoder.connect_schema(value_b) is None:
                    raise not_connect_shape(value_b)  # (JsonConverter's own records start with RECORD_PREFIX)
                value = dec.decode(value_b)
                op, position = value["op"], debezium_position(value, int(offset))
            elif whole:
                value = dec.decode(value_b)
                op, position = value["op"], value["position"]
            elif value_b[:2] == SINGLE_OBJECT_MAGIC:  # (magic + writer fingerprint: the first 10 bytes)
                read = readers.get(value_b[:10])
                if read is None:  # (header, row image) readers, or the change reader and None
                    read = readers[value_b[:10]] = (dec.decoder.change_header_of(value_b)
                                                    or (dec.decoder.change_reader_of(value_b), None))
                value = read[0](value_b, 10)
                row_reader = read[1]
                op, position = value["op"], value["position"]
            else:  # a registry's or JSON record
                value = dec.decoder.decode_change(value_b)
                op, position = value["op"], value["position"]
            if dec.store.generation != generation:  # (a lookup read new schemas)
                readers.clear()
                key_info.clear()
                schema_info.clear()
                if scans is not None:
                    scans.clear()
                generation = dec.store.generation
            # the key record's fields, in key order; False: keyed before the table's primary key changed
            if key_b is None:
                knames, newest_key = None, True
            else:
                found = key_info.get(key_b[:10])
                if found is None:
                    found = dec.key_names(key_b)
                    if key_b[:2] == SINGLE_OBJECT_MAGIC:
                        key_info[key_b[:10]] = found
                knames, newest_key = found
            while next_marker is not None and next_marker < position:
                buf.push(Marker(*window_of(markers[mi])))
                mi += 1
                next_marker = markers[mi]["position"] if mi < len(markers) else None
            src = value.get("source") or {}
            db_name, table_name = src.get("db"), src.get("table")
            names = (topic_names if db_name == topic_db and table_name == topic_table
                     else (str(db_name or topic_db), str(table_name or topic_table)))
            if buf.is_empty and op != "r" and op != TRUNCATE_OP:
                k = ""  # (no window open: the DBLog rule keeps no key of a change, and only markers open one)
            else:
                k = key_b.hex() if key_b is not None else ""
                if names != topic_names:  # a table whose name is not its topic's: keys apart
                    k = f"{names[0]}.{names[1]}|{k}"
            if op == TRUNCATE_OP:
                # To the clean changelog only: the sinks follow the table's TRUNCATE marker
                # (merge_job), and the producer reads again every chunk whose window it was in.
                # (Debezium writes no marker: the driver deletes the sink rows below its truncate
                # after the batch, table_markers.debezium_truncates.)
                if s.debezium:
                    if not push_change(k, "d", None, position):
                        continue  # a copy
                    truncates[names] = max(truncates.get(names, ""), position)
                if s.changelog:
                    kept.append(_Kept(op, None, position, "", None, int(src.get("ts_ms") or 0), int(offset), key_b,
                                      value_b, names, envelope=value if s.routes else None))
                continue
            if row_reader is not None:  # only the header was read: the image where it is needed
                row_at = value["row_at"]
                if row_at is None:
                    row = row_reader = None
                else:  # (the window buffer keeps no image, a chunk row's neither: it decides by key)
                    row = _LAZY
            else:
                row = value["row"] if not whole else _row_of(value, op)
            if op == "r" and s.debezium:  # deduplicated by Debezium, as of its chunk's window close
                emit = push_change(k, "c", row, position)
            elif op == "r":
                window = Window.from_dict(value["snapshot_window"])
                emit = buf.push(ChunkRow(k, row, window, position)) is not None
            else:
                emit = push_change(k, op, row if op != "d" else None, position)
        except (SerdeError, DBLogError, KeyError, TypeError, ValueError) as exc:
            dead.append((int(offset), key_b, value_b, f"{type(exc).__name__}: {exc}"))
            continue
        if emit:
            old_key = not newest_key
            if knames is not None and newest_key and names not in key_columns:
                key_columns[names] = knames
            found = schema_info.get(value_b[2:10]) if value_b[:2] == SINGLE_OBJECT_MAGIC else None
            if found is None:
                found = dec.schema_of(value_b)
                if value_b[:2] == SINGLE_OBJECT_MAGIC:
                    schema_info[value_b[2:10]] = found
            sid, schema = found
            if ignore_columns:  # sinks and changelog keep the table's first schema
                first = dec.as_first(value_b, record_names(s.prefix, *names)[2])
                if first is not None:
                    value, value_b, sid, schema = first
                    row = _row_of(value, op)
            # The key is not decoded per record: the sinks take the key columns from the row
            # (``before`` for a delete).
            lazy = row_reader is not None  # (then no route: ``whole``)
            kept.append(_Kept(op, None if lazy else row, position, sid, schema, int(src.get("ts_ms") or 0),
                              int(offset), key_b, value_b, names, old_key, value if s.routes else None, row_reader,
                              row_at if lazy else 0))
    held: list[dict] = []
    if state.get("held") or any(t.get("waiting") for t in s.targets.values()):
        kept = _hold(s, dec, state.get("held") or [], kept, held)
        stats["held"] = len(held)
    t_decided, c_decided = time.monotonic(), time.thread_time()
    stats["decide_s"], stats["decide_cpu_s"] = t_decided - t0, c_decided - c0
    stats["emitted"] = len(kept)
    stats["dropped"] = buf.stats["rows_dropped"] - dropped_before
    stats["copies"] = buf.stats["copies"] - copies_before

    merged_clean = dict(state.get("merged_clean") or {})  # route name -> the merged clean partition's end
    router = _router(s)
    if s.changelog and kept:
        plain = [k for k in kept if router is None or router.route_of(s.source_name, *k.table) is None]
        if plain:
            writer = CleanPartitionWriter(s.bootstrap, clean_topic(s.prefix, topic_db, topic_table), partition,
                                          s.client or None)
            for k in plain:
                writer.write(k.key_bytes, k.value_bytes, k.position)
            writer.flush()
            stats["clean_written"], stats["clean_skipped"] = writer.written, writer.skipped
        if len(plain) < len(kept):
            plain_ids = {id(k) for k in plain}
            dead += _merged_changelog(s, router, [k for k in kept if id(k) not in plain_ids], partition,
                                      merged_clean, stats)
    t_clean, c_clean = time.monotonic(), time.thread_time()
    stats["changelog_s"], stats["changelog_cpu_s"] = t_clean - t_decided, c_clean - c_decided

    by_table: dict[tuple[str, str], list[_Kept]] = {}
    fields_of: dict[str, Any] = {}  # route name -> its target's fields (this batch's layout)
    routed_any = False
    for k in kept:
        if k.old_key:
            # The sink table is keyed by the new key (rebuilt by it); the snapshot the producer
            # takes after a key change brings every row under the new key.
            stats["sink_skipped"] += 1
        elif k.op != TRUNCATE_OP:
            routed = _routed(s, router, k, key_columns, fields_of) if router is not None else None
            routed_any = routed_any or routed is not None
            by_table.setdefault(k.table if routed is None else routed.table, []).append(routed or k)
    sinks = sinks_of(s)
    turn = s.key_partitions.get(topic)  # (None: the table's whole turn, no key looked at)
    own_turn = (turn is not None and not routed_any and bool(by_table)
                and owns_keys(turn, [k.key_bytes for recs in by_table.values() for k in recs], partition))

    def writer_of(value_b: bytes) -> Any:
        return dec.store.get(value_b[2:10].hex())
    for (db, table), records_of_table in by_table.items():
        # What no table sink can apply is one dead letter, whatever the number of sinks.
        if sinks and not key_columns.get((db, table)):
            refused, records_of_table = records_of_table, []
            reason = "a table without a key cannot be applied to table sinks (set source.key_columns for it)"
        else:  # JSON records: no writer schema to build the table from
            refused = [k for k in records_of_table if k.schema is None]
            records_of_table = [k for k in records_of_table if k.schema is not None]
            reason = "JSON records cannot be applied to table sinks"
        if sinks:
            dead += [(k.offset, k.key_bytes, k.value_bytes, reason) for k in refused]
        if not records_of_table:
            continue
        for _, sink in sinks:
            waited = sink.turn_wait_s
            own = own_turn and sink.PARTITION_TURNS
            sink.turn_partition = partition if own else None
            try:
                dead += _apply(sink, db, table, records_of_table, key_columns[(db, table)], stats, writer_of)
            finally:
                sink.turn_partition = None
            stats["sinks_turn_s"] = stats.get("sinks_turn_s", 0.0) + sink.turn_wait_s - waited
            stats["partition_turns" if own else "whole_turns"] += 1
    if truncates:  # applied by the driver once every partition's records of the batch are
        stats["truncates"] = [[db, table, below] for (db, table), below in truncates.items()]
    stats["sinks_s"], stats["sinks_cpu_s"] = time.monotonic() - t_clean, time.thread_time() - c_clean
    stats["latencies_ms"] = latency_counts(map(TS_MS, kept), time.time() * 1000)
    if dead:
        _dead_letters(s, topic, partition, dead)
        stats["dead"] = len(dead)
    stats["seconds"] = time.monotonic() - t0
    new_state = {"buffer": buf.to_state(), "pending": markers[mi:]}
    if merged_clean:
        new_state["merged_clean"] = merged_clean
    if held:
        new_state["held"] = held
    return new_state, stats


def _row_of(envelope: dict, op: str) -> dict | None:
    """The row image a sink applies of a whole envelope: ``before`` for a delete, else ``after``."""
    return envelope.get("before") if op == "d" else envelope.get("after")


def _router(s: MergeSettings) -> Router | None:
    """The routes' router (None without routes), made once per worker process."""
    return _cached(("router", repr(s.routes)), lambda: Router(s.routes)) if s.routes else None


def _routed(s: MergeSettings, router: Router, k: _Kept, key_columns: dict[tuple[str, str], list[str]],
            fields_of: dict[str, Any]) -> _Kept | None:
    """A kept record of a routed table as a record of the route's target (origin values in
    its row, the target's layout and key), or None: the table is not routed.  ``fields_of``
    keeps each target's fields for the partition's other records."""
    route = router.route_of(s.source_name, *k.table)
    if route is None:
        return None
    target = s.targets.get(route.name)
    if target is None:
        raise RouteError(f"{s.source_name}/{k.table[0]}.{k.table[1]} is routed to {route.name}, but the batch was "
                         "planned without that route's target layout")
    key_columns[route.target] = list(target["key"])
    fields = fields_of.get(route.name)
    if fields is None:
        fields = fields_of[route.name] = target_fields(target["schema"])
    row = target_row(route, ShardId(s.source_name, *k.table), _row_of_kept(k), fields)
    return _Kept(k.op, row, k.position, f"route:{route.name}", target["schema"], k.ts_ms, k.offset, k.key_bytes,
                 k.value_bytes, route.target, k.old_key)


def _hold(s: MergeSettings, dec: EnvelopeDecoder, held: list[dict], kept: list[_Kept], out: list[dict]
          ) -> list[_Kept]:
    """Pessimistic routes: the records to apply now, of the rows held before (first) and the
    kept ones; from the first record written under a schema version its route's coordinator
    says WAIT for, every later record of the partition is held too (first in, first out: a
    key's changes stay in order), appended to ``out`` as JSON (raw bytes: decoded again when
    released)."""
    router = _router(s)
    go: list[_Kept] = []
    blocked = False
    for k in [_unheld(s, dec, h) for h in held] + kept:
        route = router.route_of(s.source_name, *k.table)
        if route is None or route.ddl != "pessimistic":
            go.append(k)
            continue
        version = k.value_bytes[2:10].hex() if k.value_bytes and k.value_bytes[:2] == SINGLE_OBJECT_MAGIC else ""
        waiting = (s.targets.get(route.name) or {}).get("waiting") or ()
        if blocked or f"{ShardId(s.source_name, *k.table)}|{version}" in waiting:
            blocked = True
            out.append({"op": k.op, "position": k.position, "ts_ms": k.ts_ms, "offset": k.offset,
                        "key": base64.b64encode(k.key_bytes).decode() if k.key_bytes is not None else None,
                        "value": base64.b64encode(k.value_bytes).decode(), "table": list(k.table),
                        "old_key": k.old_key})
        else:
            go.append(k)
    return go


def _unheld(s: MergeSettings, dec: EnvelopeDecoder, h: dict) -> _Kept:
    """A held record (:func:`_hold`) decoded again."""
    value_b = base64.b64decode(h["value"])
    key_b = base64.b64decode(h["key"]) if h.get("key") is not None else None
    value = dec.decode(value_b)
    sid, schema = dec.schema_of(value_b) if h["op"] != TRUNCATE_OP else ("", None)
    row = None if h["op"] == TRUNCATE_OP else _row_of(value, h["op"])
    return _Kept(h["op"], row, h["position"], sid, schema, int(h["ts_ms"]), int(h["offset"]), key_b, value_b,
                 tuple(h["table"]), bool(h.get("old_key")), value)


def _merged_changelog(s: MergeSettings, router: Router, kept: list[_Kept], partition: int, merged_clean: dict,
                      stats: dict) -> list[tuple[int, Any, Any, str]]:
    """Routed tables' kept records into their routes' merged clean topics (partition
    ``partition``), as target rows keyed by the target's key (origin values first), each
    with its shard's header; ``merged_clean`` (route name -> the partition's end offset after
    the previous write) is updated.  Returns the records that cannot be encoded (dead letters)."""
    dead = []
    groups: dict[tuple, list[_Kept]] = {}
    for k in kept:
        groups.setdefault((router.route_of(s.source_name, *k.table), k.table), []).append(k)
    for (route, table), records in groups.items():
        target = s.targets.get(route.name)
        if target is None or "envelope_schema" not in target:
            raise RouteError(f"{s.source_name}/{table[0]}.{table[1]} is routed to {route.name}, but the batch was "
                             "planned without that route's merged clean changelog schemas")
        key_w = _cached(("avro", repr(target["key_schema"])), lambda: AvroWriter(target["key_schema"]))
        value_w = _cached(("avro", repr(target["envelope_schema"])), lambda: AvroWriter(target["envelope_schema"]))
        fields = target_fields(target["schema"])
        shard = ShardId(s.source_name, *table)
        writer = MergedPartitionWriter(s.bootstrap, clean_topic(s.clean_prefix or s.prefix, *route.target), partition, str(shard),
                                       int(merged_clean.get(route.name, 0)), s.client or None)
        for k in records:
            env = k.envelope or {}
            try:
                before = env.get("before")
                after = env.get("after")
                value = {**env, "before": None if before is None else target_row(route, shard, before, fields),
                         "after": None if after is None else target_row(route, shard, after, fields)}
                row = value["after"] if value["after"] is not None else value["before"]
                key_b = key_w.encode(target_key(row, target["key"])) if row is not None else None
                value_b = value_w.encode(value)
            except (SerdeError, KeyError, TypeError, ValueError) as exc:
                dead.append((k.offset, k.key_bytes, k.value_bytes, f"merged clean changelog {route.name}: {exc}"))
                continue
            writer.write(key_b, value_b, k.position)
        writer.flush()
        merged_clean[route.name] = writer.end_offset()
        stats["clean_written"] = stats.get("clean_written", 0) + writer.written
        stats["clean_skipped"] = stats.get("clean_skipped", 0) + writer.skipped
    return dead


#: After a native scan that took no record, the records decided by the loop before the next scan
_SCAN_BACKOFF = 32
#: ``_Kept``'s slots in its fields' order: what the native scan fills (``scan_changes``)
_KEPT_MEMBERS = tuple(_Kept.__dict__[f.name] for f in dataclass_fields(_Kept))


def _scan_plain(dec: EnvelopeDecoder, records: list, i: int, scans: dict, key_info: dict, schema_info: dict,
                buf: WindowBuffer, kept: list[_Kept], topic_names: tuple[str, str], limit: str | None,
                key_columns: dict) -> int:
    """The plain stream changes from ``records[i]`` on, decided by the native scan
    (``scan_changes`` in ``contract/codecs/_avro_reader.c``) as :func:`merge_partition`'s loop
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
        ENCODED_WIDTH, data_high, marker_high, limit, kept, _KEPT_MEMBERS,
        (sid, schema, topic_names, not newest_key, row_reader))
    buf.took_changes(data_high, changes, copies)
    if len(kept) > before and newest_key and topic_names not in key_columns:
        key_columns[topic_names] = knames
    return end


def owns_keys(turn: tuple[int, str] | None, keys: list, partition: int) -> bool:
    """Whether a task of ``partition`` may write ``keys`` under its partition's own turn
    (sinks that have one: PostgreSQL), ``turn`` being the topic's ``(partition count, key
    fingerprint)`` of :func:`spark_jobs.partition_turns.partition_turn_keys` (None: the table's
    whole turn).  Yes when every key is Avro single-object framed with the topic's one key
    schema and sits where Kafka's partitioner puts it among the topic's partitions: no other
    partition's task can then write one of its rows (common/kafka/partitioner.py)."""
    if turn is None or not keys:
        return False
    count, fingerprint = turn
    if not in_partition(keys, count, partition):  # (also: every key is bytes)
        return False
    head = SINGLE_OBJECT_MAGIC + bytes.fromhex(fingerprint)
    return all(k[:10] == head for k in keys)


def merge_markers(pending: list[dict], new: list[dict]) -> list[dict]:
    """Pending and new markers of a table in position order, each position once."""
    seen: dict[str, dict] = {}
    for m in [*pending, *new]:
        seen.setdefault(m["position"], m)
    return [seen[p] for p in sorted(seen)]


def _runs(kept: list[_Kept]) -> Iterator[list[_Kept]]:
    """Consecutive records written with the same schema (a schema change starts a run)."""
    run: list[_Kept] = []
    for k in kept:
        if run and k.schema_id != run[0].schema_id:
            yield run
            run = []
        run.append(k)
    if run:
        yield run


def _winners(run: list[_Kept]) -> tuple[list[_Kept], int]:
    """Of a run's records, per key the one with the highest position (what applying the
    run leaves; the sinks reduce a batch so too), keyed by the key record's bytes: equal
    keys of one key writer schema have equal bytes.  The run itself where its records do
    not all have a key of one writer schema (the sinks then reduce by the decoded key
    columns).

    And how many of the winners are *fresh*, placed first: not deletes, of a key whose first
    record in the run is an insert (``c``), so that the source held no row of it before and
    the sinks, which applied the partition's records before this run in order, most likely
    hold none either (``apply_encoded``'s ``fresh``: they may write them as plain inserts).
    The others follow in the run's order."""
    first = run[0].key_bytes
    if first is None or first[:2] != SINGLE_OBJECT_MAGIC:
        return run, 0
    framing = first[:10]
    best: dict[bytes, _Kept] = {}
    fresh: set[bytes] = set()
    for k in run:
        kb = k.key_bytes
        if kb is None or kb[:10] != framing:
            return run, 0
        held = best.get(kb)
        if held is None:
            best[kb] = k
            if k.op == "c":
                fresh.add(kb)
        elif held.position < k.position:
            best[kb] = k
    winners = run if len(best) == len(run) else [k for k in run if best[k.key_bytes] is k]
    if not fresh:
        return winners, 0
    new = [k for k in winners if k.key_bytes in fresh and k.op != "d"]
    if not new:
        return winners, 0
    return new + [k for k in winners if k.key_bytes not in fresh or k.op == "d"], len(new)


def _apply(sink, db: str, table: str, kept: list[_Kept], key_columns: list[str], stats: dict,
           writer_of: Callable[[bytes], Any]) -> list[tuple[int, Any, Any, str]]:
    """Apply the kept records run by run; a run the sink refuses is applied record by
    record, and the records it still refuses are dead letters.  ``writer_of``: a
    record's writer schema (the records whose images are not decoded are written from
    their bytes where the sink can: :meth:`~spark_jobs.sinks.base.TableSinkBase.apply_encoded`)."""
    dead = []
    for run in _runs(kept):
        schema = run[0].schema
        # A table the sink cannot create or alter is the sink's problem, not the records':
        # it fails the batch (retried) instead of filling the dead-letter topic.
        # (rekey: the records carry the table's newest key, so a sink table keyed otherwise
        # predates a primary key change and is rebuilt)
        sink.ensure_table(db, table, schema, key_columns, rekey=True)
        try:
            winners, fresh = _winners(run)
            res = None
            if all(map(_ROW_AT, winners)):  # images in their bytes: written straight from them
                encoded = list(map(_ENCODED, map(_ENCODED_FIELDS, winners)))
                res = sink.apply_encoded(db, table, schema, key_columns, encoded, writer_of(winners[0].value_bytes),
                                         rekey=True, fresh=fresh)
                if res is not None:
                    stats["from_bytes"] += len(winners)
                    stats["inserted"] += res.inserted
                    stats["fresh_refused"] += res.fresh_refused
            if res is None:
                res = sink.apply(db, table, schema, key_columns,
                                 [Change(None, k.op, _row_of_kept(k), k.position) for k in winners], rekey=True)
            stats["upserted"] += res.upserted
            stats["deleted"] += res.deleted
            stats["sink_skipped"] += res.skipped
        except SinkUnavailable:  # a lost database is not a poison record: the batch fails and is retried
            raise
        except Exception as exc:  # noqa: BLE001 - isolate the records the sink refuses
            log.warning("%s.%s: the sink refused a run of %d records (%s); applying one by one", db, table,
                        len(run), exc)
            refused = []
            for k in run:
                try:
                    rec = Change(None, k.op, _row_of_kept(k), k.position)
                    res = sink.apply(db, table, schema, key_columns, [rec], rekey=True)
                    stats["upserted"] += res.upserted
                    stats["deleted"] += res.deleted
                except SinkUnavailable:
                    raise
                except Exception as exc2:  # noqa: BLE001 - a poison record
                    refused.append((k.offset, k.key_bytes, k.value_bytes, f"sink {type(sink).__name__}: {exc2}"))
            if len(run) > 1 and len(refused) == len(run):
                raise exc  # every record refused: the sink is the problem
            dead += refused
    return dead


def _dead_letters(s: MergeSettings, topic: str, partition: int, dead: list) -> None:
    producer = _dlq_producer(s)
    for offset, key_b, value_b, reason in dead:
        headers = [("cdc.dlq.reason", reason.encode()[:4000]), ("cdc.dlq.topic", topic.encode()),
                   ("cdc.dlq.partition", str(partition).encode()), ("cdc.dlq.offset", str(offset).encode())]
        producer.produce(s.dlq_topic, value_b, key_b, headers=headers)
        log.error("dead letter: %s[%d]@%d: %s", topic, partition, offset, reason)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} dead letters not acknowledged by Kafka")


def arrow_function(s: MergeSettings, inputs: dict[str, tuple[dict | None, list[dict]]], schemas_end: int = 0,
                   sink_epoch: int = 0):
    """The ``mapInArrow`` function over ``key, value, topic, partition, offset``;
    ``inputs``: per ``"topic|partition"``, the state from the previous batch and this
    batch's markers of the table; ``schemas_end``, ``sink_epoch``: see :func:`merge_partition`.  Yields one
    ``state`` and one ``stats`` row per Kafka partition seen."""
    def run(batches):
        import pyarrow as pa
        _tune_worker_gc()
        groups: dict[tuple[str, int], list] = {}
        for b in batches:
            cols = b.to_pydict()
            for key, value, topic, partition, offset in zip(cols["key"], cols["value"], cols["topic"],
                                                           cols["partition"], cols["offset"]):
                groups.setdefault((topic, partition), []).append((offset, key, value))
        kinds, topics, parts, payloads = [], [], [], []
        for (topic, partition), records in groups.items():
            state, markers = inputs.get(f"{topic}|{partition}", (None, []))
            with gc_paused():  # (see _tune_worker_gc)
                new_state, stats = merge_partition(topic, partition, records, s, state, markers, schemas_end,
                                                   sink_epoch)
            for kind, payload in (("state", new_state), ("stats", stats)):
                kinds.append(kind)
                topics.append(topic)
                parts.append(partition)
                payloads.append(json.dumps(payload))
        yield pa.RecordBatch.from_pydict({"kind": kinds, "topic": topics, "partition": parts, "payload": payloads},
                                         schema=pa.schema([("kind", pa.string()), ("topic", pa.string()),
                                                           ("partition", pa.int32()), ("payload", pa.string())]))
    return run


def range_function(s: MergeSettings, opts: Any, schemas_end: int = 0, sink_epoch: int = 0):
    """The task function (``RDD.mapPartitions``) over ``(KafkaRange, state, markers)``
    items, one Kafka partition range each: reads the range itself with confluent-kafka
    (:func:`spark_jobs.kafka_source.read_messages`, with the source's options ``opts``:
    data loss is found as the source finds it) and merges it: the records never travel
    through the JVM.  Yields the ``(kind, topic, partition, payload)`` rows of
    :func:`arrow_function`."""
    def run(items):
        from spark_jobs.kafka_source import range_consumer, read_messages
        _tune_worker_gc()
        # one consumer per worker process and source options, reused task after task
        consumer = _cached(("range-consumer", repr(opts)), lambda: range_consumer(opts))
        # The collector is paused from the read on (see _tune_worker_gc): reading makes no
        # cycles either, and its messages and tuples started a collection every few thousand
        # (6% of the tasks' samples in a py-spy profile of ``cdc bench merge``).  (Reading the
        # task's next range in a thread while the current one merges was tried and left: the
        # steady rate fell, docs/merge-performance.md.)
        with gc_paused():
            for rng, state, markers in items:
                t0, c0 = time.monotonic(), time.thread_time()
                records = [] if rng.start == rng.end else [  # (empty: a partition holding rows, see merge_job)
                    (m.offset(), m.key(), m.value()) for msgs in read_messages(opts, rng, consumer=consumer)
                    for m in msgs]
                read_s, read_cpu_s = time.monotonic() - t0, time.thread_time() - c0
                new_state, stats = merge_partition(rng.topic, rng.partition, records, s, state, markers,
                                                   schemas_end, sink_epoch)
                del records
                stats["read_s"], stats["read_cpu_s"] = read_s, read_cpu_s
                yield "state", rng.topic, rng.partition, json.dumps(new_state)
                yield "stats", rng.topic, rng.partition, json.dumps(stats)
    return run
