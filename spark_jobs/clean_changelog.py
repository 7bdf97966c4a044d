"""The clean changelog topics ``<prefix>.clean.<db>.<table>``: written without copies.

Partition ``p`` of a table topic is cleaned into partition ``p`` of its clean topic (the
clean topic has at least as many partitions), by one task at a time, in position order,
with an idempotent producer.  So the clean partition's last record tells how far an
earlier attempt got: a retried task or a replayed micro-batch skips every record at or
below that position and the topic never holds a copy, without Kafka transactions.

Reading that last record is a fetch inside the log, which costs the embedded broker a
listing of every batch of the partition (it grew to seconds over an hour's soak,
docs/benchmarks.md); so a writer leaves the partition's end offset and last position after
its write (:attr:`CleanPartitionWriter.tail`), the merge job keeps them in the partition's
state, and the next writer takes the last position from there when the partition's end is
still that one (nobody wrote since: not a failed attempt, not another writer); else it
reads the tail as before.

A routed table's records go to the merged clean topic of its route's target
(``<prefix>.clean.<target db>.<target table>``), whose partition ``p`` takes partition
``p`` of every shard table: tasks of several shards write one partition side by side, so
its last record says nothing of one shard.  Each record names its shard (header
:data:`SHARD_HEADER`), and :class:`MergedPartitionWriter` finds how far an earlier
attempt got for its shard among the records written since the end offset the previous
batch's state recorded (``since``): every record of the shard past that offset is from an
attempt of this batch.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import READ_AHEAD, read_partition
from contract.envelope import POSITION_HEADER
from contract.position import CopyFilter
from spark_jobs.errors import CleanChangelogError

#: The header naming a merged clean record's shard (``source/db.table``).
SHARD_HEADER = "cdc.shard"


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


def _tail_reader(bootstrap: str, topic: str, client: dict | None) -> Consumer:
    return Consumer({**READ_AHEAD, "bootstrap.servers": bootstrap, "group.id": f"cdc-clean-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "isolation.level": "read_committed", **(client or {})})


def last_position(bootstrap: str, topic: str, partition: int, client: dict | None = None,
                  known: tuple[int, str] | list | None = None) -> tuple[int, str, bool]:
    """``(end offset, position header of the last record ("" when empty), whether the tail was
    read)`` of a clean partition; ``known``: ``(end, last)`` as a writer left it
    (:attr:`CleanPartitionWriter.tail`), taken when the partition still ends there."""
    (low, end), = end_offsets(bootstrap, [(topic, partition)], client_config=client).values()
    if end <= low:
        return end, "", False
    if known is not None and int(known[0]) == end:
        return end, str(known[1]), False
    consumer = _tail_reader(bootstrap, topic, client)
    try:
        # The last record may sit a few offsets before the end (transaction markers of an
        # upstream tool): read the tail.
        last = ""
        for msgs in read_partition(consumer, topic, partition, max(low, end - 50), end, timeout=60):
            for m in msgs:
                for k, v in m.headers() or []:
                    if k == POSITION_HEADER and v:
                        last = max(last, v.decode())
        return end, last, True
    finally:
        consumer.close()


def last_shard_position(bootstrap: str, topic: str, partition: int, shard: str, since: int,
                        client: dict | None = None) -> tuple[str, int]:
    """The highest position of ``shard``'s records in a merged clean partition at offsets
    from ``since`` ("" when none), and the partition's end offset."""
    (low, end), = end_offsets(bootstrap, [(topic, partition)], client_config=client).values()
    start = max(low, since)
    if end <= start:
        return "", end
    consumer = _tail_reader(bootstrap, topic, client)
    wanted = shard.encode()
    try:
        last = ""
        for msgs in read_partition(consumer, topic, partition, start, end, timeout=60):
            for m in msgs:
                headers = dict(m.headers() or [])
                if headers.get(SHARD_HEADER) == wanted and headers.get(POSITION_HEADER):
                    last = max(last, headers[POSITION_HEADER].decode())
        return last, end
    finally:
        consumer.close()


