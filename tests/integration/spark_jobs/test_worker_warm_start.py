"""The merge job starts Spark's Python workers while its query starts (``warm_workers``), so
that the first micro-batch's tasks find them forked, with the merge's modules imported and
their collector tuned.

A SparkSession of the module's own, new (any session this pytest worker had is stopped
first): the workers of an older session may have run merge tasks already, which would make
the probe below pass without the warm start.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from common.gc_tuning import STREAMING_THRESHOLDS
from spark_jobs.merge_job import warm_workers
from spark_jobs.spark_session import build_session, running_session


@pytest.fixture(scope="module")
def fresh_spark() -> Iterator:
    active = running_session()
    if active is not None:
        active.stop()
    session = build_session(master="local[2]", app_name="test-worker-warm-start")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def _probe(_items):
    # (defined here, pickled by value: it imports nothing of the project itself)
    import gc
    import os
    import sys
    yield os.getpid(), "spark_jobs.task.partition_merge" in sys.modules, gc.get_threshold()


def test_the_python_workers_are_ready_before_the_first_batch(fresh_spark):
    sc = fresh_spark.sparkContext
    t = warm_workers(fresh_spark, "test")
    t.join(120)
    assert not t.is_alive()
    seen = sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).mapPartitions(_probe).collect()
    assert seen and all(imported for _, imported, _ in seen), seen
    assert all(tuple(th) == STREAMING_THRESHOLDS for _, _, th in seen), seen
