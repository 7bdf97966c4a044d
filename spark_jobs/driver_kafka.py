"""The merge job driver's Kafka look-ups: end offsets, topic ids, the markers and offsets
topics' records.

(Until the project ran on Apache Kafka these ran in a child process: the stand-in broker's
answer to a fetch of a deleted topic crashed librdkafka.  On Kafka a reader whose topic is
deleted under it carries on and reports the read stalled, tests/integration/common/
test_topic_reader.py, so they run here.)
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from common.kafka.clients import topic_ids
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import partition_records, topic_records
from contract.markers import decode_marker

log = logging.getLogger(__name__)

def driver_end_offsets(bootstrap: str, partitions, client: dict | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """:func:`common.kafka.offsets.end_offsets` with the driver's client settings."""
    parts = list(partitions)
    if not parts:
        return {}
    return end_offsets(bootstrap, parts, client_config=client)


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
    configuration's ``kafka`` section) with the job's client settings ``client``, and one
    admin client for metadata, made on first use (one per look-up costs a connection)."""

    def __init__(self, kafka: Any, client: dict) -> None:
        self.kafka = kafka
        self.bootstrap: str = kafka.bootstrap_servers
        self.client = client
        self._admin_client = None

    def admin(self):
        """The job's admin client (metadata), made once: one per look-up costs a connection."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient({"bootstrap.servers": self.bootstrap, **self.client})
        return self._admin_client

    def close(self) -> None:
        """Let go of the admin client (it is made again on the next look-up)."""
        self._admin_client = None

    def offsets_now(self, tps) -> dict[tuple[str, int], tuple[int, int]]:
        """``{tp: (low, end)}`` of the partitions of ``tps`` that exist now."""
        tps = set(tps)
        if not tps:
            return {}
        md = self.admin().list_topics(timeout=15)
        there = [(t, p) for t, p in tps if t in md.topics and md.topics[t].error is None
                 and p in md.topics[t].partitions]
        return driver_end_offsets(self.bootstrap, there, self.client)

    def end_offsets(self, partitions) -> dict[tuple[str, int], tuple[int, int]]:
        """:func:`driver_end_offsets` of ``partitions`` (which must exist)."""
        return driver_end_offsets(self.bootstrap, partitions, self.client)

    def topic_ids(self, topics) -> dict[str, str]:
        """Kafka's id of each of ``topics`` that exists (a topic made again has another)."""
        return topic_ids(self.bootstrap, topics, client_config=self.client)

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