def clean_producer(bootstrap: str, client: dict | None = None) -> Producer:
    """The idempotent producer clean partitions are written with (by one writer at a time)."""
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                     "acks": "all", "compression.type": "lz4", **(client or {})})


class CleanPartitionWriter:
    """Writes one clean partition, skipping what an earlier attempt already wrote."""

    def __init__(self, bootstrap: str, topic: str, partition: int, client: dict | None = None,
                 producer: Producer | None = None, known: tuple[int, str] | list | None = None) -> None:
        """``known``: the partition's :attr:`tail` as the previous writer left it (see the
        module's docstring), or None."""
        self.topic, self.partition = topic, partition
        self.extra_headers: list[tuple[str, bytes]] = []
        self.end = -1  # the partition's end offset before this writer (-1: not looked up)
        self.tail_read = False  # whether the partition's tail was read (not known)
        # What an earlier attempt wrote is a copy now.
        self.last = self._last(bootstrap, client, known)
        self.copies = CopyFilter({partition: self.last})
        self._end_written = -1  # the offset after the last record acknowledged
        self._last_written = ""  # the position of the last record written
        self._errors: list[str] = []
        # ``producer``: one of :func:`clean_producer`'s that a worker keeps from task to task
        # (a new idempotent producer's first records wait about 500 ms for its producer id
        # on the embedded broker: the merge tasks paid that on every batch)
        self.producer = producer if producer is not None else clean_producer(bootstrap, client)
        self.written = 0
        self.skipped = 0

    def _last(self, bootstrap: str, client: dict | None, known) -> str:
        self.end, last, self.tail_read = last_position(bootstrap, self.topic, self.partition, client, known)
        return last

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(str(err))
        else:
            self._end_written = max(self._end_written, msg.offset() + 1)

    @property
    def tail(self) -> tuple[int, str] | None:
        """After :meth:`flush`: ``(end offset, last position)`` of the partition as this writer
        left it (for the next writer's ``known``); None when not known (a record acknowledged
        without its offset)."""
        if self.written == 0:
            return (self.end, self.last) if self.end >= 0 else None
        if self._end_written <= self.end:
            return None
        return self._end_written, max(self.last, self._last_written)

    def write(self, key: bytes | None, value: bytes | None, position: str) -> None:
        if not self.copies.keep(self.partition, position):
            self.skipped += 1
            return
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition=self.partition,
                                      headers=[(POSITION_HEADER, position.encode()), *self.extra_headers],
                                      on_delivery=self._on_delivery)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.written += 1
        self._last_written = max(self._last_written, position)

    def flush(self) -> None:
        remaining = self.producer.flush(120)
        if remaining or self._errors:
            raise CleanChangelogError(f"{self.topic}[{self.partition}]: {remaining} records not acknowledged, "
                                      f"errors: {self._errors[:3]}")


class MergedPartitionWriter(CleanPartitionWriter):
    """Writes one shard's records into a partition of a route's merged clean topic,
    skipping what an earlier attempt wrote for that shard since offset ``since``."""

    def __init__(self, bootstrap: str, topic: str, partition: int, shard: str, since: int,
                 client: dict | None = None, producer: Producer | None = None) -> None:
        self.shard, self.since = shard, since
        super().__init__(bootstrap, topic, partition, client, producer)
        self.extra_headers = [(SHARD_HEADER, shard.encode())]
        self.bootstrap, self.client = bootstrap, client

    def _last(self, bootstrap: str, client: dict | None, known) -> str:  # noqa: ARG002 - (see the class)
        return last_shard_position(bootstrap, self.topic, self.partition, self.shard, self.since, client)[0]

    def end_offset(self) -> int:
        """The partition's end offset now (after :meth:`flush`): the next batch's ``since``."""
        (_, end), = end_offsets(self.bootstrap, [(self.topic, self.partition)], client_config=self.client).values()
        return end
