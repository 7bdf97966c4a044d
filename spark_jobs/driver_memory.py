"""pyarrow's memory pool of the merge job's driver, chosen before pyarrow makes it: jemalloc
(docs/lake.md, "Memory").

The ``driver`` engine's lake commits (pyiceberg, and the staged parts read for delta-rs) run in
the driver's committer threads, their files read and written by pyiceberg's and pyarrow's
worker threads.  With pyarrow's default allocator, mimalloc, a thread's freed pages stay with
the thread that allocated them, and :func:`~spark_jobs.sinks.lake_sink.release_unused_memory`
from the committer's thread does not reach them: an Iceberg table grown to 410,000 rows left
the process at 464 MB private after a commit with mimalloc and 231 MB with jemalloc, whose
purge returns every arena's freed pages.  pyarrow takes its default pool from
``ARROW_DEFAULT_MEMORY_POOL`` as it is imported, so this module is imported before anything
imports pyarrow; the variable is set only while the pool is made (the Spark JVM and its
Python workers started later keep their own default), and a value the user set is kept.
"""

from __future__ import annotations

import os

#: The variable pyarrow reads, and the allocator the driver gets unless it is set.
POOL_VARIABLE, DRIVER_POOL = "ARROW_DEFAULT_MEMORY_POOL", "jemalloc"


def choose_pool() -> str:
    """Import pyarrow, which makes its default pool then, with jemalloc unless
    ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise (imported before, it keeps the pool it made);
    the pool's backend."""
    if os.environ.get(POOL_VARIABLE):
        import pyarrow as pa
        return pa.default_memory_pool().backend_name
    os.environ[POOL_VARIABLE] = DRIVER_POOL
    try:
        import pyarrow as pa
        return pa.default_memory_pool().backend_name
    finally:
        del os.environ[POOL_VARIABLE]


choose_pool()
