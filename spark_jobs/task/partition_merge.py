"""One micro-batch of one Kafka partition of a table topic: the merge job's executor work.

Runs on the executors: in a task of :func:`range_function`, which reads the batch's
Kafka ranges itself, or (Spark's JVM ``kafka`` source) inside ``mapInArrow`` over the
micro-batch, where records of several Kafka partitions in one task are separated
(:func:`arrow_function`); records in offset order, which is position order:

1. decode each record (Avro writer schemas from ``<prefix>._schemas`` or the registry,
   or JSON), read with its table's newest schema (:mod:`contract.schema_resolution`);
2. the DBLog rule with copies removed (:class:`spark_jobs.task.dblog.WindowBuffer`): the
   partition's records merged by position with the table's window markers (those of
   this batch plus those still pending from earlier ones); markers beyond the
   partition's last record stay pending, since records below them may still come.  The
   state (buffer + pending markers) comes from the previous micro-batch and goes back
   as a ``state`` row;
3. the kept records, original bytes unchanged, to the clean changelog partition
   (:mod:`spark_jobs.clean_changelog`, idempotent by position); a truncate event
   (``op: t``) goes there only: the sinks follow the table's TRUNCATE marker;
4. the kept records upserted/deleted into the PostgreSQL and MySQL sink tables (position
   guarded, so a replay never moves a row backwards);
5. records that cannot be decoded, decided or applied to the dead-letter topic with the
   reason and their coordinates; the rest goes on.

Each stage is a module of :mod:`spark_jobs.task` a test can drive alone: the read here
(:func:`range_function`, :func:`arrow_function`), then
:class:`~spark_jobs.task.decide.PartitionDecider` (1, 2),
:func:`~spark_jobs.task.held_records.hold` (pessimistic routes),
:func:`~spark_jobs.task.changelog.write_changelog` (3),
:func:`~spark_jobs.task.sink_apply.apply_to_sinks` (4) and
:func:`~spark_jobs.task.dead_letters.dead_letters` (5).

The output rows are small: the partition's new deduper state and its statistics.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Iterator

from common.gc_tuning import STREAMING_THRESHOLDS, gc_paused, tune_gc
from contract.topics import table_of_topic
from spark_jobs.report.batch_latency import TS_MS, latency_counts
from spark_jobs.task.dblog import WindowBuffer
from spark_jobs.task.changelog import write_changelog
from spark_jobs.task.dead_letters import dead_letters
from spark_jobs.task.decide import PartitionDecider, merge_markers
from spark_jobs.task.envelope_decoder import EnvelopeDecoder
from spark_jobs.task.held_records import hold
from spark_jobs.task.kept import OFFSET
from spark_jobs.task.routing import router_of
from spark_jobs.task.settings import MergeSettings, sinks_of
from spark_jobs.task.sink_apply import apply_to_sinks
from spark_jobs.task.worker_cache import cached as _cached
from spark_jobs.task.worker_cache import replace as _cache_replace

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = "kind string, topic string, partition int, payload string"


def _tune_worker_gc() -> None:
    """Once per Spark Python worker process: the collector's streaming thresholds, and what
    is alive before the first task (PySpark's and the project's modules) out of every later
    collection.

    A partition's records stay alive until its sinks are written, so with Python's default
    thresholds every few thousand records started a collection of the older generations over
    all of them (a fifth of the tasks' samples in a py-spy profile of ``cdc bench merge``, at
    the lines that allocate).  The merge of a partition itself runs with the collector paused
    (``gc_paused``): it makes no reference cycles (a collection after merging 600,000 of the
    benchmark's records found no garbage), so a collection there would only walk live records
    (another 8-10% of the tasks' CPU); garbage without cycles is freed as always, and a batch
    is bounded by ``max_offsets_per_trigger``."""
    _cached(("gc",), lambda: tune_gc(STREAMING_THRESHOLDS, freeze=True) or True)


def warm_worker(items: Iterator) -> Iterator:
    """The task of :func:`~spark_jobs.merge_job.warm_workers`: unpickling it makes
    a Spark Python worker import this module (and what it imports); it then tunes the
    worker's collector (:func:`_tune_worker_gc`) and yields nothing."""
    for _ in items:
        pass
    _tune_worker_gc()
    return iter(())


def _task_decoder(s: MergeSettings, schemas_end: int, sink_epoch: int) -> EnvelopeDecoder:
    """The worker process's record decoder, its schemas read up to ``schemas_end``; the
    sinks forget what they prepared when ``sink_epoch`` moved (the driver dropped or renamed
    sink tables)."""
    dec: EnvelopeDecoder = _cached(("dec", s.bootstrap, s.prefix, s.registry_url), lambda: EnvelopeDecoder(s))
    if schemas_end:
        dec.store.refresh_until(schemas_end)
    if _cached(("epoch",), lambda: [sink_epoch])[0] != sink_epoch:
        for _, sink in sinks_of(s):
            sink.forget_plans()
        _cache_replace(("epoch",), [sink_epoch])
    return dec


def merge_partition(topic: str, partition: int, records: list[tuple[int, bytes | None, bytes | None]],
                    s: MergeSettings, state: dict | None, new_markers: list[dict], schemas_end: int = 0,
                    sink_epoch: int = 0) -> tuple[dict, dict]:
    """The work of one partition (see the module docstring): ``records`` are
    ``(offset, key, value)``; ``schemas_end`` the schemas topic's end when the batch was
    planned (its records are read with the newest schemas up to there); ``sink_epoch``
    counts the sink tables the driver dropped or renamed (the sinks forget what they
    prepared when it moves); returns (new state, stats)."""
    t0, c0 = time.monotonic(), time.thread_time()
    records.sort(key=OFFSET)
    state = state or {}
    buf = WindowBuffer.from_state(state["buffer"]) if state.get("buffer") else WindowBuffer()
    dec = _task_decoder(s, schemas_end, sink_epoch)
    # The topic names the table with Kafka's characters only (contract.topics): the
    # true names come from each record's ``source``, and so may be two tables' sharing it.
    topic_names = table_of_topic(s.prefix, topic)
    stats = {"topic": topic, "partition": partition, "input": len(records), "emitted": 0, "dropped": 0, "copies": 0,
             "dead": 0, "upserted": 0, "deleted": 0, "sink_skipped": 0, "from_bytes": 0, "inserted": 0,
             "fresh_refused": 0, "partition_turns": 0, "whole_turns": 0}
    dropped_before, copies_before = buf.stats["rows_dropped"], buf.stats["copies"]
    decider = PartitionDecider(s, dec, buf, merge_markers(state.get("pending", []), new_markers), topic_names,
                               ignore_columns=s.sinks.schema_rule(*topic_names).columns == "ignore")
    decision = decider.run(records)
    kept, dead = decision.kept, decision.dead
    held: list[dict] = []
    if state.get("held") or any(t.get("waiting") for t in s.targets.values()):
        kept = hold(s, dec, state.get("held") or [], kept, held)
        stats["held"] = len(held)
    t_decided, c_decided = time.monotonic(), time.thread_time()
    stats["decide_s"], stats["decide_cpu_s"] = t_decided - t0, c_decided - c0
    stats["emitted"] = len(kept)
    stats["dropped"] = buf.stats["rows_dropped"] - dropped_before
    stats["copies"] = buf.stats["copies"] - copies_before

    merged_clean = dict(state.get("merged_clean") or {})  # route name -> the merged clean partition's end
    clean_tails = dict(state.get("clean_tails") or {})  # clean topic -> [end, last position] of this partition
    router = router_of(s)
    dead += write_changelog(s, topic_names, partition, kept, router, merged_clean, stats, clean_tails)
    t_clean, c_clean = time.monotonic(), time.thread_time()
    stats["changelog_s"], stats["changelog_cpu_s"] = t_clean - t_decided, c_clean - c_decided

    dead += apply_to_sinks(s, dec, topic, partition, kept, decision.key_columns, router, stats)
    if decision.truncates:  # applied by the driver once every partition's records of the batch are
        stats["truncates"] = [[db, table, below] for (db, table), below in decision.truncates.items()]
    stats["sinks_s"], stats["sinks_cpu_s"] = time.monotonic() - t_clean, time.thread_time() - c_clean
    stats["latencies_ms"] = latency_counts(map(TS_MS, kept), time.time() * 1000)
    if dead:
        dead_letters(s, topic, partition, dead)
        stats["dead"] = len(dead)
    stats["seconds"] = time.monotonic() - t0
    new_state = {"buffer": buf.to_state(), "pending": decision.pending}
    if merged_clean:
        new_state["merged_clean"] = merged_clean
    if clean_tails:
        new_state["clean_tails"] = clean_tails
    if held:
        new_state["held"] = held
    return new_state, stats


def arrow_function(s: MergeSettings, inputs: dict[str, tuple[dict | None, list[dict]]], schemas_end: int = 0,
                   sink_epoch: int = 0):
    """The ``mapInArrow`` function over ``key, value, topic, partition, offset``;
    ``inputs``: per ``"topic|partition"``, the state from the previous batch and this
    batch's markers of the table; ``schemas_end``, ``sink_epoch``: see :func:`merge_partition`.  Yields one
    ``state`` and one ``stats`` row per Kafka partition seen."""
    def run(batches):
        import pyarrow as pa
        _tune_worker_gc()
        groups: dict[tuple[str, int], list] = {}
        for b in batches:
            cols = b.to_pydict()
            for key, value, topic, partition, offset in zip(cols["key"], cols["value"], cols["topic"],
                                                           cols["partition"], cols["offset"]):
                groups.setdefault((topic, partition), []).append((offset, key, value))
        kinds, topics, parts, payloads = [], [], [], []
        for (topic, partition), records in groups.items():
            state, markers = inputs.get(f"{topic}|{partition}", (None, []))
            with gc_paused():  # (see _tune_worker_gc)
                new_state, stats = merge_partition(topic, partition, records, s, state, markers, schemas_end,
                                                   sink_epoch)
            for kind, payload in (("state", new_state), ("stats", stats)):
                kinds.append(kind)
                topics.append(topic)
                parts.append(partition)
                payloads.append(json.dumps(payload))
        yield pa.RecordBatch.from_pydict({"kind": kinds, "topic": topics, "partition": parts, "payload": payloads},
                                         schema=pa.schema([("kind", pa.string()), ("topic", pa.string()),
                                                           ("partition", pa.int32()), ("payload", pa.string())]))
    return run


def range_function(s: MergeSettings, opts: Any, schemas_end: int = 0, sink_epoch: int = 0, *, inline: bool = False):
    """The task function (``RDD.mapPartitions``) over ``(KafkaRange, state, markers)``
    items, one Kafka partition range each: reads the range itself with confluent-kafka
    (:func:`spark_jobs.input.kafka_source.read_messages`, with the source's options ``opts``:
    data loss is found as the source finds it) and merges it: the records never travel
    through the JVM.  Yields the ``(kind, topic, partition, payload)`` rows of
    :func:`arrow_function`.  ``inline``: run in the driver's process (a small batch,
    :meth:`~spark_jobs.planning.merge_tasks.MergeTasks.run`), whose collector is left as it is."""
    def run(items):
        from spark_jobs.input.kafka_source import range_consumer, read_messages
        if not inline:
            _tune_worker_gc()
        # one consumer per worker process and source options, reused task after task
        consumer = _cached(("range-consumer", repr(opts)), lambda: range_consumer(opts))
        # The collector is paused from the read on (see _tune_worker_gc): reading makes no
        # cycles either, and its messages and tuples started a collection every few thousand
        # (6% of the tasks' samples in a py-spy profile of ``cdc bench merge``).  (Reading the
        # task's next range in a thread while the current one merges was tried and left: the
        # steady rate fell, docs/merge-performance.md.)
        with gc_paused():
            for rng, state, markers in items:
                t0, c0, began = time.monotonic(), time.thread_time(), time.time()
                records = [] if rng.start == rng.end else [  # (empty: a partition holding rows, see merge_job)
                    (m.offset(), m.key(), m.value()) for msgs in read_messages(opts, rng, consumer=consumer)
                    for m in msgs]
                read_s, read_cpu_s = time.monotonic() - t0, time.thread_time() - c0
                new_state, stats = merge_partition(rng.topic, rng.partition, records, s, state, markers,
                                                   schemas_end, sink_epoch)
                del records
                stats["read_s"], stats["read_cpu_s"] = read_s, read_cpu_s
                # what the driver's progress watch judges the read by (spark_jobs.report.progress_watch)
                stats["read"] = {"start": rng.start, "end": rng.end, "seconds": round(read_s, 4)}
                # the range's wall-clock span, for the batch's timeline (BatchReport.recent)
                stats["span"] = [rng.topic, rng.partition, began, time.time(), os.getpid()]
                yield "state", rng.topic, rng.partition, json.dumps(new_state)
                yield "stats", rng.topic, rng.partition, json.dumps(stats)
    return run
