"""The batch latency's counts and percentiles: the same figures as over the latencies one by one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.report.batch_latency import latency_counts, percentile


def _one_by_one(values: list[float], q: float) -> float | None:
    lat = sorted(values)
    return lat[min(len(lat) - 1, int(len(lat) * q))] if lat else None


@given(tasks=st.lists(st.lists(st.integers(min_value=0, max_value=5_000), max_size=60), max_size=4),
       now=st.integers(min_value=0, max_value=6_000),
       q=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
def test_percentiles_of_the_counts_equal_those_of_the_latencies_one_by_one(tasks, now, q):
    pairs = [p for ts in tasks for p in latency_counts(ts, now)]
    values = [max(0.0, now - t) for ts in tasks for t in ts if t]
    assert percentile(pairs, q) == _one_by_one(values, q)


def test_counts_group_equal_commit_times_leave_unknown_ones_out_and_clip_the_future():
    assert sorted(latency_counts([1000, 1000, 2000, 0, 9000], 5000)) == [[0.0, 1], [3000, 1], [4000, 2]]
    assert latency_counts([], 1.0) == [] and percentile([], 0.5) is None
    assert percentile([[7.0, 3], [1.0, 1]], 0.5) == 7.0  # (sorted: 1, 7, 7, 7; the middle one)
