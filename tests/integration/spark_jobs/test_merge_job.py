"""The Spark merge job on the real stack: producer + snapshot + concurrent writes, then
the job; PostgreSQL and MySQL sink tables and the clean changelog must equal the source."""

from __future__ import annotations

import json
import os
from decimal import Decimal

from common.kafka.topic_reader import read_topic
from contract.topics import clean_topic, dlq_topic
from spark_jobs.merge_job import MergeJob
from tests.producer_helpers import ROOT, ProducerThread, run_until_caught_up, wait_for
from tests.sink_helpers import apply_clean, mysql_sink_rows, pg_sink_rows
from tests.snapshot_helpers import WriteLoad, create_table, has_notification, snapshot, source_rows, write_loads


SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"


def _spark_driver_jvms() -> list[list[str]]:
    """The command lines of the Spark driver JVMs this process started (PySpark's gateway:
    a child running ``SparkSubmit``; one per process, it outlives a stopped session), as
    Linux's ``/proc`` shows them."""
    import os
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = [a.decode() for a in (stat.parent / "cmdline").read_bytes().split(b"\0") if a]
        except (OSError, IndexError, ValueError):  # (a process that ended meanwhile)
            continue
        if ppid == os.getpid() and SPARK_SUBMIT in argv:
            out.append(argv)
    return out


def _run_available_now(cfg):
    assert MergeJob(cfg).run(available_now=True) == 0


def _pipeline(stack, cfg, test_db, kinds, rows=800, pause_s=0.0):
    """Tables loaded before the stream starts (only the snapshot brings those rows), writes
    running while a signal snapshots every table (each writer pausing ``pause_s`` between
    its changes: unpaused, writers on a machine shared with other work can outrun the
    producer, and the snapshot's windows wait ever longer for their CLOSE markers)."""
    from tests.producer_helpers import start_at_current
    keys = {}
    with stack.admin() as conn:
        for kind in kinds:
            keys[kind] = create_table(conn, test_db, f"t_{kind}", kind, rows)
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 150
    start_at_current(cfg)
    with ProducerThread(cfg):
        with write_loads(stack, test_db, {f"t_{kind}": kind for kind in kinds}, rows + 100, min_ops=30,
                         pause_s=pause_s):
            sid = snapshot(cfg, [f"{test_db}.t_{kind}" for kind in kinds])
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
    run_until_caught_up(cfg)
    return keys


def test_merge_job_sinks_and_clean_changelog_equal_the_source(stack, merge_config, test_db):
    cfg = merge_config
    kinds = ["single", "composite", "string"]
    keys = _pipeline(stack, cfg, test_db, kinds)
    cfg.spark.inline_batch_records = 50_000  # (the backlog, ~25,000 records, in one batch merged inline)
    job = MergeJob(cfg)
    assert job.run(available_now=True) == 0
    # the tasks report their wait for the sink tables' turns (each apply takes one)
    assert job.phase_totals["sinks_turn_s"] > 0, job.phase_totals
    # batches of at most spark.inline_batch_records are merged in the driver's process
    spans = [span for b in job.report.recent for span in b["spans"]]
    assert spans and max(b["input"] for b in job.report.recent) <= cfg.spark.inline_batch_records
    assert {span[4] for span in spans} == {os.getpid()}, spans
    for kind in kinds:
        table = f"t_{kind}"
        with stack.admin() as conn:
            expected = source_rows(conn, test_db, table, keys[kind])
        assert pg_sink_rows(cfg, test_db, table, keys[kind]) == expected, f"postgres {kind}"
        assert mysql_sink_rows(stack, cfg, test_db, table, keys[kind]) == expected, f"mysql {kind}"
        assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, table)) == expected, f"clean {kind}"
    status = json.loads((__import__("pathlib").Path(cfg.state_dir) / "merge-status.json").read_text())
    assert status["totals"]["input"] > 0 and status["totals"]["dead"] == 0
    # the PostgreSQL sink took the stream's rows from their Avro bytes (PostgresSink.apply_encoded)
    assert status["totals"]["from_bytes"] > 0
    # the job's JVM runs with the client compiler only and a code cache of 240 MB (spark_session.session_conf: the
    # cdc-kafka source, no Java options chosen elsewhere): an option of the JVM itself, before
    # its main class (not only a --conf argument that names it)
    from spark_jobs.spark_session import CLIENT_COMPILER_ONLY
    [driver] = _spark_driver_jvms()
    assert all(opt in driver[:driver.index(SPARK_SUBMIT)] for opt in CLIENT_COMPILER_ONLY.split()), driver
    # the producer's records are where Kafka's partitioner puts their keys: the tasks wrote
    # under their partitions' turns (the MySQL sink has none: the table's whole turn)
    assert status["totals"]["partition_turns"] > 0 and status["totals"]["whole_turns"] > 0
    # `cdc status` shows the job's figures from that file.
    import subprocess
    import sys
    from pathlib import Path

    from common.config import dump_config
    cfg_path = Path(cfg.state_dir) / "status.yaml"
    cfg_path.write_text(dump_config(cfg))
    out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(cfg_path), "status"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"input {status['totals']['input']:,}, emitted {status['totals']['emitted']:,}" in out.stdout, out.stdout

    # A second run finds nothing new and changes nothing (the checkpoint holds).
    before = len(list(read_topic(cfg.kafka.bootstrap_servers, clean_topic(cfg.kafka.topic_prefix, test_db, "t_single"))))
    _run_available_now(cfg)
    after = len(list(read_topic(cfg.kafka.bootstrap_servers, clean_topic(cfg.kafka.topic_prefix, test_db, "t_single"))))
    assert before == after


