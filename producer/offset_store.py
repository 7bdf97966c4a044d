"""The producer's stored position: a compacted Kafka topic ``<prefix>._offsets``.

One record per commit, keyed by the producer's name, value JSON::

    {"resume": {"file": "mysql-bin.000003", "pos": 1234, "last": "<30 digits>"},
     "gtid": "...", "ts_ms": ..., "snapshot": {...}}

The record is written after every event it covers has been acknowledged by the broker
(and, with transactions, in the same transaction), so a visible offset never points
past an event that is missing.  The latest record for the key wins.
"""

from __future__ import annotations

import json
import time
from typing import Any

from cdc.config import KafkaConfig
from cdc.kafka.clients import ensure_topics
from cdc.kafka.topic_reader import read_topic


def offsets_topic(prefix: str) -> str:
    return f"{prefix}._offsets"


class OffsetStore:
    def __init__(self, kafka: KafkaConfig, name: str) -> None:
        self.kafka = kafka
        self.name = name
        self.topic = offsets_topic(kafka.topic_prefix)

    def ensure(self) -> None:
        ensure_topics(self.kafka, [self.topic], partitions=1, compacted=True)

    def load(self) -> dict[str, Any] | None:
        latest = None
        for msg in read_topic(self.kafka.bootstrap_servers, self.topic, client_config=self.kafka.client):
            if msg.key() == self.name.encode():
                latest = json.loads(msg.value()) if msg.value() else None
        return latest

    def record(self, state: dict[str, Any]) -> tuple[bytes, bytes]:
        return self.name.encode(), json.dumps({**state, "ts_ms": int(time.time() * 1000)}).encode()

    def reset(self, producer) -> None:
        """Forget the stored position (a tombstone for this producer's key)."""
        producer.produce(self.topic, key=self.name.encode(), value=None)
        producer.flush(30)
