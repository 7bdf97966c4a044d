"""The writer schemas of Avro records, kept in the compacted topic ``<prefix>._schemas``."""

from __future__ import annotations

import json
import threading

from common.kafka.topic_reader import read_topic
from contract.topics import schemas_topic


class SchemaStore:
    """Looks schemas up by fingerprint, reading the schemas topic again on a miss."""

    def __init__(self, bootstrap_servers: str, prefix: str, client_config: dict | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = schemas_topic(prefix)
        self.client_config = client_config
        self._schemas: dict[str, dict] = {}
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        for msg in read_topic(self.bootstrap_servers, self.topic, start=dict(self._next),
                              client_config=self.client_config):
            self._next[msg.partition()] = msg.offset() + 1
            if msg.key() and msg.value():
                self._schemas[msg.key().decode()] = json.loads(msg.value())

    def get(self, fingerprint: str) -> dict | None:
        with self._lock:
            if fingerprint not in self._schemas:
                self.refresh()
            if fingerprint not in self._schemas and self._next:
                # Read from the start again: the topic may have been deleted and created again
                # (lost Kafka history), its new records below the offsets read so far.
                self._next = {}
                self.refresh()
            return self._schemas.get(fingerprint)

    def known(self) -> dict[str, dict]:
        with self._lock:
            self.refresh()
            return dict(self._schemas)


def schema_record(prefix: str, fingerprint: str, schema: dict) -> tuple[str, bytes, bytes]:
    """The ``(topic, key, value)`` record that publishes a writer schema."""
    return schemas_topic(prefix), fingerprint.encode(), json.dumps(schema).encode()
