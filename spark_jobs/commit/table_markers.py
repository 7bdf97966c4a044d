"""The table markers, applied by the merge job's driver once every partition of their table
was read past the point the marker was seen.

``DELETE_MISSING`` (snapshots taken with ``delete-missing``): each table sink deletes the
table's rows below the marker's position, the rows the snapshot did not refresh (deleted at
the source while their changes were lost); ``TRUNCATE``: every row written before the
statement; ``DROP_TABLE`` and ``RENAME_TABLE``: as ``sinks.schema_changes`` says for the table
(keep, drop or rename the sink tables; a dropped table's clean changelog is deleted).  A
routed table's shard rows in its route's target are told apart by their origin values.
"""

from __future__ import annotations

import logging
from pathlib import Path

from confluent_kafka import Producer

from common.config import CDCConfig
from common.errors import CDCError
from common.kafka.clients import delete_topics, producer_config
from contract.markers import DROP_TABLE, REFILL, RENAME_TABLE, TRUNCATE
from contract.signals import debezium_snapshot_signal
from contract.topics import clean_topic
from spark_jobs.input.kafka_offsets import offsets_from_json
from spark_jobs.commit.lake_committer import settled
from spark_jobs.input.offset_log import batch_end_offsets
from spark_jobs.task.settings import sinks_of
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId

log = logging.getLogger(__name__)


def debezium_truncates(stats: list[dict]) -> list[dict]:
    """Debezium's truncate events of a batch (``op: t``, ``kafka.input: debezium``: no TRUNCATE
    marker) as TRUNCATE table markers waiting for nothing (:meth:`TableMarkers.apply` applies
    them now that every partition of the batch was applied: the truncate has no key, so its
    partition is any): each table's highest, deleting its sink rows below it."""
    highest: dict[tuple[str, str], str] = {}
    for st in stats:
        for db, table, below in st.get("truncates") or []:
            highest[(db, table)] = max(highest.get((db, table), ""), below)
    return [{"marker": {"kind": TRUNCATE, "db": db, "table": table, "below": below}, "required": {}}
            for (db, table), below in sorted(highest.items())]


