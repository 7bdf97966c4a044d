"""A partition's first offset and end, from Kafka's ListOffsets.

Under ``isolation.level=read_committed`` (the default here) Kafka answers ListOffsets(latest)
with the last stable offset (LSO): the point up to which a read_committed consumer can read,
below the records of any transaction still open; under ``read_uncommitted`` with the high
watermark.  Measured on the stack's Kafka 4.1 (2026-11-26): ten records committed in a
transaction, then five of a second one left open: read_committed 11 (the ten and their commit
marker), read_uncommitted 16; after the abort, 17 for both, and a read_committed reader gets
the ten only.  (The stand-in broker the project used before answered 0 while any transaction
was open, and a fetch had to be probed for the end instead.)
"""

from __future__ import annotations

import time
import uuid
from typing import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from common.errors import OffsetLookupError

# get_watermark_offsets errors that mean "the broker did not answer in time".
_NO_ANSWER = (KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)
# ... and that a partition's leadership is moving (a topic just made, a node that went away):
# asked again until the timeout.
_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
# ... and that the node asked does not know the partition (yet: a topic made a moment ago, whose
# metadata has not reached every node of a cluster; seen in the broker-kill chaos run).
_UNKNOWN = (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART)
#: How long a partition the caller listed (``listed=True``) may be unknown to the node asked.
UNKNOWN_GRACE_S = 5.0


def offsets_consumer(bootstrap_servers: str, client_config: dict | None = None) -> Consumer:
    """A consumer that :func:`end_offsets` asks (``read_committed`` unless ``client_config``
    says otherwise); the caller closes it."""
    return Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"cdc-offsets-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "isolation.level": "read_committed", **(client_config or {})})


class KeptOffsetsConsumer:
    """One :func:`offsets_consumer` kept from look-up to look-up (a caller that asks at every
    trigger saves a client's start and a connection each time), made again when a look-up
    fails: a kept client's metadata can go stale while nodes go away and come back (seen:
    a partition it called unknown after a node's shutdown, for as long as it was kept, while a
    new client found it), so a failed look-up is asked once more of a new consumer before its
    error is raised.  Not thread-safe: the caller serialises look-ups and :meth:`close`."""

    def __init__(self, bootstrap_servers: str, client_config: dict | None = None) -> None:
        self.bootstrap_servers, self.client_config = bootstrap_servers, client_config
        self.consumer: Consumer | None = None

    def end_offsets(self, partitions: Iterable[tuple[str, int]], *, timeout: float = 15.0
                    ) -> dict[tuple[str, int], tuple[int, int]]:
        """:func:`end_offsets` of ``partitions``, asked of the kept consumer (once more of a new
        one when that fails)."""
        parts = list(partitions)
        try:
            return self._ask(parts, timeout)
        except (KafkaException, OffsetLookupError):
            return self._ask(parts, timeout)

    def _ask(self, parts: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
        if self.consumer is None:
            self.consumer = offsets_consumer(self.bootstrap_servers, self.client_config)
        try:
            return end_offsets(self.bootstrap_servers, parts, timeout=timeout, consumer=self.consumer)
        except (KafkaException, OffsetLookupError):
            self.close()  # (made again by the next look-up)
            raise

    def close(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.close()


def end_offsets(bootstrap_servers: str, partitions: Iterable[tuple[str, int]], *, timeout: float = 15.0,
                client_config: dict | None = None, consumer: Consumer | None = None, listed: bool = False
                ) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (low, end)}``: each partition's first offset and its end, the
    last stable offset under ``isolation.level=read_committed`` (the default), the high
    watermark under ``read_uncommitted``.

    The whole call takes at most about ``timeout`` seconds: :class:`OffsetLookupError` if
    the broker has not answered by then.  A partition the broker does not know raises
    ``KafkaException``, as ``Consumer.get_watermark_offsets`` does; with ``listed`` (the
    partitions come from the cluster's metadata: they exist) it is asked again for up to
    :data:`UNKNOWN_GRACE_S` first (the node asked may not know a topic made a moment ago).
    ``consumer``: one of
    :func:`offsets_consumer`'s to ask (left open) instead of a new one (closed at the end): a
    caller that asks at every trigger saves a client's start and connection each time
    (``client_config`` is then the consumer's).
    """
    parts = list(dict.fromkeys((str(t), int(p)) for t, p in partitions))
    if not parts:
        return {}
    deadline = time.monotonic() + timeout
    unknown_until = time.monotonic() + UNKNOWN_GRACE_S
    own = consumer is None
    if own:
        consumer = offsets_consumer(bootstrap_servers, client_config)
    try:
        found: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, part in parts:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OffsetLookupError(f"no ListOffsets answer for {(topic, part)} within {timeout}s")
            try:
                low, end = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=left)
            except KafkaException as exc:
                code = exc.args[0].code() if exc.args else None
                waits = code in _MOVING or (listed and code in _UNKNOWN and time.monotonic() < unknown_until)
                if waits and deadline - time.monotonic() > 0.2:
                    time.sleep(0.1)
                    parts.append((topic, part))  # (asked again after the others)
                    continue
                if code in _NO_ANSWER or code in _MOVING:
                    raise OffsetLookupError(f"no ListOffsets answer for {(topic, part)} within {timeout}s: "
                                            f"{exc.args[0].str()}") from exc
                raise
            found[(topic, part)] = (low, max(low, end))
        return found
    finally:
        if own:
            consumer.close()
