"""Dead letters: the records a merge task cannot decode, decide or apply, to the dead-letter
topic with the reason and their coordinates (``cdc.dlq.*`` headers); the rest goes on."""

from __future__ import annotations

import logging

from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.worker_cache import cached

log = logging.getLogger(__name__)


def dlq_producer(s: MergeSettings):
    """The worker process's dead-letter producer."""
    from confluent_kafka import Producer
    return cached(("dlq", s.bootstrap), lambda: Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 5,
                                                          **(s.client or {})}))


def dead_letters(s: MergeSettings, topic: str, partition: int, dead: list) -> None:
    """``dead`` (``(offset, key, value, reason)`` of ``topic``'s ``partition``) to the
    dead-letter topic, each logged; waits until Kafka acknowledged them."""
    producer = dlq_producer(s)
    for offset, key_b, value_b, reason in dead:
        headers = [("cdc.dlq.reason", reason.encode()[:4000]), ("cdc.dlq.topic", topic.encode()),
                   ("cdc.dlq.partition", str(partition).encode()), ("cdc.dlq.offset", str(offset).encode())]
        producer.produce(s.dlq_topic, value_b, key_b, headers=headers)
        log.error("dead letter: %s[%d]@%d: %s", topic, partition, offset, reason)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} dead letters not acknowledged by Kafka")
