"""The changelog stage of a partition's merge: the kept records, original bytes unchanged, to
the clean changelog partition (:mod:`spark_jobs.clean_changelog`, idempotent by position); a
routed table's to its route's merged clean topic, as target rows."""

from __future__ import annotations

from typing import Any

from contract.codecs.serde import AvroWriter
from contract.errors import SerdeError
from contract.topics import clean_topic
from spark_jobs.clean_changelog import CleanPartitionWriter, MergedPartitionWriter, clean_producer
from spark_jobs.errors import RouteError
from spark_jobs.task.kept import Kept
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.worker_cache import cached, forget
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import target_fields, target_key, target_row


def _producer(s: MergeSettings):
    """The clean changelog's producer of this worker process, kept from task to task: a new
    idempotent producer's first records waited about 500 ms for its producer id on the
    embedded broker, every batch.  Let go when a write fails (:func:`_drop_producer`): what it
    still holds must not land after the retry looked at the partition."""
    return cached(("clean", s.bootstrap, repr(s.client)), lambda: clean_producer(s.bootstrap, s.client or None))


def _drop_producer(s: MergeSettings) -> None:
    producer = forget(("clean", s.bootstrap, repr(s.client)))
    if producer is not None:
        producer.purge()
        producer.flush(0)


def write_changelog(s: MergeSettings, topic_names: tuple[str, str], partition: int, kept: list[Kept],
                    router: Router | None, merged_clean: dict, stats: dict,
                    clean_tails: dict) -> list[tuple[int, Any, Any, str]]:
    """The kept records of table topic ``topic_names`` (its ``(db, table)``) into their clean
    changelog partition ``partition``, a routed table's into its route's merged clean topic
    (:func:`merged_changelog`, ``merged_clean`` updated); counted in ``stats``.  ``clean_tails``
    (clean topic -> ``[end offset, last position]`` of its partition ``partition`` as the
    previous write left it, from the partition's state: :class:`CleanPartitionWriter`'s
    ``known``) is updated.  Returns the records that cannot be encoded (dead letters)."""
    if not s.changelog or not kept:
        return []
    dead: list[tuple[int, Any, Any, str]] = []
    plain = [k for k in kept if router is None or router.route_of(s.source_name, *k.table) is None]
    if plain:
        topic = clean_topic(s.prefix, *topic_names)
        writer = CleanPartitionWriter(s.bootstrap, topic, partition, s.client or None, producer=_producer(s),
                                      known=clean_tails.pop(topic, None))
        try:
            for k in plain:
                writer.write(k.key_bytes, k.value_bytes, k.position)
            writer.flush()
        except BaseException:
            _drop_producer(s)
            raise
        if writer.tail is not None:
            clean_tails[topic] = list(writer.tail)
        stats["clean_written"], stats["clean_skipped"] = writer.written, writer.skipped
        stats["clean_tails_read"], stats["clean_writes"] = int(writer.tail_read), 1
    if len(plain) < len(kept):
        plain_ids = {id(k) for k in plain}
        dead += merged_changelog(s, router, [k for k in kept if id(k) not in plain_ids], partition, merged_clean, stats)
    return dead


def merged_changelog(s: MergeSettings, router: Router, kept: list[Kept], partition: int, merged_clean: dict,
                      stats: dict) -> list[tuple[int, Any, Any, str]]:
    """Routed tables' kept records into their routes' merged clean topics (partition
    ``partition``), as target rows keyed by the target's key (origin values first), each
    with its shard's header; ``merged_clean`` (route name -> the partition's end offset after
    the previous write) is updated.  Returns the records that cannot be encoded (dead letters)."""
    dead = []
    groups: dict[tuple, list[Kept]] = {}
    for k in kept:
        groups.setdefault((router.route_of(s.source_name, *k.table), k.table), []).append(k)
    for (route, table), records in groups.items():
        target = s.targets.get(route.name)
        if target is None or "envelope_schema" not in target:
            raise RouteError(f"{s.source_name}/{table[0]}.{table[1]} is routed to {route.name}, but the batch was "
                             "planned without that route's merged clean changelog schemas")
        key_w = cached(("avro", repr(target["key_schema"])), lambda: AvroWriter(target["key_schema"]))
        value_w = cached(("avro", repr(target["envelope_schema"])), lambda: AvroWriter(target["envelope_schema"]))
        fields = target_fields(target["schema"])
        shard = ShardId(s.source_name, *table)
        writer = MergedPartitionWriter(s.bootstrap, clean_topic(s.clean_prefix or s.prefix, *route.target), partition, str(shard),
                                       int(merged_clean.get(route.name, 0)), s.client or None,
                                       producer=_producer(s))
        try:
            for k in records:
                env = k.envelope or {}
                try:
                    before = env.get("before")
                    after = env.get("after")
                    value = {**env, "before": None if before is None else target_row(route, shard, before, fields),
                             "after": None if after is None else target_row(route, shard, after, fields)}
                    row = value["after"] if value["after"] is not None else value["before"]
                    key_b = key_w.encode(target_key(row, target["key"])) if row is not None else None
                    value_b = value_w.encode(value)
                except (SerdeError, KeyError, TypeError, ValueError) as exc:
                    dead.append((k.offset, k.key_bytes, k.value_bytes, f"merged clean changelog {route.name}: {exc}"))
                    continue
                writer.write(key_b, value_b, k.position)
            writer.flush()
        except BaseException:
            _drop_producer(s)
            raise
        merged_clean[route.name] = writer.end_offset()
        stats["clean_written"] = stats.get("clean_written", 0) + writer.written
        stats["clean_skipped"] = stats.get("clean_skipped", 0) + writer.skipped
    return dead
