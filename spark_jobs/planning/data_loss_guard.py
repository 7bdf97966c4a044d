"""The merge job's data-loss guard: one policy for lost Kafka history, written once, for the
table topics, the checkpoint and the markers topic.

Records a consumer has not read and Kafka no longer holds are never passed in silence
(docs/DESIGN.md, "Lost history").  With ``spark.fail_on_data_loss`` (default) the job stops
with :class:`~spark_jobs.errors.MergeDataLoss`, naming each partition, its checkpoint offset,
the broker's offsets, how far each sink got and what to do; otherwise it carries on from
what Kafka holds, and the losses are counted and logged (:mod:`spark_jobs.report.batch_report`).
The guard checks the checkpoint before a query starts and after it failed, and the markers
topic when a batch plans its markers range (:mod:`spark_jobs.planning.marker_planner`); the source
stops a running query itself on the table topics' losses.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from common.errors import OffsetLookupError
from contract.position import describe_position
from contract.topics import markers_topic, table_topic, table_topic_pattern
from spark_jobs.input.data_loss import DataLoss, data_loss_message, detect_data_loss
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.errors import MergeDataLoss
from spark_jobs.input.kafka_offsets import ids_from_json, offsets_from_json
from spark_jobs.commit.merge_state import MergeStateStore
from spark_jobs.input.offset_log import last_batches, next_start
from spark_jobs.task.settings import sinks_of

log = logging.getLogger(__name__)


def data_loss_stop(losses: list[DataLoss], sinks_note: str = "") -> MergeDataLoss:
    """The error that stops the job for ``losses``, with how far the sinks got."""
    text = data_loss_message(losses, "spark.fail_on_data_loss: true")
    return MergeDataLoss("the merge job stopped: " + text + (f"\n{sinks_note}" if sinks_note else ""), losses)


def sinks_note(settings, wanted=lambda db, table: True) -> str:
    """How far each table sink got: per table (``wanted(db, table)``), the highest position
    applied (each sink row keeps the position of the change that wrote it)."""
    lines = []
    for name, sink in sinks_of(settings):
        try:
            applied = sink.applied_positions()
        except Exception as exc:  # noqa: BLE001 - the note is best effort
            lines.append(f"  {name}: not reachable ({exc})")
            continue
        for (db, table), pos in sorted(applied.items()):
            if wanted(db, table):
                lines.append(f"  {name} holds {db}.{table} up to position {describe_position(pos)}")
    return ("How far the sinks got (the newest change applied per table):\n" + "\n".join(lines)) if lines else ""


class DataLossGuard:
    """Lost Kafka history of one source's merge job (topic prefix ``prefix``; Spark's
    checkpoint ``query_dir``; the merge ``store``): found, then stopped on
    (``fail_on_data_loss``) or let through to be counted."""

    def __init__(self, kafka: DriverKafka, prefix: str, query_dir: Path, store: MergeStateStore, settings,
                 fail_on_data_loss: bool) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.query_dir = query_dir
        self.store = store
        self.settings = settings
        self.fail_on_data_loss = fail_on_data_loss

    # -- the policy -------------------------------------------------------------------------
    def enforce(self, losses: list[DataLoss]) -> list[DataLoss]:
        """The policy: with ``fail_on_data_loss`` any loss stops the job (:func:`data_loss_stop`,
        logged and raised); otherwise the losses are returned for the caller to carry on
        past and count."""
        if losses and self.fail_on_data_loss:
            err = data_loss_stop(losses, self.sinks_note(losses))
            log.error("%s", err)
            raise err
        return losses

    def sinks_note(self, losses: list[DataLoss]) -> str:
        """How far each table sink got, for the tables of the lost topics."""
        topics = {x.topic for x in losses}
        everything = markers_topic(self.prefix) in topics
        return sinks_note(self.settings, lambda db, table: everything or table_topic(self.prefix, db, table) in topics)

    def stop_on_data_loss(self) -> None:
        """Raise :class:`MergeDataLoss` when the checkpoint would read records Kafka lost
        (when Kafka does not answer, that cannot be told: the query's own retries go on).
        Without ``fail_on_data_loss`` there is nothing to stop on: the source carries on."""
        if not self.fail_on_data_loss:
            return
        from confluent_kafka import KafkaException

        try:
            losses = self.checkpoint_losses()
        except (KafkaException, OffsetLookupError) as exc:
            log.warning("cannot check the checkpoint against Kafka (%s); the query starts and retries", exc)
            return
        self.enforce(losses)

    # -- finding losses -----------------------------------------------------------------------
    def markers_losses(self, start: int, topic_id: str | None, plan_end: int | None = None, *,
                       latest: dict | None = None, ids: dict | None = None) -> list[DataLoss]:
        """Whether the markers topic still holds its records from ``start`` (and up to
        ``plan_end``): the merge state keeps a read position in it.  ``latest`` and ``ids``:
        the markers topic's offsets and id when the caller looked them up already."""
        mt = markers_topic(self.prefix)
        if latest is None:
            latest = self.kafka.offsets_now([(mt, 0)])
        latest = {tp: v for tp, v in latest.items() if tp == (mt, 0)}
        if not latest and start == 0:
            return []  # no markers written yet
        if ids is None:
            ids = self.kafka.topic_ids([mt])
        losses = detect_data_loss({(mt, 0): start}, latest, {mt: topic_id} if topic_id else {}, ids)
        if not losses and plan_end is not None and (mt, 0) in latest and plan_end > latest[(mt, 0)][1]:
            low, end = latest[(mt, 0)]
            losses = [DataLoss(mt, 0, plan_end, low, end, "past-end", None, low)]
        return losses

    def checkpoint_losses(self) -> list[DataLoss]:
        """What the checkpoint would read next that Kafka no longer holds: the table topics'
        offsets (Spark's offset log) and the markers topic (the merge state)."""
        start_doc, pending_doc = next_start(self.query_dir)
        rx = re.compile(table_topic_pattern(self.prefix))
        start = {tp: o for tp, o in offsets_from_json(start_doc).items() if rx.fullmatch(tp[0])}
        pending = {tp: o for tp, o in offsets_from_json(pending_doc).items() if rx.fullmatch(tp[0])}
        latest = self.kafka.offsets_now(set(start) | set(pending))
        losses = detect_data_loss(start, latest, ids_from_json(start_doc),
                                  self.kafka.topic_ids({t for t, _ in start}) if start else {})
        seen = {(x.topic, x.partition) for x in losses}
        for tp, end in sorted(pending.items()):
            if tp not in seen and tp in latest and end > latest[tp][1]:
                low, top = latest[tp]
                losses.append(DataLoss(tp[0], tp[1], end, low, top, "past-end", None, low))
        planned, committed = last_batches(self.query_dir)
        next_batch = planned if planned is not None and (committed is None or planned > committed) else \
            (committed + 1 if committed is not None else 0)
        prev = self.store.state_before(next_batch)
        plan = self.store.plan(next_batch)
        if self.settings.debezium:  # no markers topic
            return losses
        losses += self.markers_losses(int(prev.get("markers_next", 0)), prev.get("markers_topic_id"),
                                      plan.get("markers_end") if plan else None)
        return losses
