"""``cdc merge``: Kafka -> Spark Structured Streaming -> DBLog window dedup -> sinks.

The stream reads every table topic ``<prefix>.<db>.<table>`` (the ``cdc-kafka`` Python
source, or Spark's own ``kafka`` source with ``spark.kafka_source: jvm``).  Each
micro-batch (``foreachBatch``):

1. fixes, once, the range of the window markers topic ``<prefix>._markers`` it covers:
   from where the previous batch stopped to the topic's end looked up *now*, after the
   batch's table offsets were fixed.  The producer commits a marker no later than the
   records after it, so every marker below any record of the batch is in that range.
   The range is written down before use (``merge-state/<batch>.plan.json``) so a
   replayed batch reads the same markers;
2. runs :func:`spark_jobs.partition_merge.merge_partition` per table partition on the
   executors: the batch's Kafka ranges, planned from Spark's offset log as the source plans
   them, in at most one task per executor core, each task reading its ranges itself
   (:func:`spark_jobs.partition_merge.range_function`; with ``spark.kafka_source: jvm``,
   ``mapInArrow`` over the batch's DataFrame); no shuffle: decode, the DBLog rule, clean
   changelog, sinks, dead letters;
3. applies the table markers once every partition of their table has been read past the
   point the marker was seen: each table sink deletes the table's rows below the marker's
   position: for ``DELETE_MISSING`` (snapshots taken with ``delete-missing``) the rows the
   snapshot did not refresh (deleted at the source while their changes were lost), for
   ``TRUNCATE`` every row written before the statement;
4. stores the partitions' new states (``merge-state/<batch>.json``: window buffers and
   pending markers, bounded by the open windows) and logs the batch's figures (input
   rows, rows/s, chunk rows dropped by the DBLog rule, copies, latency p50/p99 from the
   source commit to the sink write, records lost in Kafka), also written to
   ``<state_dir>/merge-status.json`` for ``cdc status``.

Lost Kafka history (a topic deleted or recreated, records removed before they were read,
a checkpoint past the end of the log): with ``spark.fail_on_data_loss`` (default) the job
stops with :class:`MergeDataLoss`, naming each partition, its checkpoint offset, the
broker's offsets, how far each sink got, and what to do.  It checks before it starts a
query and after a query failed; the source stops the query itself when it finds loss while
running.  With ``fail_on_data_loss: false`` it carries on from what Kafka holds and counts
what was lost (batch log WARNING, ``merge-status.json``, metrics).

A replayed batch (after a crash, Spark runs the last uncommitted batch again with the
same offsets) starts from the state stored for the batch before, reads the same markers
and so decides the same; the sinks never move a row backwards and the clean changelog
skips what it already holds.  The query restarts after a failure (a lost database,
Kafka) with backoff; ``cdc merge`` stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from common import logs
from common.config import CapturedSource, CDCConfig, load_config
from common.errors import CDCError, OffsetLookupError
from common.kafka.client_process import run_isolated
from common.kafka.clients import delete_topics, ensure_topics, topic_ids
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import partition_records, topic_records
from common.metrics_http import serve_metrics
from contract.debezium import debezium_table_markers
from contract.envelope import record_names
from contract.errors import SerdeError
from contract.markers import DROP_TABLE, RENAME_TABLE, TRUNCATE, decode_marker, is_table_marker, is_window
from contract.position import describe_position
from contract.schema_store import SchemaStore, schema_record
from contract.codecs.serde import AvroWriter
from contract.topics import (
    clean_topic,
    dlq_topic,
    markers_topic,
    offsets_topic,
    schemas_topic,
    table_of_topic,
    table_topic,
    table_topic_pattern,
)
from spark_jobs.batch_latency import percentile
from spark_jobs.clean_changelog import ensure_clean_topic
from spark_jobs.data_loss import DataLoss, data_loss_message, detect_data_loss
from spark_jobs.errors import MergeDataLoss, MergeStateError, RouteError, SchemaChangeStopped
from spark_jobs.kafka_offsets import ids_from_json, lost_from_json, offsets_from_json
from spark_jobs.kafka_source import KafkaRange, batch_ranges, parse_options
from spark_jobs.offset_log import batch_end_offsets, last_batches, next_start
from spark_jobs.partition_merge import (
    OUTPUT_SCHEMA,
    MergeSettings,
    arrow_function,
    merge_markers,
    range_function,
    sinks_of,
    warm_worker,
)
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import (
    check_history,
    coordinate,
    target_envelope_schema,
    target_key_schema,
    target_schema,
)
from spark_jobs.tombstone_horizon import TombstonePurge

log = logging.getLogger(__name__)

DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000


def data_loss_stop(losses: list[DataLoss], sinks_note: str = "") -> MergeDataLoss:
    """The error that stops the job for ``losses``, with how far the sinks got."""
    text = data_loss_message(losses, "spark.fail_on_data_loss: true")
    return MergeDataLoss("the merge job stopped: " + text + (f"\n{sinks_note}" if sinks_note else ""), losses)


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


class MergeStateStore:
    """Per batch: the plan (markers range) and the partitions' states, as JSON files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def _write(self, path: Path, data: Any) -> None:
        tmp = path.with_suffix(f".tmp{uuid.uuid4().hex[:6]}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def _ids(self, suffix: str) -> list[int]:
        return sorted(int(p.name[:-len(suffix)]) for p in self.dir.glob(f"*{suffix}")
                      if p.name[:-len(suffix)].isdigit())

    def state_before(self, batch_id: int) -> dict:
        ids = [i for i in self._ids(".json") if i < batch_id]
        return json.loads((self.dir / f"{ids[-1]}.json").read_text()) if ids else {"markers_next": 0, "partitions": {}}

    def plan(self, batch_id: int) -> dict | None:
        p = self.dir / f"{batch_id}.plan"
        return json.loads(p.read_text()) if p.exists() else None

    def save_plan(self, batch_id: int, plan: dict) -> None:
        self._write(self.dir / f"{batch_id}.plan", plan)

    def save_state(self, batch_id: int, state: dict) -> None:
        self._write(self.dir / f"{batch_id}.json", state)
        for suffix in (".json", ".plan"):
            for i in self._ids(suffix):
                if i < batch_id - 5:
                    (self.dir / f"{i}{suffix}").unlink(missing_ok=True)


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


def _our_marker(value: bytes, offset: int) -> list[dict]:  # noqa: ARG001 - read_markers' decode
    return [decode_marker(value)]


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


#: How long the driver waits for a Kafka read in its client process beyond the read's own
#: timeouts (common/kafka/client_process.py).
_READ_SLACK_S = 30.0


def driver_end_offsets(bootstrap: str, partitions, client: dict | None = None, hints: dict | None = None,
                       at_least: dict | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """:func:`common.kafka.offsets.end_offsets` as the driver asks it: in a Kafka client
    process, so that a topic deleted while it is probed (a librdkafka crash on Tansu) ends
    that process and raises :class:`common.errors.KafkaClientCrashed` here instead."""
    parts = list(partitions)
    if not parts:
        return {}
    return run_isolated(end_offsets, bootstrap, parts, client_config=client, hints=hints, at_least=at_least,
                        wait=15.0 + _READ_SLACK_S, what=f"the end offsets of {', '.join(sorted({t for t, _ in parts}))}")


def key_partition_counts(partitions: list[tuple[str, int]], seen: dict[str, int], changed: list[str]
                         ) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """The partition count per topic that a batch's tasks check their records' keys against
    (``MergeSettings.key_partitions``: where the records are all where Kafka's partitioner
    puts their keys, a task writes PostgreSQL under its partition's turn), and the job state
    to keep: ``seen`` (each topic's count when last seen) and ``changed`` (the topics whose
    count changed while the job watched them).

    A changed topic's tasks take the table's whole turn from then on: within a batch every
    task checks against the same count, so only one partition can pass for a key, but a
    task of an earlier attempt still running (a zombie) checked against the old count."""
    now: dict[str, int] = {}
    for topic, _ in partitions:
        now[topic] = now.get(topic, 0) + 1
    seen, changed_set = dict(seen), set(changed)
    for topic, n in now.items():
        if topic in seen and seen[topic] != n:
            changed_set.add(topic)
        seen[topic] = n
    return {t: n for t, n in now.items() if t not in changed_set}, seen, sorted(changed_set)


def partition_turn_keys(counts: dict[str, int], key_fingerprints: dict[str, list[str]]
                        ) -> dict[str, tuple[int, str]]:
    """``MergeSettings.key_partitions``: per table topic, the partition count and the one key
    schema fingerprint its tasks hold each record to before writing under their partition's
    turn.  ``counts``: from :func:`key_partition_counts`; ``key_fingerprints``: per topic,
    the fingerprints of every key schema its table has had (the schema store's, up to the
    batch's end).

    One row can have two key encodings: a primary key column's type change (``INT`` to
    ``BIGINT``) gives it a new key schema, new key bytes, and most likely another partition,
    so its older records sit in one partition and its newer ones in another, each where the
    partitioner puts its own bytes.  Two tasks writing it side by side could let an older
    upsert race a newer delete.  So a topic whose table ever had more than one key schema
    (or none known) is left out: its tasks take the table's whole turn, for good (the schema
    store only grows).  With one key schema, one row has one encoding, and so one
    partition."""
    return {t: (n, fps[0]) for t, n in counts.items() if len(fps := key_fingerprints.get(t) or []) == 1}


def warm_workers(spark, name: str) -> threading.Thread:
    """Start Spark's Python workers while the merge query starts: a job of one empty task per
    executor core (:func:`~spark_jobs.partition_merge.warm_worker`), run on a thread of its
    own (``name`` in its name) so that the query's start does not wait for it.

    Otherwise the first micro-batch's tasks wait for them: Spark starts its Python daemon,
    which forks the workers, and each worker imports PySpark and the merge's modules before
    it runs its task (about 0.6 s of the first micro-batch in ``cdc bench merge``, while the
    query's start left a core idle: docs/merge-performance.md).  The workers stay for the
    tasks that follow (``spark.python.worker.reuse``).  A failure here loses only the warm
    start: the first batch starts the workers as before."""
    sc = spark.sparkContext

    def run() -> None:
        try:
            n = max(1, sc.defaultParallelism)
            sc.parallelize(range(n), n).mapPartitions(warm_worker).collect()
        except Exception as exc:  # noqa: BLE001 - only the warm start is lost
            log.debug("the Python workers' warm start failed: %s", exc)

    t = threading.Thread(target=run, name=f"cdc-merge-warm-{name}", daemon=True)
    t.start()
    return t


def read_markers(bootstrap: str, topic: str, start: int, end: int, client: dict | None = None,
                 decode: Callable[[bytes, int], list[dict]] = _our_marker) -> list[dict]:
    """The markers at offsets ``[start, end)`` of the (single-partition) markers topic
    (``decode``: a record's value and offset to its markers; default ours), read in a Kafka
    client process for the reason :func:`driver_end_offsets` gives."""
    if end <= start:
        return []
    records = run_isolated(partition_records, bootstrap, topic, 0, start, end, client_config=client, timeout=120.0,
                           wait=120.0 + _READ_SLACK_S, what=f"reading {topic} [{start}, {end})")
    return [marker for offset, value in records if value for marker in decode(value, offset)]


def prometheus_text(jobs: list["MergeJob"]) -> str:
    """The figures of ``jobs`` in Prometheus text format: one family per metric; with
    several jobs each sample is labelled ``source="<name>"``."""
    families: dict[str, tuple[str, list[str]]] = {}
    for job in jobs:
        label = f'{{source="{job.source_name}"}}' if len(jobs) > 1 else ""
        for name, kind, value in job.samples():
            families.setdefault(name, (kind, []))[1].append(f"{name}{label} {value}")
    lines = []
    for name, (kind, samples) in families.items():
        lines += [f"# TYPE {name} {kind}", *samples]
    return "\n".join(lines) + "\n"


def debezium_truncates(stats: list[dict]) -> list[dict]:
    """Debezium's truncate events of a batch (``op: t``, ``kafka.input: debezium``: no TRUNCATE
    marker) as TRUNCATE table markers waiting for nothing (:meth:`MergeJob._table_markers`
    applies them now that every partition of the batch was applied: the truncate has no key,
    so its partition is any): each table's highest, deleting its sink rows below it."""
    highest: dict[tuple[str, str], str] = {}
    for st in stats:
        for db, table, below in st.get("truncates") or []:
            highest[(db, table)] = max(highest.get((db, table), ""), below)
    return [{"marker": {"kind": TRUNCATE, "db": db, "table": table, "below": below}, "required": {}}
            for (db, table), below in sorted(highest.items())]


class MergeJob:
    """The merge job of one source (``source``: an entry of ``cfg.captured_sources()``,
    default the first): its table topics, markers and schemas under the source's topic
    prefix.  With ``source:`` alone that is today's job (checkpoint ``spark.checkpoint_dir``,
    ``merge-status.json``); with ``sources`` each source's job keeps its checkpoint and
    status under its name (:func:`run_merge` runs one per source, one query each)."""

    def __init__(self, cfg: CDCConfig, source: CapturedSource | None = None) -> None:
        self.cfg = cfg
        k = cfg.kafka
        self.source = source or cfg.captured_sources()[0]
        self.prefix = self.source.topic_prefix
        self.source_name = self.source.name
        self.client = dict(k.client)
        self.router = Router.from_config(cfg)
        self.settings = MergeSettings(
            bootstrap=k.bootstrap_servers, prefix=self.prefix, client=self.client,
            registry_url=k.schema_registry_url or None, changelog=cfg.sinks.changelog.enabled, sinks=cfg.sinks,
            dlq_topic=dlq_topic(self.prefix), source_name=self.source_name, routes=list(cfg.routes),
            clean_prefix=k.topic_prefix, debezium=k.input == "debezium")
        several = bool(cfg.sources)
        self.checkpoint = Path(cfg.spark.checkpoint_dir) / (self.source_name if several else "")
        self.query_dir = self.checkpoint / "query"
        self.fail_on_data_loss = cfg.spark.fail_on_data_loss
        self.store = MergeStateStore(self.checkpoint / "merge-state")
        self.schemas = SchemaStore(k.bootstrap_servers, self.prefix, self.client or None)
        # every source's schemas (a route's target is the union of every source's shards)
        self._stores = {c.topic_prefix: (c.name, self.schemas if c.topic_prefix == self.prefix else
                                         SchemaStore(k.bootstrap_servers, c.topic_prefix, self.client or None))
                        for c in cfg.captured_sources()}
        self._clean_schemas = self._stores.get(k.topic_prefix, (None, None))[1] or \
            SchemaStore(k.bootstrap_servers, k.topic_prefix, self.client or None)
        self.status_path = Path(cfg.state_dir) / (f"merge-status-{self.source_name}.json" if several
                                                  else "merge-status.json")
        self.batches = 0
        #: Records pessimistic routes hold now (after the last batch), and the most held at once.
        self.held = self.held_peak = 0
        self.totals = {"input": 0, "emitted": 0, "dropped": 0, "copies": 0, "dead": 0, "lost_partitions": 0,
                       "lost_records": 0, "deleted_missing": 0,
                       "from_bytes": 0,  # records a sink applied from their Avro bytes (apply_encoded)
                       # of them, rows of keys new in the batch written by plain INSERTs, and the
                       # statements of such rows that met a row of their key (then upserted)
                       "inserted": 0, "fresh_refused": 0,
                       # a task's writes to a sink under its partition's turn / the table's whole turn
                       "partition_turns": 0, "whole_turns": 0}
        self._stop = threading.Event()
        self.query = None
        self._known: dict[str, int] = {}  # topics made sure of: partitions
        self._published: set[str] = set()  # fingerprints of schemas the job published
        self.last: dict[str, Any] = {}
        self.phase_totals: dict[str, float] = {}  # seconds per phase over every batch (see _report)
        self._admin_client = None
        #: The jobs whose figures this one's metrics endpoint serves (:func:`run_jobs`: every source's).
        self.peers: list[MergeJob] = [self]
        self.first_batch_started: float | None = None  # time.monotonic() of the first batch's start
        self.last_batch_ended: float | None = None  # ... and of the last batch's end
        # Tombstones below what no replay can reach any more go (Debezium's input has no
        # stored resume point to tell that; without table sinks there are none).
        self._topics: set[str] = set()
        self.tombstone_purge = TombstonePurge(
            0.0 if self.settings.debezium or not sinks_of(self.settings) else cfg.sinks.tombstone_purge_s,
            self._read_producer_offsets, self._partition_ends, lambda: sinks_of(self.settings), self._purgeable)

    def samples(self) -> list[tuple[str, str, float]]:
        """The merge job's figures: ``(metric name, Prometheus type, value)``."""
        out = [(f"cdc_merge_{name}_total", "counter", value) for name, value in self.totals.items()]
        out += [("cdc_merge_batches_total", "counter", self.batches), ("cdc_merge_held_records", "gauge", self.held)]
        for name in ("rows_per_second", "latency_p50_ms", "latency_p99_ms", "seconds"):
            v = self.last.get(name)
            if v is not None:
                out.append((f"cdc_merge_last_batch_{name}", "gauge", v))
        return out

    def prometheus(self) -> str:
        """The figures of this job and of the other sources' jobs that run beside it
        (:func:`run_jobs`; each sample labelled with its source then) in Prometheus text format."""
        return prometheus_text(self.peers)

    # -- the stream ------------------------------------------------------------------------
    def _source_options(self) -> dict[str, str]:
        cfg = self.cfg
        options = {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                   "subscribePattern": table_topic_pattern(self.prefix),
                   "startingOffsets": "earliest",
                   "maxOffsetsPerTrigger": str(cfg.spark.max_offsets_per_trigger or DEFAULT_MAX_OFFSETS_PER_TRIGGER),
                   "kafka.isolation.level": "read_committed",
                   "failOnDataLoss": "true" if self.fail_on_data_loss else "false"}
        for key, value in self.client.items():
            options[f"kafka.{key}"] = str(value)
        if any(r.ddl == "pessimistic" for r in self.router.routes) and len(self._stores) > 1:
            # A pessimistic route's held rows are released when another source's shard runs
            # the DDL: a batch runs when another source's schemas topic grows, even while
            # this source writes nothing.
            options["wakeTopics"] = ",".join(sorted(schemas_topic(p) for p in self._stores if p != self.prefix))
        return options

    def _reader(self, spark):
        fmt = "kafka" if self.cfg.spark.kafka_source == "jvm" else "cdc-kafka"
        return spark.readStream.format(fmt).options(**self._source_options()).load()

    def _batch_ranges(self, batch_id: int) -> list[KafkaRange]:
        """The Kafka ranges of batch ``batch_id`` as the ``cdc-kafka`` source plans them
        (:meth:`~spark_jobs.kafka_source.CdcKafkaStreamReader.partitions`): from the
        previous batch's end offsets (batch 0: each partition's first) to this batch's."""
        ends = batch_end_offsets(self.query_dir, batch_id)
        before = batch_end_offsets(self.query_dir, batch_id - 1) if batch_id > 0 else None
        if not ends or not isinstance(ends[0], dict):
            raise MergeStateError(f"the checkpoint {self.query_dir} holds no end offsets of batch {batch_id}")
        if batch_id > 0 and (not before or not isinstance(before[0], dict)):
            raise MergeStateError(f"the checkpoint {self.query_dir} holds no end offsets of batch {batch_id - 1}, "
                                  f"where batch {batch_id} starts")
        return batch_ranges(before[0] if before else None, ends[0])

    def _merge_tasks(self, df, batch_id: int, inputs: dict, schemas_end: int, epoch: int,
                     settings: MergeSettings | None = None) -> list[dict]:
        """Run the partitions' merge on the executors; the ``state`` and ``stats`` rows.

        With the ``cdc-kafka`` source each task reads its Kafka ranges itself (at most one task
        per executor core, ``RDD.mapPartitions``): the batch's DataFrame is not read, so the
        records are not turned into Arrow, sent to the JVM and back to a second Python
        worker.  Spark's ``kafka`` source (``spark.kafka_source: jvm``) is read through the
        DataFrame (``mapInArrow``)."""
        settings = settings or self.settings
        if self.cfg.spark.kafka_source == "jvm":
            return [r.asDict() for r in df.select("key", "value", "topic", "partition", "offset")
                    .mapInArrow(arrow_function(settings, inputs, schemas_end, epoch), OUTPUT_SCHEMA).collect()]
        ranges = self._batch_ranges(batch_id)
        items = [(r, *inputs.get(f"{r.topic}|{r.partition}", (None, []))) for r in ranges]
        # Partitions holding rows (pessimistic routes) and without records: a task of their
        # own (an empty range), so that the rows a DDL released are applied.
        seen = {(r.topic, r.partition) for r in ranges}
        for key, (state, markers) in inputs.items():
            topic, part = key.rsplit("|", 1)
            if state and state.get("held") and (topic, int(part)) not in seen:
                items.append((KafkaRange(topic, int(part), 0, 0), state, markers))
        if not items:
            return []
        opts = parse_options(self._source_options())
        sc = df.sparkSession.sparkContext
        # No more tasks than executor cores: a task merges its ranges one after the other,
        # and a small batch pays Spark's per-task cost fewer times.
        rows = (sc.parallelize(items, max(1, min(len(items), sc.defaultParallelism)))
                .mapPartitions(range_function(settings, opts, schemas_end, epoch)).collect())
        return [{"kind": k, "topic": t, "partition": p, "payload": payload} for k, t, p, payload in rows]

    def _ensure_topics(self) -> list[tuple[str, int]]:
        """Every partition of every table topic; clean topics and the DLQ exist."""
        md = self._admin().list_topics(timeout=15)
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
                    ensure_clean_topic(self.cfg.kafka.bootstrap_servers, clean, len(t.partitions), self.client or None)
                self._known[name] = len(t.partitions)
        if not self._known.get("", 0):
            # (Debezium's topics have no markers: a prefix of Debezium's gets no markers topic)
            ensure_topics(self.cfg.kafka, [self.settings.dlq_topic] +
                          ([] if self.settings.debezium else [markers_topic(self.prefix)]), partitions=1)
            self._known[""] = 1
        return parts

    # -- lost Kafka history ------------------------------------------------------------------
    def _admin(self):
        """The job's admin client (metadata), made once: one per look-up costs a connection."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient({"bootstrap.servers": self.cfg.kafka.bootstrap_servers, **self.client})
        return self._admin_client

    def _offsets_now(self, tps) -> dict[tuple[str, int], tuple[int, int]]:
        """``{tp: (low, end)}`` of the partitions of ``tps`` that exist now."""
        tps = set(tps)
        if not tps:
            return {}
        md = self._admin().list_topics(timeout=15)
        there = [(t, p) for t, p in tps if t in md.topics and md.topics[t].error is None
                 and p in md.topics[t].partitions]
        return driver_end_offsets(self.cfg.kafka.bootstrap_servers, there, self.client)

    # -- tombstones ---------------------------------------------------------------------------
    def _read_producer_offsets(self, start: dict[int, int]) -> tuple[list[tuple[bytes, Any]], dict[int, int]]:
        """The producers' offset records (``<prefix>._offsets``) from ``start`` on, and where to read on."""
        records, nxt = [], dict(start)
        topic = offsets_topic(self.prefix)
        for partition, offset, key, value in run_isolated(
                topic_records, self.cfg.kafka.bootstrap_servers, topic, start=start,
                client_config=self.client or None, wait=60.0 + _READ_SLACK_S, what=f"reading {topic}"):
            records.append((key, value))
            nxt[partition] = offset + 1
        return records, nxt

    def _partition_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: end for tp, (_, end) in self._offsets_now(partitions).items()}

    def _purgeable(self, db: str, table: str) -> bool:
        """A sink table whose tombstones this job may purge: its source table's topic is one
        of the job's, and the table is not routed (a target's rows come from several sources)."""
        return table_topic(self.prefix, db, table) in self._topics and \
            (not self.router.routes or self.router.route_of(self.source_name, db, table) is None)

    def _purge_tombstones(self, partitions: list[tuple[str, int]]) -> None:
        """After a batch: :meth:`TombstonePurge.after_batch` with the checkpoint's committed
        offsets (housekeeping: a failure is logged, the job goes on)."""
        if not self.tombstone_purge.interval_s:
            return
        self._topics = {t for t, _ in partitions}
        committed_id = last_batches(self.query_dir)[1]
        ends = batch_end_offsets(self.query_dir, committed_id) if committed_id is not None else None
        committed = offsets_from_json(ends[0]) if ends and isinstance(ends[0], dict) else None
        try:
            self.tombstone_purge.after_batch(partitions, committed)
        except Exception as exc:  # noqa: BLE001 - housekeeping: the next batch tries again
            log.warning("the tombstone purge failed (%s: %s); it is tried again after a later batch",
                        type(exc).__name__, exc)

    def _topic_ids(self, topics) -> dict[str, str]:
        return topic_ids(self.cfg.kafka.bootstrap_servers, topics, client_config=self.client)

    def _markers_losses(self, start: int, topic_id: str | None, plan_end: int | None = None, *,
                        latest: dict | None = None, ids: dict | None = None) -> list[DataLoss]:
        """Whether the markers topic still holds its records from ``start`` (and up to
        ``plan_end``): the merge state keeps a read position in it.  ``latest`` and ``ids``:
        the markers topic's offsets and id when the caller looked them up already."""
        mt = markers_topic(self.prefix)
        if latest is None:
            latest = self._offsets_now([(mt, 0)])
        latest = {tp: v for tp, v in latest.items() if tp == (mt, 0)}
        if not latest and start == 0:
            return []  # no markers written yet
        if ids is None:
            ids = self._topic_ids([mt])
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
        latest = self._offsets_now(set(start) | set(pending))
        losses = detect_data_loss(start, latest, ids_from_json(start_doc),
                                  self._topic_ids({t for t, _ in start}) if start else {})
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
        losses += self._markers_losses(int(prev.get("markers_next", 0)), prev.get("markers_topic_id"),
                                       plan.get("markers_end") if plan else None)
        return losses

    def sinks_note(self, losses: list[DataLoss]) -> str:
        """How far each table sink got, for the tables of the lost topics."""
        topics = {x.topic for x in losses}
        everything = markers_topic(self.prefix) in topics
        return sinks_note(self.settings, lambda db, table: everything or table_topic(self.prefix, db, table) in topics)

    def stop_on_data_loss(self) -> None:
        """Raise :class:`MergeDataLoss` when the checkpoint would read records Kafka lost
        (when Kafka does not answer, that cannot be told: the query's own retries go on)."""
        from confluent_kafka import KafkaException

        try:
            losses = self.checkpoint_losses()
        except (KafkaException, OffsetLookupError) as exc:
            log.warning("cannot check the checkpoint against Kafka (%s); the query starts and retries", exc)
            return
        if losses:
            err = data_loss_stop(losses, self.sinks_note(losses))
            log.error("%s", err)
            raise err

    # -- one micro-batch ------------------------------------------------------------------------
    def _plan(self, batch_id: int, prev: dict, partitions: list[tuple[str, int]]) -> tuple[dict, list[dict]]:
        """The batch's markers range (written down before use, so a replay reads the same)
        and its markers; the table markers (DELETE_MISSING, TRUNCATE) get the partition ends
        they wait for."""
        plan = self.store.plan(batch_id)
        mt = markers_topic(self.prefix)
        if plan is None and self.settings.debezium:
            # Debezium writes no window markers (its incremental snapshot deduplicates the
            # chunks itself) and no schemas topic (each record embeds its schema); its schema
            # change topic tells of DROP and RENAME TABLE (the markers range is read there).
            self._wait_committed(batch_id, partitions)
            start, end = self._debezium_ddl_range(int(prev.get("markers_next", 0)))
            plan = {"markers_start": start, "markers_end": end, "schemas_end": 0, "markers_topic_id": None,
                    "lost": []}
            self.store.save_plan(batch_id, plan)
        if plan is None:
            self._wait_committed(batch_id, partitions)
            # Looked up after the batch's records are committed (so the markers before them
            # are too), once for the losses check and the range.
            st = schemas_topic(self.prefix)
            latest = self._offsets_now([(mt, 0), (st, 0)])
            ids = self._topic_ids([mt])
            start = int(prev.get("markers_next", 0))
            losses = self._markers_losses(start, prev.get("markers_topic_id"), latest=latest, ids=ids)
            if losses and self.fail_on_data_loss:
                raise data_loss_stop(losses, self.sinks_note(losses))
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
        if self.settings.debezium:
            markers = read_markers(self.cfg.kafka.bootstrap_servers, self.prefix, plan["markers_start"],
                                   plan["markers_end"], self.client or None, decode=debezium_markers)
        else:
            markers = read_markers(self.cfg.kafka.bootstrap_servers, mt, plan["markers_start"], plan["markers_end"],
                                   self.client or None)
        if "delete_missing" not in plan:
            waits = []
            for m in markers:
                if is_table_marker(m):
                    topic = table_topic(self.prefix, m["db"], m["table"])
                    mine = [tp for tp in partitions if tp[0] == topic]
                    ends = driver_end_offsets(self.cfg.kafka.bootstrap_servers, mine, self.client)
                    waits.append({"marker": m, "required": {f"{t}|{p}": e for (t, p), (_, e) in ends.items()}})
            plan["delete_missing"] = waits
            self.store.save_plan(batch_id, plan)
        return plan, markers

    def _debezium_ddl_range(self, start: int) -> tuple[int, int]:
        """The offsets ``[start, end)`` of Debezium's schema change topic (``<topic.prefix>``,
        one partition) this batch reads: from where the last batch stopped to its end now.
        No topic (``include.schema.changes=false``): nothing.  Records gone from it (its
        retention) or a topic made again: read from what it holds, with a warning, as
        those statements can no longer be applied (the rows are not in that topic)."""
        topic = self.prefix
        latest = self._offsets_now([(topic, 0)]).get((topic, 0))
        if latest is None:
            return start, start
        low, end = latest
        if start < low or start > end:
            log.warning("Debezium's schema change topic %s holds offsets %d to %d, the job had read to %d: DROP and "
                        "RENAME TABLE statements it no longer holds were not applied to the sinks; reading from %d",
                        topic, low, end, start, low)
            start = low
        return start, end

    def _wait_committed(self, batch_id: int, partitions: list[tuple[str, int]], timeout: float = 60.0) -> None:
        """Wait until every record of the batch is committed in Kafka, so the markers range
        looked up next holds the markers of the batch's transactions.  A correct broker has
        that already; Tansu reports the first records of an open transaction as stable for a
        moment (tests/integration/common/test_kafka_offsets.py), and a chunk row read from such a
        transaction must not arrive before its window's CLOSE marker is in the range."""
        ends = batch_end_offsets(self.query_dir, batch_id)
        known = set(partitions)
        want = {tp: e for tp, e in offsets_from_json(ends[0]).items() if tp in known} \
            if ends and isinstance(ends[0], dict) else {}
        deadline = time.monotonic() + timeout
        while want:
            now = driver_end_offsets(self.cfg.kafka.bootstrap_servers, want, self.client, hints=want, at_least=want)
            want = {tp: e for tp, e in want.items() if now[tp][1] < e}
            if not want:
                return
            if time.monotonic() > deadline:
                log.warning("batch %d: records below the planned ends of %s are still not committed after %.0fs",
                            batch_id, sorted(want), timeout)
                return
            time.sleep(0.02)

    def _table_markers(self, waiting: list[dict], batch_id: int) -> tuple[list[dict], int, int]:
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
            if m.get("kind") in (DROP_TABLE, RENAME_TABLE):
                if route is not None:  # the target is shared: its other shards' rows stay
                    log.info("%s of %s.%s, routed to %s: the target and its rows of the table are kept",
                             m["kind"], m["db"], m["table"], route.name)
                else:
                    moved += self._table_ddl(m)
                continue
            db, table, where = m["db"], m["table"], None
            if route is not None:  # a shard's rows in its route's target: by their origin values
                db, table = route.target
                where = route.origin_values(ShardId(self.source_name, m["db"], m["table"]))
                if not where:
                    log.warning("%s of %s.%s: its route to %s has no origin columns, so its rows in the target "
                                "cannot be told from the other shards': nothing deleted", m.get("kind"), m["db"],
                                m["table"], route.name)
                    continue
            for name, sink in sinks_of(self.settings):
                n = sink.delete_below(db, table, m["below"], where)
                deleted += n
                if m.get("kind") == TRUNCATE:
                    log.info("TRUNCATE of %s.%s: %d rows written before it deleted from %s (below position %s)",
                             m["db"], m["table"], n, name, m["below"])
                else:
                    log.info("snapshot %s of %s.%s (delete-missing): %d rows it did not find deleted from %s "
                             "(below position %s)", m.get("snapshot_id"), m["db"], m["table"], n, name, m["below"])
        return still, deleted, moved

    def _table_ddl(self, m: dict) -> int:
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

    def stop_on_schema_change(self) -> None:
        """:class:`SchemaChangeStopped` when a table the job reads has a schema change that
        ``sinks.schema_changes`` refuses (checked before the query starts and after it fails)."""
        if not any(r.columns == "stop" for r in self.cfg.sinks.schema_changes):
            return
        st = schemas_topic(self.prefix)
        end = self._offsets_now([(st, 0)]).get((st, 0), (0, 0))[1]
        try:
            self._check_schema_changes(self._ensure_topics(), end)
        except SchemaChangeStopped as exc:
            log.error("%s", exc)
            raise

    def _check_schema_changes(self, partitions: list[tuple[str, int]], schemas_end: int) -> None:
        """Stop before the batch is applied when a table whose ``sinks.schema_changes`` rule
        says ``columns: stop`` has a schema other than the one it was first captured with."""
        if not schemas_end or not any(r.columns == "stop" for r in self.cfg.sinks.schema_changes):
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

    def _turn_keys(self, counts: dict[str, int], schemas_end: int) -> dict[str, tuple[int, str]]:
        """The batch's :func:`partition_turn_keys`: none for Debezium's input (JSON keys, no
        schema store) or where several sources' stores feed the job (sharded sources merged
        into one table: two topics may write one row), nor without the schemas topic's end
        fixed for the batch (what the store holds might then miss a key schema its records
        carry)."""
        if self.settings.debezium or len(self._stores) > 1 or not counts or not schemas_end:
            return {}
        self.schemas.refresh_until(schemas_end)
        fingerprints = {}
        for topic in counts:
            key_name = record_names(self.prefix, *table_of_topic(self.prefix, topic))[0]
            fingerprints[topic] = [fp for fp, _ in self.schemas.versions_named(key_name)]
        return partition_turn_keys(counts, fingerprints)

    # -- routing (docs/sharding.md) ----------------------------------------------------------------
    def route_targets(self, partitions: list[tuple[str, int]], schemas_end: int) -> dict[str, dict]:
        """Each route's target layout (``{"schema", "key"}`` by route name) from the newest
        schemas (up to ``schemas_end``) of the routed tables among the topics of
        ``partitions``: the union of their columns (optimistic sharding DDL).  Raises
        :class:`~spark_jobs.errors.RouteCollision` when an unrouted table lands in a target,
        :class:`~spark_jobs.errors.IncompatibleShards` (naming both tables) when a route's
        tables cannot be merged, at start or after a DDL.  With several sources and no route,
        the check that no two sources' same-named tables land in one sink table."""
        if not self.router.routes and len(self._stores) == 1:
            return {}
        if schemas_end:
            self.schemas.refresh_until(schemas_end)
        tables: list[ShardId] = []
        shards: dict = {}
        history: dict = {}  # route -> shard -> every schema version, oldest first
        topics = {self.prefix: sorted({t for t, _ in partitions})}
        if len(self._stores) > 1:  # the other sources' tables, with their newest schemas now
            md = self._admin().list_topics(timeout=15)
            for prefix, (_, store) in self._stores.items():
                if prefix != self.prefix:
                    rx = re.compile(table_topic_pattern(prefix))
                    topics[prefix] = sorted(n for n, t in md.topics.items() if rx.fullmatch(n) and t.error is None)
                    store.refresh()
        for prefix, names in topics.items():
            source_name, store = self._stores[prefix]
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
        self.router.plan(tables)
        targets = {}
        for route, members in shards.items():
            keys = {shard: k for shard, (_, k) in members.items()}
            if route.ddl == "pessimistic":
                coordinator = coordinate(route, history[route], keys, "pessimistic")
                schema, key = target_schema(route, members, coordinator.target)
                waiting = sorted(f"{sh}|{v}" for sh, v in coordinator.waiting())
                if waiting:
                    log.info("route to %s (pessimistic): the rows of %s wait for %s to run the same DDL", route.name,
                             ", ".join(waiting), ", ".join(map(str, coordinator.awaited())))
            else:
                schema, key = target_schema(route, members)
                check_history(route, history[route], keys)
                waiting = []
            targets[route.name] = {"schema": schema, "key": key, "waiting": waiting}
            if self.settings.changelog:
                # The merged clean changelog's schemas, published like the producer's.
                targets[route.name]["key_schema"] = target_key_schema(schema, key)
                targets[route.name]["envelope_schema"] = target_envelope_schema(members[min(members)][0], schema)
                self._publish_schemas([targets[route.name]["key_schema"], targets[route.name]["envelope_schema"]])
        return targets

    def _publish_schemas(self, schemas: list[dict]) -> None:
        """Publish the schemas the schemas topic does not hold yet (a merged clean changelog's)."""
        from confluent_kafka import Producer

        fresh = []
        for schema in schemas:
            fp = AvroWriter(schema).fingerprint
            if fp not in self._published and self._clean_schemas.get(fp) is None:
                fresh.append(schema_record(self.cfg.kafka.topic_prefix, fp, schema))
            self._published.add(fp)
        if not fresh:
            return
        ensure_topics(self.cfg.kafka, [schemas_topic(self.cfg.kafka.topic_prefix)], partitions=1, compacted=True)
        producer = Producer({"bootstrap.servers": self.cfg.kafka.bootstrap_servers, "enable.idempotence": True,
                             **self.client})
        for topic, key, value in fresh:
            producer.produce(topic, value, key)
        if producer.flush(60):
            raise MergeStateError(f"the merged clean changelog's schemas were not acknowledged by Kafka ({topic})")

    def check_routes(self) -> None:
        """Refuse routes the job cannot apply (before the query starts, and after it failed:
        a conflicting DDL stops the route and so the job), naming the tables."""
        if not self.router.routes and len(self._stores) == 1:
            return
        pessimistic = [r.name for r in self.router.routes if r.ddl == "pessimistic"]
        try:
            if pessimistic and self.cfg.spark.kafka_source == "jvm":
                raise RouteError(f"route(s) to {', '.join(pessimistic)} say 'ddl: pessimistic', which the merge job "
                                 "applies with the cdc-kafka source only (spark.kafka_source), not Spark's 'kafka'")
            st = schemas_topic(self.prefix)
            end = self._offsets_now([(st, 0)]).get((st, 0), (0, 0))[1]
            self.route_targets(self._ensure_topics(), end)
        except RouteError as exc:
            log.error("%s", exc)
            raise

    def process_batch(self, df, batch_id: int) -> None:
        t0 = time.monotonic()
        if self.first_batch_started is None:
            self.first_batch_started = t0
        prev = self.store.state_before(batch_id)
        partitions = self._ensure_topics()  # after the batch's offsets were fixed
        plan, markers = self._plan(batch_id, prev, partitions)
        schemas_end, epoch = int(plan.get("schemas_end") or 0), int(prev.get("sink_epoch") or 0)
        self._check_schema_changes(partitions, schemas_end)
        settings = self.settings
        if self.router.routes or len(self._stores) > 1:
            settings = dataclasses.replace(settings, targets=self.route_targets(partitions, schemas_end))
        counts, seen_counts, changed = key_partition_counts(partitions, prev.get("partition_counts") or {},
                                                            prev.get("partition_counts_changed") or [])
        settings = dataclasses.replace(settings, key_partitions=self._turn_keys(counts, schemas_end))
        states = prev.get("partitions", {})
        inputs, orphans = batch_inputs(self.prefix, states, prev.get("orphan_markers", {}), partitions, markers)
        t_tasks = time.monotonic()
        rows = self._merge_tasks(df, batch_id, inputs, schemas_end, epoch, settings)
        t_finish = time.monotonic()
        new_states = dict(states)
        for key, (state, new) in inputs.items():  # partitions without records: their markers wait
            if new:
                st = dict(state or {})
                st["pending"] = merge_markers(st.get("pending", []), new)
                new_states[key] = st
        stats = []
        for r in rows:
            if r["kind"] == "state":
                new_states[f"{r['topic']}|{r['partition']}"] = json.loads(r["payload"])
            else:
                stats.append(json.loads(r["payload"]))
        waiting, deleted, moved = self._table_markers(
            debezium_truncates(stats) + prev.get("delete_missing", []) + plan["delete_missing"], batch_id)
        self.store.save_state(batch_id, {"markers_next": plan["markers_end"], "partitions": new_states,
                                         "orphan_markers": orphans, "markers_topic_id": plan.get("markers_topic_id"),
                                         "delete_missing": waiting, "sink_epoch": epoch + moved,
                                         "partition_counts": seen_counts, "partition_counts_changed": changed})
        self._purge_tombstones(partitions)
        ends = batch_end_offsets(self.query_dir, batch_id)
        lost = [DataLoss.from_json(x) for x in plan.get("lost", [])] + \
            (lost_from_json(ends[0]) if ends and isinstance(ends[0], dict) else [])
        t_end = self.last_batch_ended = time.monotonic()
        phases = {"plan_s": t_tasks - t0, "tasks_s": t_finish - t_tasks, "finish_s": t_end - t_finish}
        self._report(batch_id, stats, len(markers), t_end - t0, lost=lost, deleted_missing=deleted, phases=phases)

    def _report(self, batch_id: int, stats: list[dict], markers: int, seconds: float, *,
                lost: list[DataLoss] = (), deleted_missing: int = 0, phases: dict | None = None) -> None:
        agg = {k: sum(s.get(k, 0) for s in stats) for k in ("input", "emitted", "dropped", "copies", "dead",
                                                            "upserted", "deleted", "held", "from_bytes",
                                                            "inserted", "fresh_refused", "partition_turns",
                                                            "whole_turns")}
        # Where the batch's time went: the driver's phases (wall clock) and the tasks' own,
        # summed over the tasks (which run side by side): wall clock (``*_s``) and the task
        # thread's CPU time (``*_cpu_s``: what a phase costs, whatever else the machine does);
        # ``sinks_turn_s``: of ``sinks_s``, the wait for the tables' turns (other tasks' writes).
        phases = {**(phases or {}), **{k: sum(s.get(k, 0.0) for s in stats)
                                       for k in ("read_s", "decide_s", "changelog_s", "sinks_s", "sinks_turn_s",
                                                 "read_cpu_s", "decide_cpu_s", "changelog_cpu_s", "sinks_cpu_s")}}
        phases = {k: round(v, 3) for k, v in phases.items()}
        for k, v in phases.items():
            self.phase_totals[k] = self.phase_totals.get(k, 0.0) + v
        agg["lost_partitions"] = len(lost)
        agg["lost_records"] = sum(x.skipped or 0 for x in lost)
        agg["deleted_missing"] = deleted_missing
        if lost:
            log.warning("batch %d: Kafka lost records the job had not read (spark.fail_on_data_loss is false, the "
                        "job carries on from what Kafka holds): %d partition(s), %s records known skipped: %s",
                        batch_id, len(lost), f"{agg['lost_records']:,}",
                        "; ".join(x.describe() for x in lost))
        lat = [pair for s in stats for pair in s.get("latencies_ms", [])]  # ([latency, count], batch_latency)
        p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        self.batches += 1
        if agg["held"] != self.held:  # (logged when it changes, not every batch while rows wait)
            log.info("batch %d: %d record(s) held by pessimistic routes until every shard ran the same DDL",
                     batch_id, agg["held"])
        self.held, self.held_peak = agg["held"], max(self.held_peak, agg["held"])
        for k in self.totals:
            self.totals[k] += agg.get(k, 0)
        rate = agg["input"] / seconds if seconds > 0 else 0.0
        if agg["input"] or markers:
            log.info("batch %d: %d records (%.0f/s), %d emitted, %d chunk rows dropped by the DBLog rule, %d copies, "
                     "%d dead letters, %d markers, latency p50 %s ms p99 %s ms", batch_id, agg["input"], rate,
                     agg["emitted"], agg["dropped"], agg["copies"], agg["dead"], markers,
                     f"{p50:.0f}" if p50 is not None else "-", f"{p99:.0f}" if p99 is not None else "-")
            log.debug("batch %d phases: %s", batch_id, phases)
        self.last = {**agg, "markers": markers, "seconds": seconds, "rows_per_second": rate,
                     "latency_p50_ms": p50, "latency_p99_ms": p99}
        status = {"pid": os.getpid(), "updated_at": time.time(), "batch_id": batch_id, "batches": self.batches,
                  "last_batch": {**agg, "markers": markers, "seconds": round(seconds, 3),
                                 "rows_per_second": round(rate, 1), "latency_p50_ms": p50, "latency_p99_ms": p99,
                                 "phases": phases,
                                 "lost": [x.to_json() for x in lost]},
                  "totals": self.totals}
        try:
            self.status_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.status_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(status))
            os.replace(tmp, self.status_path)
        except OSError as exc:  # best effort
            log.debug("cannot write the merge status file: %s", exc)

    def close(self) -> None:
        """Let go of the job's Kafka admin client (it is made again if the job runs again)."""
        self._admin_client = None

    # -- running -----------------------------------------------------------------------------
    def stop(self, wait_s: float = 60.0) -> None:
        """Stop after the running micro-batch (if any) has finished: interrupting a batch
        is safe (it is run again on restart) but noisy."""
        self._stop.set()
        q = self.query
        if q is None:
            return
        deadline = time.monotonic() + wait_s
        try:
            while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.1)
            q.stop()
        except Exception:  # noqa: BLE001 - stopping a query that already failed
            pass

    def run(self, *, available_now: bool = False, max_restarts: int | None = None) -> int:
        """Run until stopped; ``available_now``: process what is in Kafka now, then return."""
        from spark_jobs.spark_session import build_session
        if self.fail_on_data_loss:
            self.stop_on_data_loss()
        self.stop_on_schema_change()
        self.check_routes()
        spark = build_session(self.cfg.spark.master, app_name=f"cdc-merge-{self.prefix}",
                              kafka_source=self.cfg.spark.kafka_source)
        warm_workers(spark, self.prefix)
        first = self.source_name == self.cfg.captured_sources()[0].name  # one metrics port: the first source's job serves all
        server = serve_metrics(self.cfg.spark.metrics_port if first else None, self.prometheus)
        delay, restarts = 1.0, 0
        try:
            while not self._stop.is_set():
                self._ensure_topics()
                writer = (self._reader(spark).writeStream.foreachBatch(self.process_batch)
                          .option("checkpointLocation", str(self.checkpoint / "query")))
                writer = writer.trigger(availableNow=True) if available_now else \
                    writer.trigger(processingTime=f"{self.cfg.spark.trigger_interval_s} seconds")
                self.query = writer.start()
                try:
                    self.query.awaitTermination()
                    return 0
                except Exception as exc:  # noqa: BLE001 - a failed batch: restart from the checkpoint
                    if self._stop.is_set():
                        return 0
                    if self.fail_on_data_loss:
                        self.stop_on_data_loss()  # lost Kafka history stops the job: a restart cannot help
                    self.stop_on_schema_change()  # so does a schema change the configuration refuses
                    self.check_routes()  # and a route whose tables no longer merge (a conflicting DDL)
                    restarts += 1
                    if max_restarts is not None and restarts > max_restarts:
                        raise
                    log.error("the merge query failed (%s); restarting from the checkpoint in %.0fs",
                              str(exc).splitlines()[0][:500], delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, 60.0)
            return 0
        finally:
            self.query = None
            if server is not None:
                server.shutdown()


