"""The producer's own Kafka client (producer/_native_producer.c) writes to Kafka what the Python way writes.

The Python way is ``EventBuilder.records`` then ``KafkaWriter.produce_all``; the native one,
``EventBuilder.emit_encoded`` through ``KafkaWriter.produce_rows``.  Both write the same rows
into one topic of the embedded broker, and what is read back -- partition, key, value,
headers, order -- must be the same: inserts, deletes, updates keeping and changing their key,
tombstones, a start past the first row, records at or before a stored position left out, and
a local queue of a few records (it fills: the emitter stops, the writer polls, it goes on
after the last record it produced).  A record whose delivery fails reaches the writer's
delivery callback, as one produced by confluent-kafka's ``produce`` does.  The client is a
librdkafka handle of its own: its transactions commit and abort, a second writer of the same
name fences the first, and librdkafka's errors come as confluent-kafka raises them.

In debezium-json the emitter transcodes each record from the Avro body it joined
(``contract/codecs/avro_json.h``): held byte for byte to the records made from the events'
dicts, the producer's way without the transcoder.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import struct
import subprocess
import sys

import confluent_kafka
import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition

from common.kafka.partitioner import partition_of
from contract.position import BinlogPosition
from contract.topics import offsets_topic
from producer import _native_producer, kafka_writer, native_producer
from producer.binlog.reader import RowChanges
from producer.binlog.row_decoder import RowDecoder
from producer.errors import WriterError
from producer.events.builder import EventBuilder
from producer.events.row_encoder import encode_rows
from producer.kafka_writer import KafkaWriter
from producer.record_encoder import RecordEncoder
from producer.snapshot.chunks import ReleasedChunk
from tests.unit.producer.events.test_builder import FromDicts
from tests.unit.producer.events.test_image_encoder import BENCH, ROWS, _bench_encoder

PARTITIONS = 3
FORMATS = ["avro", "debezium-json"]


def _encoders(config, fmt: str, writer):
    """The emitter's record encoder, and the reference's."""
    out = RecordEncoder(config.kafka, fmt, writer.produce)
    return out, (out if fmt == "avro" else FromDicts(config.kafka, fmt, writer.produce))


def _changes(kind: str, rows, table) -> RowChanges:
    return RowChanges(kind, table.db, table.name, table, BinlogPosition.from_binlog("mysql-bin.000007", 1234), rows, 0,
                      1700000000000, "0-1-9", 42, "mysql-bin.000007", "mysql-bin.000007", 1000)


def _read_all(config, topic: str, unique) -> list[tuple]:
    """Every record of ``topic``: (partition, offset, key, value, headers), by partition."""
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": unique("g"),
                         "enable.auto.commit": False})
    ends = {}
    for p in range(PARTITIONS):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS) if ends[p]])
    out, seen = [], {p: 0 for p in range(PARTITIONS)}
    try:
        while any(seen[p] < ends[p] for p in range(PARTITIONS)):
            for msg in consumer.consume(1000, 2.0):
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
                seen[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r[0], r[1]))


class _Counting:
    """The native emitter, counting the calls that stopped at a full queue."""

    def __init__(self, emitter) -> None:
        self.emitter, self.stopped = emitter, 0

    def rows(self, *args):
        records, events, done = self.emitter.rows(*args)
        self.stopped += not done
        return records, events, done


@pytest.fixture
def small_queue(monkeypatch):
    """A local queue of 5 records: the emitter fills it many times over in one rows event."""
    monkeypatch.setattr(kafka_writer, "THROUGHPUT_SETTINGS",
                        {**kafka_writer.THROUGHPUT_SETTINGS, "queue.buffering.max.messages": 5, "linger.ms": 1})


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_the_native_emitter_writes_the_records_the_python_way_gives(stack, config, unique, small_queue, kind, fmt):
    te, encoder = _bench_encoder()
    key_change = ROWS[0][:2] + struct.pack("<i", 99) + ROWS[0][6:]
    # (updates: pairs of images; ROWS' keys all differ, so a key change each but the last pair's)
    data = b"".join(ROWS + [ROWS[0], key_change, ROWS[2], ROWS[2]]) * 20 if kind == "update" else \
        b"".join(ROWS) * 20
    rows = encoder.encode(data, kind == "update")
    ch = _changes(kind, rows, te.table)
    # (the reference from dicts: the same rows decoded, not encoded, where they were read)
    decoded = ch if fmt == "avro" else _changes(kind, RowDecoder(BENCH).decode_packed(data, kind == "update"), te.table)
    skip = BinlogPosition.from_binlog("mysql-bin.000007", 1234, 5).encode()
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    assert writer.emitter is not None  # (built here)
    writer.emitter = _Counting(writer.emitter)
    out, reference = _encoders(config, fmt, writer)
    expected = []
    for tombstones in (False, True):
        builder = EventBuilder(config.kafka.topic_prefix, "prod", 1, tombstones=tombstones)
        topic = builder.table_events(te.table).topic
        writer.ensure_topic(topic, partitions=PARTITIONS)
        for start, skip_up_to in [(0, None), (3, None), (0, skip)]:
            records = builder.records(decoded, start, len(rows), reference, skip_up_to=skip_up_to)
            native = builder.emit_encoded(ch, start, len(rows), out, writer, skip_up_to=skip_up_to)
            assert native == (len(records), sum(1 for r in records if r[2] is not None))
            expected += records
    writer.flush()
    writer.close()
    assert writer.emitter.stopped > 3  # the queue was full, again and again: each time it went on
    got = _read_all(config, topic, unique)
    assert len(got) == len(expected) and any(r[2] is None for r in expected) == (kind != "insert")
    if kind == "update":  # both kinds of update: one that keeps its key, one that changes it (d, c)
        schema = fastavro.parse_schema(builder.table_events(te.table).value_schema)
        ops = {json.loads(r[2])["payload"]["op"] if fmt != "avro" else
               fastavro.schemaless_reader(io.BytesIO(r[2][10:]), schema)["op"] for r in expected if r[2] is not None}
        assert ops == {"u", "c", "d"}  # (Avro: the values framed as single objects: 10 bytes, then the body)
    for p in range(PARTITIONS):
        mine = [(key, value, headers) for partition, _, key, value, headers in got if partition == p]
        theirs = [(key, value, [("cdc.position", position.encode())]) for _, key, value, position in expected
                  if partition_of(key, PARTITIONS) == p]
        assert mine == theirs


@pytest.mark.parametrize("fmt", FORMATS)
def test_snapshot_chunks_emitted_natively_are_the_records_chunk_records_gives(stack, config, unique, small_queue, fmt):
    """Chunk rows encoded where they were read (EncodedRows), op r: the same records, each at its
    position above the CLOSE marker (here across a change in the sequence's digit count)."""
    te, _ = _bench_encoder()
    table = te.table
    values = RowDecoder(BENCH).decode_packed(b"".join(ROWS) * 30, False).images
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    assert writer.emitter is not None
    out, reference = _encoders(config, fmt, writer)
    builder = EventBuilder(config.kafka.topic_prefix, "prod", 1)
    read = builder.read_table_events(table)
    writer.ensure_topic(read.topic, partitions=PARTITIONS)
    expected = []
    for close_row, count in [(0, 120), (95, 10), (9_999_999_000, 25)]:
        rows = encode_rows(read.encoder, builder.read_encoding(table).ident, tuple(table.column_names), values[:count])
        assert len(rows.bodies) == count and not rows.rest
        chunk = ReleasedChunk("snap-1", 3, table, rows, BinlogPosition.from_binlog("mysql-bin.000002", 400),
                              BinlogPosition.from_binlog("mysql-bin.000002", 900, close_row), ["id"])
        # (the reference from dicts: the rows' values, not encoded where they were read)
        expected += builder.chunk_records(chunk if fmt == "avro" else dataclasses.replace(
            chunk, rows=[dict(zip(table.column_names, v)) for v in values[:count]]), reference)
        assert builder.emit_chunk(chunk, out, writer) == count
    assert {r[3][-3:] for r in expected} >= {"096", "105"}  # (rows 96 to 105: two digits, then three)
    chunk = ReleasedChunk("snap-1", 4, table, encode_rows(read.encoder, builder.read_encoding(table).ident,
                                                          tuple(table.column_names), values[:2]),
                          BinlogPosition.from_binlog("mysql-bin.000002", 400),
                          BinlogPosition.from_binlog("mysql-bin.000002", 900, 9_999_999_998), ["id"])
    with pytest.raises(ValueError):  # a row past the sequence's 10 digits: refused, as chunk_records refuses it
        builder.emit_chunk(chunk, out, writer)
    writer.flush()
    writer.close()
    got = _read_all(config, read.topic, unique)
    assert len(got) == len(expected)
    for p in range(PARTITIONS):
        mine = [(key, value, headers) for partition, _, key, value, headers in got if partition == p]
        theirs = [(key, value, [("cdc.position", position.encode())]) for _, key, value, position in expected
                  if partition_of(key, PARTITIONS) == p]
        assert mine == theirs


def test_a_failed_delivery_of_a_natively_produced_record_stops_the_writer(config, unique):
    """No broker to take it: the record's delivery fails after message.timeout.ms, and the
    writer says so at the flush, as for a record produced by confluent-kafka's produce."""
    kafka = config.kafka.model_copy(deep=True)
    kafka.bootstrap_servers = "127.0.0.1:9"  # (the discard port: nothing listens)
    kafka.client = {"message.timeout.ms": 1500}
    writer = KafkaWriter(kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    assert writer.emitter is not None
    te, encoder = _bench_encoder()
    builder = EventBuilder(kafka.topic_prefix, "prod", 1)
    topic = builder.table_events(te.table).topic
    writer._topics.add(topic)  # (no broker to create it on)

    class Header:
        def header(self, schema, topic, role):
            return b"\xc3\x01" + bytes(8)

        def json_writer(self, schema, topic):
            return None

    rows = encoder.encode(b"".join(ROWS), False)
    assert builder.emit_encoded(_changes("insert", rows, te.table), 0, len(rows), Header(), writer) == (4, 4)
    with pytest.raises(WriterError, match=f"delivery to {topic} failed"):
        writer.flush()
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):  # (its librdkafka handle is gone: refused, not used)
        builder.emit_encoded(_changes("insert", rows, te.table), 0, len(rows), Header(), writer)


def _read_committed(config, topic: str, unique) -> list[bytes]:
    """The values of ``topic``'s committed records (a read_committed consumer, to the end)."""
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": unique("g"),
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            msgs = consumer.consume(100, 2.0)
            if not msgs:
                break
            out += [m.value() for m in msgs if m.error() is None]
            if msgs[-1].offset() >= end - 1:
                break
    finally:
        consumer.close()
    return out


def test_the_native_producers_transactions_commit_abort_and_fence(stack, config, unique):
    """A batch committed is read by a read_committed consumer with its offset record; one
    aborted (the writer closed in the middle) is not; a second writer of the same name fences
    the first, whose commit then fails with the fencing error."""
    name, topic, offsets = unique("w"), unique("t"), offsets_topic(unique("p"))
    writer = KafkaWriter(config.kafka, name, transactions=True, offsets_topic=offsets)
    assert writer.emitter is not None and writer.producer is writer.emitter  # (its own client, transactions too)
    writer.ensure_topic(topic)
    writer.ensure_topic(offsets)
    writer.produce(topic, b"k", b"committed", "0" * 30)
    writer.commit(b"offset", b"1")
    writer.produce(topic, b"k", b"aborted", "0" * 30)
    writer.flush()
    writer.close()  # (the open batch aborted)
    assert _read_committed(config, topic, unique) == [b"committed"]
    assert _read_committed(config, offsets, unique) == [b"1"]

    first = KafkaWriter(config.kafka, name, transactions=True, offsets_topic=offsets)
    first.produce(topic, b"k", b"fenced", "0" * 30)
    second = KafkaWriter(config.kafka, name, transactions=True, offsets_topic=offsets)  # (fences the first)
    with pytest.raises(WriterError, match="(?i)fenc"):
        first.commit(b"offset", b"2")
    first.close()
    second.produce(topic, b"k", b"second", "0" * 30)
    second.commit(b"offset", b"3")
    second.close()
    assert _read_committed(config, topic, unique) == [b"committed", b"second"]
    assert _read_committed(config, offsets, unique) == [b"1", b"3"]


def test_the_native_producer_is_a_librdkafka_client_of_its_own(config, unique):
    """Made from librdkafka settings (as text) and the two callbacks; a setting librdkafka
    refuses is raised as confluent-kafka raises it; closed, it refuses every call."""
    path = native_producer.librdkafka_file()
    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    assert os.path.dirname(path) == libs or not os.path.isdir(libs)  # (the wheel's own librdkafka)
    with pytest.raises(confluent_kafka.KafkaException, match="no.such.setting"):
        native_producer.open_native_producer({"no.such.setting": 1}, print, print)
    with pytest.raises(TypeError, match="text"):
        _native_producer.NativeProducer(path, {"linger.ms": 5}, print, print)
    assert native_producer.as_text({"enable.idempotence": True, "linger.ms": 5}) == \
        {"enable.idempotence": "true", "linger.ms": "5"}
    client = native_producer.open_native_producer({"bootstrap.servers": "127.0.0.1:9"}, print, print)
    client.produce("t", b"v", b"k", headers=[("h", b"1")])
    assert client.flush(0) == 1 == len(client)  # (no broker: the record waits in the queue)
    client.purge()
    client.close()
    assert len(client) == 0  # (the metrics' queue length, read from their thread, after the end too)
    for call in (lambda: client.produce("t", b"v"), lambda: client.poll(0), lambda: client.flush(0),
                 client.begin_transaction):
        with pytest.raises(RuntimeError, match="closed"):
            call()


def test_the_writer_takes_confluent_kafkas_producer_without_the_native_one(config, unique, monkeypatch):
    """CDC_NATIVE_PRODUCER=0: confluent-kafka's Producer, every record through produce_all."""
    monkeypatch.setenv(native_producer.NATIVE_ENV, "0")
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    assert writer.emitter is None and isinstance(writer.producer, confluent_kafka.Producer)
    writer.close()


def test_a_librdkafka_that_cannot_be_loaded_leaves_the_writer_confluent_kafkas_producer(tmp_path):
    """(In a process of its own: a librdkafka once loaded stays loaded.)"""
    code = ("from producer import native_producer as n\n"
            "n.librdkafka_file = lambda: '/nonexistent/librdkafka.so.1'\n"
            "print(n.open_native_producer({'bootstrap.servers': '127.0.0.1:9'}, print, print))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
    assert "native Kafka client is off" in out.stderr and "/nonexistent/librdkafka.so.1" in out.stderr
