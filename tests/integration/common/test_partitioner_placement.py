"""Where the producer's records land is where ``common.kafka.partitioner`` says: the merge
tasks rely on it to write PostgreSQL under their partition's turn."""

from __future__ import annotations

import random

from confluent_kafka import Consumer, TopicPartition

from common.kafka.partitioner import in_partition, partition_of
from contract.topics import offsets_topic
from producer.kafka_writer import KafkaWriter


def test_the_producers_records_are_where_the_partitioner_puts_their_keys(stack, config, unique):
    topic, parts = unique("placed"), 6
    writer = KafkaWriter(config.kafka, unique("w"), transactions=False, offsets_topic=offsets_topic(unique("p")))
    writer.ensure_topic(topic, partitions=parts)
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(400)] + [b'{"id":%d}' % i for i in range(200)]
    writer.produce_all([(topic, k, b"v", None) for k in keys])
    writer.flush()
    writer.close()
    consumer = Consumer({"bootstrap.servers": config.kafka.bootstrap_servers, "group.id": unique("g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    where: dict[int, list[bytes]] = {}
    try:
        got = 0
        while got < len(keys):
            for msg in consumer.consume(1000, 1.0):
                assert msg.error() is None, msg.error()
                where.setdefault(msg.partition(), []).append(msg.key() or b"")
                got += 1
    finally:
        consumer.close()
    assert len(where) == parts  # (the keys spread over every partition)
    for p, ks in where.items():
        assert in_partition(ks, parts, p), [(k, partition_of(k, parts)) for k in ks if partition_of(k, parts) != p][:5]
    assert not in_partition(where[0] + where[1][:1], parts, 0)
