"""The merge job's schema guard: a table whose ``sinks.schema_changes`` rule says
``columns: stop`` and whose schema changed since it was first captured stops the job before
its records are applied (checked before the query starts, after it failed, and before each
batch is applied).
"""

from __future__ import annotations

import logging

from common.config import CDCConfig
from contract.envelope import record_names
from contract.schema_store import SchemaStore
from contract.topics import schemas_topic, table_of_topic
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.errors import SchemaChangeStopped
from spark_jobs.planning.table_topics import TableTopics

log = logging.getLogger(__name__)


class SchemaGuard:
    """Schema changes of one source's tables (topic prefix ``prefix``, writer schemas in
    ``schemas``) held to ``cfg.sinks.schema_changes``."""

    def __init__(self, cfg: CDCConfig, kafka: DriverKafka, prefix: str, schemas: SchemaStore,
                 topics: TableTopics) -> None:
        self.cfg = cfg
        self.kafka = kafka
        self.prefix = prefix
        self.schemas = schemas
        self.topics = topics

    def _stops(self) -> bool:
        return any(r.columns == "stop" for r in self.cfg.sinks.schema_changes)

    def stop_on_schema_change(self) -> None:
        """:class:`SchemaChangeStopped` when a table the job reads has a schema change that
        ``sinks.schema_changes`` refuses (checked before the query starts and after it fails)."""
        if not self._stops():
            return
        st = schemas_topic(self.prefix)
        end = self.kafka.offsets_now([(st, 0)]).get((st, 0), (0, 0))[1]
        try:
            self.check(self.topics.ensure(), end)
        except SchemaChangeStopped as exc:
            log.error("%s", exc)
            raise

    def check(self, partitions: list[tuple[str, int]], schemas_end: int) -> None:
        """Stop before the batch is applied when a table whose ``sinks.schema_changes`` rule
        says ``columns: stop`` has a schema other than the one it was first captured with."""
        if not schemas_end or not self._stops():
            return
        self.schemas.refresh_until(schemas_end)
        for topic in sorted({t for t, _ in partitions}):
            db, table = table_of_topic(self.prefix, topic)
            if self.cfg.sinks.schema_rule(db, table).columns != "stop":
                continue
            key_name, _, envelope_name = record_names(self.prefix, db, table)
            change = "; ".join(f"{what} {c}" for what, c in (("key", self.schemas.change_of(key_name)),
                                                               ("columns", self.schemas.change_of(envelope_name)))
                               if c)
            if change:
                raise SchemaChangeStopped(
                    f"the schema of {db}.{table} changed since it was first captured ({change}), and "
                    f"sinks.schema_changes says 'columns: stop' for it: the merge job stops before applying its "
                    "records.  Bring the sink tables in line by hand and set 'columns: evolve' or 'ignore' for the "
                    "table, then start the job again")
