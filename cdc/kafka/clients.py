"""librdkafka client configurations and topic creation from the ``kafka`` section."""

from __future__ import annotations

from typing import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.config import KafkaConfig


def base_config(cfg: KafkaConfig) -> dict:
    return {"bootstrap.servers": cfg.bootstrap_servers, **cfg.client}


def producer_config(cfg: KafkaConfig, *, transactional_id: str | None = None, **extra) -> dict:
    conf = {**base_config(cfg), "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "compression.type": "none", "queue.buffering.max.messages": 200000}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    conf.update(extra)
    return conf


def ensure_topics(cfg: KafkaConfig, names: Iterable[str], *, partitions: int | None = None,
                  compacted: bool = False, timeout: float = 30.0) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are)."""
    admin = AdminClient(base_config(cfg))
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [n for n in dict.fromkeys(names) if n not in existing]
    if not wanted:
        return
    conf = {"cleanup.policy": "compact"} if compacted else {}
    futures = admin.create_topics(
        [NewTopic(n, partitions or cfg.partitions, cfg.replication_factor, config=conf) for n in wanted],
        operation_timeout=timeout)
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
