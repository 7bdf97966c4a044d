"""The driver engine's memory after a lake commit (issue 67: the merge job's private memory grew
with the lake tables in the hour-long soak): what pyarrow's pool kept of a commit's freed
memory goes back to the system when the commit ends, so the private memory left follows
what the process holds, not the largest commit so far.  Linux (``/proc/self/status``)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_jobs.sinks.lake_types import OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN
from tests.lake_helpers import make_lake_sink


def private_mb() -> float:
    """This process's private memory (``RssAnon``), MB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("RssAnon:"))
    return int(line.split()[1]) / 1024


def _changes(ids: list[int], op: str, first_position: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "note": pa.array(["x" * (i % 200) for i in ids]),
                     POSITION_COLUMN: pa.array([f"{first_position + k:030d}" for k in range(len(ids))]),
                     OP_COLUMN: pa.array([op] * len(ids))})


def test_a_copy_on_write_commit_leaves_no_freed_memory_in_pyarrows_pool(tmp_path, unique):
    """An Iceberg table of 200,000 rows, then a batch of updates at keys spread over it (its
    data file read and written again): right after each commit, releasing pyarrow's pool
    frees next to nothing, the commit gave back what it freed (without that, mimalloc kept
    150 MB of the first commit's 200,000 rows and more with every larger table)."""
    sink = make_lake_sink("iceberg", tmp_path, None, unique("cat"))
    rows = 200_000
    batches = [_changes(list(range(rows)), "c", 10 ** 12),
               _changes(sorted(random.Random(3).sample(range(rows), 20_000)), "u", 10 ** 13)]
    try:
        for b, changes in enumerate(batches):
            part = sink.staging.write("app", "shop", "big", b, 0, changes, ["id"])
            part["input"] = changes.num_rows
            sink.commit("shop", "big", [part], batch_id=b, app="app", owner="cdc-merge:test")
            after = private_mb()
            pa.default_memory_pool().release_unused()
            assert after - private_mb() < 25, (b, after, private_mb())
        assert sink.file_count("shop", "big") >= 1
        assert sink.load_table("shop", "big").scan().count() == rows
    finally:
        sink.close()


def test_iceberg_compaction_reads_a_group_of_files_of_the_target_size_at_a_time(tmp_path, unique):
    """Compaction merged every small file in one read: the whole table in memory, however
    large, when its files are small.  Now it reads and writes a group of files of at most
    ``target_file_size`` at a time (in one snapshot): 8 files of about a third of the target
    become 3 or 4, the rows all there."""
    sink = make_lake_sink("iceberg", tmp_path, None, unique("cat"))
    try:
        for b in range(8):
            changes = _changes(list(range(b * 500, (b + 1) * 500)), "c", 10 ** 12 + b * 1000)
            part = sink.staging.write("app", "shop", "many", b, 0, changes, ["id"])
            part["input"] = changes.num_rows
            sink.commit("shop", "many", [part], batch_id=b, app="app", owner="cdc-merge:test")
        handle = sink.load_table("shop", "many")
        sizes = [t.file.file_size_in_bytes for t in handle.scan().plan_files()]
        assert len(sizes) == 8
        sink.format.target_file_size = 3 * max(sizes) + 1
        done = sink.compact("shop", "many")
        assert done["files_removed"] >= 6 and done["files_added"] >= 2, done
        assert 3 <= sink.file_count("shop", "many") <= 4
        assert sink.load_table("shop", "many").scan().count() == 4000
    finally:
        sink.close()
