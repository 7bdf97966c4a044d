"""End offsets that are right on every Kafka-protocol broker.

The embedded Tansu broker answers ListOffsets wrongly in two ways:

* ListOffsets(latest) is the base offset of the last record batch plus one, not the
  log-end offset (1,000 records produced in one batch report an end of 1);
* under ``read_committed`` it answers 0 for as long as any transaction is open on the
  partition, which with a producer that commits transactions back to back is nearly
  always.

The Fetch response is right on Tansu as on Kafka: it carries the high watermark and the
last stable offset (LSO) of the partition whatever offset the fetch asked for.  So every
partition is probed with one fetch, and the end is read from librdkafka's statistics
(``ls_offset``: the fetch's LSO under ``read_committed``, its high watermark under
``read_uncommitted``; the cached watermarks of ``get_watermark_offsets`` only hold the
high watermark, which under ``read_committed`` counts records of open transactions).

The ListOffsets answer is still asked for: it raises for a partition the broker does not
know (yet) as before, gives the low watermark, is a lower bound (a correct broker's answer never
exceeds what a later fetch reports, and Tansu's is never above the true end), and is a
fetch position that is known to be valid.  The fetch starts past the end of the log
(:data:`PAST_END`): Tansu answers that with the watermarks without reading anything.  A
broker that answers "offset out of range" instead (Kafka) is probed from the highest of
the low watermark, that answer and the caller's hint (typically the end returned last
time), so the fetch carries few or no records; and when that is refused as well (a hint
past the end of a recreated topic), from the ListOffsets answer.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from common.errors import OffsetLookupError

# get_watermark_offsets errors that mean "the broker did not answer in time".
_NO_ANSWER = (KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)

# How often librdkafka emits statistics while the probe waits for its fetch answers.
_STATS_INTERVAL_MS = 10

#: Where the probe fetches first: past the end of any log.  Tansu answers such a fetch with
#: the partition's watermarks at once, while a fetch inside the log costs it a listing of
#: every batch of the partition (0.3 s at 100,000 batches, docs/operations.md); Kafka answers
#: it "offset out of range", after which the probe fetches within the log, and does so for
#: that broker from then on (:data:`_REFUSE_PAST_END`).
PAST_END = 1 << 60
#: Bootstrap servers whose broker refused a fetch past the end of a log.
_REFUSE_PAST_END: set[str] = set()
_OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
#: How long the probe past the end waits for its answers before the partitions left are
#: asked the long way (ListOffsets first: a partition the broker does not know raises there).
_QUICK_S = 2.0


def end_offsets(bootstrap_servers: str, partitions: Iterable[tuple[str, int]], *, timeout: float = 15.0,
                client_config: dict | None = None,
                hints: Mapping[tuple[str, int], int] | None = None,
                at_least: Mapping[tuple[str, int], int] | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (low, end)}`` where ``end`` is the true log-end offset.

    Under ``isolation.level=read_committed`` (the default here) ``end`` is the last stable
    offset, the point up to which a read_committed consumer can read, also while
    transactions are open; under ``read_uncommitted`` it is the high watermark.

    ``hints`` (optional) maps partitions to an offset at or below their current end, such
    as the end this function returned last time: the probing fetch starts there and so
    carries only the records written since.  A wrong hint costs time, never correctness.

    ``at_least`` (optional), for a caller that only asks whether ends have reached given
    offsets (the merge job's wait for a batch's records to be committed), on a broker that
    refuses a fetch past the end of a log (Kafka; Tansu answers one with the true end, which
    is asked first and costs it less than ListOffsets): a partition whose
    ListOffsets answer is already at or above its offset there is answered with that answer,
    a lower bound of its end, and not probed.  When every partition is, no fetch is made at
    all: the probe is what costs (25-35 ms a call on the embedded broker, against 3 ms for
    four ListOffsets).

    The whole call takes at most about ``timeout`` seconds: :class:`OffsetLookupError` if
    the broker has not answered by then.  A partition the broker does not know raises
    ``KafkaException``, as ``Consumer.get_watermark_offsets`` does.
    """
    parts = list(dict.fromkeys((str(t), int(p)) for t, p in partitions))
    if not parts:
        return {}
    stats: list[str] = []
    conf = {"bootstrap.servers": bootstrap_servers, "group.id": f"cdc-offsets-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "fetch.max.bytes": 1048576, "max.partition.fetch.bytes": 65536, **(client_config or {}),
            # The probe's own settings: one small fetch per partition, answered at once
            # even when it asks at the end of the log, and statistics to read it from.
            "enable.auto.offset.store": False, "enable.partition.eof": False, "auto.offset.reset": "error",
            "fetch.wait.max.ms": 10, "fetch.error.backoff.ms": 50, "fetch.queue.backoff.ms": 10,
            "queued.min.messages": 1000,
            "statistics.interval.ms": _STATS_INTERVAL_MS, "stats_cb": stats.append}
    committed = str(conf.get("isolation.level", "read_committed")).lower() != "read_uncommitted"
    end_field = "ls_offset" if committed else "hi_offset"
    deadline = time.monotonic() + timeout
    quick: dict[tuple[str, int], tuple[int, int]] = {}
    if bootstrap_servers not in _REFUSE_PAST_END:
        quick = _past_end_probe(conf, stats, parts, end_field, min(deadline, time.monotonic() + _QUICK_S))
        if len(quick) == len(parts):
            return quick
        parts = [tp for tp in parts if tp not in quick]
        stats.clear()
    consumer = Consumer(conf)
    try:
        reported = _list_offsets(consumer, parts, deadline, timeout)
        enough = {tp: lohi for tp, lohi in reported.items() if at_least and tp in at_least and lohi[1] >= at_least[tp]}
        if len(enough) == len(reported):
            return {**quick, **enough}
        probed = {tp: lohi for tp, lohi in reported.items() if tp not in enough}
        hints = hints or {}
        within = [TopicPartition(t, p, max(lo, hi, int(hints.get((t, p), lo)))) for (t, p), (lo, hi) in probed.items()]
        fetched = _probe(consumer, bootstrap_servers, probed, within, stats, end_field, deadline, timeout)
        result = {**quick, **enough}
        for tp, (lo, hi) in probed.items():
            # A correct ListOffsets answer is never above what the later fetch reports, and
            # Tansu's answer is never above the true end: the larger of the two is right.
            result[tp] = (lo, max(lo, hi, fetched[tp]))
        return result
    finally:
        consumer.close()


