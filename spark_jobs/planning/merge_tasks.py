"""The merge job's tasks: the stream of a source's table topics, and each micro-batch's
partitions merged on the executors, or a small batch in the driver's process.

With the ``cdc-kafka`` source each task reads its Kafka ranges itself (planned from Spark's
offset log as the source plans them, at most one task per executor core): the batch's
DataFrame is not read.  A batch of at most ``spark.inline_batch_records`` records is merged
by the same function in the driver's process, its ranges one after the other: a Spark job's
scheduling and tasks' start cost more than such a batch's work (docs/merge-performance.md,
"The latency floor").  Spark's ``kafka`` source (``spark.kafka_source: jvm``) is read
through the DataFrame (``mapInArrow``).
"""

from __future__ import annotations

from pathlib import Path

from pyspark import cloudpickle

from common.config import CDCConfig
from common.kafka.security import SECURITY_KEYS, export_secret_references, jvm_settings
from contract.topics import route_decisions_topic, schemas_topic, table_topic_pattern
from spark_jobs.errors import MergeStateError
from spark_jobs.input.kafka_source import KafkaRange, batch_ranges, parse_options
from spark_jobs.input.offset_log import batch_end_offsets
from spark_jobs.task import worker_cache
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.partition_merge import OUTPUT_SCHEMA, arrow_function, range_function
from spark_jobs.sharding.routes import Router

DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000


