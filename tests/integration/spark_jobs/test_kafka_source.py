"""The cdc-kafka Python streaming source against the real broker of the test stack.

One SparkSession (local[2]) for the module; every test uses its own topics and
checkpoint directory.  Records are produced with confluent-kafka, read back through
Structured Streaming and compared by (topic, partition, offset) and content.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common.kafka.offsets import end_offsets
from spark_jobs.input.available_now import run_available_now
from spark_jobs.errors import KafkaDataLossError, KafkaReadTimeout
from spark_jobs.input.kafka_source import SCHEMA, KafkaRange, SourceOptions, parse_options, read_range
from spark_jobs.spark_session import build_session


@pytest.fixture(scope="module")
def spark() -> Iterator:
    session = build_session(master="local[2]", app_name="test-kafka-source",
                            conf={"spark.sql.streaming.stopTimeout": "30s"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def test_the_session_keeps_its_scratch_space_where_a_later_start_clears_it(spark):
    """The driver's files (the jars of ``spark.jars`` it copies, its block manager's) go to
    this process's :func:`scratch_dir`, whose leftovers a later process removes once this one
    has ended (a killed JVM leaves them: 84 MB with the lake connectors, each time)."""
    from pyspark import SparkFiles

    from spark_jobs.spark_session import scratch_dir
    here = scratch_dir()
    # given as the JVM's SPARK_LOCAL_DIRS: as spark.local.dir, Spark warned at each start that a
    # cluster manager's value overrides it; not left in this process's environment either
    assert spark.conf.get("spark.local.dir", None) is None
    assert "SPARK_LOCAL_DIRS" not in os.environ
    assert Path(SparkFiles.getRootDirectory()).is_relative_to(here)
    assert any(here.glob("blockmgr-*"))


def _bootstrap(config) -> str:
    return config.kafka.bootstrap_servers


def _create(bs: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        fut.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} did not appear")


def _produce(bs: str, topic: str, n: int, partitions: int, *, first: int = 0, **conf) -> dict[str, int]:
    """``n`` records, key ``str(i)``, value ``v<i>``, round robin over the partitions;
    odd records carry a header.  Returns ``{value: partition}``."""
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, **conf})
    sent = {}
    for i in range(first, first + n):
        part = i % partitions
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=part,
                  headers=[("n", str(i).encode())] if i % 2 else None)
        sent[f"v{i}"] = part
    assert p.flush(30) == 0
    return sent


class Collector:
    """foreachBatch target: keeps every batch's rows as plain tuples (driver side)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple]]] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestampType, r.headers)
                for r in df.collect()]
        self.batches.append((batch_id, rows))

    @property
    def rows(self) -> list[tuple]:
        return [r for _, rows in self.batches for r in rows]

    def values(self) -> list[str]:
        return [r[4].decode() for r in self.rows]


def _reader(spark, bs: str, **options):
    r = spark.readStream.format("cdc-kafka").option("kafka.bootstrap.servers", bs)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _available_now(spark, bs: str, checkpoint: Path, collector: Collector | None = None, **options) -> Collector:
    """What the partitions hold now, read in batches (spark_jobs.input.available_now)."""
    collector = collector or Collector()
    writer = _reader(spark, bs, **options).writeStream.foreachBatch(collector).option("checkpointLocation",
                                                                                       str(checkpoint))
    q = run_available_now(lambda every: writer.trigger(processingTime=every).start(),
                          {"kafka.bootstrap.servers": bs, **{k: str(v) for k, v in options.items()}}, checkpoint,
                          timeout_s=90)
    assert q.exception() is None, q.exception()
    return collector


def test_many_record_batches_exactly_once(spark, config, topic, tmp_path):
    bs = _bootstrap(config)
    _create(bs, topic, 3)
    sent = _produce(bs, topic, 5000, 3, **{"linger.ms": 1000, "batch.num.messages": 1000})
    ends = end_offsets(bs, [(topic, p) for p in range(3)])
    assert sum(end for _, end in ends.values()) == 5000

    df = _reader(spark, bs, subscribe=topic, startingOffsets="earliest")
    assert df.schema == SCHEMA
    got = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="earliest")

    rows = got.rows
    assert len(rows) == 5000
    assert sorted(got.values()) == sorted(sent)  # every record exactly once
    assert {(r[1], r[2]) for r in rows} == {(p, o) for p in range(3) for o in range(ends[(topic, p)][1])}
    for t, part, off, key, value, ts, ts_type, headers in rows:
        i = int(key)
        assert t == topic and value == f"v{i}".encode() and part == sent[value.decode()]
        assert ts is not None and ts_type == 0  # CreateTime
        assert headers == ([("n", str(i).encode())] if i % 2 else None)

    # A second run on the same checkpoint has nothing new to read.
    again = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="earliest")
    assert again.rows == []


