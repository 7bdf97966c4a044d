"""Whether the merge job keeps pace with its partitions, judged as rates (pure: no I/O).

A job whose reads trickle never "stalls" by the old measure (any record within 120 s): the
issue that brought this in read 2,166 records in 29 s while 900 a second arrived, and then
sat in a read that no answer came to, restarted on the same range and sat there again.
The driver feeds the watch after every batch (:meth:`ProgressWatch.batch_done`: each
partition's planned range, the seconds its task spent reading it, and the log's latest end
offsets), while a batch runs (:meth:`ProgressWatch.running`)
and when the query restarts (:meth:`ProgressWatch.restarted`).  It answers with the
warnings that are new; :meth:`ProgressWatch.current` lists those in force, for the status
file, ``cdc status`` and the metrics.

The rules:

* **falling behind**: over the last :attr:`ProgressWatch.window_s` seconds a partition's
  reads ran at fewer records a second than arrived in it, and reading took at least a
  quarter of the time (so it is the read that holds the partition back, not an idle job);
  cleared when the reads run at twice the arrival rate again;
* **a batch running long**: a batch has run for longer than :attr:`ProgressWatch.slow_batch_s`
  and :attr:`ProgressWatch.slow_factor` times the median of the recent ones;
* **a restart on the same range**: the query failed on a batch and the next batch after the
  restart starts where that one did.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping


@dataclass(frozen=True)
class PartitionRead:
    """One task's read of one partition range in a batch."""

    topic: str
    partition: int
    start: int
    end: int
    seconds: float

    @property
    def key(self) -> str:
        return f"{self.topic}[{self.partition}]"

    @classmethod
    def from_stats(cls, stats: Mapping) -> "PartitionRead | None":
        """From a task's stats row (``spark_jobs.task.partition_merge.range_function``), or None
        when it holds no read (an empty range, Spark's own Kafka source)."""
        r = stats.get("read")
        if not r or r.get("end", 0) <= max(r.get("start", 0), 0):
            return None
        return cls(str(stats["topic"]), int(stats["partition"]), max(int(r["start"]), 0), int(r["end"]),
                   float(r.get("seconds", 0.0)))


@dataclass
class PaceWarning:
    """A warning in force: what it is about (``kind``, ``subject``), since when, and what it says."""

    kind: str  # falling_behind | slow_batch | restart_repeats
    subject: str
    message: str
    since: float
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "message": self.message, "since": self.since,
                **self.details}


@dataclass
class _Sample:
    at: float
    records: int
    read_s: float
    latest: int | None
    end: int


