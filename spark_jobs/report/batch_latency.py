"""A micro-batch's source-to-sink latency: counted by the tasks, its percentiles taken by the driver.

A task reports, per distinct source commit time (``source.ts_ms``) of the records it
emitted, how many there were and how long ago that was when it finished: pairs
``[latency_ms, count]``.  The binlog's commit times come in whole seconds, so a task of
200,000 records sends a few dozen pairs where it used to send (and the driver to parse and
sort) one number per record; the percentiles are the same as over the numbers one by one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

__all__ = ["TS_MS", "latency_counts", "percentile"]

#: A record's source commit time (``ts_ms``, milliseconds since the epoch; 0: not known).
TS_MS = attrgetter("ts_ms")


def latency_counts(ts_ms: Iterable[int], now_ms: float) -> list[list[float]]:
    """``[[latency_ms, count], ...]`` of the commit times ``ts_ms`` (0: unknown, left out)
    at ``now_ms``; a commit time in the future (clocks apart) counts as 0 ms."""
    return [[max(0.0, now_ms - ts), n] for ts, n in Counter(ts_ms).items() if ts]


def percentile(pairs: Sequence[Sequence[Any]], q: float) -> float | None:
    """The latency at fraction ``q`` of every latency the ``[latency, count]`` pairs (of any
    number of tasks) count, as ``sorted(values)[min(n - 1, int(n * q))]`` would give over
    the values one by one; None when they count none."""
    n = sum(int(c) for _, c in pairs)
    if n <= 0:
        return None
    at = min(n - 1, int(n * q))
    seen = 0
    for value, count in sorted(pairs, key=lambda p: p[0]):
        seen += int(count)
        if seen > at:
            return float(value)
    raise AssertionError("unreachable: the counts sum to n")  # pragma: no cover