def test_transactions_committed_records_arrive_and_query_stops(spark, config, topic, unique, tmp_path):
    bs = _bootstrap(config)
    _create(bs, topic, 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique("txn"), "linger.ms": 5})
    p.init_transactions(30)
    committed: set[str] = set()

    def txn(start: int, n: int, commit: bool) -> None:
        p.begin_transaction()
        for i in range(start, start + n):
            p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
        if commit:
            p.commit_transaction(30)
            committed.update(f"v{i}" for i in range(start, start + n))
        else:
            p.flush(30)
            p.abort_transaction(30)

    txn(0, 300, True)
    txn(300, 40, False)
    txn(340, 300, True)  # the partitions end with a commit marker: no record at end - 1
    t0 = time.monotonic()
    got = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="earliest")
    assert time.monotonic() - t0 < 60
    values = got.values()
    assert set(values) == committed  # the aborted transaction's records are not read (read_committed)
    assert len(values) == len(set(values))  # nothing twice
    assert len({(r[1], r[2]) for r in got.rows}) == len(values)


def test_max_offsets_per_trigger_splits_the_backlog(spark, config, topic, tmp_path):
    bs = _bootstrap(config)
    _create(bs, topic, 3)
    sent = _produce(bs, topic, 900, 3, **{"linger.ms": 200})
    got = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="earliest",
                         maxOffsetsPerTrigger=250)
    sizes = [len(rows) for _, rows in got.batches if rows]
    assert len(sizes) >= 4, sizes
    assert all(s <= 250 for s in sizes), sizes
    assert sum(sizes) == 900
    assert sorted(got.values()) == sorted(sent)


def test_starting_offsets_latest_then_resume(spark, config, topic, tmp_path):
    bs = _bootstrap(config)
    _create(bs, topic, 2)
    _produce(bs, topic, 100, 2)
    first = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="latest")
    assert first.rows == []
    # The start resolved by the first run is in the checkpoint: the next run reads what
    # arrived in between, and only that.
    later = _produce(bs, topic, 50, 2, first=100)
    second = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets="latest")
    assert sorted(second.values()) == sorted(later)


def test_starting_offsets_json(spark, config, topic, tmp_path):
    bs = _bootstrap(config)
    _create(bs, topic, 2)
    sent = _produce(bs, topic, 40, 2)  # 20 per partition, offsets 0..19
    start = json.dumps({topic: {"0": 12, "1": -2}})
    got = _available_now(spark, bs, tmp_path / "ck", subscribe=topic, startingOffsets=start)
    offsets = sorted((r[1], r[2]) for r in got.rows)
    assert offsets == [(0, o) for o in range(12, 20)] + [(1, o) for o in range(20)]
    assert all(sent[r[4].decode()] == r[1] for r in got.rows)