class ProgressWatch:
    """The merge job's pace, partition by partition (see the module's docstring)."""

    def __init__(self, window_s: float = 60.0, slow_batch_s: float = 30.0, slow_factor: float = 5.0) -> None:
        self.window_s = window_s
        self.slow_batch_s = slow_batch_s
        self.slow_factor = slow_factor
        self._samples: dict[str, deque[_Sample]] = {}
        self._durations: deque[float] = deque(maxlen=20)
        self._warnings: dict[tuple[str, str], PaceWarning] = {}
        self._failed_on: dict[str, int] | None = None  # the starts of the batch a failed query was on
        self._failed_error = ""

    # -- what the driver tells ----------------------------------------------------------
    def batch_done(self, now: float, seconds: float, reads: Iterable[PartitionRead],
                   latest: Mapping[str, int] | None = None) -> list[PaceWarning]:
        """A batch ended at ``now`` after ``seconds``; ``reads``: its partitions' reads;
        ``latest``: the log's end offsets by partition key (``topic[partition]``) when the
        batch was planned, where known.  The warnings that are new."""
        self._durations.append(seconds)
        self._warnings.pop(("slow_batch", "batch"), None)
        self._warnings.pop(("restart_repeats", "query"), None)
        new = []
        for r in reads:
            samples = self._samples.setdefault(r.key, deque())
            samples.append(_Sample(now, r.end - r.start, r.seconds, (latest or {}).get(r.key), r.end))
            while samples and samples[0].at < now - self.window_s:
                samples.popleft()
            w = self._judge(r, samples, now)
            if w is not None:
                new.append(w)
        return new

    def batch_started(self, now: float, starts: Mapping[str, int]) -> list[PaceWarning]:
        """A batch starts reading its partitions at ``starts`` (offsets by partition key).
        After a failed query, a batch that starts where the failed one did repeats it."""
        if self._failed_on is None:
            return []
        failed, self._failed_on = self._failed_on, None
        same = sorted(k for k, o in starts.items() if failed.get(k) == o)
        if not same:
            return []
        w = PaceWarning("restart_repeats", "query",
                    f"the merge query restarted on the range it failed on ({', '.join(f'{k} from {starts[k]}' for k in same)}); "
                    f"it failed with: {self._failed_error}", now, {"partitions": same})
        self._warnings[(w.kind, w.subject)] = w
        return [w]

    def running(self, now: float, started: float, batch_id: int, ranges: Mapping[str, tuple[int, int]]) -> list[PaceWarning]:
        """Batch ``batch_id``, started at ``started``, still runs at ``now``; ``ranges``: its
        partitions' ``(start, end)``.  A warning when it runs long (once per batch)."""
        elapsed = now - started
        typical = statistics.median(self._durations) if self._durations else 0.0
        if elapsed < max(self.slow_batch_s, self.slow_factor * typical):
            return []
        old = self._warnings.get(("slow_batch", "batch"))
        if old is not None and old.details.get("batch_id") == batch_id:
            return []
        parts = ", ".join(f"{k} [{a}, {b})" for k, (a, b) in sorted(ranges.items())) or "no partition ranges"
        w = PaceWarning("slow_batch", "batch",
                    f"batch {batch_id} has run for {elapsed:.0f}s (recent batches: {typical:.1f}s) and waits for its "
                    f"tasks' reads and writes: {parts}", now, {"batch_id": batch_id, "seconds": round(elapsed, 1)})
        self._warnings[(w.kind, w.subject)] = w
        return [w]

    def restarted(self, starts: Mapping[str, int] | None, error: str) -> None:
        """The query failed while on a batch starting at ``starts`` (None: unknown)."""
        self._failed_on = dict(starts) if starts else None
        self._failed_error = error.splitlines()[0][:300] if error else ""

    # -- what the driver shows ------------------------------------------------------------
    def current(self) -> list[PaceWarning]:
        """The warnings in force, oldest first."""
        return sorted(self._warnings.values(), key=lambda w: w.since)

    def _judge(self, r: PartitionRead, samples: deque[_Sample], now: float) -> PaceWarning | None:
        key = ("falling_behind", r.key)
        if len(samples) < 2:
            return None
        first, last = samples[0], samples[-1]
        span = last.at - first.at
        if span <= 0:
            return None
        # arrivals: how far the log's end moved (the planned ends where the latest is unknown)
        a0 = first.latest if first.latest is not None else first.end
        a1 = last.latest if last.latest is not None else last.end
        arrival = max(0, a1 - a0) / span
        records = sum(s.records for s in list(samples)[1:])
        read_s = sum(s.read_s for s in list(samples)[1:])
        read_rate = records / read_s if read_s > 0 else float("inf")
        lag = (last.latest - last.end) if last.latest is not None else None
        if key in self._warnings:
            if read_rate >= 2 * arrival or read_s < 0.1 * span:
                del self._warnings[key]
            return None
        if arrival <= 0 or read_rate >= arrival or read_s < 0.25 * span:
            return None
        behind = f", {lag:,} records behind the log's end" if lag is not None else ""
        w = PaceWarning("falling_behind", r.key,
                    f"{r.key} is read at {read_rate:,.0f} records/s while {arrival:,.0f}/s arrive (over the last "
                    f"{span:.0f}s; last range [{r.start}, {r.end}) read in {r.seconds:.1f}s{behind}): the job "
                    f"waits for the broker's fetch answers", now,
                    {"read_per_s": round(read_rate, 1), "arrive_per_s": round(arrival, 1), "start": r.start,
                     "end": r.end, "lag": lag})
        self._warnings[key] = w
        return w