class TableMarkers:
    """The table markers of one source's job (``source_name``, topic prefix ``prefix``),
    applied to the table sinks of ``settings`` once the batch's checkpoint offsets
    (``query_dir``) passed the ends each marker waits for."""

    def __init__(self, cfg: CDCConfig, prefix: str, source_name: str, query_dir: Path, router: Router,
                 settings) -> None:
        self.cfg = cfg
        self.prefix = prefix
        self.source_name = source_name
        self.query_dir = query_dir
        self.router = router
        self.settings = settings

    def apply(self, waiting: list[dict], batch_id: int) -> tuple[list[dict], int, int]:
        """Apply the table markers (DELETE_MISSING, TRUNCATE, DROP_TABLE, RENAME_TABLE) whose
        table partitions this batch read past the ends they wait for; returns the ones still
        waiting, the rows deleted and how many sink tables were dropped or renamed."""
        ends = batch_end_offsets(self.query_dir, batch_id)
        reached = offsets_from_json(ends[0]) if ends and isinstance(ends[0], dict) else None
        still, deleted, moved = [], 0, 0
        for w in waiting:
            if reached is None or any(reached.get((key.rsplit("|", 1)[0], int(key.rsplit("|", 1)[1])), 0) < end
                                      for key, end in w["required"].items()):
                still.append(w)
                continue
            m = w["marker"]
            route = self.router.route_of(self.source_name, m["db"], m["table"]) if self.router.routes else None
            if m.get("kind") == REFILL:
                self.refill(m)
                continue
            if m.get("kind") in (DROP_TABLE, RENAME_TABLE):
                if route is not None:  # the target is shared: its other shards' rows stay
                    log.info("%s of %s.%s, routed to %s: the target and its rows of the table are kept",
                             m["kind"], m["db"], m["table"], route.name)
                else:
                    moved += self.table_ddl(m)
                continue
            deleted += self._delete_below(m, route)
        return still, deleted, moved

    def refill(self, m: dict) -> None:
        """A REFILL marker (Debezium's schema change topic: a statement changed the table's rows
        without row events): ask Debezium, through its Kafka signal topic
        (``kafka.debezium_signal_topic``), for an incremental snapshot of the table, whose rows
        then bring the sinks the values the statement wrote; without that topic, say what to do.
        A batch replayed after a crash asks again (Debezium snapshots the table twice)."""
        k = self.cfg.kafka
        what = f"{m.get('reason', 'a statement')} on {m['db']}.{m['table']} (at {m.get('file')}:{m.get('pos')})"
        if not k.debezium_signal_topic:
            log.warning("%s changed its rows without row events: the sinks keep the values from before until Debezium "
                        "snapshots the table: set kafka.debezium_signal_topic (Debezium's signal.kafka.topic) for the "
                        "merge job to ask for it, or send Debezium an execute-snapshot signal for %s.%s yourself",
                        what, m["db"], m["table"])
            return
        key, value = debezium_snapshot_signal(k.topic_prefix, f"{m['db']}.{m['table']}")
        producer = Producer(producer_config(k))
        try:
            producer.produce(k.debezium_signal_topic, value, key)
            if producer.flush(30):
                raise CDCError(f"could not send Debezium's snapshot signal for {m['db']}.{m['table']} to "
                               f"{k.debezium_signal_topic} within 30 s")
        finally:
            producer.flush(0)
        log.info("%s changed its rows without row events: asked Debezium for an incremental snapshot of the table "
                 "(signal to %s)", what, k.debezium_signal_topic)

    def _delete_below(self, m: dict, route) -> int:
        """A DELETE_MISSING or TRUNCATE marker: every table sink deletes the table's rows below
        the marker's position (a routed table's: its shard's rows in the target); the rows
        deleted."""
        db, table, where = m["db"], m["table"], None
        if route is not None:  # a shard's rows in its route's target: by their origin (and extracted) values
            db, table = route.target
            where = route.values(ShardId(self.source_name, m["db"], m["table"]))
            if not where:
                log.warning("%s of %s.%s: its route to %s has no origin columns and no column mapping, so its rows "
                            "in the target cannot be told from the other shards': nothing deleted", m.get("kind"),
                            m["db"], m["table"], route.name)
                return 0
        deleted = 0
        for name, sink in sinks_of(self.settings):
            with settled(sink, [(db, table)]):  # (a lake table's staged batches committed first)
                n = sink.delete_below(db, table, m["below"], where)
            deleted += n
            if m.get("kind") == TRUNCATE:
                log.info("TRUNCATE of %s.%s: %d rows written before it deleted from %s (below position %s)",
                         m["db"], m["table"], n, name, m["below"])
            else:
                log.info("snapshot %s of %s.%s (delete-missing): %d rows it did not find deleted from %s "
                         "(below position %s)", m.get("snapshot_id"), m["db"], m["table"], n, name, m["below"])
        return deleted

    def table_ddl(self, m: dict) -> int:
        """A DROP_TABLE or RENAME_TABLE marker, as ``sinks.schema_changes`` says for the
        table; how many sink tables were dropped or renamed."""
        db, table = m["db"], m["table"]
        rule = self.cfg.sinks.schema_rule(db, table)
        action = rule.drop_table if m["kind"] == DROP_TABLE else rule.rename_table
        what = "DROP TABLE" if m["kind"] == DROP_TABLE else f"RENAME TABLE to {m.get('to_db')}.{m.get('to_table')}"
        if action == "keep":
            log.info("%s of %s.%s: the sink tables and the clean changelog are kept (sinks.schema_changes)", what,
                     db, table)
            return 0
        moved = 0
        for name, sink in sinks_of(self.settings):
            with settled(sink, [(db, table), (m.get("to_db") or db, m.get("to_table") or table)]):
                if action == "rename":
                    done = sink.rename_table(db, table, m["to_db"], m["to_table"], position=m.get("position"))
                else:
                    done = "dropped" if sink.drop_table(db, table, below=m["position"]) else "none"
            moved += done != "none"
            log.info("%s of %s.%s: sink %s: %s", what, db, table, name, done)
        if action == "drop" and self.settings.changelog:
            topic = clean_topic(self.prefix, db, table)
            delete_topics(self.cfg.kafka, [topic])
            log.info("%s of %s.%s: clean changelog %s deleted", what, db, table, topic)
        return moved