def test_subscribe_pattern_picks_up_new_topic(spark, config, unique, tmp_path):
    bs = _bootstrap(config)
    prefix = unique("pat")
    old, new = f"{prefix}.old", f"{prefix}.new"
    _create(bs, old, 2)
    sent_old = _produce(bs, old, 30, 2)
    collector = Collector()
    q = (_reader(spark, bs, subscribePattern=rf"{prefix}\..*", startingOffsets="earliest")
         .writeStream.foreachBatch(collector).trigger(processingTime="1 second")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 60
            while len(collector.rows) < n:
                assert q.exception() is None, q.exception()
                assert time.monotonic() < deadline, f"saw {len(collector.rows)} of {n} records"
                time.sleep(0.3)
        wait_for(30)
        _create(bs, new, 1)
        sent_new = _produce(bs, new, 20, 1, first=1000)
        wait_for(50)
    finally:
        q.stop()
    assert q.exception() is None
    by_topic = Counter(r[0] for r in collector.rows)
    assert by_topic == {old: 30, new: 20}
    assert sorted(collector.values()) == sorted([*sent_old, *sent_new])


def test_an_idle_reader_waits_for_records_and_answers_when_a_transaction_commits(config, topic):
    """``idleWaitMs``: with nothing new, ``latestOffset`` waits on a fetch the broker holds,
    and answers with the new end when records are committed (a transaction's, so the wait
    ends at its commit, not at its first record); with nothing written it answers the start
    unchanged once the wait is over.  What ended each wait is asserted, not how long it took."""
    import threading

    from confluent_kafka import Producer

    from spark_jobs.input.kafka_source import CdcKafkaStreamReader
    bs = _bootstrap(config)
    _create(bs, topic, 2)
    _produce(bs, topic, 3, 2)
    reader = CdcKafkaStreamReader(parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic,
                                                 "startingOffsets": "earliest", "idleWaitMs": "300"}))
    try:
        first = reader.latestOffset()
        reader.partitions(reader.initialOffset(), first)  # (Spark plans the batch: the next starts there)
        assert reader.latestOffset() == first and reader.last_wait == "timeout"  # nothing new: the start again

        reader.opts = dataclasses.replace(reader.opts, idle_wait_s=120.0)
        producer = Producer({"bootstrap.servers": bs, "transactional.id": f"{topic}-tx"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"late", partition=1)
        producer.flush(30)  # (in the log, not committed: a read_committed wait does not end on it)

        def commit_later():
            time.sleep(1.0)
            producer.commit_transaction(30)
        committer = threading.Thread(target=commit_later)
        committer.start()
        answer = reader.latestOffset()
        committer.join(60)
        assert reader.last_wait == "record"
        ends = {tp: hi for tp, (_, hi) in end_offsets(bs, [(topic, 0), (topic, 1)]).items()}
        assert json.loads(json.dumps(answer))[topic] == {"0": ends[(topic, 0)], "1": ends[(topic, 1)]}
        assert answer != first
    finally:
        reader.stop()


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t"}, "KafkaSourceOptionError: option kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "subscribePattern": "t.*"},
     "KafkaSourceOptionError: options subscribe and subscribePattern are exclusive"),
    ({"kafka.bootstrap.servers": "127.0.0.1:1"}, "KafkaSourceOptionError: .* needs one of the options subscribe or"),
])
def test_clear_errors_for_bad_options(spark, options, message):
    r = spark.readStream.format("cdc-kafka")
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises(Exception, match=message):
        r.load()


def test_a_range_past_the_end_is_data_loss_not_a_hang(config, topic):
    """A planned range whose records are not in the log (removed after the batch was
    planned) fails with what was lost; with failOnDataLoss=false the task gives what is
    there and ends."""
    bs = _bootstrap(config)
    _create(bs, topic, 1)
    _produce(bs, topic, 10, 1)
    opts = parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic, "kafkaConsumer.pollTimeoutMs": "1500"})
    assert isinstance(opts, SourceOptions)
    t0 = time.monotonic()
    with pytest.raises(KafkaDataLossError, match=rf"{topic} partition 0: planned range \[0, 100\), broker "
                                                 r"earliest offset 0, latest 10: records the batch was planned"):
        list(read_range(opts, KafkaRange(topic, 0, 0, 100)))
    assert time.monotonic() - t0 < 20
    lenient = parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic, "kafkaConsumer.pollTimeoutMs": "1500",
                             "failOnDataLoss": "false"})
    batches = list(read_range(lenient, KafkaRange(topic, 0, 0, 100)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(10))
    # The same range within the end reads exactly its records.
    batches = list(read_range(opts, KafkaRange(topic, 0, 3, 8)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == [3, 4, 5, 6, 7]


def test_read_gives_up_with_a_clear_error_when_the_broker_does_not_answer(stack, config, topic):
    bs = _bootstrap(config)
    _create(bs, topic, 1)
    _produce(bs, topic, 10, 1)
    opts = parse_options({"kafka.bootstrap.servers": bs, "subscribe": topic, "kafkaConsumer.pollTimeoutMs": "2000",
                          "fetchOffset.timeoutMs": "1000"})
    t0 = time.monotonic()
    with stack.broker_frozen():
        with pytest.raises(KafkaReadTimeout, match=rf"{topic}/0 made no progress"):
            list(read_range(opts, KafkaRange(topic, 0, 0, 10)))
    assert time.monotonic() - t0 < 30


def test_spark_python_workers_import_the_installed_pyspark(spark):
    """``make venv`` sets pip's ``pyspark.zip`` aside (cdc/pyspark_zip.py): Spark's Python
    workers import PySpark from site-packages, with its bytecode, not from the zip (where
    each new process compiled every module it imported)."""
    files = spark.sparkContext.parallelize(range(2), 2).map(lambda _: __import__("pyspark").__file__).collect()
    assert files and all(".zip" not in f and f.endswith("__init__.py") for f in files), files
