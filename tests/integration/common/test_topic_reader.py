"""``read_partition`` against the real broker: a range that ends at a transaction's commit
marker gives its records and none past its end, however the consumer's batches fall; a
partition deeper than a 10 ms fetch wait can answer is read all the same."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer

from common.errors import PartitionStalled
from common.kafka.clients import ensure_topics
from common.kafka.fetch_wait import AdaptiveConsumer, FetchWait
from common.kafka.topic_reader import read_partition, topic_reader_config


def _committed(bs: str, topic: str, transactions: int, size: int) -> None:
    """``transactions`` committed transactions of ``size`` records each on partition 0: their
    offsets, then one offset for each commit marker."""
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    for t in range(transactions):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, value=b"%d.%d" % (t, i), partition=0)
        producer.commit_transaction(30)


@pytest.mark.parametrize("batch", [1, 3, 4, 10, 1000])
def test_a_range_ending_at_a_commit_marker_gives_nothing_past_its_end(stack, config, topic, batch):
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    _committed(bs, topic, 3, 3)  # records 0-2, marker 3, records 4-6, marker 7, records 8-10, marker 11
    consumer = AdaptiveConsumer(topic_reader_config(bs))
    try:
        ranges = {(0, 4): [0, 1, 2], (4, 8): [4, 5, 6], (0, 8): [0, 1, 2, 4, 5, 6], (2, 11): [2, 4, 5, 6, 8, 9, 10]}
        for (start, end), want in ranges.items():
            for _ in range(3):  # (the consumer's fetch may have more or less in hand each time)
                got = [m.offset() for msgs in read_partition(consumer, topic, 0, start, end, timeout=30, batch=batch)
                       for m in msgs]
                assert got == want, (start, end, batch)
    finally:
        consumer.close()


def test_a_range_from_the_logical_beginning_reads_from_the_first_record(stack, config, topic):
    """``start`` = OFFSET_BEGINNING on a consumer that has never seen the topic: the topic's
    metadata is asked for first (without it librdkafka's look-up of the offset fails and is
    retried 500 ms later), and the range holds every record from the first one."""
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    _committed(bs, topic, 2, 3)  # records 0-2, marker 3, records 4-6, marker 7
    for end, want in ((3, [0, 1, 2]), (8, [0, 1, 2, 4, 5, 6])):
        consumer = AdaptiveConsumer(topic_reader_config(bs))
        try:
            got = [m.offset() for msgs in read_partition(consumer, topic, 0, OFFSET_BEGINNING, end, timeout=30)
                   for m in msgs]
        finally:
            consumer.close()
        assert got == want


def test_a_partition_too_deep_for_a_short_fetch_wait_is_read_with_a_longer_one(stack, config, topic):
    """The embedded broker lists every batch of a partition on each fetch and answers empty
    when the wait runs out first: with 40,000 one-record batches a reader stuck at 10 ms
    gets nothing (the endurance issue's stall); the reader's wait grows and it reads."""
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1,
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(40_000):
        producer.produce(topic, value=b"%d" % i, partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    stuck = AdaptiveConsumer(topic_reader_config(bs), FetchWait(10, 10))
    try:
        with pytest.raises(PartitionStalled):
            list(read_partition(stuck, topic, 0, 20_000, 20_100, timeout=5))
    finally:
        stuck.close()
    reader = AdaptiveConsumer(topic_reader_config(bs))
    try:
        got = [m.value() for msgs in read_partition(reader, topic, 0, 20_000, 20_100, timeout=30) for m in msgs]
        assert got == [b"%d" % i for i in range(20_000, 20_100)]
        assert reader.wait.ms > 10 and reader.rebuilds >= 1
        # the next read of the same partition starts with the wait it learned
        got = [m.offset() for msgs in read_partition(reader, topic, 0, 39_000, 39_010, timeout=30) for m in msgs]
        assert got == list(range(39_000, 39_010))
    finally:
        reader.close()