def test_poison_record_goes_to_the_dead_letter_topic_and_the_job_goes_on(stack, merge_config, test_db):
    from confluent_kafka import Producer
    cfg = merge_config
    keys = _pipeline(stack, cfg, test_db, ["single"], rows=100)
    topic = f"{cfg.kafka.topic_prefix}.{test_db}.t_single"
    p = Producer({"bootstrap.servers": cfg.kafka.bootstrap_servers})
    p.produce(topic, b"\xc3\x01garbage-not-avro", b"\x00\x01")
    p.flush(10)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{test_db}`.t_single VALUES (99999, 'after poison', 1)")
        conn.commit()
    run_until_caught_up(cfg)
    _run_available_now(cfg)
    dead = list(read_topic(cfg.kafka.bootstrap_servers, dlq_topic(cfg.kafka.topic_prefix)))
    assert len(dead) == 1
    headers = dict(dead[0].headers())
    assert headers["cdc.dlq.topic"].decode() == topic and b"writer schema" in headers["cdc.dlq.reason"]
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t_single", keys["single"])
    assert pg_sink_rows(cfg, test_db, "t_single", keys["single"]) == expected


def test_added_source_column_appears_in_the_sinks(stack, merge_config, test_db):
    cfg = merge_config
    keys = _pipeline(stack, cfg, test_db, ["single"], rows=50)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{test_db}`.t_single ADD COLUMN price DECIMAL(30,10) NULL")
        cur.execute(f"UPDATE `{test_db}`.t_single SET price = 12345678901234567890.0123456789 WHERE id < 10")
        conn.commit()
    run_until_caught_up(cfg)
    cfg.spark.inline_batch_records = 0  # every batch a Spark job, its ranges merged in Spark's Python workers
    job = MergeJob(cfg)
    assert job.run(available_now=True) == 0
    spans = [span for b in job.report.recent for span in b["spans"]]
    assert spans and os.getpid() not in {span[4] for span in spans}, spans
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t_single", keys["single"])
    big = Decimal("12345678901234567890.0123456789")
    assert any(r["price"] == big for r in expected.values())
    assert pg_sink_rows(cfg, test_db, "t_single", keys["single"]) == expected
    # this second job wrote the clean partitions as the first left them: their end offsets
    # and last positions came from the partitions' stored states, no tail was read
    totals = json.loads((__import__("pathlib").Path(cfg.state_dir) / "merge-status.json").read_text())["totals"]
    assert totals["clean_writes"] > 0 and totals["clean_tails_read"] == 0, totals
    assert mysql_sink_rows(stack, cfg, test_db, "t_single", keys["single"]) == expected


