"""The merge query's restart policy (pure)."""

from __future__ import annotations

import pytest

from spark_jobs.errors import BatchKeepsFailing
from spark_jobs.query_restarts import BOUNDED_RUN_ATTEMPTS, MAX_DELAY_S, QueryRestarts


def test_the_wait_doubles_to_a_minute_and_starts_again_once_a_batch_finished():
    r = QueryRestarts(bounded=False)
    waits = [r.after_failure(RuntimeError("down"), 3) for _ in range(9)]
    assert waits == [1, 2, 4, 8, 16, 32, MAX_DELAY_S, MAX_DELAY_S, MAX_DELAY_S]
    assert r.same_batch_failures == 9  # a streaming job keeps trying
    assert r.after_failure(RuntimeError("down"), 4) == 1 and r.same_batch_failures == 1


def test_a_bounded_run_stops_when_one_batch_keeps_failing():
    r = QueryRestarts(bounded=True)
    cause = RuntimeError("constraint refused\nthe trace")
    for _ in range(BOUNDED_RUN_ATTEMPTS - 1):
        r.after_failure(cause, 0)
    with pytest.raises(BatchKeepsFailing, match=f"failed {BOUNDED_RUN_ATTEMPTS} times in a row.*: constraint "
                                                f"refused$") as failed:
        r.after_failure(cause, 0)
    assert failed.value.__cause__ is cause


def test_a_bounded_run_that_moves_on_between_failures_keeps_going():
    r = QueryRestarts(bounded=True)
    for finished in range(3 * BOUNDED_RUN_ATTEMPTS):  # a batch finished between each two failures
        assert r.after_failure(RuntimeError("broker away"), finished) == 1


def test_max_restarts_raises_the_failure_itself():
    r = QueryRestarts(bounded=False, max_restarts=2)
    r.after_failure(ValueError("a"), 0)
    r.after_failure(ValueError("b"), 0)
    with pytest.raises(ValueError, match="c"):
        r.after_failure(ValueError("c"), 0)
