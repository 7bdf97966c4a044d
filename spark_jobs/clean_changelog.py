"""The clean changelog topics ``<prefix>.clean.<db>.<table>``: written without copies.

Partition ``p`` of a table topic is cleaned into partition ``p`` of its clean topic (the
clean topic has at least as many partitions), by one task at a time, in position order,
with an idempotent producer.  So the clean partition's last record tells how far an
earlier attempt got: a retried task or a replayed micro-batch skips every record at or
below that position and the topic never holds a copy, without Kafka transactions.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_partition
from contract.envelope import POSITION_HEADER
from contract.position import CopyFilter
from spark_jobs.errors import CleanChangelogError


def ensure_clean_topic(bootstrap: str, topic: str, partitions: int, client: dict | None = None) -> None:
    """Create ``topic`` with ``partitions`` partitions, or grow it to that many."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    md = admin.list_topics(topic, timeout=15).topics.get(topic)
    if md is None or md.error is not None:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])[topic]
        try:
            fut.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        return
    if len(md.partitions) < partitions:
        admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(30)


def last_position(bootstrap: str, topic: str, partition: int, client: dict | None = None) -> str:
    """The position header of the last record of a clean partition ("" when empty)."""
    (low, end), = end_offsets(bootstrap, [(topic, partition)], client_config=client).values()
    if end <= low:
        return ""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cdc-clean-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed", **(client or {})})
    try:
        # The last record may sit a few offsets before the end (transaction markers of an
        # upstream tool): read the tail.
        last = ""
        for msgs in read_partition(consumer, topic, partition, max(low, end - 50), end, timeout=60):
            for m in msgs:
                for k, v in m.headers() or []:
                    if k == POSITION_HEADER and v:
                        last = max(last, v.decode())
        return last
    finally:
        consumer.close()


class CleanPartitionWriter:
    """Writes one clean partition, skipping what an earlier attempt already wrote."""

    def __init__(self, bootstrap: str, topic: str, partition: int, client: dict | None = None) -> None:
        self.topic, self.partition = topic, partition
        # What an earlier attempt wrote is a copy now.
        self.copies = CopyFilter({partition: last_position(bootstrap, topic, partition, client)})
        self._errors: list[str] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                                  "acks": "all", "compression.type": "lz4", **(client or {})})
        self.written = 0
        self.skipped = 0

    def _on_delivery(self, err, msg) -> None:  # noqa: ARG002
        if err is not None:
            self._errors.append(str(err))

    def write(self, key: bytes | None, value: bytes | None, position: str) -> None:
        if not self.copies.keep(self.partition, position):
            self.skipped += 1
            return
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition=self.partition,
                                      headers=[(POSITION_HEADER, position.encode())], on_delivery=self._on_delivery)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.written += 1

    def flush(self) -> None:
        remaining = self.producer.flush(120)
        if remaining or self._errors:
            raise CleanChangelogError(f"{self.topic}[{self.partition}]: {remaining} records not acknowledged, "
                                      f"errors: {self._errors[:3]}")
