"""Batch sinks: the tasks stage their parts, the driver commits once per table per batch."""

from __future__ import annotations

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
    assert commit_staged([("lake", lake)], stats_of, 7, "o/src/q1", "o") == {
        "upserted": 4, "deleted": 0, "sink_rows": {"lake|db.t": 4}}
    parts = [{"partition": 0, "rows": 2, "app": "o/src/q1"}, {"partition": 1, "rows": 2, "app": "o/src/q1"}]
    assert lake.commits == [("db", "t", 7, "o/src/q1", "o", parts)]


def test_no_parts_no_commit_and_a_part_for_no_batch_sink_is_refused():
    assert commit_staged([], [{"input": 3}], 1) == {}
    with pytest.raises(SinkError):
        commit_staged([], [{"staged": [["gone", "db", "t", {}]]}], 1)
