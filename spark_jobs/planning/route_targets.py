"""The merge job's route targets (docs/sharding.md): each route's target layout from the
newest schemas of its shards, the check that the routes can be applied, and the merged clean
changelog's schemas published.

A reader takes the schema published last under a record name as its newest
(:mod:`contract.schema_store`), and the queries of several sources publish a merged target's
schemas each from its own view, computed a moment before: a query whose view was a DDL
behind could publish after one that had seen it, and the target's newest schema would lose
the column for good (seen once in CI: the merged clean changelog read without a shard's new
column).  So every publication is followed, under one lock of the process (every source's
query runs in one, :func:`~spark_jobs.merge_job.run_jobs`), by the check that the newest
schema of each target is the one of every shard's newest schema now, published again when
it is not (:meth:`RouteTargets.publish_targets`).
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

from common.config import CDCConfig
from common.kafka.clients import ensure_topics
from contract.codecs.serde import AvroWriter
from contract.envelope import record_names
from contract.schema_store import SchemaStore, schema_name, schema_record
from contract.topics import schemas_topic, table_of_topic, table_topic_pattern
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.errors import MergeStateError, RouteError
from spark_jobs.input.kafka_offsets import wake_from_json
from spark_jobs.input.offset_log import batch_end_offsets, last_batches
from spark_jobs.planning.route_decisions import RouteDecisions
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import (
    check_history,
    coordinate,
    target_envelope_schema,
    target_key_schema,
    target_schema,
)
from spark_jobs.planning.table_topics import TableTopics

log = logging.getLogger(__name__)

_PUBLISHING = threading.Lock()  # the merged clean changelogs' schemas, published by one query at a time


class RouteTargets:
    """The targets of ``router``'s routes as one source's job (topic prefix ``prefix``) sees
    them: ``stores`` holds every source's schemas (``{prefix: (source name, store)}``: a
    route's target is the union of every source's shards), ``clean_schemas`` the schemas
    of the clean changelog's prefix."""

    def __init__(self, cfg: CDCConfig, kafka: DriverKafka, prefix: str, router: Router,
                 stores: dict[str, tuple[str, SchemaStore]], clean_schemas: SchemaStore | None,
                 topics: TableTopics | None, changelog: bool, query_dir: Path | None = None) -> None:
        self.cfg = cfg
        self.query_dir = query_dir  # the query's checkpoint (None: no query, read the decisions each time)
        self.kafka = kafka
        self.prefix = prefix
        self.router = router
        self.stores = stores
        self.schemas = stores[prefix][1]
        self.clean_schemas = clean_schemas
        self.topics = topics
        self.changelog = changelog
        self._published: set[str] = set()  # fingerprints of schemas the job published
        self._latest: SchemaStore | None = None  # this source's schemas to their end (keep_newest)
        # the operator's decisions on pessimistic routes' waiting DDL (cdc route force|skip)
        self.decisions = RouteDecisions(cfg.kafka, kafka.client) if any(
            r.ddl == "pessimistic" for r in router.routes) else None

    @property
    def active(self) -> bool:
        """Whether there is anything to route: routes, or several sources (whose same-named
        tables must not land in one sink table)."""
        return bool(self.router.routes) or len(self.stores) > 1

    def targets(self, partitions: list[tuple[str, int]], schemas_end: int) -> dict[str, dict]:
        """Each route's target layout (``{"schema", "key"}`` by route name) from the newest
        schemas (up to ``schemas_end``) of the routed tables among the topics of
        ``partitions``: the union of their columns (optimistic sharding DDL).  Raises
        :class:`~spark_jobs.errors.RouteCollision` when an unrouted table lands in a target,
        :class:`~spark_jobs.errors.IncompatibleShards` (naming both tables) when a route's
        tables cannot be merged, at start or after a DDL.  With several sources and no route,
        the check that no two sources' same-named tables land in one sink table."""
        targets = self.layouts(partitions, schemas_end)
        if self.changelog:
            self.publish_targets(targets)
        return targets

    def layouts(self, partitions: list[tuple[str, int]], schemas_end: int, *, quiet: bool = False) -> dict[str, dict]:
        """:meth:`targets` without publishing the merged clean changelog's schemas (with
        ``changelog``: each target's ``key_schema`` and ``envelope_schema`` too); ``partitions``
        None: every source's tables now, with the newest schemas of all (:meth:`_shards`)."""
        if not self.active:
            return {}
        if schemas_end:
            self.schemas.refresh_until(schemas_end)
        tables, shards, history = self._shards(partitions, latest=partitions is None)
        if partitions is not None:
            self.router.plan(tables)
        if self.decisions is not None and self._decisions_moved():
            self.decisions.refresh()
        targets = {}
        for route, members in shards.items():
            keys = {shard: k for shard, (_, k) in members.items()}
            if route.ddl == "pessimistic":
                coordinator = self.coordinator(route, history[route], keys)
                schema, key = target_schema(route, members, coordinator.target)
                waiting = sorted(f"{sh}|{v}" for sh, v in coordinator.waiting())
                if waiting and not quiet:
                    log.info("route to %s (pessimistic): the rows of %s wait for %s to run the same DDL", route.name,
                             ", ".join(waiting), ", ".join(map(str, coordinator.awaited())))
            else:
                schema, key = target_schema(route, members)
                check_history(route, history[route], keys)
                waiting = []
            targets[route.name] = {"schema": schema, "key": key, "waiting": waiting}
            if self.changelog:
                targets[route.name]["key_schema"] = target_key_schema(schema, key)
                targets[route.name]["envelope_schema"] = target_envelope_schema(members[min(members)][0], schema)
        return targets

    def publish_targets(self, targets: dict[str, dict]) -> None:
        """Publish the merged clean changelog's schemas of ``targets`` (:meth:`layouts`) as
        the producer publishes its own, and then keep each target's newest schema the one of
        every shard's newest schema now (the module's docstring), under the process's lock."""
        with _PUBLISHING:
            fresh = self.publish_schemas([s for t in targets.values() for s in (t["key_schema"], t["envelope_schema"])])
            if fresh:
                self.keep_newest(set(targets))

    def keep_newest(self, routes: set[str]) -> int:
        """Publish again, where another schema was published after it, the merged clean
        changelog's schemas of ``routes`` laid out from every shard's newest schema now; how
        many.  A layout that cannot be made now (shards that no longer merge) is left to the
        next batch, which stops on it."""
        try:
            now = self.layouts(None, 0, quiet=True)
        except RouteError as exc:
            log.debug("the merged clean changelogs' newest schemas are left as they are: %s", exc)
            return 0
        self.clean_schemas.refresh()
        stale = []
        for name in sorted(routes & set(now)):
            for schema in (now[name]["key_schema"], now[name]["envelope_schema"]):
                newest = self.clean_schemas.newest_named(schema_name(schema))
                if newest is None or newest[0] != AvroWriter(schema).fingerprint:
                    stale.append(schema)
        if stale:
            log.info("the newest schemas of the merged clean changelog of %s published again (another query "
                     "published an older layout after them)", ", ".join(sorted(routes)))
            self.publish_schemas(stale, again=True)
        return len(stale)

    def coordinator(self, route, history: dict, keys: dict):
        """A pessimistic route's coordinator (:func:`~spark_jobs.sharding.target.coordinate`)
        with the operator's decisions on it applied, in the order they were taken; one that
        no longer applies (the version does not wait any more) is passed over."""
        coordinator = coordinate(route, history, keys, "pessimistic")
        if coordinator is None:
            return None
        for shard, version, action in self.decisions.of(route.name) if self.decisions is not None else ():
            try:
                getattr(coordinator, action)(shard, version)
                log.info("route to %s: %s of %s (schema %s), as the operator decided", route.name, action, shard,
                         version)
            except (RouteError, KeyError) as exc:
                log.debug("route to %s: the decision %s of %s (schema %s) does not apply: %s", route.name, action,
                          shard, version, exc)
        return coordinator

    def _decisions_moved(self) -> bool:
        """Whether the decisions topic may hold records not read yet: its end offset as the
        batch being run was planned (a wake topic's, in the batch's offsets; about 25-60 ms
        a batch saved when nothing was decided), or always without a query's checkpoint."""
        if self.query_dir is None:
            return True
        planned, _ = last_batches(self.query_dir)
        ends = batch_end_offsets(self.query_dir, planned) if planned is not None else None
        if not ends or not isinstance(ends[0], dict):
            return True
        end = wake_from_json(ends[0]).get((self.decisions.topic, 0))
        return end is not None and end > self.decisions.read_to

    def view(self) -> dict:
        """Every route's shards as the merge job sees them now (every source's table topics
        and schemas): ``{route: (members, history, coordinator or None)}``, for ``cdc route``."""
        if self.decisions is not None:
            self.decisions.refresh()
        _, shards, history = self._shards(None)
        out = {}
        for route, members in shards.items():
            keys = {shard: k for shard, (_, k) in members.items()}
            out[route] = (members, history[route],
                          self.coordinator(route, history[route], keys) if route.ddl == "pessimistic" else None)
        return out

    def _shards(self, partitions: list[tuple[str, int]] | None, latest: bool = False
                ) -> tuple[list[ShardId], dict, dict]:
        """Every source's tables (this source's: the topics of ``partitions``, or all now
        when None; the others': their table topics now, with their newest schemas), and per
        route its shards' newest ``(envelope schema, key columns)`` and every schema
        version, oldest first.  ``latest``: this source's newest schemas too, from a store of
        its own (the job's store stays where its batch is)."""
        tables: list[ShardId] = []
        shards: dict = {}
        history: dict = {}  # route -> shard -> every schema version, oldest first
        stores = dict(self.stores)
        if latest:
            if self._latest is None:
                self._latest = SchemaStore(self.kafka.bootstrap, self.prefix, self.kafka.client or None)
            stores[self.prefix] = (stores[self.prefix][0], self._latest)
        topics = {self.prefix: sorted({t for t, _ in partitions or []})}
        if len(stores) > 1 or partitions is None:  # the other sources' tables, with their newest schemas now
            md = self.kafka.admin().list_topics(timeout=15)
            for prefix, (_, store) in stores.items():
                if prefix != self.prefix or partitions is None:
                    rx = re.compile(table_topic_pattern(prefix))
                    topics[prefix] = sorted(n for n, t in md.topics.items() if rx.fullmatch(n) and t.error is None)
                    store.refresh()
        for prefix, names in topics.items():
            source_name, store = stores[prefix]
            for topic in names:
                db, table = table_of_topic(prefix, topic)
                shard = ShardId(source_name, db, table)
                tables.append(shard)
                route = self.router.route_of(*shard)
                if route is None:
                    continue
                key_name, _, envelope_name = record_names(prefix, db, table)
                envelope, key = store.newest_named(envelope_name), store.newest_named(key_name)
                if envelope is None:
                    continue  # no schema yet: no record either
                key_columns = [f.get("mysql.column") or f["name"] for f in key[1].get("fields", [])] if key else []
                shards.setdefault(route, {})[shard] = (envelope[1], key_columns)
                history.setdefault(route, {})[shard] = store.versions_named(envelope_name)
        return tables, shards, history

    def publish_schemas(self, schemas: list[dict], again: bool = False) -> int:
        """Publish the schemas the schemas topic does not hold yet (a merged clean
        changelog's; ``again``: every one, so that it is the newest of its name); how many."""
        from confluent_kafka import Producer

        fresh = []
        for schema in schemas:
            fp = AvroWriter(schema).fingerprint
            if again or (fp not in self._published and self.clean_schemas.get(fp) is None):
                fresh.append(schema_record(self.cfg.kafka.topic_prefix, fp, schema))
            self._published.add(fp)
        if not fresh:
            return 0
        ensure_topics(self.cfg.kafka, [schemas_topic(self.cfg.kafka.topic_prefix)], partitions=1, compacted=True)
        producer = Producer({"bootstrap.servers": self.cfg.kafka.bootstrap_servers, "enable.idempotence": True,
                             **self.kafka.client})
        for topic, key, value in fresh:
            producer.produce(topic, value, key)
        if producer.flush(60):
            raise MergeStateError(f"the merged clean changelog's schemas were not acknowledged by Kafka ({topic})")
        return len(fresh)

    def check_routes(self) -> None:
        """Refuse routes the job cannot apply (before the query starts, and after it failed:
        a conflicting DDL stops the route and so the job), naming the tables."""
        if not self.active:
            return
        pessimistic = [r.name for r in self.router.routes if r.ddl == "pessimistic"]
        try:
            if pessimistic and self.cfg.spark.kafka_source == "jvm":
                raise RouteError(f"route(s) to {', '.join(pessimistic)} say 'ddl: pessimistic', which the merge job "
                                 "applies with the cdc-kafka source only (spark.kafka_source), not Spark's 'kafka'")
            st = schemas_topic(self.prefix)
            end = self.kafka.offsets_now([(st, 0)]).get((st, 0), (0, 0))[1]
            self.targets(self.topics.ensure(), end)
        except RouteError as exc:
            log.error("%s", exc)
            raise
