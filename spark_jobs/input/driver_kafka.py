"""The merge job driver's Kafka look-ups: end offsets, topic ids, the markers and offsets
topics' records.

(Until the project ran on Apache Kafka these ran in a child process: the stand-in broker's
answer to a fetch of a deleted topic crashed librdkafka.  On Kafka a reader whose topic is
deleted under it carries on and reports the read stalled, tests/integration/common/
test_topic_reader.py, so they run here.)
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from common.kafka.clients import topic_ids
from common.kafka.offsets import KeptOffsetsConsumer
from common.kafka.topic_reader import partition_records, topic_records
from contract.markers import decode_marker

log = logging.getLogger(__name__)

def our_marker(value: bytes, offset: int) -> list[dict]:  # noqa: ARG001 - read_markers' decode
    """A record of our markers topic: its one marker."""
    return [decode_marker(value)]


def read_markers(bootstrap: str, topic: str, start: int, end: int, client: dict | None = None,
                 decode: Callable[[bytes, int], list[dict]] = our_marker) -> list[dict]:
    """The markers at offsets ``[start, end)`` of the (single-partition) markers topic
    (``decode``: a record's value and offset to its markers; default ours)."""
    if end <= start:
        return []
    records = partition_records(bootstrap, topic, 0, start, end, client_config=client, timeout=120.0)
    return [marker for offset, value in records if value for marker in decode(value, offset)]


class DriverKafka:
    """The Kafka cluster as the driver of one source's merge job sees it: ``kafka`` (the
    configuration's ``kafka`` section) with the job's client settings ``client``, one admin
    client for metadata and one consumer for end offsets, each made on first use: a new
    client per look-up costs its start and a connection, and the batch's plan looks up end
    offsets at every trigger (issue 70: a few milliseconds of every batch)."""

    def __init__(self, kafka: Any, client: dict) -> None:
        self.kafka = kafka
        self.bootstrap: str = kafka.bootstrap_servers
        self.client = client
        self._admin_client = None
        self._offsets = KeptOffsetsConsumer(self.bootstrap, client)
        self._consumer_lock = threading.Lock()  # (the batch's plan, and the metrics' lag from another thread)

    def admin(self):
        """The job's admin client (metadata), made once: one per look-up costs a connection."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient({"bootstrap.servers": self.bootstrap, **self.client})
        return self._admin_client

    def close(self) -> None:
        """Let go of the admin client and close the offsets consumer (both made again on the
        next look-up)."""
        self._admin_client = None
        with self._consumer_lock:
            self._offsets.close()

    def offsets_now(self, tps) -> dict[tuple[str, int], tuple[int, int]]:
        """``{tp: (low, end)}`` of the partitions of ``tps`` that exist now."""
        tps = set(tps)
        if not tps:
            return {}
        md = self.admin().list_topics(timeout=15)
        there = [(t, p) for t, p in tps if t in md.topics and md.topics[t].error is None
                 and p in md.topics[t].partitions]
        return self.end_offsets(there)

    @property
    def offsets_consumer(self):
        """The consumer the end offsets are asked of (None until the first look-up, and after
        a failed one)."""
        return self._offsets.consumer

    def end_offsets(self, partitions) -> dict[tuple[str, int], tuple[int, int]]:
        """:func:`~common.kafka.offsets.end_offsets` of ``partitions`` (which must exist),
        asked of the job's kept offsets consumer (made again when a look-up fails)."""
        parts = list(partitions)
        if not parts:
            return {}
        with self._consumer_lock:
            return self._offsets.end_offsets(parts)

    def topic_ids(self, topics) -> dict[str, str]:
        """Kafka's id of each of ``topics`` that exists (a topic made again has another),
        asked of the job's admin client."""
        return topic_ids(self.bootstrap, topics, client_config=self.client, admin=self.admin())

    def read_markers(self, topic: str, start: int, end: int,
                     decode: Callable[[bytes, int], list[dict]] = our_marker) -> list[dict]:
        """:func:`read_markers` of ``topic``'s offsets ``[start, end)``."""
        return read_markers(self.bootstrap, topic, start, end, self.client or None, decode=decode)

    def read_topic(self, topic: str, start: dict[int, int]) -> tuple[list[tuple[bytes, Any]], dict[int, int]]:
        """``topic``'s records from ``start`` (``{partition: offset}``) on, as ``(key, value)``
        pairs, and where to read on."""
        records, nxt = [], dict(start)
        for partition, offset, key, value in topic_records(self.bootstrap, topic, start=start,
                                                           client_config=self.client or None):
            records.append((key, value))
            nxt[partition] = offset + 1
        return records, nxt