def test_tombstones_go_once_no_replay_can_reach_them(stack, merge_config, test_db):
    """Deletes leave tombstones in both table sinks; the job drops them once the producer's
    stored resume point is past them and the job's committed offsets passed every record
    written before that point was read (spark_jobs/maintenance/tombstone_horizon.py), and not before."""
    from spark_jobs.sinks.configured import build_sinks
    from tests.producer_helpers import start_at_current
    cfg = merge_config
    cfg.source.include_databases = [test_db]
    cfg.sinks.tombstone_purge_s = 0.01
    start_at_current(cfg)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO `{test_db}`.t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 41)))
        cur.execute(f"DELETE FROM `{test_db}`.t WHERE id <= 20")
        conn.commit()
    run_until_caught_up(cfg)  # (its stored resume point is past the deletes)
    sinks = build_sinks(cfg.sinks)
    assert [name for name, _ in sinks] == ["postgres", "mysql"]
    job = MergeJob(cfg)
    assert job.run(available_now=True) == 0
    # the batch that applied the deletes cannot purge: nothing of it is committed yet
    for name, sink in sinks:
        assert len(sink.tombstones(test_db, "t")) == 20, name
    assert job.tombstone_purge.purged == 0
    # the next batch runs with the first one committed: past the sighting taken after it
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{test_db}`.t VALUES (100, 'later')")
        cur.execute(f"DELETE FROM `{test_db}`.t WHERE id = 21")
        conn.commit()
    run_until_caught_up(cfg)
    assert job.run(available_now=True) == 0
    for name, sink in sinks:
        # the 20 below the sighting's resume point went; the delete of this batch stays
        assert [k for k, _ in sink.tombstones(test_db, "t")] == ["[21]"], name
    assert job.tombstone_purge.purged == 40  # 20 in each sink
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", ["id"])
    assert sorted(expected) == [(i,) for i in range(22, 41)] + [(100,)]
    assert pg_sink_rows(cfg, test_db, "t", ["id"]) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "t", ["id"]) == expected
    for _, sink in sinks:
        sink.close()


def test_kill9_of_the_job_mid_snapshot_changes_nothing(stack, merge_config, test_db, tmp_path):
    """``cdc merge`` runs as a process while a snapshot and writes run; it is killed with
    SIGKILL twice and restarted; at the end the sinks and the clean changelog equal the
    source as if nothing had happened."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from common.config import dump_config
    from tests.producer_helpers import ROOT, start_at_current
    cfg = merge_config
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 100
    with stack.admin() as conn:
        keys = create_table(conn, test_db, "t_composite", "composite", 3000)
    start_at_current(cfg)
    path = tmp_path / "merge.yaml"
    path.write_text(dump_config(cfg))
    status = __import__("pathlib").Path(cfg.state_dir) / "merge-status.json"

    def start():
        log = open(tmp_path / "merge.log", "ab")
        return subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(path), "merge"], stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                start_new_session=True)

    def batches() -> int:
        try:
            return json.loads(status.read_text())["batches"]
        except (OSError, ValueError, KeyError):
            return 0

    job = start()
    kills = 0
    try:
        with ProducerThread(cfg), WriteLoad(stack.admin, test_db, "t_composite", "composite", key_space=3300,
                                            seed=5) as load:
            # (generous: a restarted job starts Spark and replays its last batch first; under the
            # suite's load, Debezium's JVMs beside it, that took 97 s once)
            wait_for(lambda: batches() >= 1, timeout=300, what="first merge batch")
            sid = snapshot(cfg, [f"{test_db}.t_composite"])
            for _ in range(2):
                seen = batches()
                wait_for(lambda s=seen: batches() >= s + 2, timeout=300, what="merge batches")
                os.killpg(job.pid, signal.SIGKILL)  # the driver and its Spark JVM
                job.wait(30)
                kills += 1
                status.unlink(missing_ok=True)
                job = start()
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
            load.stop()
        run_until_caught_up(cfg)
        wait_for(lambda: batches() >= 1, timeout=120, what="merge after the last restart")
        time.sleep(1)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
    _run_available_now(cfg)  # drain what is left, from the same checkpoint
    assert kills == 2
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t_composite", keys)
    assert pg_sink_rows(cfg, test_db, "t_composite", keys) == expected
    assert mysql_sink_rows(stack, cfg, test_db, "t_composite", keys) == expected
    assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, "t_composite")) == expected


def test_table_names_kafka_cannot_hold_and_a_keyless_table_in_a_regex_snapshot(stack, merge_config, test_db):
    """A user's schema with a table named with a space and accented letters (not a legal
    Kafka topic name) and a table without a primary key, snapshotted by a regular
    expression typed into SQL the way Debezium's docs show it: the keyed tables reach
    both sinks and the clean changelog equal to the source, the key-less one is skipped
    by the snapshot (a SKIPPED notification naming it) and its changes are dead letters
    once each, whatever the number of sinks."""
    from contract.topics import table_topic
    from tests.producer_helpers import start_at_current
    from tests.snapshot_helpers import notifications
    cfg = merge_config
    odd = "stock items é$"
    with stack.admin() as conn:
        keys = create_table(conn, test_db, odd, "composite", 400)
        create_table(conn, test_db, "t_single", "single", 300)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{test_db}`.`no key` (a INT, b VARCHAR(10))")
            cur.execute(f"INSERT INTO `{test_db}`.`no key` VALUES (1, 'x'), (2, 'y')")
        conn.commit()
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 100
    start_at_current(cfg)
    sid = "regex-" + test_db
    with ProducerThread(cfg), WriteLoad(stack.admin, test_db, odd, "composite", key_space=500, seed=3) as load:
        wait_for(lambda: sum(load.ops.values()) > 30, what="writes running")
        # What `INSERT ... VALUES (..., '{"data-collections": ["db\\..*"]}')` delivers: one backslash.
        raw = '{"data-collections": ["%s\\..*"], "type": "incremental"}' % test_db
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {cfg.source.signal_table} (id, type, data) VALUES (%s, 'execute-snapshot', %s)",
                        (sid, raw))
            cur.execute(f"UPDATE `{test_db}`.`no key` SET b = 'z' WHERE a = 1")
            conn.commit()
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        load.stop()
    run_until_caught_up(cfg)

    mine = [n for n in notifications(cfg) if n["id"] == sid]
    skipped = [n["additionalData"] for n in mine if n["type"] == "SKIPPED"]
    assert skipped == [{"table": f"{test_db}.no key", "reason": f"table {test_db}.no key has no primary key: "
                                                                "give a 'surrogate-key'"}]
    started = next(n["additionalData"] for n in mine if n["type"] == "STARTED")
    assert sorted(started["tables"]) == sorted([f"{test_db}.{odd}", f"{test_db}.t_single"])
    topic = table_topic(cfg.kafka.topic_prefix, test_db, odd)
    assert topic == f"{cfg.kafka.topic_prefix}.{test_db}.stock_items___"

    _run_available_now(cfg)
    for table, table_keys in ((odd, keys), ("t_single", ["id"])):
        with stack.admin() as conn:
            expected = source_rows(conn, test_db, table, table_keys)
        assert pg_sink_rows(cfg, test_db, table, table_keys) == expected, f"postgres {table}"
        assert mysql_sink_rows(stack, cfg, test_db, table, table_keys) == expected, f"mysql {table}"
        assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, test_db, table)) == expected, f"clean {table}"
    dead = list(read_topic(cfg.kafka.bootstrap_servers, dlq_topic(cfg.kafka.topic_prefix)))
    assert len(dead) == 1  # the one UPDATE of the key-less table, once (two sinks)
    assert b"without a key" in dict(dead[0].headers())["cdc.dlq.reason"]


