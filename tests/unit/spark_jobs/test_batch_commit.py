"""Batch sinks: the tasks stage their parts, the driver commits once per table per batch."""

from __future__ import annotations

import threading

import pytest

from common.config import SinksConfig
from spark_jobs.batch_commit import commit_staged
from spark_jobs.errors import SinkError
from spark_jobs.partition import sink_apply
from spark_jobs.partition.kept import Kept
from spark_jobs.partition.settings import MergeSettings
from spark_jobs.sinks.batch import ApplyResult
from spark_jobs.sinks.interface import BatchSink


class _Lake(BatchSink):
    """A batch sink that keeps what it was given."""

    def __init__(self) -> None:
        self.staged: list = []
        self.commits: list = []

    def stage(self, db, table, value_schema, key_columns, records, *, batch_id, partition, app=""):
        self.staged.append((db, table, batch_id, partition, [(c.op, c.position) for c in records]))
        return {"partition": partition, "rows": len(records), "app": app}

    def commit(self, db, table, staged, *, batch_id, app="", owner=""):
        self.commits.append((db, table, batch_id, app, owner, list(staged)))
        return ApplyResult(upserted=sum(p["rows"] for p in staged))


def test_a_task_stages_its_part_and_the_driver_commits_each_table_once(monkeypatch):
    lake = _Lake()
    monkeypatch.setattr(sink_apply, "sinks_of", lambda s: [("lake", lake)])
    s = MergeSettings(bootstrap="127.0.0.1:1", prefix="cdc", sinks=SinksConfig(), batch_id=7, app_id="o/src/q1",
                      owner="o")
    stats_of = []
    for partition in (0, 1):
        kept = [Kept("c", {"id": partition}, f"{partition}1", "sid", "schema", 0, 1, None, b"v", ("db", "t")),
                Kept("u", {"id": partition}, f"{partition}2", "sid", "schema", 0, 2, None, b"v", ("db", "t"))]
        stats = {"sink_skipped": 0, "partition_turns": 0, "whole_turns": 0}
        assert sink_apply.apply_to_sinks(s, None, "cdc.db.t", partition, kept, {("db", "t"): ["id"]}, None,
                                         stats) == []
        stats_of.append(stats)
    assert [(p, changes) for _, _, batch, p, changes in lake.staged if batch == 7] == [
        (0, [("c", "01"), ("u", "02")]), (1, [("c", "11"), ("u", "12")])]
    done = commit_staged([("lake", lake)], stats_of, 7, "o/src/q1", "o")
    assert set(done.pop("commit_s")) == {"lake"}
    assert done == {"upserted": 4, "deleted": 0, "sink_rows": {"lake|db.t": 4}}
    parts = [{"partition": 0, "rows": 2, "app": "o/src/q1"}, {"partition": 1, "rows": 2, "app": "o/src/q1"}]
    assert lake.commits == [("db", "t", 7, "o/src/q1", "o", parts)]


def test_no_parts_no_commit_and_a_part_for_no_batch_sink_is_refused():
    assert commit_staged([], [{"input": 3}], 1) == {}
    with pytest.raises(SinkError):
        commit_staged([], [{"staged": [["gone", "db", "t", {}]]}], 1)


class _Slow(_Lake):
    """A batch sink whose commit waits until ``others`` sinks are committing too (or times out)."""

    def __init__(self, barrier: threading.Barrier, fail: bool = False) -> None:
        super().__init__()
        self.barrier, self.fail = barrier, fail

    def commit(self, db, table, staged, *, batch_id, app="", owner=""):
        self.barrier.wait(timeout=10)  # (a BrokenBarrierError when the other sink is not committing meanwhile)
        if self.fail:
            raise SinkError(f"{db}.{table}: refused")
        return super().commit(db, table, staged, batch_id=batch_id, app=app, owner=owner)


def test_the_batch_sinks_commit_side_by_side_each_sinks_tables_in_turn():
    barrier = threading.Barrier(2)
    delta, iceberg = _Slow(barrier), _Slow(barrier)
    stats = [{"staged": [[name, "db", t, {"rows": 1}] for name in ("delta", "iceberg") for t in ("a", "b")]}]
    done = commit_staged([("delta", delta), ("iceberg", iceberg)], stats, 3, "app", "o")
    assert done["sink_rows"] == {"delta|db.a": 1, "delta|db.b": 1, "iceberg|db.a": 1, "iceberg|db.b": 1}
    assert set(done["commit_s"]) == {"delta", "iceberg"}
    assert [c[:2] for c in delta.commits] == [c[:2] for c in iceberg.commits] == [("db", "a"), ("db", "b")]


def test_a_sink_that_fails_fails_the_batch_after_the_other_committed():
    barrier = threading.Barrier(2)
    delta, iceberg = _Slow(barrier), _Slow(barrier, fail=True)
    stats = [{"staged": [["delta", "db", "t", {"rows": 1}], ["iceberg", "db", "t", {"rows": 1}]]}]
    with pytest.raises(SinkError, match="refused"):
        commit_staged([("delta", delta), ("iceberg", iceberg)], stats, 3, "app", "o")
    assert len(delta.commits) == 1  # (kept: the batch run again finds it committed)
