"""What Spark's ``Trigger.AvailableNow`` does, for the ``cdc-kafka`` source on Spark 4.1: read
what the subscribed partitions hold now, in batches no larger than ``maxOffsetsPerTrigger``,
then stop.

Spark 4.1 gives Python sources no admission control, and runs a source without it under
``Trigger.AvailableNow`` as one batch up to the first ``latestOffset`` it asks for; the source
caps that answer (:mod:`spark_jobs.input.kafka_source`), so such a run would stop after one capped
batch.  Instead: the ends of the subscribed partitions are taken first, the query runs batches
back to back (:data:`TRIGGER_INTERVAL`), and it is stopped, between batches, once a
batch of this run (Spark's checkpoint, :mod:`spark_jobs.input.offset_log`) reached every one, or
once the source plans no further batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from spark_jobs.input.data_loss import TP
from spark_jobs.input.kafka_offsets import offsets_from_json
from spark_jobs.input.kafka_source import CdcKafkaStreamReader, parse_options
from spark_jobs.input.offset_log import batch_end_offsets, last_batches


def source_ends(options: Mapping[str, str]) -> dict[TP, int]:
    """The end offset of every partition the ``cdc-kafka`` source with ``options`` reads, now."""
    reader = CdcKafkaStreamReader(parse_options(options))
    try:
        return reader.available_ends()
    finally:
        reader.stop()


def reached(query_dir: Path, target: Mapping[TP, int], after_batch: int | None) -> bool:
    """Whether a batch committed after batch ``after_batch`` (None: any) of the query
    checkpointed in ``query_dir`` reached every offset of ``target``.  (Only batches of this
    run count: a checkpoint's offsets can lie past the ends of a topic made again.)"""
    _, committed = last_batches(query_dir)
    if committed is None or (after_batch is not None and committed <= after_batch):
        return False
    ends = batch_end_offsets(query_dir, committed)
    if not ends or not isinstance(ends[0], dict):
        return False
    done = offsets_from_json(ends[0])
    return all(done.get(tp, -1) >= end for tp, end in target.items())


def nothing_to_read(options: Mapping[str, str], query_dir: Path) -> bool:
    """Whether the query checkpointed in ``query_dir`` has nothing left to read: every batch
    it planned is committed, and the source, asked as Spark asks it, plans no batch after the
    last one.  (Raises what the source raises: lost records, with failOnDataLoss.)"""
    planned, committed = last_batches(query_dir)
    if planned is None or planned != committed:
        return False
    ends = batch_end_offsets(query_dir, committed)
    if not ends or not isinstance(ends[0], dict):
        return False
    reader = CdcKafkaStreamReader(parse_options(options))
    try:
        reader.partitions(ends[0], ends[0])  # (what Spark does on a restart: the next batch starts there)
        return reader.latestOffset() == ends[0]
    finally:
        reader.stop()


#: The trigger interval of such a run: batches with records run back to back (a trigger that
#: is due when the last batch ends starts at once), and between the short triggers that find
#: nothing new the query is idle for most of it, so that it can be stopped between batches.
#: (With 0 s it is nearly never idle: 50 triggers a second, each asking Kafka for its ends.)
TRIGGER_INTERVAL = "0.25 seconds"


def run_available_now(start: Callable[[str], object], options: Mapping[str, str], query_dir: Path, *,
                      poll_s: float = 0.05, idle_check_s: float = 1.0, timeout_s: float | None = None):
    """Take the source's ends, start the query (``start(trigger interval)`` returns the
    started ``StreamingQuery``; its checkpoint is ``query_dir``), and stop it between batches
    once a batch of this run reached them, or once it has nothing left to read.  Returns the
    query (stopped; a failure raises from here as from ``awaitTermination``).  ``timeout_s``:
    give up (the query stopped) and raise TimeoutError."""
    import time
    target = source_ends(options)
    _, before = last_batches(query_dir)
    query = start(TRIGGER_INTERVAL)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    next_idle_check = time.monotonic() + idle_check_s
    while not query.awaitTermination(poll_s):
        if not query.status.get("isTriggerActive"):
            done = reached(query_dir, target, before)
            if not done and time.monotonic() >= next_idle_check:
                done = nothing_to_read(options, query_dir)
                next_idle_check = time.monotonic() + idle_check_s
            if done and not query.status.get("isTriggerActive"):
                query.stop()
                break
        if deadline is not None and time.monotonic() > deadline:
            query.stop()
            raise TimeoutError(f"the query did not reach the ends {dict(target)} within {timeout_s:g}s")
    return query
