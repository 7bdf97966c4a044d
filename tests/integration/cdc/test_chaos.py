"""The chaos scenario in its moderate form (``make chaos`` runs a long one): the pipeline
under a random write load with the producer killed 10 times, the merge job 5 times and
the source restarted once must end with sinks and clean changelog equal to the source.
Both runs have the lake sinks on, the merge job killed right after a lake commit, between a
batch's staging and its commit, and during a commit (its intent written): the first on the
``driver`` lake engine, the read-only run on the ``spark`` engine.  The read-only run does so on
a Kafka cluster of three nodes of its own (replication factor 3, ``min.insync.replicas`` 2)
whose busiest partition's leader is killed while a snapshot runs and again during streaming,
and a node shut down, each started again; the topics then show that each stopped node led
that partition (a newer leader epoch after the stop) and that the first kill came during a
snapshot.
``CDC_CHAOS_SEED`` picks another seed (the same seed gives the same plan)."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from cdc.broker_chaos import BrokerChaos
from cdc.chaos import ChaosPlan, passed, run_chaos
from cdc.stack.kafka_broker import EmbeddedKafka


def test_same_seed_same_plan():
    a = ChaosPlan.make(7, duration=60, producer_kills=10, job_kills=5)
    b = ChaosPlan.make(7, duration=60, producer_kills=10, job_kills=5)
    c = ChaosPlan.make(8, duration=60, producer_kills=10, job_kills=5)
    assert a.actions == b.actions != c.actions
    kinds = [act for _, act in a.actions]
    assert kinds.count("kill:producer") == 10 and kinds.count("restart:source") == 1
    assert [kinds.count(f"kill:job{k}") for k in ("", "-commit", "-staged", "-intent")] == [2, 1, 1, 1]
    assert kinds.index("pause") < kinds.index("resume")
    kills = [t for t, act in a.actions if act == "kill:producer"]
    assert all(y - x >= 2.0 for x, y in zip(kills, kills[1:]))
    assert not any("broker" in act for act in kinds)
    brokers = [act for _, act in ChaosPlan.make(7, duration=60, producer_kills=10, job_kills=5,
                                                 broker_kills=True).actions if ":broker" in act]
    assert brokers == ["kill:broker:snapshot", "start:broker", "kill:broker", "start:broker", "shutdown:broker",
                       "start:broker"]


@pytest.mark.parametrize("read_only", [False, True], ids=["marker-rows-and-lake", "read-only-brokers-spark-lake"])
def test_chaos_run_ends_equal(stack, config, tmp_path, read_only):
    seed = int(os.environ.get("CDC_CHAOS_SEED", "1"))
    # the lake sinks (their places: the run's own, cdc.pipeline_run.run_config); on the spark engine
    # in the read-only run: the executors merge the lake tables, the job killed during their commits
    config.sinks.delta.enabled = config.sinks.iceberg.enabled = True
    config.sinks.delta.engine = config.sinks.iceberg.engine = "spark" if read_only else "driver"
    # the job killed once at each of the four moments (a plain kill, after a lake commit, after a
    # staging, during a commit); five times without the spark lakes, whose job takes 10-20 s to start
    job_kills = 4 if read_only else 5
    brokers = None
    if read_only:  # on three Kafka nodes of its own
        cluster = EmbeddedKafka(tmp_path / "kafka3", 3)
        brokers = BrokerChaos(cluster, cluster.start())
        config.kafka.bootstrap_servers = brokers.info["bootstrap_servers"]
    try:
        counts = run_chaos(config, admin=stack.admin, restart_source=lambda: stack.restart_source(down_s=1.0),
                           seed=seed, rows=2000, duration=45.0, producer_kills=10, job_kills=job_kills,
                           work_dir=tmp_path / "chaos", console=Console(width=160), read_only=read_only,
                           brokers=brokers)
    finally:
        if brokers is not None:
            brokers.cluster.stop(brokers.info)
    assert counts["read_only"] is read_only
    if brokers is not None:  # each stopped node led the busiest partition; the first kill during a snapshot
        assert (counts["broker_kills"], counts["broker_shutdowns"], counts["broker_starts"]) == (2, 1, 3), counts
        assert counts["broker_stops_of_the_leader"] == 3, counts["broker_stop_epochs"]
        assert counts["broker_kills_during_snapshot"] == 1, counts
        assert passed(counts, brokers)
    assert counts["producer_kills"] >= 10 and counts["job_kills"] >= job_kills and counts["source_restarts"] == 1
    assert counts["clean_changelog_duplicates"] == 0
    assert counts["verify_equal"], counts["report"]
    # every lake table written, no batch committed twice, kills right after a lake commit, between a
    # batch's staging and its commit, and during a commit (its intent written)
    assert counts["lake_commits"] > 0 and counts["lake_batches_committed_twice"] == 0, counts
    assert counts["job_kills_at_commit"] >= 1 and counts["job_kills_at_staged"] >= 1, counts
    assert counts["job_kills_at_intent"] >= 1, counts
