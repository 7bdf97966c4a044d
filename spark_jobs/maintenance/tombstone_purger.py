"""The merge job's tombstone purger: after a batch, the table sinks' tombstones below what no
replay can reach any more are dropped (:class:`spark_jobs.maintenance.tombstone_horizon.TombstonePurge`,
fed here with the job's Kafka reads and checkpoint).

Housekeeping: a failure is logged and tried again after a later batch.  Debezium's input
has no stored resume point to tell the horizon by, and without table sinks there are no
tombstones: then nothing is purged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from contract.topics import offsets_topic, table_topic
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.input.kafka_offsets import offsets_from_json
from spark_jobs.input.offset_log import batch_end_offsets, last_batches
from spark_jobs.task.settings import sinks_of
from spark_jobs.sharding.routes import Router
from spark_jobs.maintenance.tombstone_horizon import TombstonePurge

log = logging.getLogger(__name__)


class TombstonePurger:
    """The purge of one source's job (topic prefix ``prefix``, ``source_name``) every
    ``interval_s`` (0: never); ``purge``: the :class:`TombstonePurge` it drives."""

    def __init__(self, kafka: DriverKafka, prefix: str, source_name: str, query_dir: Path, router: Router,
                 settings, interval_s: float) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.source_name = source_name
        self.query_dir = query_dir
        self.router = router
        self._topics: set[str] = set()
        self.purge = TombstonePurge(interval_s, self._read_producer_offsets, self._partition_ends,
                                    lambda: sinks_of(settings), self._purgeable)

    def _read_producer_offsets(self, start: dict[int, int]) -> tuple[list[tuple[bytes, Any]], dict[int, int]]:
        """The producers' offset records (``<prefix>._offsets``) from ``start`` on, and where to read on."""
        return self.kafka.read_topic(offsets_topic(self.prefix), start)

    def _partition_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: end for tp, (_, end) in self.kafka.offsets_now(partitions).items()}

    def _purgeable(self, db: str, table: str) -> bool:
        """A sink table whose tombstones this job may purge: its source table's topic is one
        of the job's, and the table is not routed (a target's rows come from several sources)."""
        return table_topic(self.prefix, db, table) in self._topics and \
            (not self.router.routes or self.router.route_of(self.source_name, db, table) is None)

    def after_batch(self, partitions: list[tuple[str, int]]) -> None:
        """After a batch: :meth:`TombstonePurge.after_batch` with the checkpoint's committed
        offsets (housekeeping: a failure is logged, the job goes on)."""
        if not self.purge.interval_s:
            return
        self._topics = {t for t, _ in partitions}
        committed_id = last_batches(self.query_dir)[1]
        ends = batch_end_offsets(self.query_dir, committed_id) if committed_id is not None else None
        committed = offsets_from_json(ends[0]) if ends and isinstance(ends[0], dict) else None
        try:
            self.purge.after_batch(partitions, committed)
        except Exception as exc:  # noqa: BLE001 - housekeeping: the next batch tries again
            log.warning("the tombstone purge failed (%s: %s); it is tried again after a later batch",
                        type(exc).__name__, exc)
