"""The merge job's state store: plans and states per batch, the newest few kept."""

from __future__ import annotations

from spark_jobs.commit.merge_state import MergeStateStore


def test_a_batch_starts_from_the_state_stored_for_the_batch_before(tmp_path):
    store = MergeStateStore(tmp_path / "merge-state")
    assert store.state_before(0) == {"markers_next": 0, "partitions": {}}
    assert store.plan(3) is None
    store.save_plan(3, {"markers_start": 0, "markers_end": 5})
    store.save_state(3, {"markers_next": 5, "partitions": {"t|0": {"pending": []}}})
    assert store.plan(3) == {"markers_start": 0, "markers_end": 5}
    assert store.state_before(3) == {"markers_next": 0, "partitions": {}}  # a replay of 3 starts before it
    assert store.state_before(4)["markers_next"] == 5
    assert store.state_before(9)["markers_next"] == 5  # (batches without a state of their own)


def test_only_the_newest_batches_files_are_kept(tmp_path):
    store = MergeStateStore(tmp_path)
    for batch in range(12):
        store.save_plan(batch, {"markers_end": batch})
        store.save_state(batch, {"markers_next": batch, "partitions": {}})
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(f"{i}.json" for i in range(6, 12))
    assert sorted(p.name for p in tmp_path.glob("*.plan")) == sorted(f"{i}.plan" for i in range(6, 12))
    assert not list(tmp_path.glob("*.tmp*"))
