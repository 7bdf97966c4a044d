"""End offsets that are right on every Kafka-protocol broker.

The embedded Tansu broker answers ListOffsets(latest) with the base offset of the last
record batch plus one, not the log-end offset (1,000 records produced in one batch
report an end of 1).  The high watermark carried by Fetch responses is correct, so the
true end is read from a fetch at the last reported offset: librdkafka caches the
fetch's high watermark, and ``get_watermark_offsets(cached=True)`` returns it.  On a
broker that answers ListOffsets correctly this gives the same number.
"""

from __future__ import annotations

import time
import uuid
from typing import Iterable

from confluent_kafka import Consumer, TopicPartition


class OffsetLookupError(Exception):
    """The broker did not answer an offset lookup in time."""


def end_offsets(bootstrap_servers: str, partitions: Iterable[tuple[str, int]], *, timeout: float = 15.0,
                client_config: dict | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (low, end)}`` where ``end`` is the true log-end offset.

    Under ``isolation.level=read_committed`` (the default here) ``end`` is the last stable
    offset, the point up to which a read_committed consumer can read.
    """
    parts = list(partitions)
    conf = {"bootstrap.servers": bootstrap_servers, "group.id": f"cdc-offsets-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "fetch.max.bytes": 1048576, "max.partition.fetch.bytes": 65536, **(client_config or {})}
    consumer = Consumer(conf)
    try:
        reported: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, part in parts:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=timeout)
            reported[(topic, part)] = (lo, hi)
        to_probe = [(tp, lo, hi) for tp, (lo, hi) in reported.items() if hi > lo]
        if not to_probe:
            return reported
        consumer.assign([TopicPartition(t, p, max(lo, hi - 1)) for (t, p), lo, hi in to_probe])
        result = dict(reported)
        pending = {tp for tp, _, _ in to_probe}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            consumer.poll(0.1)
            for tp in list(pending):
                lo, hi = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                # Before the first fetch answer the cached value is negative (OFFSET_INVALID).
                if hi >= 0:
                    result[tp] = (reported[tp][0], max(hi, reported[tp][1] - 1))
                    pending.discard(tp)
        if pending:
            raise OffsetLookupError(f"no fetch answer for {sorted(pending)} within {timeout}s")
        return result
    finally:
        consumer.close()