def _probe(consumer: Consumer, bootstrap_servers: str, probed: Mapping[tuple[str, int], tuple[int, int]],
           within: list[TopicPartition], stats: list[str], end_field: str, deadline: float,
           timeout: float) -> dict[tuple[str, int], int]:
    """The end offset of each ``probed`` partition (its ListOffsets answer ``(low, latest)``)
    from one fetch answer's statistics: past the end of the log first, at ``within``'s
    positions on a broker that refuses that (:data:`_REFUSE_PAST_END`)."""
    past = bootstrap_servers not in _REFUSE_PAST_END
    consumer.assign([TopicPartition(tp.topic, tp.partition, PAST_END) for tp in within] if past else within)
    fetched: dict[tuple[str, int], int] = {}
    while True:
        # Records the probe happens to fetch are dropped; consuming them in bulk keeps
        # the statistics callbacks queued behind them from waiting.
        msgs = consumer.consume(100000, 0.01)
        if any(m.error() is not None and m.error().code() in _OUT_OF_RANGE for m in msgs):
            # A broker that refuses a fetch past the end (Kafka): probed within the log
            # from now on (the consumer does not reset on its own: auto.offset.reset=error);
            # refused within the log too (a hint past the end of a recreated topic): from
            # the ListOffsets answers, which are valid positions.
            if past:
                _REFUSE_PAST_END.add(bootstrap_servers)
                past = False
            else:
                within = [TopicPartition(t, p, max(lo, hi)) for (t, p), (lo, hi) in probed.items()]
            consumer.assign(within)
            stats.clear()
            continue
        if stats:
            latest = stats[-1]
            stats.clear()
            _read_stats(latest, end_field, probed, fetched)
        if len(fetched) == len(probed):
            break
        if time.monotonic() > deadline:
            missing = sorted(set(probed) - set(fetched))
            raise OffsetLookupError(f"no fetch answer for {missing} within {timeout}s")
    return fetched


def _list_offsets(consumer: Consumer, parts: list[tuple[str, int]], deadline: float,
                  timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's ListOffsets answer ``(low, latest)``; :class:`OffsetLookupError` when
    the broker does not answer by ``deadline``, ``KafkaException`` for a partition it does
    not know."""
    reported: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, part in parts:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OffsetLookupError(f"no ListOffsets answer for {(topic, part)} within {timeout}s")
        try:
            reported[(topic, part)] = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=left)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in _NO_ANSWER:
                raise OffsetLookupError(f"no ListOffsets answer for {(topic, part)} within {timeout}s: "
                                        f"{exc.args[0].str()}") from exc
            raise
    return reported


def _past_end_probe(conf: dict, stats: list[str], parts: list[tuple[str, int]], end_field: str,
                    deadline: float) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, partition): (low, end)}`` from one fetch past the end of each log, without
    ListOffsets (which costs Tansu a listing of the partition's batches too): the answer's
    log start offset and last stable offset (or high watermark).  The partitions that got no
    answer by ``deadline`` are left out (the caller asks them the long way: an unknown one
    raises there); a broker that answers "offset out of range" is remembered
    (:data:`_REFUSE_PAST_END`) and nothing is returned."""
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(t, p, PAST_END) for t, p in parts])
        ends: dict[tuple[str, int], int] = {}
        lows: dict[tuple[str, int], int] = {}
        while time.monotonic() < deadline:
            msgs = consumer.consume(100000, 0.01)
            if any(m.error() is not None and m.error().code() in _OUT_OF_RANGE for m in msgs):
                _REFUSE_PAST_END.add(conf["bootstrap.servers"])
                return {}
            if stats:
                latest = stats[-1]
                stats.clear()
                _read_stats(latest, end_field, parts, ends)
                _read_stats(latest, "lo_offset", parts, lows)
            if all(tp in ends and tp in lows for tp in parts):
                break
        return {tp: (lows[tp], max(lows[tp], ends[tp])) for tp in parts if tp in ends and tp in lows}
    finally:
        consumer.close()


def _read_stats(raw: str, end_field: str, wanted: Mapping[tuple[str, int], object],
                found: dict[tuple[str, int], int]) -> None:
    """Record into ``found`` the end offset of every wanted partition that the statistics
    JSON ``raw`` shows a fetch answer for (before the first answer the value is -1001,
    after an answer with a partition error it is -1)."""
    topics = json.loads(raw).get("topics", {})
    for (topic, part) in wanted:
        entry = topics.get(topic, {}).get("partitions", {}).get(str(part))
        if entry is not None and int(entry.get(end_field, -1)) >= 0:
            found[(topic, part)] = int(entry[end_field])
