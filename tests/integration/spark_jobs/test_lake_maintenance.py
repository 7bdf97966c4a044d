"""``cdc lake optimize|vacuum|expire`` (:func:`cdc.lake.maintain`) and the staged parts' cleanup
on real delta-rs and pyiceberg (a SQLite catalog: no stack needed), each effect asserted
exactly, so a maintenance step that does nothing fails: compaction leaves one file where
there were several and the same rows; expiry at retention 0 expires every snapshot but the
current one and deletes the files none of them needs, at an hour's retention nothing; vacuum
removes the files no version needs and the staged parts of failed tasks older than the
retention; a commit leaves no staged part behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdc.lake import lake_sinks, maintain
from common.config import CDCConfig, dump_config
from spark_jobs.commit.batch_commit import owner_of
from spark_jobs.commit.lake_committer import LakeCommitters
from tests.integration.spark_jobs.test_sinks import simple_source
from tests.lake_helpers import LAKE_KINDS, commit_batch, lake_rows

SRC = simple_source()


@pytest.fixture
def cfg(tmp_path: Path) -> CDCConfig:
    """Both lake sinks in the test's own directory, no upkeep after commits (the commands do it)."""
    upkeep = {"enabled": True, "compact_every": 0, "retention_hours": None}
    return CDCConfig.model_validate({"sinks": {
        "delta": {**upkeep, "path": str(tmp_path / "delta")},
        "iceberg": {**upkeep, "catalog_uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")},
        "postgres": {"enabled": False}, "mysql": {"enabled": False}}})


@pytest.fixture
def sinks(cfg: CDCConfig):
    made = dict(lake_sinks(cfg))
    try:
        yield made
    finally:
        for s in made.values():
            s.close()


def new_keys(sink, batches: int, first: int = 0) -> None:
    """``batches`` commits of five new keys each: a data file each."""
    for b in range(first, first + batches):
        commit_batch(sink, "shop", "items", SRC.schema, ["id"],
                     [[SRC.upsert({"id": b * 5 + i, "v": f"{b}-{i}"}, 100 * b + i, "c") for i in range(5)]], b)


def rewrites(sink, batches: int, first: int) -> None:
    """``batches`` commits changing keys 0..4: each rewrites their file, the old one stays for
    the older versions."""
    for b in range(first, first + batches):
        commit_batch(sink, "shop", "items", SRC.schema, ["id"],
                     [[SRC.upsert({"id": i, "v": f"new {b}"}, 100 * b + i, "u") for i in range(5)]], b)


def by_sink(results: list[dict], table: str = "shop.items") -> dict[str, dict]:
    return {r["sink"]: r for r in results if r["table"] == table}


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_optimize_leaves_one_file_of_the_same_rows(cfg, sinks):
    for s in sinks.values():
        new_keys(s, 6)
        assert s.file_count("shop", "items") == 6, s.FORMAT
    rows = {name: lake_rows(s, "shop", "items", ["id"], position=True) for name, s in sinks.items()}
    assert all(len(r) == 30 for r in rows.values())

    done = by_sink(maintain(cfg, "optimize", ["shop\\.items"]))
    for name, s in sinks.items():
        r = done[name]
        assert (r["files_before"], r["files_after"]) == (6, 1), r
        assert (r["files_removed"], r["files_added"]) == (6, 1), r
        assert s.file_count("shop", "items") == 1
        assert lake_rows(s, "shop", "items", ["id"], position=True) == rows[name], name
    # Delta writes a checkpoint of its log with the compaction
    assert list((Path(cfg.sinks.delta.path) / "shop" / "items" / "_delta_log").glob("*.checkpoint.parquet"))
    # one file already: nothing to do
    again = by_sink(maintain(cfg, "optimize"))
    assert all((r["files_before"], r["files_after"], r["files_removed"]) == (1, 1, 0) for r in again.values()), again


