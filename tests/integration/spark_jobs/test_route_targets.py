"""The merged clean changelog's newest schema when the queries of several sources publish it
(spark_jobs.planning.route_targets), on the stack's Kafka.

A reader takes the schema published last under a record name as the newest.  Each source's
query lays the route's target out from its own view a moment before it publishes, so a query
a DDL behind could publish its older layout after the other's newer one: seen once in CI, the
merged clean changelog then read without a shard's new column for good.  Here the two views
are taken in that order on purpose (``layouts`` then ``publish_targets``)."""

from __future__ import annotations

import re

from confluent_kafka import Producer

from common.config import CDCConfig
from common.kafka.clients import ensure_topics
from common.kafka.offsets import end_offsets
from contract.codecs.serde import AvroWriter
from contract.envelope import envelope_schema, record_names
from contract.schema_resolution import row_fields
from contract.schema_store import SchemaStore, schema_name, schema_record
from contract.topics import schemas_topic, table_topic
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.planning.route_targets import RouteTargets
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.routes import Router


def _two_sources(config: CDCConfig, unique) -> CDCConfig:
    data = config.model_dump()
    source = data.pop("source")
    data["sources"] = [{**source, "name": unique("east")},
                       {**source, "name": unique("west"), "server_id": source["server_id"] + 1}]
    return CDCConfig.model_validate(data)


def _publish_table_schema(cfg: CDCConfig, prefix: str, db: str, columns: list[str]) -> int:
    """The producer's key and envelope schemas of ``db.orders`` (int ``columns``, key ``id``)
    into ``prefix``'s schemas topic; the topic's end offset after them."""
    key_name, value_name, envelope_name = record_names(prefix, db, "orders")
    key = {"type": "record", "name": key_name, "fields": [{"name": "id", "type": "int"}]}
    fields = [{"name": "id", "type": "int"}] + [{"name": c, "type": ["null", "int"], "default": None}
                                                for c in columns if c != "id"]
    row = {"type": "record", "name": value_name, "fields": fields}
    ensure_topics(cfg.kafka, [schemas_topic(prefix)], partitions=1, compacted=True)
    producer, failed = Producer({"bootstrap.servers": cfg.kafka.bootstrap_servers}), []
    for schema in (key, envelope_schema(row, envelope_name)):
        topic, fp, value = schema_record(prefix, AvroWriter(schema).fingerprint, schema)
        producer.produce(topic, value, fp, on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(30) == 0 and not failed, failed
    return end_offsets(cfg.kafka.bootstrap_servers, [(schemas_topic(prefix), 0)])[(schemas_topic(prefix), 0)][1]


def _newest_columns(cfg: CDCConfig, envelope: dict) -> list[str]:
    store = SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix)
    store.refresh()
    newest = store.newest_named(schema_name(envelope))
    assert newest is not None
    return [f["name"] for f in row_fields(newest[1])]


def test_an_older_layout_published_last_does_not_stay_the_newest_schema(config, unique):
    cfg = _two_sources(config, unique)
    base = unique("shop")
    east, west = cfg.captured_sources()
    cfg.routes = [RouteConfig(source=f"{re.escape(east.name)}|{re.escape(west.name)}",
                              schema=re.escape(base) + "_0[12]", table="orders", target=f"{base}.orders",
                              ddl="optimistic")]
    shards = {east.topic_prefix: f"{base}_01", west.topic_prefix: f"{base}_02"}
    ensure_topics(cfg.kafka, [table_topic(p, db, "orders") for p, db in shards.items()], partitions=1)
    ends = {p: _publish_table_schema(cfg, p, db, ["id", "qty"]) for p, db in shards.items()}

    def targets_of(prefix: str) -> RouteTargets:  # as each source's job makes its own (stores of its own)
        stores = {c.topic_prefix: (c.name, SchemaStore(cfg.kafka.bootstrap_servers, c.topic_prefix))
                  for c in cfg.captured_sources()}
        clean = SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix)
        return RouteTargets(cfg, DriverKafka(cfg.kafka, {}), prefix, Router.from_config(cfg), stores, clean, None,
                            True)
    jobs = {p: targets_of(p) for p in shards}
    mine = {p: [(table_topic(p, db, "orders"), 0)] for p, db in shards.items()}

    # West lays its target out before east's shard runs ADD COLUMN coupon...
    older = jobs[west.topic_prefix].layouts(mine[west.topic_prefix], ends[west.topic_prefix])
    envelope = older[f"{base}.orders"]["envelope_schema"]
    ends[east.topic_prefix] = _publish_table_schema(cfg, east.topic_prefix, shards[east.topic_prefix],
                                                    ["id", "qty", "coupon"])
    # ... east publishes the target with the column, and west publishes its older layout after it.
    jobs[east.topic_prefix].targets(mine[east.topic_prefix], ends[east.topic_prefix])
    assert _newest_columns(cfg, envelope)[-3:] == ["id", "qty", "coupon"]
    jobs[west.topic_prefix].publish_targets(older)
    # The older layout was published (its records are written with it) and is not the newest.
    clean = SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix)
    assert clean.get(AvroWriter(envelope).fingerprint) is not None
    assert _newest_columns(cfg, envelope)[-3:] == ["id", "qty", "coupon"]
    # Nothing to publish again when the newest is right.
    assert jobs[east.topic_prefix].keep_newest({f"{base}.orders"}) == 0
    assert jobs[west.topic_prefix].keep_newest({f"{base}.orders"}) == 0
