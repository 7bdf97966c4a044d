"""``read_partition`` against the real broker: a range that ends at a transaction's commit
marker gives its records and none past its end, however the consumer's batches fall; a deep
partition is read from its middle with the readers' 10 ms fetch wait."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common.kafka.clients import ensure_topics
from common.kafka.topic_reader import READ_AHEAD, read_partition, topic_reader_config
from tests.producer_helpers import ROOT


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
    consumer = Consumer(topic_reader_config(bs))
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
        consumer = Consumer(topic_reader_config(bs))
        try:
            got = [m.offset() for msgs in read_partition(consumer, topic, 0, OFFSET_BEGINNING, end, timeout=30)
                   for m in msgs]
        finally:
            consumer.close()
        assert got == want


def test_a_deep_partition_is_read_from_its_middle_with_a_10_ms_fetch_wait(stack, config, topic):
    """40,000 one-record batches (the depth at which the stand-in broker of before answered a
    10 ms fetch with nothing, for good): Kafka finds the offset through its index, and a reader
    with the 10 ms wait reads from the middle at once."""
    bs = config.kafka.bootstrap_servers
    ensure_topics(config.kafka, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1,
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(40_000):
        producer.produce(topic, value=b"%d" % i, partition=0)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    assert topic_reader_config(bs)["fetch.wait.max.ms"] == READ_AHEAD["fetch.wait.max.ms"] == 10
    reader = Consumer(topic_reader_config(bs))
    try:
        got = [m.value() for msgs in read_partition(reader, topic, 0, 20_000, 20_100, timeout=5) for m in msgs]
        assert got == [b"%d" % i for i in range(20_000, 20_100)]
        got = [m.offset() for msgs in read_partition(reader, topic, 0, 39_000, 39_010, timeout=5) for m in msgs]
        assert got == list(range(39_000, 39_010))
    finally:
        reader.close()


_WAITING_READER = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    from common.kafka.topic_reader import read_partition, topic_reader_config
    bootstrap, topic = sys.argv[1:3]
    consumer = Consumer(topic_reader_config(bootstrap))
    try:
        for msgs in read_partition(consumer, topic, 0, 0, 1000, timeout=10):  # 10 records there: then it waits, fetching
            print(f"read {len(msgs)}", flush=True)
    except Exception as exc:
        print(f"raised {type(exc).__name__}: {exc}")
    finally:
        consumer.close()
    print("alive")
""")


def test_a_reader_whose_topic_is_deleted_under_it_carries_on_and_reports(stack, config, unique):
    """A reader (in a process of its own) is fetching when its topic is deleted: it survives and
    reports the read stalled.  (librdkafka 2.5-2.16 died with SIGSEGV on the stand-in broker's
    answer to such a fetch, so the merge job's driver read Kafka in child processes; on Kafka
    it need not.)"""
    bs, topic = config.kafka.bootstrap_servers, unique("gone")
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bs})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    reader = subprocess.Popen([sys.executable, "-c", _WAITING_READER, bs, topic], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines, read = [], 0
    while read < 10:  # (the reader has read the 10 records: it is fetching past them)
        lines.append(reader.stdout.readline())
        assert lines[-1].startswith("read "), lines
        read += int(lines[-1].split()[1])
    admin.delete_topics([topic])[topic].result(30)
    out, _ = reader.communicate(timeout=90)
    assert reader.returncode == 0, out
    assert "raised PartitionStalled" in out and f"{topic}[0] made no progress" in out and out.endswith("alive\n")