def test_merge_job_runs_by_spark_submit_on_a_standalone_cluster(stack, lake_config, test_db, tmp_path):
    """What the compose file's merge-job service does: ``spark-submit`` of the job's module
    to a Spark master with a worker (both started here from pip's pyspark, on loopback),
    configured only by ``CDC_CONFIG`` and ``CDC__*`` variables; the executors run on the
    worker (and stage the lake sinks' parts there, which the driver commits).  The sinks and
    the lake tables end equal to the source and SIGTERM stops the job cleanly."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    from cdc.stack.spark_cluster import spark_env, standalone_cluster
    from common.config import dump_config
    from cdc.verify import verify
    from tests.producer_helpers import wait_for
    cfg = lake_config
    cfg.spark.inline_batch_records = 0  # (every batch a Spark job: on the worker's executors)
    keys = _pipeline(stack, cfg, test_db, ["single"], rows=300)
    env = spark_env(tmp_path)
    config_path = tmp_path / "cluster.yaml"
    config_path.write_text(dump_config(cfg))
    job = None
    try:
        with standalone_cluster(tmp_path, workers=1, cores=2, memory="2g") as master:
            job = subprocess.Popen(
                [str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"), "--master", master, "--conf",
                 "spark.cores.max=2", "--conf", "spark.executor.memory=1g", str(ROOT / "spark_jobs" / "merge_job.py")],
                stdout=open(tmp_path / "submit.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True,
                env={**env, "CDC_CONFIG": str(config_path), "CDC__SPARK__MASTER": master})
            with stack.admin() as conn:
                expected = source_rows(conn, test_db, "t_single", keys["single"])

            def caught_up() -> bool:
                assert job.poll() is None, (tmp_path / "submit.log").read_text(errors="replace")[-3000:]
                try:  # a task writes one sink after the other, the driver commits the lake: all caught up
                    return (pg_sink_rows(cfg, test_db, "t_single", keys["single"]) == expected and
                            mysql_sink_rows(stack, cfg, test_db, "t_single", keys["single"]) == expected and
                            verify(cfg, [f"{test_db}.t_single"]).equal)
                except Exception:  # noqa: BLE001 - no sink table yet
                    return False
            wait_for(caught_up, timeout=240, interval=1.0, what="the cluster job to fill the sinks and the lake")
            assert "app-" in (tmp_path / "worker-0.log").read_text(errors="replace")  # executors ran on the worker

            # The Python driver (a child of spark-submit's JVM) stops after the running batch.
            def drivers() -> list[int]:
                return [int(d) for d in os.listdir("/proc") if d.isdigit() and _parent(int(d)) == job.pid
                        and b"merge_job.py" in _cmdline(int(d)) and b"python" in _cmdline(int(d)).split(b"\0")[0]]
            wait_for(lambda: len(drivers()) == 1, timeout=30, what="the Python driver under spark-submit")
            os.kill(drivers()[0], signal.SIGTERM)
            assert job.wait(120) == 0, (tmp_path / "submit.log").read_text(errors="replace")[-3000:]
            assert "stopping the merge job (signal 15)" in (tmp_path / "submit.log").read_text(errors="replace")
    finally:
        if job is not None and job.poll() is None:
            try:
                os.killpg(job.pid, signal.SIGTERM)
                job.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(job.pid, signal.SIGKILL)
        time.sleep(0.5)


def _parent(pid: int) -> int:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def test_a_bounded_run_stops_on_a_batch_that_keeps_failing(stack, merge_config, test_db):
    """A batch no restart can apply (a PostgreSQL constraint refuses every row of a run: the
    sink is the problem, not the records, so the batch fails instead of dead-lettering them):
    a bounded run stops with the failure after BOUNDED_RUN_ATTEMPTS tries instead of retrying
    it forever, and once the cause is gone the next run applies the batch (nothing was lost)."""
    import psycopg
    import pytest

    from spark_jobs.errors import BatchKeepsFailing
    from spark_jobs.query_restarts import BOUNDED_RUN_ATTEMPTS
    from spark_jobs.sinks.postgres import PostgresSink
    cfg = merge_config
    keys = _pipeline(stack, cfg, test_db, ["single"], rows=20)
    _run_available_now(cfg)
    dsn = cfg.sinks.postgres.dsn.get_secret_value()
    table = PostgresSink(dsn, cfg.sinks.postgres.schema_name).qualified_name(test_db, "t_single")
    with psycopg.connect(dsn) as pg:
        pg.execute(f"ALTER TABLE {table} ADD CONSTRAINT refused CHECK (id < 99990) NOT VALID")
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{test_db}`.t_single VALUES (99998, 'refused', 1), (99999, 'refused', 2)")
        conn.commit()
    run_until_caught_up(cfg)
    job = MergeJob(cfg)
    with pytest.raises(BatchKeepsFailing, match=f"failed {BOUNDED_RUN_ATTEMPTS} times in a row") as failed:
        job.run(available_now=True)
    assert "refused" in str(failed.value.__cause__)  # (the constraint's name, in PostgreSQL's error)
    assert job.report.batches == 0
    with psycopg.connect(dsn) as pg:
        pg.execute(f"ALTER TABLE {table} DROP CONSTRAINT refused")
    _run_available_now(cfg)
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t_single", keys["single"])
    assert {(99998,), (99999,)} <= set(expected) and pg_sink_rows(cfg, test_db, "t_single", keys["single"]) == expected
    assert not list(read_topic(cfg.kafka.bootstrap_servers, dlq_topic(cfg.kafka.topic_prefix)))  # none dead-lettered