def test_expire_keeps_the_snapshots_within_the_retention_and_only_the_current_one_at_zero(cfg, sinks):
    ice = sinks["iceberg"]
    new_keys(ice, 2)
    rewrites(ice, 4, first=2)  # each rewrite leaves a data file only older snapshots name
    handle = ice.load_table("shop", "items")
    n, current = len(handle.metadata.snapshots), handle.current_snapshot().snapshot_id
    assert n >= 6, n
    rows = lake_rows(ice, "shop", "items", ["id"], position=True)
    location = Path(handle.metadata.location.removeprefix("file://"))
    disk = files_under(location / "data") | files_under(location / "metadata")

    # within an hour's retention every snapshot, and every file, stays
    kept = by_sink(maintain(cfg, "expire", retention_hours=1))["iceberg"]
    assert (kept["snapshots_expired"], kept["files_removed"]) == (0, 0), kept
    assert len(ice.load_table("shop", "items").metadata.snapshots) == n

    done = by_sink(maintain(cfg, "expire", retention_hours=0))["iceberg"]
    handle = ice.load_table("shop", "items")
    assert done["snapshots_expired"] == n - 1, (done, n)
    assert [s.snapshot_id for s in handle.metadata.snapshots] == [current]
    assert lake_rows(ice, "shop", "items", ["id"], position=True) == rows
    # the data files on disk are exactly the live ones; what went is what was reported
    live = {Path(t.file.file_path.removeprefix("file://")) for t in handle.scan().plan_files()}
    assert files_under(location / "data") == live
    left = files_under(location / "data") | files_under(location / "metadata")
    assert done["files_removed"] == len(disk - left) > 0, (done, len(disk), len(left))
    assert done["files_before"] == done["files_after"] == len(live)
    # nothing left to expire
    assert by_sink(maintain(cfg, "expire", retention_hours=0))["iceberg"]["snapshots_expired"] == 0


def test_vacuum_removes_the_files_no_version_needs_and_stale_staged_parts(cfg, sinks):
    delta = sinks["delta"]
    new_keys(delta, 2)
    rewrites(delta, 3, first=2)
    table = Path(delta.format.table_uri("shop", "items"))
    live = {Path(u.removeprefix("file://")) for u in delta.load_table("shop", "items").file_uris()}
    on_disk = {p for p in table.glob("*.parquet")}
    assert len(live) == 2 and len(on_disk) == 5, (live, on_disk)
    rows = lake_rows(delta, "shop", "items", ["id"], position=True)
    # Parts staged by task attempts that failed (never committed): one of each sink two hours
    # old, one just written.
    stale, fresh = {}, {}
    for name, s in sinks.items():
        part = s.stage("shop", "items", SRC.schema, ["id"], [SRC.upsert({"id": 1, "v": "x"}, 1, "c")], batch_id=7,
                       partition=0, app="failed-job")
        stale[name] = Path(part["path"]).parent
        old = time.time() - 2 * 3600
        os.utime(stale[name], (old, old))
        fresh[name] = Path(s.stage("shop", "items", SRC.schema, ["id"], [SRC.upsert({"id": 1, "v": "x"}, 1, "c")],
                                   batch_id=8, partition=0, app="failed-job")["path"]).parent

    done = maintain(cfg, "vacuum", retention_hours=1)
    assert by_sink(done)["delta"]["files_removed"] == 0  # removed less than an hour ago: kept
    assert by_sink(done, "(staged parts)") == {"delta": {"sink": "delta", "table": "(staged parts)", "removed": 1},
                                               "iceberg": {"sink": "iceberg", "table": "(staged parts)", "removed": 1}}
    assert not any(d.exists() for d in stale.values()) and all(d.exists() for d in fresh.values())
    assert set(table.glob("*.parquet")) == on_disk

    done = maintain(cfg, "vacuum", retention_hours=0)
    assert by_sink(done)["delta"]["files_removed"] == 3
    assert set(table.glob("*.parquet")) == live
    assert lake_rows(delta, "shop", "items", ["id"], position=True) == rows
    assert {r["sink"]: r["removed"] for r in done if r["table"] == "(staged parts)"} == {"delta": 1, "iceberg": 1}
    assert not any(files_under(Path(s.staging.uri)) for s in sinks.values())


