"""The peers' race clock's figures (:func:`cdc.bench.topic_clock.clock_figures`) from its marks:
a side that writes all its records between two polls has its marks on one poll, and its rate
is then bounded by the poll's span, not reported as 0 rows/s (the race's smoke test failed
on it in CI: our parallel snapshot of 3,000 rows landed within one poll)."""

from __future__ import annotations

import pytest

from cdc.bench.topic_clock import TopicClock, clock_figures


def _clock(first: float, warm: float, done: float, before_done: float | None) -> TopicClock:
    clock = TopicClock("127.0.0.1:1", "t", 3000)  # never started: only its marks are read
    clock.first, clock.warm, clock.done, clock.before_done, clock.count = first, warm, done, before_done, 3000
    return clock


def test_marks_on_separate_polls_give_their_spans():
    figs = clock_figures(_clock(10.0, 10.5, 12.0, 11.9), 3000, launch=8.0)
    assert figs["from_first_s"] == pytest.approx(2.0)
    assert figs["rows_per_s_from_first"] == pytest.approx(1500.0)
    assert figs["rows_per_s_after_warmup"] == pytest.approx(2700 / 1.5)
    assert figs["startup_s"] == pytest.approx(2.0) and "within_one_poll" not in figs


def test_every_record_within_one_poll_is_bounded_by_the_poll_not_zero():
    figs = clock_figures(_clock(10.0, 10.0, 10.0, 9.94), 3000, launch=8.0)
    assert figs["from_first_s"] == pytest.approx(0.06)
    assert figs["rows_per_s_from_first"] == pytest.approx(3000 / 0.06)
    assert figs["rows_per_s_after_warmup"] == pytest.approx(2700 / 0.06)
    assert figs["within_one_poll"] is True


def test_the_warm_up_and_the_end_on_one_poll_bound_only_that_span():
    figs = clock_figures(_clock(10.0, 10.8, 10.8, 10.74), 3000, launch=8.0)
    assert figs["from_first_s"] == pytest.approx(0.8)
    assert figs["rows_per_s_after_warmup"] == pytest.approx(2700 / 0.06)
    assert figs["within_one_poll"] is True
