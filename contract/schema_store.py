"""The writer schemas of Avro records, kept in the compacted topic ``<prefix>._schemas``.

The topic's order is also the schemas' history: the producer publishes a table's schema
when it first uses it after a DDL (and never again a schema the topic already holds), so
for each record name the schema published last is the table's newest.  Readers resolve
records with it (:mod:`contract.schema_resolution`).
"""

from __future__ import annotations

import json
import threading

from common.kafka.topic_reader import read_topic
from contract.schema_resolution import describe_change
from contract.topics import schemas_topic


def schema_name(schema: dict) -> str:
    """The full name of a named schema (``namespace.name``)."""
    name = str(schema.get("name", ""))
    ns = schema.get("namespace")
    return name if "." in name or not ns else f"{ns}.{name}"


class SchemaStore:
    """Looks schemas up by fingerprint, reading the schemas topic again on a miss; knows the
    newest schema of every record name."""

    def __init__(self, bootstrap_servers: str, prefix: str, client_config: dict | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = schemas_topic(prefix)
        self.client_config = client_config
        self._schemas: dict[str, dict] = {}
        self._newest: dict[str, str] = {}  # record name -> fingerprint of its newest schema
        self._first: dict[str, str] = {}  # record name -> fingerprint of its first schema
        self._next: dict[int, int] = {}
        self._covered = 0  # the highest end refresh_until read up to
        self._lock = threading.Lock()
        #: Rises whenever a schema is read that the store did not hold: what was worked out
        #: from the newest schemas (a decoder's reader schemas) is stale when it moved.
        self.generation = 0

    def refresh(self) -> None:
        for msg in read_topic(self.bootstrap_servers, self.topic, start=dict(self._next),
                              client_config=self.client_config):
            self._next[msg.partition()] = msg.offset() + 1
            if msg.key() and msg.value():
                fp, schema = msg.key().decode(), json.loads(msg.value())
                if fp not in self._schemas:
                    self.generation += 1
                self._schemas[fp] = schema
                if isinstance(schema, dict):
                    self._newest[schema_name(schema)] = fp
                    self._first.setdefault(schema_name(schema), fp)

    def refresh_until(self, end: int) -> None:
        """Read the topic up to offset ``end`` (of its one partition) unless read that far:
        a reader that knows the topic's end when its batch was fixed sees every schema the
        batch's records were written with, and the newest of each name."""
        with self._lock:
            # (not the next offset to read: a transactional topic ends with a commit marker)
            if self._covered < end:
                self.refresh()
                self._covered = end

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

    def newest(self, fingerprint: str) -> tuple[str, dict] | None:
        """``(fingerprint, schema)`` of the newest schema with the name of ``fingerprint``'s
        schema, as far as the topic was read; None for an unknown fingerprint."""
        schema = self._schemas.get(fingerprint)
        if not isinstance(schema, dict):
            return None
        fp = self._newest.get(schema_name(schema), fingerprint)
        return fp, self._schemas[fp]

    def newest_named(self, name: str) -> tuple[str, dict] | None:
        """``(fingerprint, schema)`` of the newest schema of record ``name`` read so far, or None."""
        fp = self._newest.get(name)
        return None if fp is None else (fp, self._schemas[fp])

    def versions_named(self, name: str) -> list[tuple[str, dict]]:
        """``(fingerprint, schema)`` of every schema of record ``name`` read so far, in the
        order the topic first held them (oldest first)."""
        with self._lock:
            return [(fp, sc) for fp, sc in self._schemas.items() if isinstance(sc, dict) and schema_name(sc) == name]

    def first(self, name: str) -> tuple[str, dict] | None:
        """``(fingerprint, schema)`` of the first schema of record ``name`` the topic holds
        (the table's schema when it was first captured), or None."""
        fp = self._first.get(name)
        return None if fp is None else (fp, self._schemas[fp])

    def change_of(self, name: str) -> str | None:
        """How the newest schema of envelope ``name`` differs from its first (columns added,
        dropped, retyped), or None when they are the same."""
        first, newest = self._first.get(name), self._newest.get(name)
        if first is None or newest is None or first == newest:
            return None
        return describe_change(self._schemas[first], self._schemas[newest])

    def known(self) -> dict[str, dict]:
        with self._lock:
            self.refresh()
            return dict(self._schemas)


def schema_record(prefix: str, fingerprint: str, schema: dict) -> tuple[str, bytes, bytes]:
    """The ``(topic, key, value)`` record that publishes a writer schema."""
    return schemas_topic(prefix), fingerprint.encode(), json.dumps(schema).encode()
