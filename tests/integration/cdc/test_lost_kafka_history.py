"""Kafka loses history: the merge job and the producer notice, say so, and recover.

* a table topic deleted and created again under a running merge job stops it with the
  partition, the offsets and what to do; told ``fail_on_data_loss: false`` it carries on
  from what Kafka holds and counts what was lost;
* a producer whose position Kafka no longer holds stops instead of starting at
  ``latest``; told ``--recover resume`` it re-publishes from the position it kept;
* the embedded stack stopped and started again keeps its topics, and the pipeline carries on;
  stopped, its Kafka data directory wiped and started again: ``cdc stack up`` says so and
  resets what depended on the lost topics, the producer re-publishes and snapshots with
  delete-missing, and ``cdc verify --changelog`` ends equal, also for rows deleted in changes
  the merge job had not read when the topics were lost.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pymysql
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from common.config import dump_config, load_config
from common.kafka.offsets import end_offsets
from contract.topics import offsets_topic, table_topic
from producer.app import ProducerApp
from producer.errors import KafkaHistoryLost
from producer.offset_store import LocalOffsetCopy
from spark_jobs.errors import MergeDataLoss
from spark_jobs.merge_job import MergeJob
from tests.producer_helpers import ROOT, read_events, run_until_caught_up, start_at_current, wait_for
from tests.sink_helpers import pg_sink_rows


def _recreate_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30, what=f"{topic} deleted")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


class _JobThread:
    def __init__(self, cfg) -> None:
        self.job = MergeJob(cfg)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.job.run(max_restarts=5)
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            self.error = exc


def _table_in_kafka(stack, cfg, db: str, rows: int) -> str:
    """``cfg`` capturing ``db`` (PostgreSQL sink only); a table ``t`` of ``rows`` rows written
    after the producer's start and produced into Kafka; its topic."""
    cfg.source.include_databases = [db]
    cfg.sinks.mysql.enabled = False
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    start_at_current(cfg)
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(rows)])
    run_until_caught_up(cfg)
    return table_topic(cfg.kafka.topic_prefix, db, "t")


def test_merge_job_stops_on_a_recreated_topic_and_carries_on_when_told(stack, merge_config, test_db, caplog):
    cfg = merge_config
    topic = _table_in_kafka(stack, cfg, test_db, 300)

    runner = _JobThread(cfg)
    try:
        wait_for(lambda: len(_pg_rows(cfg, test_db)) == 300, 120, what="300 rows in the sink")
        _recreate_topic(cfg.kafka.bootstrap_servers, topic)
        runner.thread.join(120)
        assert not runner.thread.is_alive(), f"the merge job did not stop on the lost topic:\n{caplog.text[-3000:]}"
    finally:
        runner.job.stop()
        runner.thread.join(60)
    err = runner.error
    assert isinstance(err, MergeDataLoss), f"the job ended with {err!r}:\n{caplog.text[-3000:]}"
    text = str(err)
    kinds = [x.kind for x in err.losses]
    # Which it is depends on when the job looked: between the delete and the create the
    # partition is gone; after the create its id changed (or, ids unknown, the checkpoint
    # lies past the new topic's end).
    assert kinds in (["recreated"], ["past-end"], ["deleted"]), text
    assert f"{topic} partition 0: checkpoint offset 301" in text, text
    assert ("gone from the broker" if kinds == ["deleted"] else "earliest offset 0, latest 0") in text, text
    assert "fail_on_data_loss" in text and "cdc snapshot" in text
    assert "postgres holds" in text and f"{test_db}.t up to position" in text, text  # how far the sink got

    # The job refuses to start again on that checkpoint, before Spark starts.
    with pytest.raises(MergeDataLoss):
        MergeJob(cfg).run(available_now=True)

    # Changes written to the new topic; told to carry on, the job reads it from its start.
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(300, 350)])
        cur.execute("UPDATE t SET v = 'changed' WHERE id = 1")
    run_until_caught_up(cfg)
    cfg.spark.fail_on_data_loss = False
    with caplog.at_level(logging.WARNING, logger="spark_jobs.report.batch_report"):
        assert MergeJob(cfg).run(available_now=True) == 0
    warned = [r.getMessage() for r in caplog.records if "Kafka lost records" in r.getMessage()]
    assert warned and topic in warned[0], caplog.text[-2000:]
    status = json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())
    assert status["totals"]["lost_partitions"] == 1
    rows = _pg_rows(cfg, test_db)
    assert len(rows) == 350 and rows[(1,)]["v"] == "changed"

    # Under a running job told to carry on: the topic goes again, the job goes on.
    runner = _JobThread(cfg)
    try:
        wait_for(lambda: runner.job.query is not None and runner.job.query.isActive, 120, what="the job running")
        time.sleep(2)  # a trigger or two on the old topic
        _recreate_topic(cfg.kafka.bootstrap_servers, topic)
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET v = 'second loss' WHERE id = 2")
        run_until_caught_up(cfg)
        try:
            wait_for(lambda: _pg_rows(cfg, test_db)[(2,)]["v"] == "second loss", 120,
                     what="the change written after the loss in the sink")
        except AssertionError as exc:
            raise AssertionError(f"{exc} (job error {runner.error!r}):\n{caplog.text[-3000:]}") from None
        assert runner.thread.is_alive() and runner.error is None, f"{runner.error!r}:\n{caplog.text[-3000:]}"
        # The sink row is written by a task; the batch's loss is counted by the driver's report
        # after the tasks end: checked at once, the count could still be 0 (a flaky failure
        # under load, issue 38): the count comes with that batch's report.
        wait_for(lambda: runner.job.totals["lost_partitions"] >= 1, 60, what="the loss counted by the batch report")
    finally:
        runner.job.stop()
        runner.thread.join(60)


