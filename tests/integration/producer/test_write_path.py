"""Each table's rows take one write path (producer/write_path.py), chosen once per table.

On the embedded broker, with the producer's native client: rows encoded where they were read
go by the native emitter, and while a read-only chunk window of their table is in flight by the
records path, whose keys the window's changed-key set takes (the DBLog rule drops those chunk
rows); the rows of another table go on by the emitter meanwhile.  Whichever path wrote them, the
topic holds the records the Python way gives.  Transaction metadata takes every table to the
records path; the outbox table alone to the router.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from common.config import OutboxConfig
from contract.gtid import GtidSet
from contract.position import BinlogPosition
from contract.topics import offsets_topic
from producer.events.builder import EventBuilder
from producer.events.image_encoder import BinlogImageEncoder
from producer.events.outbox import OutboxRouter
from producer.kafka_writer import KafkaWriter
from producer.record_encoder import RecordEncoder
from producer.snapshot.chunks import InflightChunk
from producer.snapshot.coordinator import SnapshotCoordinator
from producer.snapshot.gtid_windows import Boundary
from producer.snapshot.state import KeyRange, TableJob
from producer.transaction_metadata import TransactionMetadata
from producer.write_path import EmitterPath, OutboxPath, RecordsPath, WritePaths
from tests.integration.producer.test_native_producer import PARTITIONS, _changes, _read_all
from tests.unit.producer.events.test_image_encoder import BENCH, ROWS, _table


class _Topics:
    """The native emitter, noting the topic of each rows event it is handed."""

    def __init__(self, emitter) -> None:
        self.emitter, self.topics = emitter, []

    def rows(self, topic, *args):
        self.topics.append(topic)
        return self.emitter.rows(topic, *args)


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)


def _rows(name: str):
    """Inserts of the benchmark rows into table ``db.<name>``, encoded as the reader process does."""
    table = _table(BENCH, [i != 0 for i in range(len(BENCH))], [0], name)
    return _changes("insert", BinlogImageEncoder(BENCH, EventBuilder("cdc", "p", 1).table_events(table)).encode(
        b"".join(ROWS) * 5, False), table)


def _coordinator() -> SnapshotCoordinator:
    def no_connection():
        raise AssertionError("the write paths never connect")
    return SnapshotCoordinator(signal_table="db.signals", chunk_size=10, captures=lambda db, table: True,
                               connect=no_connection, read_only=True)


def _window(coord: SnapshotCoordinator, table) -> InflightChunk:
    """A read-only chunk of ``table`` in flight, as the coordinator submits one."""
    at = BinlogPosition.from_binlog("mysql-bin.000007", 100)
    chunk = InflightChunk(len(coord.inflight) + 1, TableJob(table.qualified_name), KeyRange(None, [10]), table,
                          ["id"], Future(), quiet=Boundary(at, at, GtidSet()))
    coord.inflight[chunk.chunk_id] = chunk
    return chunk


def test_rows_go_by_the_emitter_but_a_tables_with_a_read_only_window_in_flight(stack, config, unique):
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    assert writer.emitter is not None
    writer.emitter = _Topics(writer.emitter)
    calls = writer.emitter.topics
    builder = EventBuilder(config.kafka.topic_prefix, "prod", 1)
    encoder = RecordEncoder(config.kafka, "avro", writer.produce)
    coord = _coordinator()
    paths = WritePaths(builder, encoder, writer, outbox=None, windows=coord, txn=None)
    a, b = _rows("a"), _rows("b")
    topic_a, topic_b = (builder.table_events(ch.table_def).topic for ch in (a, b))
    for topic in (topic_a, topic_b):
        writer.ensure_topic(topic, partitions=PARTITIONS)
    expected_a, expected_b = (builder.records(ch, 0, len(ch.rows), encoder) for ch in (a, b))
    path = paths.choose(("db", "a"))
    assert type(path) is EmitterPath and paths[("db", "a")] is path and paths.choose(("db", "b")) is path

    assert path.write(a, 0, len(a.rows), None) == (len(expected_a), len(expected_a))
    assert calls == [topic_a]  # by the emitter: no window in flight
    window = _window(coord, a.table_def)
    assert path.write(b, 0, len(b.rows), None) == (len(expected_b), len(expected_b))
    assert path.write(a, 0, len(a.rows), None) == (len(expected_a), len(expected_a))
    assert calls == [topic_a, topic_b]  # a's rows built here: their keys are the window's
    assert window.changed == {r[1] for r in expected_a}
    del coord.inflight[window.chunk_id]  # (the window closed)
    assert path.write(a, 3, len(a.rows), None) == (len(expected_a) - 3, len(expected_a) - 3)
    assert calls == [topic_a, topic_b, topic_a]
    writer.flush()
    writer.close()

    def got(topic):
        return sorted((key, value) for _, _, key, value, _ in _read_all(config, topic, unique))
    assert got(topic_a) == sorted([r[1:3] for r in expected_a] * 2 + [r[1:3] for r in expected_a[3:]])
    assert got(topic_b) == sorted(r[1:3] for r in expected_b)


def test_transaction_metadata_takes_every_table_to_the_records_path_the_outbox_table_to_the_router(stack, config,
                                                                                                    unique):
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    builder = EventBuilder(config.kafka.topic_prefix, "prod", 1)
    encoder = RecordEncoder(config.kafka, "avro", writer.produce)
    outbox = OutboxRouter(OutboxConfig(table="db.outbox"), config.kafka.topic_prefix)
    txn = TransactionMetadata(config.kafka.topic_prefix, writer.produce)
    plain = WritePaths(builder, encoder, writer, outbox=outbox, windows=None, txn=None)
    with_txn = WritePaths(builder, encoder, writer, outbox=outbox, windows=None, txn=txn)
    assert type(plain.choose(("db", "a"))) is EmitterPath
    assert type(plain.choose(("db", "outbox"))) is OutboxPath is type(with_txn.choose(("db", "outbox")))
    assert type(with_txn.choose(("db", "a"))) is RecordsPath
    assert type(plain.choose(("other", "outbox"))) is EmitterPath  # (routed by db and table)
    a = _rows("a")
    writer.ensure_topic(builder.table_events(a.table_def).topic, partitions=PARTITIONS)
    n = len(a.rows)
    assert with_txn.choose(("db", "a")).write(a, 0, n, None) == (n, n)
    assert txn.open is not None and txn.open["count"] == n  # (its BEGIN written before the rows)
    writer.flush()
    writer.close()
