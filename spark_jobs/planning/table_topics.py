"""The table topics a merge job reads, and the topics it writes made sure of.

Every partition of every table topic ``<prefix>.<db>.<table>`` is listed (after a batch's
offsets were fixed); each table topic's clean changelog topic exists with as many partitions
(a routed table's: its target's), and so do the dead letter topic and the markers topic.
"""

from __future__ import annotations

import logging
import re

from common.config import CDCConfig
from common.kafka.clients import ensure_topics
from contract.topics import clean_topic, markers_topic, table_of_topic, table_topic_pattern
from spark_jobs.clean_changelog import ensure_clean_topic
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.sharding.routes import Router

log = logging.getLogger(__name__)


class TableTopics:
    """One source's table topics (topic prefix ``prefix``, source ``source_name``) and the
    topics its job writes; ``settings``: the job's :class:`~spark_jobs.task.partition_merge.MergeSettings`."""

    def __init__(self, cfg: CDCConfig, kafka: DriverKafka, prefix: str, source_name: str, router: Router,
                 settings) -> None:
        self.cfg = cfg
        self.kafka = kafka
        self.prefix = prefix
        self.source_name = source_name
        self.router = router
        self.settings = settings
        self._known: dict[str, int] = {}  # topics made sure of: partitions

    def ensure(self) -> list[tuple[str, int]]:
        """Every partition of every table topic; clean topics and the DLQ exist."""
        md = self.kafka.admin().list_topics(timeout=15)
        rx = re.compile(table_topic_pattern(self.prefix))
        parts = []
        for name, t in md.topics.items():
            if rx.fullmatch(name) and t.error is None:
                parts += [(name, p) for p in t.partitions]
                if self.settings.changelog and self._known.get(name) != len(t.partitions):
                    db, table = table_of_topic(self.prefix, name)
                    route = self.router.route_of(self.source_name, db, table)
                    clean = clean_topic(self.prefix, db, table) if route is None else \
                        clean_topic(self.cfg.kafka.topic_prefix, *route.target)  # merged: the target's
                    ensure_clean_topic(self.cfg.kafka.bootstrap_servers, clean, len(t.partitions),
                                       self.kafka.client or None)
                self._known[name] = len(t.partitions)
        if not self._known.get("", 0):
            # (Debezium's topics have no markers: a prefix of Debezium's gets no markers topic)
            ensure_topics(self.cfg.kafka, [self.settings.dlq_topic] +
                          ([] if self.settings.debezium else [markers_topic(self.prefix)]), partitions=1)
            self._known[""] = 1
        return parts
