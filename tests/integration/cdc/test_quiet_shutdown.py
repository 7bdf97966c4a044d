"""No Kafka client is left behind to say "Connection refused" once the broker stops: a
process that ran the producer and the merge job, as ``cdc demo`` does, then stopped its
broker, prints nothing more from librdkafka.

The clients that used to linger: the producer's Kafka writer (its session and the snapshot
coordinator refer to each other, so it lived until the garbage collector's rare full pass)
and the merge job's admin client (Spark's gateway keeps the job's batch function, and with it
the job, for as long as the JVM runs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from common.config import dump_config
from tests.producer_helpers import ROOT, start_at_current

SCRIPT = textwrap.dedent("""
    import gc, sys, time
    from pathlib import Path
    from cdc.stack.kafka_broker import EmbeddedKafka
    from common.config import load_config
    from producer.app import ProducerApp
    from spark_jobs.merge_job import MergeJob
    from spark_jobs.spark_session import stop_session

    gc.disable()  # (what the collector's rare full passes, tune_gc, leave in place: nothing collected here)
    cfg = load_config(sys.argv[1])
    broker = EmbeddedKafka(Path(sys.argv[2]))
    info = broker.start()
    cfg.kafka.bootstrap_servers = info["bootstrap_servers"]
    ProducerApp(cfg).run(idle_exit_s=1.0)
    assert MergeJob(cfg).run(available_now=True) == 0
    stop_session()
    print("BROKER STOPS", file=sys.stderr, flush=True)
    broker.stop(info)
    time.sleep(4)  # librdkafka retries a lost broker about every second
    print("END", file=sys.stderr, flush=True)
""")


def test_nothing_reaches_for_the_broker_after_it_stopped(stack, merge_config, test_db, tmp_path):
    cfg = merge_config
    cfg.spark.master = "local[1]"
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    cfg.source.include_databases = [test_db]
    start_at_current(cfg)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(20)])
    path = tmp_path / "cdc.yaml"
    path.write_text(dump_config(cfg))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(tmp_path / "broker")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    after = out.stderr.split("BROKER STOPS", 1)[1]
    assert "END" in after
    assert [line for line in after.splitlines() if "rdkafka" in line or "Connection refused" in line] == []
