"""The lake committer (spark_jobs/commit/lake_committer.py) on real lake sinks: batches staged as the
merge job stages them and committed on the committer's cadence, several batches in one commit
(the newest position per key winning across them), each batch once across crashes, a lake that
refuses commits holding the stream back, and the interval and size bounds."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from spark_jobs.report.batch_report import MergeCollector
from spark_jobs.commit.lake_committer import REQUEST_FILE, LakeCommitters
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.naming import POSITION_COLUMN
from tests.integration.spark_jobs.test_sinks import P, simple_source
from tests.lake_helpers import LAKE_KINDS, lake_commits, lake_rows, lake_session, make_lake_sink

OWNER = "cdc-merge:test"
APP = "cdc-merge:test/src/q1"


def section(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{"commit_interval_s": 3600.0, "commit_rows": 10 ** 9, "max_staged_rows": 10 ** 9, **kw})


@pytest.fixture(params=[(k, "driver") for k in LAKE_KINDS] + [("delta", "spark")], ids=lambda p: "-".join(p))
def lake(request, stack, tmp_path, unique):
    kind, engine = request.param
    if engine == "spark":
        lake_session()
    sink = make_lake_sink(kind, tmp_path, stack.pg_dsn, unique("cat"), engine=engine)
    try:
        yield sink
    finally:
        sink.close()


@pytest.fixture
def driver_delta(tmp_path):
    sink = make_lake_sink("delta", tmp_path, None, "unused")
    yield sink
    sink.close()


def stage(committers: LakeCommitters, sink: LakeSink, src, batch_id: int, partitions, app: str = APP,
          table: str = "items") -> dict:
    """Batch ``batch_id``'s partitions staged as the merge tasks stage them, handed over as the
    driver hands them over."""
    stats = [{"staged": [["lake", "shop", table,
                          sink.stage("shop", table, src.schema, ["id"], list(changes), batch_id=batch_id,
                                     partition=p, app=app)]]}
             for p, changes in enumerate(partitions) if changes]
    return committers.hand_over(stats, batch_id, app)


def committers_of(sink, tmp_path: Path, **kw) -> LakeCommitters:
    return LakeCommitters([("lake", sink)], SimpleNamespace(lake=section(**kw)), OWNER, tmp_path / "state")


def rows(sink, table="items") -> dict:
    return {k[0]: (r["v"], r[POSITION_COLUMN]) for k, r in lake_rows(sink, "shop", table, ["id"], position=True).items()}


def test_staged_batches_commit_together_the_newest_position_winning(lake, tmp_path):
    src = simple_source()
    group = committers_of(lake, tmp_path)
    group.start()
    try:
        assert stage(group, lake, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c"),
                                            src.upsert({"id": 2, "v": "b"}, 11, "c")],
                                           [src.upsert({"id": 3, "v": "c"}, 12, "c")]]) == {}
        # batch 1: key 1 updated, key 2 deleted, key 3 deleted; batch 2: key 3 inserted again, key 1 deleted
        stage(group, lake, src, 1, [[src.upsert({"id": 1, "v": "a1"}, 20), src.delete({"id": 2}, 21)],
                                    [src.delete({"id": 3}, 22)]])
        stage(group, lake, src, 2, [[src.delete({"id": 1}, 30)], [src.upsert({"id": 3, "v": "c2"}, 31, "c")],
                                    [src.upsert({"id": 4, "v": "d"}, 32, "c")]])
        assert lake.committed_batch("shop", "items", group.committers[0].app) is None  # nothing committed yet
        assert group.committers[0].status()["tables"]["shop.items"]["staged_batches"] == 3
        group.committers[0].commit_now()
        assert rows(lake) == {3: ("c2", P(31)), 4: ("d", P(32))}
        assert sorted(lake_commits(lake, "shop", "items")) == [(APP, 0), (APP, 1), (APP, 2)]  # one commit, three batches
        assert lake.committed_batch("shop", "items", group.committers[0].app) == 1  # the committer's commit 1
        assert not list(Path(lake.staging.uri).rglob("*.parquet"))  # the staged parts gone once committed
        # batch 2 replayed (a crash before the query stored it): staged again, committed nothing twice
        stage(group, lake, src, 2, [[src.delete({"id": 1}, 30)], [src.upsert({"id": 3, "v": "c2"}, 31, "c")]])
        stage(group, lake, src, 3, [[src.upsert({"id": 1, "v": "back"}, 40, "c")]])  # a re-insert after the delete
        group.committers[0].commit_now()
        assert rows(lake) == {1: ("back", P(40)), 3: ("c2", P(31)), 4: ("d", P(32))}
        assert sorted(lake_commits(lake, "shop", "items")) == [(APP, 0), (APP, 1), (APP, 2), (APP, 3)]
    finally:
        group.stop()


def test_a_crash_between_staging_and_commit_and_during_a_commit_commits_each_batch_once(driver_delta, tmp_path):
    sink, src = driver_delta, simple_source()
    first = committers_of(sink, tmp_path)
    stage(first, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c")]])
    stage(first, sink, src, 1, [[src.upsert({"id": 1, "v": "a1"}, 20), src.upsert({"id": 2, "v": "b"}, 21, "c")]])
    # the driver dies here (nothing committed); the next one finds the staged batches in the journal
    second = committers_of(sink, tmp_path)
    second.start()
    second.stop()  # (drains)
    assert rows(sink) == {1: ("a1", P(20)), 2: ("b", P(21))}
    assert lake_commits(sink, "shop", "items") == [(APP, 0), (APP, 1)]
    # A driver that dies during a commit, after the table took it and before the journal forgot the
    # batches: its manifests are still there; the next driver finds the batches committed.
    third = committers_of(sink, tmp_path)
    stage(third, sink, src, 2, [[src.delete({"id": 1}, 30)]])
    staged = third.committers[0].journal.staged()
    third.committers[0].commit_now()
    for b in staged:  # (as if the driver had died before forgetting them)
        third.committers[0].journal.record(b)
    fourth = committers_of(sink, tmp_path)
    assert fourth.committers[0].recover() == 1
    fourth.committers[0].commit_now()
    assert rows(sink) == {2: ("b", P(21))}
    assert sorted(lake_commits(sink, "shop", "items")) == [(APP, 0), (APP, 1), (APP, 2)]
    assert fourth.committers[0].journal.staged() == []
    # and one that died after writing a commit's intent and before the commit: committed once
    stage(fourth, sink, src, 3, [[src.upsert({"id": 5, "v": "e"}, 50, "c")]])
    c = fourth.committers[0]
    t = c._tables[("shop", "items")]
    c._load(t, {APP})
    c.journal.intend("shop", "items", (t.commit or 0) + 1, {**t.marks, APP: 3})
    fifth = committers_of(sink, tmp_path)
    fifth.start()
    fifth.stop()
    assert rows(sink) == {2: ("b", P(21)), 5: ("e", P(50))}
    assert sorted(lake_commits(sink, "shop", "items")) == [(APP, b) for b in range(4)]


@pytest.mark.parametrize("kind", LAKE_KINDS)
def test_sources_share_one_committer_per_table(kind, stack, tmp_path, unique):
    """Two merge queries (two sources, two application ids) feeding one table: one commit holds
    both's batches, each recorded."""
    sink, src = make_lake_sink(kind, tmp_path, stack.pg_dsn, unique("cat")), simple_source()
    group = committers_of(sink, tmp_path)
    east, west = "cdc-merge:test/east/q1", "cdc-merge:test/west/q9"
    stage(group, sink, src, 4, [[src.upsert({"id": 1, "v": "e"}, 10, "c")]], app=east)
    stage(group, sink, src, 7, [[src.upsert({"id": 2, "v": "w"}, 11, "c")]], app=west)
    stage(group, sink, src, 5, [[src.upsert({"id": 1, "v": "e2"}, 12)]], app=east)
    group.committers[0].commit_now()
    assert rows(sink) == {1: ("e2", P(12)), 2: ("w", P(11))}
    assert sorted(lake_commits(sink, "shop", "items")) == [(east, 4), (east, 5), (west, 7)]
    assert group.committers[0].status()["tables"]["shop.items"]["batches"] == {east: 5, west: 7}


