"""The operator's decisions on pessimistic routes' waiting DDL (docs/sharding.md, "Route
reset"): ``cdc route force|skip`` writes one record per shard schema version to the compacted
topic ``<kafka.topic_prefix>._routes`` (key ``<route>|<shard>|<version>``, the last decision for
a version wins); every source's merge query reads the topic before it plans a batch and
applies them to its route's coordinator, which it rebuilds each batch from the ``_schemas``
topics as before.  So the decisions are state of their own, in Kafka, beside the schema
history they are about: a restarted or replayed batch decides from the same or a newer view
(more released, never less), and the records a route held so far are released once, in the
batch whose plan first sees the decision (they leave the partition's state in the batch
that applies them).  The topic is a ``wakeTopics`` topic of each query with a pessimistic
route, so a decision runs a batch even while no shard writes.
"""

from __future__ import annotations

import json
import threading
import time

from common.config import KafkaConfig
from common.kafka.clients import ensure_topics
from common.kafka.topic_reader import read_topic
from contract.topics import route_decisions_topic
from spark_jobs.errors import MergeStateError
from spark_jobs.sharding.shapes import ShardId

ACTIONS = ("force", "skip")


class RouteDecisions:
    """The decisions of ``<prefix>._routes`` (``prefix``: ``kafka.topic_prefix``), read
    incrementally, in the topic's order."""

    def __init__(self, kafka: KafkaConfig, client: dict | None = None) -> None:
        self.kafka = kafka
        self.client = dict(client if client is not None else kafka.client_settings())
        self.topic = route_decisions_topic(kafka.topic_prefix)
        self._next: dict[int, int] = {}
        self._by_key: dict[str, dict] = {}  # key -> decision (the last one; insertion order: first seen)
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            for msg in read_topic(self.kafka.bootstrap_servers, self.topic, start=dict(self._next),
                                  client_config=self.client or None):
                self._next[msg.partition()] = msg.offset() + 1
                if not msg.key() or not msg.value():
                    continue
                try:
                    d = json.loads(msg.value())
                    if d.get("action") in ACTIONS:
                        self._by_key[msg.key().decode()] = d
                except (ValueError, AttributeError):
                    continue  # not a decision of ours: passed over

    @property
    def read_to(self) -> int:
        """The offset after the last record read (of the topic's one partition)."""
        return self._next.get(0, 0)

    def of(self, route: str) -> list[tuple[ShardId, str, str]]:
        """``(shard, version, action)`` of the decisions on ``route`` (``db.table``)."""
        with self._lock:
            return [(ShardId(*d["shard"]), str(d["version"]), d["action"]) for d in self._by_key.values()
                    if d.get("route") == route]

    def record(self, route: str, shard: ShardId, version: str, action: str) -> None:
        """Write a decision (and wait for Kafka's acknowledgement)."""
        from confluent_kafka import Producer

        if action not in ACTIONS:
            raise MergeStateError(f"route decision {action!r} is not one of {', '.join(ACTIONS)}")
        ensure_topics(self.kafka, [self.topic], partitions=1, compacted=True)
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers, "enable.idempotence": True,
                             **self.client})
        value = {"route": route, "shard": list(shard), "version": version, "action": action,
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        producer.produce(self.topic, json.dumps(value).encode(), f"{route}|{shard}|{version}".encode())
        if producer.flush(60):
            raise MergeStateError(f"the route decision was not acknowledged by Kafka ({self.topic})")
