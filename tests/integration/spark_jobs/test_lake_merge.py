"""The merge job into the lake sinks on the real stack, with each engine (``driver``: delta-rs
and pyiceberg; ``spark``: the job's executors, merge-on-read): producer + snapshot +
concurrent writes, then the job, Delta and Iceberg tables equal to the source (``cdc
verify``), one commit per table per batch, and a batch replayed after a crash committed once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc.verify import verify
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.lake_sink import LakeSink
from tests.integration.spark_jobs.test_merge_job import _pipeline
from tests.lake_helpers import lake_commits


def _lake_sinks(cfg) -> dict[str, LakeSink]:
    return {name: s for name, s in build_sinks(cfg.sinks) if isinstance(s, LakeSink)}


def _verify_lake(cfg, db: str, tables: list[str]):
    report = verify(cfg, [f"{db}.{t}" for t in tables])
    by = {(t.table, r.sink): r for t in report.tables for r in t.results}
    for t in tables:
        for sink in ("delta", "iceberg"):
            r = by[(f"{db}.{t}", sink)]
            assert r.error is None and (r.missing, r.extra, r.differing) == (0, 0, 0), (t, sink, r)
            assert r.sink_rows == r.source_rows > 0, (t, sink, r)
    return report


def _commits_once_per_batch(cfg, db: str, tables: list[str]) -> dict[tuple[str, str], list]:
    """Every lake table's commits: at most one per (app, batch), batches rising."""
    out = {}
    for name, sink in _lake_sinks(cfg).items():
        for t in tables:
            commits = lake_commits(sink, db, t)
            assert commits, (name, t)
            assert len(set(commits)) == len(commits), (name, t, commits)
            assert [b for _, b in commits] == sorted(b for _, b in commits), (name, t, commits)
            out[(name, t)] = commits
        sink.close()
    return out


ENGINES = ["driver", "spark"]


def _engine(cfg, engine: str):
    cfg.sinks.delta.engine = cfg.sinks.iceberg.engine = engine
    return cfg


@pytest.mark.parametrize("engine", ENGINES)
def test_merge_job_keeps_delta_and_iceberg_equal_to_the_source(stack, lake_config, test_db, engine):
    cfg = _engine(lake_config, engine)
    kinds = ["single", "composite", "string"]
    _pipeline(stack, cfg, test_db, kinds, rows=300, pause_s=0.005)
    job = MergeJob(cfg)
    assert job.run(available_now=True) == 0
    tables = [f"t_{k}" for k in kinds]
    report = _verify_lake(cfg, test_db, tables)
    assert report.equal, report.to_dict()
    commits = _commits_once_per_batch(cfg, test_db, tables)
    # the batches the job ran: no table was committed to more often
    assert all(len(c) <= job.batches for c in commits.values()), (commits, job.batches)
    status = json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())
    assert status["totals"]["dead"] == 0

    # A batch replayed after a crash between the lake commits and the job's own commit
    # (Spark's commit log and the merge state of the last batch gone): run again, the lake
    # tables find the batch committed and commit nothing twice.
    query = Path(cfg.spark.checkpoint_dir) / "query"
    last = max(int(p.name) for p in (query / "commits").iterdir() if p.name.isdigit())
    (query / "commits" / str(last)).unlink()
    for p in (Path(cfg.spark.checkpoint_dir) / "merge-state").glob(f"{last}.*"):
        p.unlink()
    assert MergeJob(cfg).run(available_now=True) == 0
    assert _commits_once_per_batch(cfg, test_db, tables) == commits
    assert _verify_lake(cfg, test_db, tables).equal


@pytest.mark.parametrize("engine", ENGINES)
def test_deleted_and_changed_keys_reach_the_lake_and_duckdb_reads_it(stack, lake_config, test_db, engine):
    from cdc.lake import lake_sql
    from tests.producer_helpers import ProducerThread, run_until_caught_up, start_at_current
    cfg = _engine(lake_config, engine)
    cfg.source.include_databases = [test_db]
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(20,0) UNSIGNED)")
        conn.commit()
    start_at_current(cfg)
    with ProducerThread(cfg):
        with stack.admin() as conn, conn.cursor() as cur:
            cur.executemany(f"INSERT INTO `{test_db}`.t VALUES (%s, %s, %s)",
                            [(i, f"v{i}", 18446744073709551615 - i) for i in range(50)])
            conn.commit()
            cur.execute(f"DELETE FROM `{test_db}`.t WHERE id < 10")
            cur.execute(f"UPDATE `{test_db}`.t SET id = id + 1000 WHERE id BETWEEN 20 AND 24")  # key changes
            cur.execute(f"UPDATE `{test_db}`.t SET v = 'changed' WHERE id = 30")
            conn.commit()
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    assert _verify_lake(cfg, test_db, ["t"]).equal
    columns, rows = lake_sql(cfg, f'SELECT count(*), min(id), max(id), max(d) FROM delta."{test_db}".t')
    assert rows == [(40, 10, 1024, 18446744073709551615 - 10)]
    _, rows = lake_sql(cfg, f"SELECT v FROM iceberg.\"{test_db}\".t WHERE id = 30")
    assert rows == [("changed",)]

    # the same through the command a user runs: cdc lake files|optimize|vacuum|expire|sql
    import json
    import subprocess
    import sys
    from pathlib import Path

    from common.config import dump_config
    from tests.producer_helpers import ROOT
    path = Path(cfg.state_dir) / "lake.yaml"
    path.write_text(dump_config(cfg))

    def cdc(*args: str) -> list:
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "lake", *args, "--json"],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout)
    files = {(r["sink"], r["table"]): r["files"] for r in cdc("files", f"{test_db}\\..*")}
    assert set(files) == {("delta", f"{test_db}.t"), ("iceberg", f"{test_db}.t")} and all(files.values())
    sinks = _lake_sinks(cfg)
    done = {(r["sink"], r["table"]): r for r in cdc("optimize")}
    assert {r["sink"]: r["files_after"] for r in done.values()} == {"delta": 1, "iceberg": 1}, done
    if engine == "spark":  # no row marked deleted any more: Spark's OPTIMIZE and rewrite_data_files
        assert sinks["delta"].format.deletion_vectors(test_db, "t") == 0
        assert sinks["iceberg"].format.delete_file_count(test_db, "t") == 0
        delta_files = sinks["delta"].format.files_on_disk(test_db, "t")
        snapshots = len(sinks["iceberg"].load_table(test_db, "t").metadata.snapshots)
    vacuumed = {(r["sink"], r["table"]): r for r in cdc("vacuum", "--retention-hours", "0")}
    assert ("delta", "(staged parts)") in vacuumed
    expired = {(r["sink"], r["table"]): r for r in cdc("expire", "--retention-hours", "0")}
    assert expired
    if engine == "spark":  # VACUUM removed the compacted files; expire_snapshots all but the current one
        assert vacuumed[("delta", f"{test_db}.t")]["files_removed"] == delta_files - 1, vacuumed
        assert expired[("iceberg", f"{test_db}.t")]["snapshots_expired"] == snapshots - 1, expired
        assert len(sinks["iceberg"].load_table(test_db, "t").metadata.snapshots) == 1
    for sink in sinks.values():
        sink.close()
    assert cdc("sql", f'SELECT count(*) AS n FROM delta."{test_db}".t') == [{"n": 40}]
    assert _verify_lake(cfg, test_db, ["t"]).equal  # maintenance changed no row