def test_the_interval_the_row_bound_and_a_request_are_honoured(driver_delta, tmp_path):
    sink, src = driver_delta, simple_source()
    group = committers_of(sink, tmp_path, commit_interval_s=3600.0, commit_rows=3)
    group.start()
    c = group.committers[0]
    try:
        stage(group, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c")]])
        looks = c.looks
        wait_for(lambda: c.looks >= looks + 4)  # (the committer looked: the interval is an hour, 1 row < 3)
        assert c.figures["commits"] == 0 and lake_rows(sink, "shop", "items", ["id"]) == {}
        stage(group, sink, src, 1, [[src.upsert({"id": 2, "v": "b"}, 11, "c"), src.upsert({"id": 3, "v": "c"}, 12, "c")]])
        wait_for(lambda: c.figures["commits"] == 1)  # 3 rows staged: committed before the interval
        assert set(rows(sink)) == {1, 2, 3}
        stage(group, sink, src, 2, [[src.upsert({"id": 4, "v": "d"}, 13, "c")]])
        (tmp_path / "state").mkdir(exist_ok=True)
        time.sleep(0.05)
        (tmp_path / "state" / REQUEST_FILE).write_text(str(time.time()))  # `cdc lake commit`
        wait_for(lambda: c.figures["commits"] == 2)
        assert set(rows(sink)) == {1, 2, 3, 4}
    finally:
        group.stop()
    status = json.loads((tmp_path / "state" / "lake-status.json").read_text())
    assert status["sinks"]["lake"]["tables"]["shop.items"]["commits"] == 2
    names = {name for name, *_ in group.samples()}
    assert {"cdc_lake_freshness_seconds", "cdc_lake_staged_rows", "cdc_lake_commits_total"} <= names
    registry = CollectorRegistry()  # (the merge job's metrics endpoint serves them)
    registry.register(MergeCollector(lambda: [], group))
    text = generate_latest(registry).decode()
    assert 'cdc_lake_table_commits_total{sink="lake",table="shop.items"} 2.0' in text
    assert 'cdc_lake_freshness_seconds{sink="lake",table="shop.items"} 0.0' in text


def test_a_lake_that_refuses_commits_holds_the_stream_back_then_catches_up(tmp_path, caplog):
    """An Iceberg catalog that cannot be reached (its SQLite file's directory missing): the
    batches stay staged, the stream goes on until max_staged_rows, then waits with a warning;
    once the catalog is there the committer commits them and the stream goes on."""
    missing = tmp_path / "not-yet"
    sink = IcebergSink(f"sqlite:///{missing}/catalog.db", str(tmp_path / "warehouse"), catalog_name="cat")
    src = simple_source()
    group = committers_of(sink, tmp_path, commit_interval_s=0.2, max_staged_rows=3)
    c = group.committers[0]
    c.retry_max_s = 1.0  # (tried again every second: the test waits for the catalog's return, not the backoff)
    group.start()
    try:
        caplog.set_level(logging.WARNING)
        stage(group, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c"), src.upsert({"id": 2, "v": "b"}, 11, "c")]])
        wait_for(lambda: c.figures["failures"] >= 1)
        assert c.last_error and c.staged_rows() == 2
        done = threading.Event()

        def more() -> None:
            stage(group, sink, src, 1, [[src.upsert({"id": 3, "v": "c"}, 12, "c")]])
            done.set()
        threading.Thread(target=more, daemon=True).start()
        wait_for(lambda: c.held_since is not None)  # 3 rows staged: the stream waits
        assert not done.is_set()
        assert ("cdc_lake_holding_stream", "gauge", {"sink": "lake"}, 1) in group.samples()
        assert any("holds the stream back" in r.getMessage() for r in caplog.records)
        missing.mkdir()  # the catalog comes back
        wait_for(done.is_set, timeout=90)
        assert set(lake_rows(sink, "shop", "items", ["id"])) == {(1,), (2,), (3,)}
        assert c.held_since is None and c.last_error == ""
    finally:
        group.stop()
        sink.close()


def test_inline_commits_every_batch_on_its_path(driver_delta, tmp_path):
    sink, src = driver_delta, simple_source()
    group = committers_of(sink, tmp_path, commit_interval_s=0)
    group.start()
    try:
        done = stage(group, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c")]])
        assert done["upserted"] == 1 and rows(sink) == {1: ("a", P(10))}
    finally:
        group.stop()


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)



def test_vacuum_leaves_a_batch_that_waits_for_its_commit(driver_delta, tmp_path):
    """``cdc lake vacuum``'s removal of stale staged parts keeps a batch handed to the committer
    (a merge job stopped for longer than the retention commits it when it starts again)."""
    sink, src = driver_delta, simple_source()
    group = committers_of(sink, tmp_path)
    stage(group, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c")]])
    sink.stage("shop", "items", src.schema, ["id"], [src.upsert({"id": 9, "v": "x"}, 11, "c")], batch_id=1,
               partition=0, app=APP)  # (a task attempt whose batch was never handed over)
    assert sink.staging.remove_stale(0) == 1
    again = committers_of(sink, tmp_path)
    again.start()
    again.stop()
    assert rows(sink) == {1: ("a", P(10))}


def test_a_restarted_committer_shows_what_the_table_holds_before_its_first_commit(driver_delta, tmp_path):
    """The status (`cdc status`'s lake table) names the position and commit a table holds from
    an earlier process's commits, before this process commits it."""
    sink, src = driver_delta, simple_source()
    first = committers_of(sink, tmp_path)
    first.start()
    stage(first, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c"), src.upsert({"id": 2, "v": "b"}, 20, "c")]])
    first.stop()  # (drains: commit 1)
    second = committers_of(sink, tmp_path)  # (interval an hour: no commit while the test looks)
    second.start()
    try:
        stage(second, sink, src, 1, [[src.upsert({"id": 3, "v": "c"}, 30, "c")]])
        c = second.committers[0]
        wait_for(lambda: (c.status()["tables"].get("shop.items") or {}).get("commit") == 1)
        table = c.status()["tables"]["shop.items"]
        assert table["position"] == P(20) and table["last_commit_at"] is not None
        assert table["staged_rows"] == 1 and c.figures["commits"] == 0
    finally:
        second.stop(drain=False)


def test_the_committer_thread_runs_at_commit_nice_and_the_stream_at_the_jobs(driver_delta, tmp_path):
    """``commit_nice``: the committer's thread (Linux: a thread's own nice value) below the
    stream's threads, which keep the job's."""
    group = committers_of(driver_delta, tmp_path, commit_nice=7)
    group.start()
    try:
        thread = next(t for t in threading.enumerate() if t.name == "cdc-lake-lake")
        wait_for(lambda: group.committers[0].looks > 0)
        assert _nice(thread.native_id) == 7 and _nice(threading.get_native_id()) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        group.stop()


def _nice(tid: int) -> int:
    """A thread's nice value, from /proc (the 19th field of its stat line)."""
    return int(Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_the_switch_interval_is_lowered_while_the_committer_commits(driver_delta, tmp_path, monkeypatch):
    """The committers run Python beside the stream's batch thread: while one commits, the
    interpreter's switch interval is :data:`COMMIT_SWITCH_INTERVAL_S`, so that the stream's
    thread gets the GIL back sooner after each answer it waits for; restored after."""
    import sys

    from spark_jobs.commit.lake_committer import COMMIT_SWITCH_INTERVAL_S
    sink, src = driver_delta, simple_source()
    before = sys.getswitchinterval()
    seen = []
    commit = sink.commit

    def commit_seen(*args, **kw):  # (the real commit; the interval it ran under noted)
        seen.append(sys.getswitchinterval())
        return commit(*args, **kw)
    monkeypatch.setattr(sink, "commit", commit_seen)
    group = committers_of(sink, tmp_path, commit_interval_s=3600.0, commit_rows=1)
    group.start()
    c = group.committers[0]
    try:
        stage(group, sink, src, 0, [[src.upsert({"id": 1, "v": "a"}, 10, "c")]])
        wait_for(lambda: c.figures["commits"] == 1)
        assert seen == [COMMIT_SWITCH_INTERVAL_S] and COMMIT_SWITCH_INTERVAL_S < before
        wait_for(lambda: sys.getswitchinterval() == before)
        assert set(rows(sink)) == {1}
    finally:
        group.stop()
    assert sys.getswitchinterval() == before
