"""``end_offsets`` against Apache Kafka: open and aborted transactions, a busy transactional
producer, speed and the timeout.  (The stand-in broker of before answered ListOffsets
(read_committed) with 0 while any transaction was open: these tests failed with it.)
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from common.errors import OffsetLookupError
from common.kafka.clients import ensure_topics
from common.kafka.offsets import end_offsets

UNCOMMITTED = {"isolation.level": "read_uncommitted"}


def _read(bootstrap: str, topic: str, part: int, end: int, isolation: str, *,
          timeout: float = 30.0) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of the records with offset < ``end`` that a consumer with
    ``isolation`` reads from 0; fails if its position does not reach ``end`` in time
    (what a reader given a too-high end would do: wait for records it cannot see)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-read-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, part, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None and msg.offset() < end:
                    got.append((msg.offset(), msg.value()))
            pos = consumer.position([TopicPartition(topic, part)])[0].offset
            if pos >= end or (got and got[-1][0] == end - 1):
                return got
            assert time.monotonic() < deadline, f"{isolation} reader of {topic}[{part}] stuck at {pos}, end {end}"
    finally:
        consumer.close()


def _one_committed_one_open(bs: str, topic: str, committed: tuple[bytes, int], left_open: tuple[bytes, int], *,
                            linger_ms: int = 5) -> Producer:
    """A transactional producer that wrote ``committed`` (value prefix, count) to partition 0
    in a committed transaction, then ``left_open`` in one it left open (its records in the
    log); returned, to commit or abort it."""
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{topic}", "linger.ms": linger_ms,
                         "batch.num.messages": 100000})
    producer.init_transactions(30)
    for (prefix, n), commit in ((committed, True), (left_open, False)):
        producer.begin_transaction()
        for i in range(n):
            producer.produce(topic, value=prefix + b"%d" % i, partition=0)
        if commit:
            producer.commit_transaction(30)
    producer.flush(30)
    return producer


def _until_end(end_now, at_least: int, timeout: float = 30.0) -> int:
    """``end_now()`` asked until it is at least ``at_least`` (or ``timeout`` passed: the last
    answer).  A transaction's commit returns once its coordinator logged the
    decision; the commit markers reach the partitions after that, and the end a read_committed
    consumer sees (the last stable offset) moves only then."""
    deadline = time.monotonic() + timeout
    while True:
        end = end_now()
        if end >= at_least or time.monotonic() > deadline:
            return end
        time.sleep(0.02)


def test_end_offsets_stop_before_an_open_transaction_and_move_on_its_commit(stack, config, topic):
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    tp = (topic, 0)
    producer = _one_committed_one_open(bs, topic, (b"c", 1000), (b"o", 500), linger_ms=200)
    open_txn = True
    try:
        low, end = end_offsets(bs, [tp])[tp]
        _, hw = end_offsets(bs, [tp], client_config=UNCOMMITTED)[tp]
        assert low == 0
        # read_uncommitted: the high watermark, just past the last open-transaction record.
        everything = _read(bs, topic, 0, hw, "read_uncommitted")
        assert len(everything) == 1500 and everything[-1] == (hw - 1, b"o499")
        last_committed = max(off for off, v in everything if v.startswith(b"c"))
        first_open = min(off for off, v in everything if v.startswith(b"o"))
        # read_committed: at least past the last committed record (and its commit marker
        # when the broker counts it), never into the open transaction.
        assert last_committed + 1 <= end <= first_open
        committed = _read(bs, topic, 0, end, "read_committed")
        assert [v for _, v in committed] == [b"c%d" % i for i in range(1000)]

        producer.commit_transaction(30)
        open_txn = False
        # (the coordinator writes the commit marker after it answered the commit: waited for)
        end2 = _until_end(lambda: end_offsets(bs, [tp])[tp][1], hw + 1)
        _, hw2 = end_offsets(bs, [tp], client_config=UNCOMMITTED)[tp]
        assert end2 == hw2 >= hw + 1  # the commit marker of the second transaction is counted
        committed = _read(bs, topic, 0, end2, "read_committed")
        assert [v for _, v in committed] == [b"c%d" % i for i in range(1000)] + [b"o%d" % i for i in range(500)]
    finally:
        if open_txn:
            producer.abort_transaction(30)


def test_end_offsets_keep_up_with_a_producer_that_always_has_a_transaction_open(stack, config, topic):
    """The binlog producer's pattern: transactions committed back to back, so one is open
    nearly all the time."""
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=2)
    parts = [(topic, 0), (topic, 1)]
    stop, first_commit = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    txns = [0]

    def produce() -> None:
        try:
            producer = Producer({"bootstrap.servers": bs, "transactional.id": f"loop-{topic}", "linger.ms": 5})
            producer.init_transactions(30)
            while not stop.is_set():
                producer.begin_transaction()
                for i in range(20):
                    producer.produce(topic, value=f"{txns[0]}:{i}".encode(), partition=i % 2)
                producer.flush(30)
                time.sleep(0.005)  # the records sit in the log, uncommitted, for a moment
                producer.commit_transaction(30)
                txns[0] += 1
                first_commit.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
            first_commit.set()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        assert first_commit.wait(60)
        calls, took = [], []
        for _ in range(50):
            t0 = time.perf_counter()
            calls.append(end_offsets(bs, parts))
            took.append(time.perf_counter() - t0)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert not thread.is_alive()
    print(f"{txns[0]} transactions; end_offsets took median {statistics.median(took):.3f}s, max {max(took):.3f}s")

    # Every end is one the log reached and stands at a transaction's boundary (0, or just past
    # a commit marker: the offsets a read_uncommitted reader skips), never inside one, and
    # never moves backwards.
    for tp in parts:
        ends = [call[tp][1] for call in calls]
        assert sum(1 for e in ends if e > 0) >= 0.9 * len(ends), ends
        assert ends[-1] > ends[0], ends
        _, final = end_offsets(bs, [tp])[tp]
        assert all(e <= final for e in ends)
        seen = {off for off, _ in _read(bs, *tp, final, "read_uncommitted")}
        boundaries = {0} | {off + 1 for off in range(final) if off not in seen}
        assert ends == sorted(ends), f"{tp}: the end moved backwards: {ends}"
        assert [e for e in ends if e not in boundaries] == [], f"{tp}: ends inside a transaction: {ends}"
    for tp in parts:
        _, final = end_offsets(bs, [tp])[tp]
        records = _read(bs, *tp, final, "read_committed")
        assert len(records) == 10 * txns[0]
        counts = Counter(value.decode().split(":")[0] for _, value in records)
        assert set(counts.values()) == {10}, counts  # (each transaction's ten records of the partition)


def test_end_offsets_of_ten_partitions_are_quick(stack, config, topic):
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=10)
    parts = [(topic, p) for p in range(10)]
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 50})
    for i in range(8000):  # partitions 8 and 9 stay empty
        producer.produce(topic, value=b"x" * 100, partition=i % 8)
    producer.flush(30)
    took = []
    for _ in range(10):
        t0 = time.perf_counter()
        ends = end_offsets(bs, parts)
        took.append(time.perf_counter() - t0)
    assert ends == {tp: (0, 1000 if tp[1] < 8 else 0) for tp in parts}
    print(f"10 partitions: median {statistics.median(took):.3f}s, max {max(took):.3f}s")
    assert statistics.median(took) < 0.5


def test_an_aborted_transaction_is_never_read_committed(stack, config, topic):
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    tp = (topic, 0)
    producer = _one_committed_one_open(bs, topic, (b"kept", 10), (b"gone", 5))
    assert end_offsets(bs, [tp])[tp] == (0, 11)  # the ten and their commit marker
    assert end_offsets(bs, [tp], client_config=UNCOMMITTED)[tp] == (0, 16)
    producer.abort_transaction(30)
    assert _until_end(lambda: end_offsets(bs, [tp])[tp][1], 17) == 17  # (the abort marker: after the answer)
    assert end_offsets(bs, [tp])[tp] == end_offsets(bs, [tp], client_config=UNCOMMITTED)[tp] == (0, 17)
    assert [v for _, v in _read(bs, topic, 0, 17, "read_committed")] == [b"kept%d" % i for i in range(10)]


def test_end_offsets_give_up_with_offset_lookup_error_when_the_broker_does_not_answer(stack, config, topic):
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=2)
    t0 = time.monotonic()
    with stack.broker_frozen(), pytest.raises(OffsetLookupError):
        end_offsets(bs, [(topic, 0), (topic, 1)], timeout=2.0)
    assert time.monotonic() - t0 < 8
    assert end_offsets(bs, [(topic, 0), (topic, 1)]) == {(topic, 0): (0, 0), (topic, 1): (0, 0)}


def test_the_merge_jobs_driver_asks_one_kept_consumer_and_sees_each_commit(stack, config, topic):
    """The driver's look-ups (every batch's plan) ask one consumer they keep (issue 70): it
    still stops before an open transaction and moves on its commit, a topic made since is
    found, a failed look-up lets it go, and after ``close`` a look-up makes it again."""
    from spark_jobs.input.driver_kafka import DriverKafka

    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    tp = (topic, 0)
    kafka = DriverKafka(config.kafka, config.kafka.client_settings())
    assert kafka.offsets_now([tp]) == {tp: (0, 0)}
    kept = kafka.offsets_consumer
    producer = _one_committed_one_open(bs, topic, (b"c", 100), (b"o", 50))
    try:
        _, end = kafka.end_offsets([tp])[tp]
        assert 100 <= end < 150
        producer.commit_transaction(30)
        assert _until_end(lambda: kafka.end_offsets([tp])[tp][1], 151) >= 151  # (the marker: after the answer)
        later = f"{topic}-later"
        ensure_topics(config.kafka, [later], partitions=2)
        assert kafka.offsets_now([(later, 0), (later, 1), (f"{topic}-none", 0)]) == {(later, 0): (0, 0),
                                                                                    (later, 1): (0, 0)}
        assert kafka.offsets_consumer is kept
        # a look-up that fails lets the kept consumer go (its metadata may be stale: a node went away
        # and came back): asked again of a new one, and the next look-up makes one again
        with pytest.raises(KafkaException):
            kafka.end_offsets([(f"{topic}-none", 0)])
        assert kafka.offsets_consumer is None
        assert kafka.end_offsets([tp])[tp][1] >= 151 and kafka.offsets_consumer not in (None, kept)
        kafka.close()
        assert kafka.offsets_consumer is None
        assert kafka.end_offsets([tp])[tp][1] >= 151 and kafka.offsets_consumer is not None
    finally:
        kafka.close()


def test_a_listed_partition_unknown_to_the_node_asked_is_asked_again(stack, config, unique):
    """A partition the caller listed from the cluster's metadata, unknown to the node asked
    (a topic made a moment ago; seen in the broker-kill chaos run, which then stopped the
    producer at its start): ``listed`` asks again until the node knows it; unlisted, the
    ``KafkaException`` of an unknown partition comes at once, as before."""
    bs, topic = config.kafka.bootstrap_servers, unique("late")
    with pytest.raises(KafkaException):
        end_offsets(bs, [(topic, 0)])
    made = threading.Timer(1.0, lambda: ensure_topics(config.kafka, [topic], partitions=1))
    made.start()
    try:
        assert end_offsets(bs, [(topic, 0)], listed=True) == {(topic, 0): (0, 0)}
    finally:
        made.join()