def test_a_running_job_told_to_carry_on_counts_every_recreation_of_its_topic(stack, merge_config, test_db, caplog):
    """The topic recreated three times under a running job, changes written before and after
    each time: each loss is seen and counted by the batch that meets it (none goes unseen),
    the job carries on, and every change written after a loss reaches the sink."""
    cfg = merge_config
    cfg.source.include_databases = [test_db]
    cfg.sinks.mysql.enabled = False
    cfg.spark.fail_on_data_loss = False
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    start_at_current(cfg)
    topic = table_topic(cfg.kafka.topic_prefix, test_db, "t")

    def write(first: int, v: str) -> None:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s) ON DUPLICATE KEY UPDATE v = VALUES(v)",
                            [(i, v) for i in range(first, first + 50)])
        run_until_caught_up(cfg)

    write(0, "before")
    runner = _JobThread(cfg)
    try:
        wait_for(lambda: len(_pg_rows(cfg, test_db)) == 50, 120, what="the first rows in the sink")
        for n in range(1, 4):
            _recreate_topic(cfg.kafka.bootstrap_servers, topic)
            write(1000 * n, f"after loss {n}")
            wait_for(lambda: runner.job.totals["lost_partitions"] >= n, 120,
                     what=f"recreation {n} seen and counted (job error {runner.error!r})")
            wait_for(lambda: _pg_rows(cfg, test_db).get((1000 * n + 49,), {}).get("v") == f"after loss {n}", 120,
                     what=f"the changes written after loss {n} in the sink")
            assert runner.thread.is_alive() and runner.error is None, f"{runner.error!r}:\n{caplog.text[-3000:]}"
        assert runner.job.totals["lost_partitions"] == 3
    finally:
        runner.job.stop()
        runner.thread.join(60)


def _pg_rows(cfg, db):
    try:
        return pg_sink_rows(cfg, db, "t", ["id"])
    except psycopg.errors.UndefinedTable:
        return {}


