"""What Spark's ``Trigger.AvailableNow`` does, for the ``cdc-kafka`` source on Spark 4.1: read
what the subscribed partitions hold now, in batches no larger than ``maxOffsetsPerTrigger``,
then stop.

Spark 4.1 gives Python sources no admission control, and runs a source without it under
``Trigger.AvailableNow`` as one batch up to the first ``latestOffset`` it asks for; the source
caps that answer (:mod:`spark_jobs.kafka_source`), so such a run would stop after one capped
batch.  Instead: the ends of the subscribed partitions are taken first, the query runs batches
back to back (a processing-time trigger of 0 s), and it is stopped, between batches, once its
last committed batch (Spark's checkpoint, :mod:`spark_jobs.offset_log`) reached every one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from spark_jobs.data_loss import TP
from spark_jobs.kafka_offsets import offsets_from_json
from spark_jobs.kafka_source import CdcKafkaStreamReader, parse_options
from spark_jobs.offset_log import batch_end_offsets, last_batches


def source_ends(options: Mapping[str, str]) -> dict[TP, int]:
    """The end offset of every partition the ``cdc-kafka`` source with ``options`` reads, now."""
    reader = CdcKafkaStreamReader(parse_options(options))
    try:
        return reader.available_ends()
    finally:
        reader.stop()


def reached(query_dir: Path, target: Mapping[TP, int]) -> bool:
    """Whether the last committed batch of the query checkpointed in ``query_dir`` reached
    every offset of ``target`` (nothing to reach: True)."""
    if not any(end > 0 for end in target.values()):
        return True
    _, committed = last_batches(query_dir)
    if committed is None:
        return False
    ends = batch_end_offsets(query_dir, committed)
    if not ends or not isinstance(ends[0], dict):
        return False
    done = offsets_from_json(ends[0])
    return all(done.get(tp, -1) >= end for tp, end in target.items())


def run_available_now(start: Callable[[str], object], options: Mapping[str, str], query_dir: Path, *,
                      poll_s: float = 0.2, timeout_s: float | None = None):
    """Take the source's ends, start the query (``start(trigger interval)`` returns the
    started ``StreamingQuery``; its checkpoint is ``query_dir``), and stop it between batches
    once it reached them.  Returns the query (stopped; a failure raises from here as from
    ``awaitTermination``).  ``timeout_s``: give up (the query stopped) and raise TimeoutError."""
    import time
    target = source_ends(options)
    query = start("0 seconds")
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not query.awaitTermination(poll_s):
        if reached(query_dir, target) and not query.status.get("isTriggerActive"):
            query.stop()
            break
        if deadline is not None and time.monotonic() > deadline:
            query.stop()
            raise TimeoutError(f"the query did not reach the ends {dict(target)} within {timeout_s:g}s")
    return query
