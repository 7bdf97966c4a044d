"""The merge job's marker planner: which markers a micro-batch reads, and which table
partition gets which.

A batch fixes, once, the range of the window markers topic ``<prefix>._markers`` it covers:
from where the previous batch stopped to the topic's end looked up *now*, after the batch's
table offsets were fixed and its records committed.  The producer commits a marker no later
than the records after it, so every marker below any record of the batch is in that range.
The range is written down before use (the batch's plan in the
:class:`~spark_jobs.commit.merge_state.MergeStateStore`) so a replayed batch reads the same
markers.  The table markers (DELETE_MISSING, TRUNCATE, DROP and RENAME TABLE) get the
partition ends they wait for (:mod:`spark_jobs.commit.table_markers` applies them).  With
Debezium's input (``kafka.input: debezium``) the range is read in Debezium's schema change
topic, for its DROP and RENAME TABLE statements.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from contract.debezium import debezium_table_markers
from contract.errors import SerdeError
from contract.markers import is_table_marker, is_window
from contract.topics import markers_topic, schemas_topic, table_topic
from spark_jobs.planning.data_loss_guard import DataLossGuard
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.commit.merge_state import MergeStateStore

log = logging.getLogger(__name__)


def debezium_markers(value: bytes, offset: int) -> list[dict]:
    """The table markers of a record of Debezium's schema change topic (``kafka.input:
    debezium``): DROP TABLE and RENAME TABLE (:func:`contract.debezium.debezium_table_markers`).
    A record that is not a schema change event is reported and passed over: it can only be
    a statement the sinks would not follow (no row is in it)."""
    try:
        return debezium_table_markers(json.loads(value))
    except (ValueError, SerdeError) as exc:
        log.error("Debezium's schema change topic, offset %d: not a schema change event (%s); passed over", offset,
                  exc)
        return []


def batch_inputs(prefix: str, states: dict[str, dict], orphans: dict[str, list[dict]],
                 partitions: list[tuple[str, int]], markers: list[dict]
                 ) -> tuple[dict[str, tuple[dict | None, list[dict]]], dict[str, list[dict]]]:
    """What each table partition gets in a batch: its state and the markers of its table
    (this batch's, plus those kept for a table whose topic did not exist yet: a table
    snapshotted before any change of it has markers before its topic is created).
    Returns ``(inputs by "topic|partition", markers still without a topic)``."""
    by_table: dict[str, list[dict]] = {t: list(ms) for t, ms in orphans.items()}
    for m in markers:
        if is_window(m):
            by_table.setdefault(table_topic(prefix, m["db"], m["table"]), []).append(m)
    known = {t for t, _ in partitions}
    inputs = {f"{t}|{p}": (states.get(f"{t}|{p}"), by_table.get(t, [])) for t, p in partitions}
    return inputs, {t: ms for t, ms in by_table.items() if t not in known}


class MarkerPlanner:
    """The markers range of each batch of one source's job (topic prefix ``prefix``), planned
    once and kept in ``store``; ``guard`` checks the markers topic for lost records."""

    def __init__(self, kafka: DriverKafka, prefix: str, query_dir: Path, store: MergeStateStore,
                 guard: DataLossGuard, debezium: bool) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.query_dir = query_dir
        self.store = store
        self.guard = guard
        self.debezium = debezium

    def plan(self, batch_id: int, prev: dict, partitions: list[tuple[str, int]]) -> tuple[dict, list[dict]]:
        """The batch's markers range (written down before use, so a replay reads the same)
        and its markers; the table markers (DELETE_MISSING, TRUNCATE) get the partition ends
        they wait for."""
        plan = self.store.plan(batch_id)
        mt = markers_topic(self.prefix)
        if plan is None and self.debezium:
            # Debezium writes no window markers (its incremental snapshot deduplicates the
            # chunks itself) and no schemas topic (each record embeds its schema); its schema
            # change topic tells of DROP and RENAME TABLE (the markers range is read there).
            start, end = self.debezium_ddl_range(int(prev.get("markers_next", 0)))
            plan = {"markers_start": start, "markers_end": end, "schemas_end": 0, "markers_topic_id": None,
                    "lost": []}
            self.store.save_plan(batch_id, plan)
        if plan is None:
            # Looked up after the batch's offsets were fixed (so the markers of its committed
            # records are there), once for the losses check and the range.
            st = schemas_topic(self.prefix)
            latest = self.kafka.offsets_now([(mt, 0), (st, 0)])
            ids = self.kafka.topic_ids([mt])
            start = int(prev.get("markers_next", 0))
            losses = self.guard.enforce(
                self.guard.markers_losses(start, prev.get("markers_topic_id"), latest=latest, ids=ids))
            for x in losses:
                log.warning("%s; spark.fail_on_data_loss is false: the markers are read from offset %s", x.describe(),
                            x.resume)
                start = x.resume or 0
            end = latest.get((mt, 0), (0, 0))[1]
            plan = {"markers_start": start, "markers_end": max(end, start),
                    "schemas_end": latest.get((st, 0), (0, 0))[1],
                    "markers_topic_id": ids.get(mt) or prev.get("markers_topic_id"),
                    "lost": [x.to_json() for x in losses]}
            self.store.save_plan(batch_id, plan)
        if self.debezium:
            markers = self.kafka.read_markers(self.prefix, plan["markers_start"], plan["markers_end"],
                                              decode=debezium_markers)
        else:
            markers = self.kafka.read_markers(mt, plan["markers_start"], plan["markers_end"])
        if "delete_missing" not in plan:
            waits = []
            for m in markers:
                if is_table_marker(m):
                    topic = table_topic(self.prefix, m["db"], m["table"])
                    mine = [tp for tp in partitions if tp[0] == topic]
                    ends = self.kafka.end_offsets(mine)
                    waits.append({"marker": m, "required": {f"{t}|{p}": e for (t, p), (_, e) in ends.items()}})
            plan["delete_missing"] = waits
            self.store.save_plan(batch_id, plan)
        return plan, markers

    def debezium_ddl_range(self, start: int) -> tuple[int, int]:
        """The offsets ``[start, end)`` of Debezium's schema change topic (``<topic.prefix>``,
        one partition) this batch reads: from where the last batch stopped to its end now.
        No topic (``include.schema.changes=false``): nothing.  Records gone from it (its
        retention) or a topic made again: read from what it holds, with a warning, as
        those statements can no longer be applied (the rows are not in that topic)."""
        topic = self.prefix
        latest = self.kafka.offsets_now([(topic, 0)]).get((topic, 0))
        if latest is None:
            return start, start
        low, end = latest
        if start < low or start > end:
            log.warning("Debezium's schema change topic %s holds offsets %d to %d, the job had read to %d: DROP and "
                        "RENAME TABLE statements it no longer holds were not applied to the sinks; reading from %d",
                        topic, low, end, start, low)
            start = low
        return start, end