def test_retention_under_a_stopped_merge_job_stops_it_naming_the_loss(stack, merge_config, test_db):
    """Kafka's retention deletes segments the stopped job had not read (a topic with short
    segments and retention, as an operator might set to bound the disk): the job's next start
    stops, naming the partition, its checkpoint offset and the broker's earliest offset."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    cfg = merge_config
    topic = _table_in_kafka(stack, cfg, test_db, 100)
    assert MergeJob(cfg).run(available_now=True) == 0  # everything read; then the job stops
    admin = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "2000", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    read_to = end_offsets(cfg.kafka.bootstrap_servers, [(topic, 0)])[(topic, 0)][1]

    def removed() -> bool:  # (more changes keep rolling segments, so that the unread ones can go)
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET v = CONCAT(v, '.') WHERE id < 10")
        run_until_caught_up(cfg, idle_s=0.5)
        return end_offsets(cfg.kafka.bootstrap_servers, [(topic, 0)])[(topic, 0)][0] > read_to
    wait_for(removed, 120, interval=2.0, what="Kafka's retention to delete the segments the job had not read")
    with pytest.raises(MergeDataLoss) as lost:
        MergeJob(cfg).run(available_now=True)
    text = str(lost.value)
    assert [x.kind for x in lost.value.losses] == ["truncated"], text
    assert f"{topic} partition 0: checkpoint offset {read_to}, broker earliest offset" in text, text
    assert "retention" in text and "fail_on_data_loss" in text


def test_producer_stops_when_kafka_lost_its_history_and_resumes_when_told(stack, config, test_db, tmp_path):
    cfg = config
    cfg.source.include_databases = [test_db]
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    start_at_current(cfg)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(100)])
    run_until_caught_up(cfg)
    kept = LocalOffsetCopy(cfg.state_dir, cfg.producer.name).load()
    assert kept is not None and kept["resume"]["last"]

    # Kafka loses the producer's offsets and the table's events; the table changes meanwhile.
    prefix, topic = cfg.kafka.topic_prefix, table_topic(cfg.kafka.topic_prefix, test_db, "t")
    admin = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers})
    for t in (offsets_topic(prefix), topic):
        admin.delete_topics([t])[t].result(30)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(100, 120)])

    with pytest.raises(KafkaHistoryLost) as lost:
        ProducerApp(cfg).run(idle_exit_s=1)
    text = str(lost.value)
    assert f"Kafka lost the history of producer '{cfg.producer.name}'" in text
    assert kept["resume"]["file"] in text and str(LocalOffsetCopy(cfg.state_dir, cfg.producer.name).path) in text
    assert "cdc produce --recover resume" in text and "cdc produce --recover snapshot" in text

    # The command says the same and exits 1.
    path = tmp_path / "cdc.yaml"
    path.write_text(dump_config(cfg))
    out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "produce"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Kafka lost the history" in out.stderr and "Traceback" not in out.stderr

    app = ProducerApp(cfg)
    app.recover = "resume"
    app.run(idle_exit_s=1.5)
    ids = sorted(v["after"]["id"] for _, _, v in read_events(cfg, topic))
    assert ids == list(range(100, 120))  # what came after the kept position, nothing lost, nothing older
    ProducerApp(cfg).run(idle_exit_s=1)  # Kafka holds the history again: a plain start


# -- the embedded stack, stopped and started again ---------------------------------------------

def _cdc(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cdc.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return out.stdout + out.stderr


def test_stack_restarted_keeps_its_topics_and_with_its_kafka_data_wiped_recovers_and_verifies_equal(tmp_path):
    state = tmp_path / "stack"
    _ok(_cdc("stack", "up", "--state-dir", str(state)))
    try:
        data = json.loads((state / "stack.json").read_text())
        m = data["mysql"]

        def admin():
            return pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                                   autocommit=True)
        with admin() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)")
            cur.execute("CREATE TABLE shop.tags (tag VARCHAR(30) PRIMARY KEY, n INT)")
        cfg = load_config(state / "cdc.yaml")
        cfg.source.include_databases = ["shop"]
        cfg.spark.master = "local[2]"
        start_at_current(cfg)  # the producer starts where the binlog is now
        path = tmp_path / "cdc.yaml"
        path.write_text(dump_config(cfg))
        conf = ("-c", str(path))

        with admin() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO shop.items VALUES (%s, %s, %s)", [(i, f"item {i}", i % 7) for i in range(2000)])
            cur.executemany("INSERT INTO shop.tags VALUES (%s, %s)", [(f"t{i}", i) for i in range(50)])
        _ok(_cdc(*conf, "produce", "--exit-when-idle", "0.5"))
        _ok(_cdc(*conf, "merge", "--available-now"))
        _ok(_cdc(*conf, "verify", "--changelog"))

        # Changes Kafka will hold but the merge job will not have read when the topics are lost.
        with admin() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM shop.items WHERE id < 300")
            cur.execute("UPDATE shop.items SET qty = qty + 100 WHERE id BETWEEN 300 AND 499")
            cur.execute("DELETE FROM shop.tags WHERE n < 10")
        _ok(_cdc(*conf, "produce", "--exit-when-idle", "0.5"))

        # Stopped and started again: Kafka keeps its topics, nothing is reset, the pipeline
        # carries on where it was.
        _ok(_cdc("stack", "down", "--state-dir", str(state)))
        up = _ok(_cdc("stack", "up", "--state-dir", str(state)))
        assert "gone" not in up and "deleted" not in up, up
        with admin() as conn, conn.cursor() as cur:
            cur.execute("UPDATE shop.items SET name = 'after restart' WHERE id BETWEEN 600 AND 609")
        produced = _ok(_cdc(*conf, "produce", "--exit-when-idle", "0.5"))
        assert "Kafka lost the history" not in produced and "Recovering" not in produced
        _ok(_cdc(*conf, "merge", "--available-now"))
        report = _cdc(*conf, "verify", "--changelog", "--json")
        assert json.loads(_ok(report) and report.stdout)["equal"] is True
        with admin() as conn, conn.cursor() as cur:  # (changes the merge job will not have read)
            cur.execute("DELETE FROM shop.items WHERE id BETWEEN 700 AND 709")
        _ok(_cdc(*conf, "produce", "--exit-when-idle", "0.5"))

        # Stopped, and Kafka's data directory lost: 'up' says what depended on it.
        _ok(_cdc("stack", "down", "--state-dir", str(state)))
        for node in data["kafka"]["nodes"]:
            shutil.rmtree(node["data_dir"])

        refused = _cdc("stack", "up", "--state-dir", str(state), "--on-lost-kafka", "refuse")
        assert refused.returncode == 1 and "merge job checkpoint" in refused.stderr, refused.stderr
        assert "producer" in refused.stderr and "Traceback" not in refused.stderr

        up = " ".join(_ok(_cdc("stack", "up", "--state-dir", str(state))).split())
        assert "no longer held its cluster" in up and "every topic of the earlier run is gone" in up, up
        assert "deleted the merge job checkpoint" in up
        assert "re-publishes from its last position" in up

        # Written while the producer is down.
        with admin() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO shop.items VALUES (%s, %s, %s)", [(i, f"new {i}", 1) for i in range(5000, 5100)])
            cur.execute("UPDATE shop.items SET name = 'renamed' WHERE id BETWEEN 1000 AND 1009")
            cur.execute("DELETE FROM shop.items WHERE id BETWEEN 1500 AND 1504")

        produced = _ok(_cdc(*conf, "produce", "--exit-when-idle", "1"))
        assert "Kafka lost the history" in produced and "Recovering (snapshot)" in produced
        merged = _ok(_cdc(*conf, "merge", "--available-now"))
        assert "did not find deleted" in merged
        report = _cdc(*conf, "verify", "--changelog", "--json")
        _ok(report)
        assert json.loads(report.stdout)["equal"] is True
    finally:
        _cdc("stack", "down", "--state-dir", str(state))