class MergeTasks:
    """The stream and the executor work of one source's job (topic prefix ``prefix``, Kafka
    client settings ``client``, Spark's checkpoint ``query_dir``); ``other_prefixes``: the
    other sources' topic prefixes (their schemas topics wake a pessimistic route's job)."""

    def __init__(self, cfg: CDCConfig, prefix: str, client: dict, query_dir: Path, router: Router,
                 other_prefixes: list[str]) -> None:
        self.cfg = cfg
        self.prefix = prefix
        self.client = client
        self.query_dir = query_dir
        self.router = router
        self.other_prefixes = other_prefixes

    def source_options(self, *, idle_wait: bool = False) -> dict[str, str]:
        """The stream source's options: the source's table topics, from the earliest offsets,
        read committed, ``maxOffsetsPerTrigger`` records a batch at most; ``idle_wait``: with
        ``spark.idle_wait_s``'s wait for records (a query that runs until stopped)."""
        cfg = self.cfg
        options = {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                   "subscribePattern": table_topic_pattern(self.prefix),
                   "startingOffsets": "earliest",
                   "maxOffsetsPerTrigger": str(cfg.spark.max_offsets_per_trigger or DEFAULT_MAX_OFFSETS_PER_TRIGGER),
                   "kafka.isolation.level": "read_committed",
                   "failOnDataLoss": "true" if self.cfg.spark.fail_on_data_loss else "false"}
        if idle_wait and cfg.spark.idle_wait_s > 0:
            options["idleWaitMs"] = str(max(1, round(cfg.spark.idle_wait_s * 1000)))
        # Secrets as ${env:}/${file:} references: the options are shown in the query plan.
        client = {**self.client, **cfg.kafka.client_settings(secrets=export_secret_references(cfg.kafka.security))}
        if cfg.spark.kafka_source == "jvm":  # the JVM client's own names for kafka.security
            client = {**{k: v for k, v in client.items() if k not in SECURITY_KEYS},
                      **jvm_settings(cfg.kafka.security)}
        for key, value in client.items():
            options[f"kafka.{key}"] = str(value)
        if any(r.ddl == "pessimistic" for r in self.router.routes):
            # A pessimistic route's held rows are released when another source's shard runs
            # the DDL, or the operator forces or skips it (cdc route): a batch runs when
            # another source's schemas topic or the decisions topic grows, even while this
            # source writes nothing.
            options["wakeTopics"] = ",".join(sorted(schemas_topic(p) for p in self.other_prefixes)
                                             + [route_decisions_topic(cfg.kafka.topic_prefix)])
        return options

    def reader(self, spark, *, idle_wait: bool = False):
        """The stream of the source's table topics (``cdc-kafka``, or Spark's ``kafka``);
        ``idle_wait``: :meth:`source_options`'."""
        if self.cfg.spark.kafka_source == "jvm":
            return spark.readStream.format("kafka").options(**self.source_options()).load()
        return spark.readStream.format("cdc-kafka").options(**self.source_options(idle_wait=idle_wait)).load()

    def batch_ranges(self, batch_id: int) -> list[KafkaRange]:
        """The Kafka ranges of batch ``batch_id`` as the ``cdc-kafka`` source plans them
        (:meth:`~spark_jobs.input.kafka_source.CdcKafkaStreamReader.partitions`): from the
        previous batch's end offsets (batch 0: each partition's first) to this batch's."""
        ends = batch_end_offsets(self.query_dir, batch_id)
        before = batch_end_offsets(self.query_dir, batch_id - 1) if batch_id > 0 else None
        if not ends or not isinstance(ends[0], dict):
            raise MergeStateError(f"the checkpoint {self.query_dir} holds no end offsets of batch {batch_id}")
        if batch_id > 0 and (not before or not isinstance(before[0], dict)):
            raise MergeStateError(f"the checkpoint {self.query_dir} holds no end offsets of batch {batch_id - 1}, "
                                  f"where batch {batch_id} starts")
        return batch_ranges(before[0] if before else None, ends[0])

    def run(self, df, batch_id: int, inputs: dict, schemas_end: int, epoch: int, settings: MergeSettings
            ) -> list[dict]:
        """Run the partitions' merge on the executors; the ``state`` and ``stats`` rows.

        With the ``cdc-kafka`` source each task reads its Kafka ranges itself (at most one task
        per executor core, ``RDD.mapPartitions``): the batch's DataFrame is not read, so the
        records are not turned into Arrow, sent to the JVM and back to a second Python
        worker; a small batch is merged in this process instead (:meth:`inline`).  Spark's
        ``kafka`` source (``spark.kafka_source: jvm``) is read through the DataFrame
        (``mapInArrow``)."""
        if self.cfg.spark.kafka_source == "jvm":
            return [r.asDict() for r in df.select("key", "value", "topic", "partition", "offset")
                    .mapInArrow(arrow_function(settings, inputs, schemas_end, epoch), OUTPUT_SCHEMA).collect()]
        ranges = self.batch_ranges(batch_id)
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
        opts = parse_options(self.source_options())
        if self.inline(ranges):
            return self._run_inline(items, opts, schemas_end, epoch, settings)
        sc = df.sparkSession.sparkContext
        # No more tasks than executor cores: a task merges its ranges one after the other,
        # and a small batch pays Spark's per-task cost fewer times.
        return _as_dicts(sc.parallelize(items, max(1, min(len(items), sc.defaultParallelism)))
                         .mapPartitions(range_function(settings, opts, schemas_end, epoch)).collect())

    def range_spans(self, batch_id: int) -> dict[str, tuple[int, int]]:
        """Batch ``batch_id``'s partition ranges by ``topic[partition]`` (empty where not known)."""
        try:
            return {f"{r.topic}[{r.partition}]": (max(r.start, 0), r.end) for r in self.batch_ranges(batch_id)}
        except MergeStateError:
            return {}

    @property
    def _inline_namespace(self) -> str:
        return f"inline:{self.prefix}"

    def close(self) -> None:
        """Let go of what batches merged inline kept (their consumers, producers, decoders)."""
        worker_cache.release(self._inline_namespace)

    def inline(self, ranges: list[KafkaRange]) -> bool:
        """Whether a batch of ``ranges`` is merged in the driver's process
        (``spark.inline_batch_records``): at most that many records (a range from a
        partition's first offset, ``start`` -2, counted from offset 0: at least its records)."""
        limit = self.cfg.spark.inline_batch_records
        return bool(limit) and sum(r.end - max(r.start, 0) for r in ranges) <= limit

    def _run_inline(self, items: list, opts, schemas_end: int, epoch: int, settings: MergeSettings) -> list[dict]:
        """The batch's ranges merged here, one after the other, by the tasks' own function,
        handed the settings as a task gets them (a copy through pickle: nothing a merge
        leaves on them carries to the next batch), with what it keeps (consumers, sinks'
        connections) under this job's namespace (:func:`worker_cache.namespace`)."""
        task_settings = cloudpickle.loads(cloudpickle.dumps(settings))
        with worker_cache.namespace(self._inline_namespace):
            return _as_dicts(range_function(task_settings, opts, schemas_end, epoch, inline=True)(iter(items)))


def _as_dicts(rows) -> list[dict]:
    """The tasks' ``(kind, topic, partition, payload)`` rows as dicts."""
    return [{"kind": k, "topic": t, "partition": p, "payload": payload} for k, t, p, payload in rows]
