"""The merge job's driver makes pyarrow's pool with jemalloc (spark_jobs/driver_memory.py), whose
purge after a lake commit reaches every thread's freed pages (docs/lake.md, "Memory"); a pool
the user chose is kept, and the processes the driver starts later keep their own default."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = "import os; print(os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))"
PROBE = ("import subprocess, sys, spark_jobs.merge_job, pyarrow as pa; "
         f"child = subprocess.run([sys.executable, '-c', {CHILD!r}], capture_output=True, text=True).stdout.strip(); "
         "print(pa.default_memory_pool().backend_name, child)")


def _probe(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    return subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_merge_jobs_driver_makes_pyarrows_pool_with_jemalloc_and_keeps_a_chosen_one():
    assert _probe() == "jemalloc None"  # (pyarrow's own default here: mimalloc)
    assert _probe(ARROW_DEFAULT_MEMORY_POOL="system") == "system system"
