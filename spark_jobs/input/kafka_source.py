"""Kafka as a PySpark 4 Python streaming data source, built on confluent-kafka.

Spark's own ``kafka`` source lives in a JVM connector JAR that cannot be downloaded on
the machines this project is built on (no Maven Central, DESIGN.md section 6).  This
module gives Structured Streaming the same thing in Python::

    from spark_jobs.input.kafka_source import CdcKafkaDataSource
    spark.dataSource.register(CdcKafkaDataSource)
    df = (spark.readStream.format("cdc-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "cdc.shop.orders")
          .load())

Output schema (Spark's ``kafka`` source, headers always included)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>

Options (case-insensitive, as for every Spark source):

``kafka.bootstrap.servers`` (required)
    The brokers.  Every other ``kafka.*`` option goes to the librdkafka consumers with the
    prefix removed (``kafka.security.protocol`` -> ``security.protocol``).  A value that is a
    whole ``${env:NAME}`` or ``${file:PATH}`` is read from that environment variable or file
    where the source runs (Kafka's config provider spelling): secrets such as
    ``kafka.sasl.password`` stay out of the query plan.
``subscribe`` / ``subscribePattern`` (exactly one)
    A comma-separated topic list, or a regular expression matched against whole topic
    names (``re.fullmatch``; names starting with ``__`` are internal and never matched).
    Topics and partitions are discovered at every ``latestOffset`` call; new ones are read
    from their earliest offset.
``startingOffsets``
    ``earliest``, ``latest`` (default) or JSON ``{"topic": {"0": 23, "1": -2}}`` where -2
    means earliest and -1 latest.  Partitions of subscribed topics that the JSON leaves
    out start at earliest.  Only used when a query starts without a checkpoint.
``maxOffsetsPerTrigger``
    Cap on the offsets of one micro-batch, spread over the partitions in proportion to
    their backlog (each partition with a backlog gets at least one).  Spark 4.1 has no
    admission control for Python sources, so the reader applies it itself, from the end of
    the last batch Spark planned.  ``Trigger.AvailableNow`` is not supported: Spark takes a
    source's first ``latestOffset`` as the end of such a run, which would stop it at the
    first cap; run a processing-time trigger until the end offsets are reached instead, as
    ``MergeJob.run(available_now=True)`` does.
``wakeTopics``
    A comma-separated list of topics whose records are never read, but whose growth makes
    a micro-batch run (their end offsets are part of the batch's offset, under ``"@wake"``).
    The merge job wakes on the other sources' schema topics, so that the rows a pessimistic
    route holds are released when another source's shard runs the DDL, even while this
    source writes nothing.
``idleWaitMs``
    With nothing new to read, how long ``latestOffset`` waits for a record before answering
    that (default 0: it answers at once).  The wait is a fetch from the partitions' ends that
    the broker holds until a record arrives (under read_committed: until its transaction
    commits), so with a short trigger a batch starts as soon as records are there, while an
    idle query asks Spark's trigger loop no more often than once per wait.
``kafka.isolation.level``
    ``read_committed`` unless set: records of open transactions are not read.
``kafkaConsumer.pollTimeoutMs``
    How long a task may wait without progress for the records of its range (120 s).
``fetchOffset.timeoutMs``
    Time allowed for one metadata / end-offset lookup on the driver (30 s).
``failOnDataLoss``
    ``true`` (default, as in Spark): the query stops with :class:`KafkaDataLossError` when
    Kafka no longer holds records the query has not read: a topic or partition deleted,
    a topic deleted and created again (its topic id changed), records removed below the
    checkpoint's offset (retention), or the checkpoint's offset past the end of the log
    (a recreated topic, a checkpoint of another cluster).  The message names the topic,
    partition, checkpoint offset and the broker's earliest and latest offsets.
    ``false``: a WARNING, and reading carries on from the partition's earliest offset (a
    deleted partition is dropped); the batch's end offset records what was lost under
    ``"@lost"`` (:func:`lost_from_json`), so the job can count it.

Offsets are ``{"topic": {"partition": next_offset}}`` dicts (JSON-ready, canonical
order), plus ``"@ids": {"topic": "<topic id>"}`` (Kafka's topic ids, which change when a
topic is recreated) and, in a batch that skipped lost records, ``"@lost"``.  ``@`` cannot
appear in a topic name, so these keys never collide with one.  Every micro-batch has its offsets fixed before it runs, and a task reads exactly
the records with ``start <= offset < end`` of one partition, so a replay of a batch reads
the same records.  End offsets come from :func:`common.kafka.offsets.end_offsets` (the last
stable offset under read_committed).  Spark
always runs and logs a batch 0 for a new query (empty when there is nothing to read), so
the start that ``startingOffsets`` resolved to is in the checkpoint from then on.

The planning arithmetic is pure: option parsing at the top of this module, the offset JSON
and the rate limit in :mod:`spark_jobs.input.kafka_offsets`, data loss in
:mod:`spark_jobs.input.data_loss`; the Spark and Kafka parts are thin around them.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, Union

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from common.errors import CDCError, OffsetLookupError, PartitionStalled
from common.kafka.clients import topic_ids
from common.kafka.offsets import KeptOffsetsConsumer, end_offsets
from common.kafka.security import resolve_references
from common.kafka.topic_reader import READ_AHEAD, read_partition
from spark_jobs.input.data_loss import TP, DataLoss, apply_data_loss, data_loss_message, detect_data_loss
from spark_jobs.errors import KafkaDataLossError, KafkaReadTimeout, KafkaSourceError, KafkaSourceOptionError
from spark_jobs.input.kafka_offsets import (
    EARLIEST,
    ids_from_json,
    lost_from_json,
    offsets_from_doc,
    offsets_from_json,
    offsets_to_json,
    plan_end_offsets,
    resolve_starting_offsets,
    wake_from_json,
)

SHORT_NAME = "cdc-kafka"

_log = logging.getLogger(__name__)

SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])


# librdkafka settings the source manages itself; setting them would break the offset plan.
_FORBIDDEN_CLIENT_KEYS = {
    "auto.offset.reset": "use startingOffsets",
    "enable.auto.commit": "the source never commits offsets to Kafka; Spark's checkpoint holds them",
    "enable.auto.offset.store": "the source never commits offsets to Kafka",
}


# --------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting: Union[str, dict[TP, int]] = "latest"
    max_offsets_per_trigger: int | None = None
    # kafka.* minus prefix, minus bootstrap, ${env:}/${file:} references resolved (secrets: never shown)
    client_config: dict[str, Any] = field(default_factory=dict, repr=False)
    poll_timeout_s: float = 120.0
    fetch_timeout_s: float = 30.0
    fail_on_data_loss: bool = True
    wake_topics: tuple[str, ...] = ()
    idle_wait_s: float = 0.0

    def subscribed(self, topic: str) -> bool:
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KafkaSourceOptionError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaSourceOptionError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the user's options (any mapping; keys compared case-insensitively)."""
    opts = {str(k).lower(): v for k, v in options.items()}
    client: dict[str, Any] = {}
    for key, value in opts.items():
        if key.startswith("kafka."):
            name = key[len("kafka."):]
            if name in _FORBIDDEN_CLIENT_KEYS:
                raise KafkaSourceOptionError(f"option {key} is not supported by the cdc-kafka source: "
                                             f"{_FORBIDDEN_CLIENT_KEYS[name]}")
            client[name] = value
    try:
        client = resolve_references(client)  # secrets given as ${env:NAME} / ${file:PATH}: not in the plan
    except CDCError as exc:
        raise KafkaSourceOptionError(str(exc)) from None
    bootstrap = str(client.pop("bootstrap.servers", "") or "").strip()
    if not bootstrap:
        raise KafkaSourceOptionError("option kafka.bootstrap.servers is required by the cdc-kafka source")
    client.setdefault("isolation.level", "read_committed")
    if "assign" in opts:
        raise KafkaSourceOptionError("option assign is not supported by the cdc-kafka source: "
                                     "use subscribe or subscribePattern")
    subscribe = opts.get("subscribe")
    pattern = opts.get("subscribepattern")
    if subscribe is not None and pattern is not None:
        raise KafkaSourceOptionError("options subscribe and subscribePattern are exclusive: give exactly one")
    if subscribe is None and pattern is None:
        raise KafkaSourceOptionError("the cdc-kafka source needs one of the options subscribe or subscribePattern")
    topics: tuple[str, ...] = ()
    if subscribe is not None:
        topics = tuple(dict.fromkeys(t.strip() for t in str(subscribe).split(",") if t.strip()))
        if not topics:
            raise KafkaSourceOptionError(f"option subscribe names no topic: {subscribe!r}")
    if pattern is not None:
        pattern = str(pattern)
        if not pattern.strip():
            raise KafkaSourceOptionError("option subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaSourceOptionError(f"option subscribePattern is not a valid regular expression: {exc}") from None
    starting = parse_starting_offsets(opts.get("startingoffsets", "latest"))
    if isinstance(starting, dict):
        probe = SourceOptions(bootstrap, topics, pattern)
        stray = sorted({t for t, _ in starting if not probe.subscribed(t)})
        if stray:
            raise KafkaSourceOptionError(f"startingOffsets names topics the query does not subscribe to: {stray}")
    fail = str(opts.get("failondataloss", "true")).strip().lower()
    if fail not in ("true", "false"):
        raise KafkaSourceOptionError(f"option failOnDataLoss must be true or false, got {opts.get('failondataloss')!r}")
    wake = tuple(dict.fromkeys(t.strip() for t in str(opts.get("waketopics") or "").split(",") if t.strip()))
    probe = SourceOptions(bootstrap, topics, pattern)
    read = sorted(t for t in wake if probe.subscribed(t))
    if read:
        raise KafkaSourceOptionError(f"wakeTopics names topics the query reads: {read}")
    poll_ms = _positive_int(opts, "kafkaconsumer.polltimeoutms", 120_000)
    fetch_ms = _positive_int(opts, "fetchoffset.timeoutms", 30_000)
    idle_ms = 0 if str(opts.get("idlewaitms", "0")).strip() in ("", "0") else _positive_int(opts, "idlewaitms", 0)
    return SourceOptions(bootstrap_servers=bootstrap, topics=topics, pattern=pattern, starting=starting,
                         max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", None),
                         client_config=client, poll_timeout_s=poll_ms / 1000.0, fetch_timeout_s=fetch_ms / 1000.0,
                         fail_on_data_loss=fail == "true", wake_topics=wake, idle_wait_s=idle_ms / 1000.0)


def parse_starting_offsets(text: Any) -> Union[str, dict[TP, int]]:
    """``"earliest"``, ``"latest"`` or ``{(topic, partition): offset}`` from the option's
    text, where an offset is >= 0, or -2 (earliest) / -1 (latest)."""
    raw = str(text).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        doc = json.loads(raw)
    except ValueError:
        raise KafkaSourceOptionError(f"startingOffsets must be earliest, latest or JSON like "
                                     f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}') from None
    return offsets_from_doc(doc, "startingOffsets", min_offset=-2)


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Spark task: the records of ``topic``/``partition`` with ``start <= offset < end``.
    ``start`` is -2 (:data:`EARLIEST`) for a partition that is new in this batch."""

    topic: str
    partition: int
    start: int
    end: int


def plan_ranges(start: Mapping[TP, int], end: Mapping[TP, int]) -> list[KafkaRange]:
    """One range per partition that advances from ``start`` to ``end``."""
    ranges = []
    for (topic, part) in sorted(end):
        until = end[(topic, part)]
        first = start.get((topic, part), EARLIEST)
        if until > max(first, 0):
            ranges.append(KafkaRange(topic, part, first, until))
    return ranges


def batch_ranges(start: Mapping | None, end: Mapping) -> list[KafkaRange]:
    """The ranges of a micro-batch from its start and end offset documents (the previous
    batch's end, None for the first batch: every partition from its first record), lost
    partitions moved to where reading carries on."""
    first = apply_data_loss(offsets_from_json(start) if start else {}, lost_from_json(end))
    return plan_ranges(first, offsets_from_json(end))


# --------------------------------------------------------------------------------------
# Spark data source
# --------------------------------------------------------------------------------------

class CdcKafkaDataSource(DataSource):
    """``spark.readStream.format("cdc-kafka")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        parse_options(self.options)  # fail at load() with a clear message
        return SCHEMA

    def streamReader(self, schema: StructType) -> "CdcKafkaStreamReader":
        if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SCHEMA.fields]:
            raise KafkaSourceOptionError("the cdc-kafka source has a fixed schema; do not pass one to readStream")
        return CdcKafkaStreamReader(parse_options(self.options))


class CdcKafkaStreamReader(DataSourceStreamReader):
    """Plans batches on the driver (offsets), reads them on the executors (:meth:`read`).

    Spark 4.1 gives a Python source no admission control (``latestOffset()`` has no start
    and no limit), so the reader caps its batches itself: it keeps where the next batch
    starts, the end of the last batch Spark planned (:meth:`partitions`, which Spark also
    calls with the checkpoint's last offsets when a query restarts: ``setLatestSeenOffset``)
    or, before any, the query's initial offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.opts = options
        self._meta = None            # driver-side consumer for metadata, created lazily
        self._offsets = None         # ... for end offsets, and an admin client for topic ids:
        self._admin = None           # kept from trigger to trigger (a client's start each time cost ~20 ms)
        self._waiter = None          # ... and a consumer for idleWaitMs's fetch
        self.last_wait = ""  # what ended the last wait for records (_wait_for_records)
        self._initial: dict | None = None  # initialOffset's answer, resolved once
        self._next_start: dict | None = None  # the end of the last batch planned

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_meta"] = state["_offsets"] = state["_admin"] = state["_waiter"] = None
        return state

    # ---- driver side -----------------------------------------------------------------

    def _client(self, purpose: str) -> dict:
        return {**self.opts.client_config, "bootstrap.servers": self.opts.bootstrap_servers,
                "group.id": f"cdc-kafka-source-{purpose}-{uuid.uuid4().hex}", "enable.auto.commit": False,
                "enable.auto.offset.store": False}

    def _end_offsets(self, parts: list[TP]) -> dict[TP, tuple[int, int]]:
        """:func:`~common.kafka.offsets.end_offsets` asked of the reader's own consumer."""
        if self._offsets is None:
            client = {k: v for k, v in self._client("offsets").items() if k != "bootstrap.servers"}
            self._offsets = KeptOffsetsConsumer(self.opts.bootstrap_servers, client)
        return self._offsets.end_offsets(parts, timeout=self.opts.fetch_timeout_s)

    def _discover(self) -> list[TP]:
        from confluent_kafka import Consumer

        if self._meta is None:
            self._meta = Consumer(self._client("meta"))
        md = self._meta.list_topics(timeout=self.opts.fetch_timeout_s)
        parts: list[TP] = []
        for name, tmd in md.topics.items():
            if tmd.error is not None or not self.opts.subscribed(name):
                continue
            parts.extend((name, p) for p in tmd.partitions)
        return sorted(parts)

    def _fetch_latest(self) -> dict[TP, tuple[int, int]]:
        """``{tp: (low, end)}`` for every subscribed partition, end = true log end (or the
        last stable offset under read_committed)."""
        from confluent_kafka import KafkaException


        deadline = time.monotonic() + self.opts.fetch_timeout_s
        while True:
            try:
                parts = self._discover()
                if not parts:
                    return {}
                return {tp: (int(lo), int(hi)) for tp, (lo, hi) in self._end_offsets(parts).items()}
            except (KafkaException, OffsetLookupError) as exc:
                # A topic created a moment ago may not have partition leaders yet.
                if time.monotonic() > deadline:
                    raise KafkaSourceError(f"cdc-kafka: end offsets of {self._describe()} unavailable: {exc}") from exc
                time.sleep(0.5)

    def available_ends(self) -> dict[TP, int]:
        """The end of every subscribed partition now (what a run that reads what is available
        now must reach)."""
        return {tp: end for tp, (_, end) in self._fetch_latest().items()}

    def _fetch_wake(self) -> dict[TP, int]:
        """The end offsets of the ``wakeTopics`` that exist (``{}`` when none is set)."""
        if not self.opts.wake_topics:
            return {}
        from confluent_kafka import Consumer, KafkaException

        if self._meta is None:
            self._meta = Consumer(self._client("meta"))
        try:
            md = self._meta.list_topics(timeout=self.opts.fetch_timeout_s)
            parts = [(t, p) for t in self.opts.wake_topics if t in md.topics and md.topics[t].error is None
                     for p in md.topics[t].partitions]
            found = self._end_offsets(parts) if parts else {}
        except (KafkaException, OffsetLookupError) as exc:  # the next trigger asks again
            _log.warning("cdc-kafka: end offsets of the wake topics unavailable: %s", exc)
            return {}
        return {tp: int(hi) for tp, (_, hi) in found.items()}

    def _fetch_ids(self, topics) -> dict[str, str]:
        from confluent_kafka import KafkaException

        if self._admin is None:
            from confluent_kafka.admin import AdminClient
            self._admin = AdminClient({"bootstrap.servers": self.opts.bootstrap_servers,
                                       **{k: v for k, v in self.opts.client_config.items()
                                          if k not in ("isolation.level",)}})
        try:
            return topic_ids(self.opts.bootstrap_servers, topics, timeout=self.opts.fetch_timeout_s,
                             admin=self._admin)
        except KafkaException:
            return {}  # ids unknown this time: compared where known only

    def _describe(self) -> str:
        return f"pattern {self.opts.pattern!r}" if self.opts.pattern else f"topics {list(self.opts.topics)}"

    def initialOffset(self) -> dict:
        if self._initial is None:
            latest = self._fetch_latest()
            self._initial = offsets_to_json(resolve_starting_offsets(self.opts.starting, latest),
                                            ids=self._fetch_ids({t for t, _ in latest}))
        return self._initial

    def _wait_for_records(self, ends: Mapping[TP, int]) -> str:
        """Until a record is there past ``ends`` in one of those partitions, or
        ``idle_wait_s`` passed (:data:`SourceOptions.idle_wait_s`): a fetch from the ends,
        which the broker holds until records arrive; then the partitions are let go (nothing
        more is fetched by this consumer until the next wait).  What ended it: ``record``,
        ``timeout`` or ``error``."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if not ends:
            time.sleep(self.opts.idle_wait_s)  # (no partition yet: the topics are looked for again after)
            return "timeout"
        try:
            if self._waiter is None:  # (what it fetches is dropped: a little, from the ends on)
                self._waiter = Consumer({**self._client("wait"), "enable.partition.eof": False,
                                         "auto.offset.reset": "latest",
                                         "fetch.wait.max.ms": max(1, int(self.opts.idle_wait_s * 1000)),
                                         "max.partition.fetch.bytes": 1 << 16, "queued.max.messages.kbytes": 1024})
            self._waiter.assign([TopicPartition(t, p, o) for (t, p), o in ends.items()])
            try:
                got = self._waiter.consume(num_messages=1, timeout=self.opts.idle_wait_s)
            finally:
                self._waiter.unassign()
        except KafkaException as exc:  # the wait is an optimisation: the next trigger looks again
            _log.warning("cdc-kafka: the wait for new records failed (%s); looking again at the next trigger", exc)
            return "error"
        if not got:
            return "timeout"
        return "error" if got[0].error() is not None else "record"

    def latestOffset(self) -> dict:
        answer, unchanged_ends = self._latest_offset()
        if unchanged_ends is not None and self.opts.idle_wait_s > 0:
            self.last_wait = self._wait_for_records(unchanged_ends)
            answer, _ = self._latest_offset()
        return answer

    def _latest_offset(self) -> tuple[dict, dict[TP, int] | None]:
        """:meth:`latestOffset`'s answer now, and when there is nothing new (the answer is the
        start itself) the ends looked at, which a wait for records starts from (else None)."""
        start = self._next_start if self._next_start is not None else self.initialOffset()
        latest = self._fetch_latest()
        cap = self.opts.max_offsets_per_trigger
        start_map = {tp: o for tp, o in offsets_from_json(start).items() if self.opts.subscribed(tp[0])}
        ids = self._fetch_ids({t for t, _ in latest} | {t for t, _ in start_map})
        losses = detect_data_loss(start_map, latest, ids_from_json(start), ids)
        if any(x.kind == "deleted" for x in losses):
            # A partition missing from one metadata answer: ask again before calling it gone.
            latest = {**self._fetch_latest(), **latest}
            losses = detect_data_loss(start_map, latest, ids_from_json(start), ids)
        if losses:
            if self.opts.fail_on_data_loss:
                raise KafkaDataLossError(data_loss_message(losses), losses)
            for x in losses:
                _log.warning("cdc-kafka: %s; failOnDataLoss=false: %s", x.describe(),
                             "reading carries on from the earliest offset" if x.resume is not None else
                             "the partition is dropped")
        base = apply_data_loss(start_map, losses)
        end = plan_end_offsets(base, latest, cap)
        wake = {**wake_from_json(start), **self._fetch_wake()}  # (a wake topic gone for a moment: kept)
        ends = {tp: hi for tp, (_, hi) in latest.items()}
        if not losses and end == start_map and wake == wake_from_json(start):
            return start, {**ends, **wake}  # nothing new: Spark runs no batch
        return offsets_to_json(end, ids=ids, lost=losses, wake=wake, log_end=ends), None  # (log_end: the pace watch's)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._next_start = end
        return batch_ranges(start, end)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to Kafka

    def stop(self) -> None:
        clients = (self._meta, self._offsets, self._waiter)
        self._meta = self._offsets = self._waiter = None
        self._admin = None  # (an admin client has no close: its threads end when it is collected)
        for client in clients:
            if client is not None:
                client.close()

    # ---- executor side ---------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, KafkaRange), f"unexpected partition {partition!r}"
        yield from read_range(self.opts, partition)


_BATCH_ROWS = 10_000
# Task consumers read one partition's range.  kafka.* wins.
# A range's records are in the log already: a fetch with nothing to return (past the last
# record, before a commit marker) must not wait for new records (librdkafka's 500 ms).
# And the fetching ahead must not pause for librdkafka's 1 s (READ_AHEAD).
# But it must not run far past the range's end either: librdkafka fetches ahead until its
# queue holds ``queued.min.messages`` (100,000), so with fetches of 10 MiB a range of
# 50,000 records was read with up to a fetch's worth of the next batch's records after it,
# which the broker served and the client parsed for nothing.  Fetches of 2 MiB and a queue
# of 5,000 records read as fast; measured on the embedded broker, two processes reading
# two 50,000-record ranges of four partitions each, records after every range: the
# broker's CPU 0.85-0.88 us a record against 1.10-1.35 with 10 MiB and the default queue,
# the client's 0.99-1.09 against 1.18-1.65; and in ``cdc bench merge``'s steady batches
# the broker's 0.78-0.89 us an event against 1.33-1.43 (docs/merge-performance.md; measured
# on the stand-in broker of that time).  The fetch wait: 1 ms, not READ_AHEAD's 10: a range of
# a transactional topic (our producer's) ends with a commit marker, which is no message; the
# range is done when the consumer's position passes it, which librdkafka learns from the
# next fetch, and that fetch finds nothing and waits out ``fetch.wait.max.ms`` at the broker.
# Reading ranges of 190 records (one transaction each) with a kept consumer: 12.4-13.3 ms a
# range at 10 ms (median), 3.1-4.0 ms at 1 ms, 6.2 ms at 0 (issue 70: four of them in every
# small batch).  A range consumer is unassigned between ranges, so it never idles at 1 ms.
_READ_DEFAULTS = {**READ_AHEAD, "fetch.wait.max.ms": 1, "max.partition.fetch.bytes": 2 * 1024 * 1024,
                  "queued.min.messages": 5000}


def _to_batch(msgs: list, rng: KafkaRange, schema) -> Any:
    """One Arrow record batch (the source's schema) of data messages of ``rng``."""
    import pyarrow as pa

    stamps = [m.timestamp() for m in msgs]
    headers = [m.headers() for m in msgs]
    n = len(msgs)
    arrays = [
        pa.array([m.key() for m in msgs], type=pa.binary()),
        pa.array([m.value() for m in msgs], type=pa.binary()),
        pa.array([rng.topic] * n, type=pa.string()),
        pa.array([rng.partition] * n, type=pa.int32()),
        pa.array([m.offset() for m in msgs], type=pa.int64()),
        # confluent-kafka timestamp types: 0 not available, 1 create time, 2 log append
        # time; Spark's kafka source: -1, 0, 1.
        pa.array([ts * 1000 if kind != 0 and ts >= 0 else None for kind, ts in stamps],
                 type=schema.field("timestamp").type),
        pa.array([kind - 1 if kind in (1, 2) else -1 for kind, _ in stamps], type=pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                 type=schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


#: How long a task waits without progress before it asks the broker whether the records
#: of its range are still there (and again after each such interval).
_STALL_CHECK_S = 5.0


def _range_gone(opts: SourceOptions, rng: KafkaRange, position: int) -> DataLoss | None:
    """Whether the records of ``rng`` from ``position`` on are no longer in Kafka (the
    topic was deleted or recreated, or records were removed, after the batch was planned)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        (low, end), = end_offsets(opts.bootstrap_servers, [(rng.topic, rng.partition)],
                                  timeout=opts.fetch_timeout_s, client_config=opts.client_config).values()
    except KafkaException as exc:
        code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
            return DataLoss(rng.topic, rng.partition, max(rng.start, 0), None, None, "deleted", None, None, rng.end)
        return None  # not an answer about the records (the read times out as before)
    except OffsetLookupError:
        return None  # the broker does not answer: not a loss (the read times out as before)
    if end < rng.end:
        return DataLoss(rng.topic, rng.partition, max(rng.start, 0), low, end, "vanished", None, None, rng.end)
    if low > position:
        return DataLoss(rng.topic, rng.partition, position, low, end, "truncated", low - position, None)
    return None


def _lost_in_task(opts: SourceOptions, loss: DataLoss) -> None:
    """A task found records of its range gone: stop the query, or (failOnDataLoss=false)
    say so and end the range with what was read."""
    if opts.fail_on_data_loss:
        raise KafkaDataLossError(data_loss_message([loss]), [loss])
    _log.warning("cdc-kafka: %s (found while reading); failOnDataLoss=false: the rest of the range is skipped",
                 loss.describe())


def range_consumer_config(opts: SourceOptions) -> dict:
    """The configuration of :func:`range_consumer`: the read defaults, then the source's
    ``kafka.*`` options, then what reading a range by offsets needs."""
    return {**_READ_DEFAULTS, **opts.client_config, "bootstrap.servers": opts.bootstrap_servers,
            "group.id": f"cdc-kafka-source-read-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "enable.partition.eof": True}


def range_consumer(opts: SourceOptions) -> Any:
    """A consumer for :func:`read_messages` (which assigns it the partition it reads)."""
    from confluent_kafka import Consumer
    return Consumer(range_consumer_config(opts))


def read_messages(opts: SourceOptions, rng: KafkaRange, *, batch_rows: int = _BATCH_ROWS,
                  consumer: Any = None) -> Iterator[list]:
    """Lists of the data messages (confluent-kafka's) of ``rng``, in offset order, about
    ``batch_rows`` at a time (:func:`common.kafka.topic_reader.read_partition`: offset gaps
    such as transaction markers, aborted or compacted records are passed).  Records that
    vanished since the batch was planned are data loss (:class:`KafkaDataLossError`, or a
    WARNING with ``failOnDataLoss=false``).  Raises :class:`KafkaReadTimeout` when no
    progress is made for ``opts.poll_timeout_s``.  What :func:`read_range` turns into Arrow,
    and what the merge job's tasks read directly (no trip through the JVM).  ``consumer``:
    one of :func:`range_consumer`'s to use (and leave unassigned, open) instead of a new one
    (closed at the end): a worker that reads range after range saves the connection."""
    from confluent_kafka import OFFSET_BEGINNING

    own = consumer is None
    if own:
        consumer = range_consumer(opts)
    position = rng.start  # the next offset to read (-2: the partition's first)
    stalled_since: float | None = None
    try:
        pending: list = []
        while position < 0 or position < rng.end:
            try:
                for msgs in read_partition(consumer, rng.topic, rng.partition,
                                           OFFSET_BEGINNING if position < 0 else position, rng.end,
                                           timeout=min(_STALL_CHECK_S, opts.poll_timeout_s), batch=batch_rows):
                    if position == rng.start >= 0 and msgs[0].offset() > position:
                        # A gap before the first record: transaction markers, or records
                        # removed (retention) since the batch was planned.
                        loss = _range_gone(opts, rng, position)
                        if loss is not None and loss.kind == "truncated" and loss.earliest is not None \
                                and loss.earliest > position:
                            _lost_in_task(opts, loss)
                    position = msgs[-1].offset() + 1
                    stalled_since = None
                    pending.extend(msgs)
                    if len(pending) >= batch_rows:
                        yield pending
                        pending = []
                break
            except PartitionStalled as exc:
                now = time.monotonic()
                stalled_since = stalled_since or now - min(_STALL_CHECK_S, opts.poll_timeout_s)
                loss = _range_gone(opts, rng, max(position, 0))
                if loss is not None:
                    _lost_in_task(opts, loss)
                    break
                if now - stalled_since >= opts.poll_timeout_s:
                    raise KafkaReadTimeout(
                        f"cdc-kafka: {rng.topic}/{rng.partition} made no progress for {opts.poll_timeout_s:g}s, "
                        f"planned range [{rng.start}, {rng.end}) (kafkaConsumer.pollTimeoutMs); is the broker "
                        f"unreachable? ({exc})") from None
                position = max(position, exc.position)
            except RuntimeError as exc:
                raise KafkaSourceError(f"cdc-kafka: {exc}") from None
        if pending:
            yield pending
    finally:
        if own:
            consumer.close()
        else:
            consumer.unassign()


def arrow_schema():
    """:data:`SCHEMA` as Arrow's (the record batches :meth:`CdcKafkaStreamReader.read` returns)."""
    import pyarrow as pa
    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


def read_range(opts: SourceOptions, rng: KafkaRange, *, batch_rows: int = _BATCH_ROWS) -> Iterator:
    """Arrow record batches (the source's schema) of the records of ``rng``, in offset
    order (:func:`read_messages`)."""
    schema = arrow_schema()
    for msgs in read_messages(opts, rng, batch_rows=batch_rows):
        yield _to_batch(msgs, rng, schema)


__all__ = [
    "SHORT_NAME", "SCHEMA", "SourceOptions", "parse_options", "parse_starting_offsets", "KafkaRange", "plan_ranges", "batch_ranges",
    "CdcKafkaDataSource", "CdcKafkaStreamReader", "range_consumer", "read_messages", "read_range",
]
