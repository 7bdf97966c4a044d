"""When the merge query starts again after a failure, and when it stops instead.

A failed batch restarts the query from its checkpoint after a wait of 1 s, doubling up to
60 s, and from 1 s again once a batch finished since the last failure.  A streaming job
retries for as long as it runs (as Flink's default restart strategy does; the status file,
the metrics and ``/healthz`` say it is restarting).  A bounded run (``available_now``:
``cdc merge --available-now``, the demo's and the benches' drains) stops instead when one
batch failed :data:`BOUNDED_RUN_ATTEMPTS` times in a row: a batch that cannot be applied
would otherwise hold it forever.  Pure: the caller waits and counts the batches.
"""

from __future__ import annotations

from spark_jobs.errors import BatchKeepsFailing

#: How often a bounded run tries one batch before it stops with the error: the waits between
#: the tries are 1, 2, 4 and 8 s, so a sink or broker back within about 15 s is waited for.
BOUNDED_RUN_ATTEMPTS = 5
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


class QueryRestarts:
    """The restarts of one job's query: :meth:`after_failure` at each failure."""

    def __init__(self, *, bounded: bool, max_restarts: int | None = None) -> None:
        self.bounded = bounded
        self.max_restarts = max_restarts  # (tests: the failure raised after this many restarts)
        self.restarts = 0
        self._delay = FIRST_DELAY_S
        self._finished_at_failure = -1  # batches finished when the query last failed
        self.same_batch_failures = 0  # failures since a batch finished

    def after_failure(self, exc: BaseException, batches_finished: int) -> float:
        """The wait before the query starts again after ``exc``, with ``batches_finished``
        batches finished so far; raises ``exc`` past ``max_restarts`` and
        :class:`BatchKeepsFailing` when a bounded run failed on one batch too often."""
        self.restarts += 1
        if self.max_restarts is not None and self.restarts > self.max_restarts:
            raise exc
        if batches_finished == self._finished_at_failure:
            self.same_batch_failures += 1
        else:
            self._finished_at_failure, self.same_batch_failures = batches_finished, 1
            self._delay = FIRST_DELAY_S
        if self.bounded and self.same_batch_failures >= BOUNDED_RUN_ATTEMPTS:
            raise BatchKeepsFailing(
                f"the bounded run (available_now) failed {self.same_batch_failures} times in a row on the same "
                f"batch (no batch finished between; a restart does not help): {str(exc).splitlines()[0][:500]}"
            ) from exc
        delay, self._delay = self._delay, min(self._delay * 2, MAX_DELAY_S)
        return delay