@pytest.mark.parametrize("kind", LAKE_KINDS)
def test_a_commit_leaves_no_staged_part(cfg, sinks, kind):
    """The parts of a batch go with its commit, with the commit that finds it committed (a
    replay) and, with the next commit, those of an older batch's failed attempt."""
    sink = sinks[kind]
    staging = Path(sink.staging.uri)

    def stage(batch: int, partitions: list[list]) -> list[dict]:
        return [sink.stage("shop", "items", SRC.schema, ["id"], p, batch_id=batch, partition=i, app="app-1")
                for i, p in enumerate(partitions)]
    b0 = [[SRC.upsert({"id": 1, "v": "a"}, 10, "c")], [SRC.upsert({"id": 2, "v": "b"}, 11, "c")]]
    parts = stage(0, b0)
    assert {Path(p["path"]) for p in parts} == files_under(staging)  # two parts, where we look
    assert sink.commit("shop", "items", parts, batch_id=0, app="app-1").upserted == 2
    assert files_under(staging) == set()

    parts = stage(0, b0)  # the batch replayed: committed already, its parts go all the same
    assert len(files_under(staging)) == 2
    assert sink.commit("shop", "items", parts, batch_id=0, app="app-1").skipped == 2
    assert files_under(staging) == set()

    stage(1, [[SRC.upsert({"id": 3, "v": "lost"}, 12, "c")]])  # a failed attempt of batch 1
    parts = stage(2, [[SRC.upsert({"id": 4, "v": "d"}, 13, "c")]])
    assert len(files_under(staging)) == 2
    sink.commit("shop", "items", parts, batch_id=2, app="app-1")
    assert files_under(staging) == set()
    assert sorted(k[0] for k in lake_rows(sink, "shop", "items", ["id"])) == [1, 2, 4]


def test_lake_commit_commits_what_a_stopped_job_left_staged(cfg, sinks, tmp_path):
    """``cdc lake commit`` with no merge job running: the batches a stopped job handed to its
    lake committers (their manifests in the journal) are committed by the command, each once,
    and a second run finds nothing to commit."""
    cfg.state_dir = str(tmp_path / "state")
    app = f"{owner_of(cfg.kafka.topic_prefix)}/src/q1"
    group = LakeCommitters(list(sinks.items()), cfg.sinks, owner_of(cfg.kafka.topic_prefix), Path(cfg.state_dir))
    for b in range(3):  # staged and handed over as the merge job does, never committed (the job stopped)
        parts = {kind: sink.stage("shop", "items", SRC.schema, ["id"], [SRC.upsert({"id": b, "v": f"v{b}"}, 10 + b, "c")],
                                  batch_id=b, partition=0, app=app) for kind, sink in sinks.items()}
        group.hand_over([{"staged": [[kind, "shop", "items", part] for kind, part in parts.items()]}], b, app)
    assert all(lake_rows(sink, "shop", "items", ["id"]) == {} for sink in sinks.values())
    path = tmp_path / "cdc.yaml"
    path.write_text(dump_config(cfg))

    def run() -> dict:
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "lake", "commit", "--json"],
                             capture_output=True, text=True, timeout=300, check=True)
        return {r["sink"]: r["result"] for r in json.loads(out.stdout)}
    assert run() == {k: {"staged_batches": 3, "upserted": 3, "deleted": 0} for k in sinks}
    for sink in sinks.values():
        assert set(lake_rows(sink, "shop", "items", ["id"])) == {(0,), (1,), (2,)}
        assert sorted(sink.commits("shop", "items")) == [(app, 0), (app, 1), (app, 2)]
    assert run() == {k: {"staged_batches": 0, "upserted": 0, "deleted": 0} for k in sinks}