def run_jobs(jobs: list[MergeJob], *, available_now: bool = False, max_restarts: int | None = None) -> int:
    """Run the jobs of several sources side by side (a query each, one Spark session);
    when one stops with an error the others are stopped and the error raised."""
    if len(jobs) == 1:
        return jobs[0].run(available_now=available_now, max_restarts=max_restarts)
    for job in jobs:
        job.peers = list(jobs)  # the first source's job serves every job's figures
    from spark_jobs.spark_session import build_session
    build_session(jobs[0].cfg.spark.master, app_name="cdc-merge",  # one session, made before the threads
                  kafka_source=jobs[0].cfg.spark.kafka_source)
    results: dict[int, Any] = {}
    done = threading.Event()

    def run(i: int, job: MergeJob) -> None:
        try:
            results[i] = job.run(available_now=available_now, max_restarts=max_restarts)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread
            results[i] = exc
            done.set()
    threads = [threading.Thread(target=run, args=(i, job), daemon=True, name=f"merge-{job.source_name}")
               for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if done.wait(0.5):
            for job in jobs:
                job.stop()
            break
    for t in threads:
        t.join()
    for i in range(len(jobs)):
        if isinstance(results.get(i), BaseException):
            raise results[i]
    return max((r for r in results.values() if isinstance(r, int)), default=0)


def run_merge(cfg: CDCConfig, *, available_now: bool = False) -> int:
    """The merge job of every source (``CDCConfig.captured_sources()``): with ``source:``
    alone, one job exactly as before."""
    jobs = [MergeJob(cfg, source) for source in cfg.captured_sources()]

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("stopping the merge job (signal %d)", signum)
        for job in jobs:
            threading.Thread(target=job.stop, daemon=True).start()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    return run_jobs(jobs, available_now=available_now)


def main() -> int:
    """``spark-submit spark_jobs/merge_job.py`` / ``python -m spark_jobs.merge_job``: the
    configuration from ``CDC_CONFIG`` (default ./cdc.yaml) and ``CDC__*`` variables."""
    logs.configure()
    try:
        return run_merge(load_config(os.environ.get("CDC_CONFIG", "cdc.yaml")))
    except CDCError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
