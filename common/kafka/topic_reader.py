"""Reading a whole topic, up to its true end, with bounded memory per call."""

from __future__ import annotations

import time
import uuid
from typing import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from common.errors import KafkaAuthError, PartitionStalled
from common.kafka.offsets import end_offsets

# How long one ``consume`` call may wait.  librdkafka's ``consume(n, timeout)`` returns
# only when ``n`` messages arrived or the timeout passed, so a call asking for more than
# the log still holds always waits its whole timeout: ask for what is left, wait briefly,
# and look at the consumer's position (offset gaps: transaction markers) in between.
CONSUME_WAIT_S = 0.01
#: How long :func:`read_partition` waits for a topic's metadata before a logical start offset
_METADATA_WAIT_S = 5.0

#: librdkafka settings of a consumer that reads records already in the log (client settings
#: given with it win).  librdkafka keeps fetching a partition ahead of what is consumed until
#: its local queue holds ``queued.min.messages`` (100,000), and then postpones the next fetch
#: by ``fetch.queue.backoff.ms``: 1 s by default.  A reader that drains the queue faster than
#: that waits for the fetch to start again; measured on the embedded broker, 200,000 records
#: of 190 bytes were read from one partition in 1.19-1.38 s with the default and in
#: 0.33-0.43 s with 10 ms, the Python side's CPU time the same (docs/merge-performance.md).
#: The prefetch itself stays bounded by ``queued.min.messages`` and
#: ``queued.max.messages.kbytes``.  And a fetch that reaches the end of the log (past a
#: range's last record, before a commit marker) is held by the broker for
#: ``fetch.wait.max.ms`` (librdkafka's 500 ms) while the next one waits behind it: 10 ms.
#: Kafka answers a fetch anywhere in a partition at once, however deep (``cdc bench broker``,
#: docs/operations.md: the first record from the middle of a 300,000-batch partition in 12 ms).
READ_AHEAD = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 10}


def read_partition(consumer: Consumer, topic: str, partition: int, start: int, end: int, *,
                   timeout: float = 60.0, batch: int = 1000, user: str | None = None) -> Iterator[list]:
    """Lists of the data messages of ``topic[partition]`` at offsets ``[start, end)``, in
    offset order, read with ``consumer`` (assigned here; ``start`` may be a logical offset
    such as ``OFFSET_BEGINNING``).  Offsets may have gaps (transaction markers, aborted or
    compacted records): the range is done when a record at ``end - 1`` arrives or the
    consumer's position reaches ``end``.

    Raises :class:`PartitionStalled` when the read makes no progress for ``timeout``
    seconds, :class:`KafkaAuthError` naming ``user`` (the consumer's login, where known) when
    Kafka refuses the read, ``RuntimeError`` on another consumer error."""
    if end <= start:
        return
    if start < 0:
        # A logical offset is looked up from the partition's leader.  A consumer that has no
        # metadata of the topic yet fails that look-up and tries again 500 ms later
        # (librdkafka's fixed back-off): measured on the embedded broker, the first record
        # came after 0.53 s, and after 0.02 s with the topic's metadata asked for first.
        try:
            consumer.list_topics(topic, timeout=min(timeout, _METADATA_WAIT_S))
        except KafkaException:
            pass  # (the read below reports what is wrong, as it did without this)
    where = TopicPartition(topic, partition)
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = last_change = time.monotonic()
    while position < end:
        msgs = consumer.consume(max(1, min(batch, end - position)), CONSUME_WAIT_S)
        if msgs and not [m for m in msgs if m.error() is not None]:
            # (the common case: data messages only, in offset order; 0.03 against 0.18 us a
            # message for the loop below, measured in-process)
            last = msgs[-1].offset()
            data = msgs if last < end else [m for m in msgs if m.offset() < end]
            position = max(position, last + 1)
        else:
            data = []
            for m in msgs:
                err = m.error()
                if err is None:
                    if m.offset() < end:
                        data.append(m)
                    position = max(position, m.offset() + 1)
                elif err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED):
                    raise KafkaAuthError(_read_refused(topic, partition, err, user))
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"reading {topic}[{partition}]: {err}")
        now = time.monotonic()
        if data:
            last_progress = last_change = now
            yield data
        if position < end:
            pos = consumer.position([where])[0].offset
            if pos > position:
                position, last_progress, last_change = pos, now, now
                continue
            if now - last_change > timeout:
                raise PartitionStalled(f"{topic}[{partition}] made no progress for {now - last_progress:.0f}s at "
                                       f"position {position}, range [{start}, {end})", position)


def _read_refused(topic: str, partition: int, err: KafkaError, user: str | None) -> str:
    if user:
        return f"Kafka refused reading {topic}[{partition}] to user {user!r} ({err.name()}): its ACLs do not allow it"
    return f"Kafka refused reading {topic}[{partition}] ({err.name()}): the ACLs of this client's user do not allow it"


def topic_reader_config(bootstrap_servers: str, client_config: dict | None = None) -> dict:
    """The configuration of :func:`read_topic`'s consumer: :data:`READ_AHEAD`, then the
    client settings, then what reading committed records from the beginning needs."""
    return {**READ_AHEAD, "bootstrap.servers": bootstrap_servers, **(client_config or {}),
            "group.id": f"cdc-reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest"}


def read_topic(bootstrap_servers: str, topic: str, *, start: dict[int, int] | None = None, timeout: float = 60.0,
               client_config: dict | None = None, batch: int = 500) -> Iterator:
    """Yield every record of ``topic`` from ``start`` (default: the beginning) up to the end
    offsets taken when the call begins, then stop: partition after partition, each in offset
    order (:func:`read_partition`: a read that makes no progress for ``timeout`` seconds
    raises :class:`PartitionStalled`, a ``TimeoutError``)."""
    consumer = Consumer(topic_reader_config(bootstrap_servers, client_config))
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            return
        parts = sorted(tmd.partitions)
        ends = end_offsets(bootstrap_servers, [(topic, p) for p in parts], client_config=client_config, listed=True)
        for p in parts:
            low, end = ends[(topic, p)]
            first = max(low, (start or {}).get(p, low))
            for msgs in read_partition(consumer, topic, p, first, end, timeout=timeout, batch=batch,
                                       user=(client_config or {}).get("sasl.username")):
                yield from msgs
    finally:
        consumer.close()


def partition_records(bootstrap_servers: str, topic: str, partition: int, start: int, end: int, *,
                      client_config: dict | None = None, timeout: float = 120.0) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` of the committed data records of ``topic[partition]`` at offsets
    ``[start, end)`` (:func:`read_partition`), as plain values."""
    if end <= start:
        return []
    consumer = Consumer(topic_reader_config(bootstrap_servers, client_config))
    try:
        return [(m.offset(), m.value()) for msgs in read_partition(
            consumer, topic, partition, start, end, timeout=timeout, user=(client_config or {}).get("sasl.username"))
            for m in msgs]
    finally:
        consumer.close()


def topic_records(bootstrap_servers: str, topic: str, *, start: dict[int, int] | None = None,
                  client_config: dict | None = None) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """``(partition, offset, key, value)`` of what :func:`read_topic` yields, as plain values."""
    return [(m.partition(), m.offset(), m.key(), m.value())
            for m in read_topic(bootstrap_servers, topic, start=start, client_config=client_config)]
