"""A merge job that falls behind is seen: its reads slowed below the input rate (Kafka's own
fetch quota on the consumers, as a slow network or a busy broker would), ``cdc status``
shows the pace WARNING naming the partition, and the metrics count the partition falling
behind; with the quota gone the warning clears and the sink ends equal."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import time
import urllib.request

from cdc.pipeline_run import pipeline_processes, run_config
from cdc.stack.kafka_broker import set_consumer_quota
from cdc.stack.process import free_port
from producer.binlog.server import start_at_current
from tests.producer_helpers import ROOT, wait_for
from tests.sink_helpers import pg_sink_rows


def _merged(cfg, db: str) -> int:
    try:
        return len(pg_sink_rows(cfg, db, "t", ["id"]))
    except psycopg.errors.UndefinedTable:
        return 0


def _metric(port: int, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _status(path) -> str:
    out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "status"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})
    return " ".join((out.stdout + out.stderr).split())


def test_a_merge_job_whose_reads_are_slowed_below_the_input_rate_is_reported(stack, config, unique, tmp_path):
    run = unique("pace")
    work = tmp_path / "pace"
    work.mkdir()
    cfg = run_config(config, run, work, partitions=1)
    cfg.sinks.mysql.enabled = cfg.sinks.changelog.enabled = False
    cfg.sinks.postgres.schema_name = run
    cfg.spark.metrics_port = free_port()
    cfg.spark.trigger_interval_s = 1.0
    cfg.spark.max_offsets_per_trigger = 300  # (batches that end: the pace is judged batch by batch)
    # Fetches of 32 KB: Kafka's quota holds a consumer back for as long as its last fetch
    # took to send at the quota's rate, so a fetch of everything that arrived meanwhile
    # (2 MiB a fetch by default) was held back ten times longer each time, and a batch
    # never ended; small fetches make the reads steady at the quota's rate.
    cfg.kafka.client = {**cfg.kafka.client, "max.partition.fetch.bytes": 32_768}
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{run}`")
        cur.execute(f"CREATE TABLE `{run}`.t (id INT PRIMARY KEY, payload TEXT)")
    start_at_current(cfg)
    producer, job = pipeline_processes(cfg, work, "pace")
    bs = cfg.kafka.bootstrap_servers
    stop = False
    try:
        producer.start()
        job.start()
        written = 0

        def write(n: int) -> None:  # rows of about 1 KB
            nonlocal written
            with stack.admin(run) as conn, conn.cursor() as cur:
                cur.executemany("INSERT INTO t (id, payload) VALUES (%s, %s)",
                                [(written + i, "x" * 1000) for i in range(n)])
            written += n
        write(50)
        wait_for(lambda: _merged(cfg, run) == 50, 180, what="the first rows merged")
        assert _metric(cfg.spark.metrics_port, "cdc_merge_partitions_falling_behind") == 0
        # Reads slowed to about 30 KB/s while about 300 KB/s arrive.
        set_consumer_quota(bs, 30_000)
        deadline = time.monotonic() + 240
        seen_status = seen_metric = ""
        looked = time.monotonic()
        while time.monotonic() < deadline and not (seen_status and seen_metric):
            write(30)
            time.sleep(0.1)
            if time.monotonic() - looked >= 5:
                looked = time.monotonic()
                text = _status(work / "pace.yaml")
                if "WARNING" in text and "is read at" in text:
                    seen_status = text
                if (_metric(cfg.spark.metrics_port, "cdc_merge_partitions_falling_behind") or 0) >= 1:
                    seen_metric = "yes"
        assert seen_status, f"no pace warning in cdc status: {_status(work / 'pace.yaml')[-2000:]}"
        assert f"{run}.{run}.t[0] is read at" in seen_status and "arrive" in seen_status, seen_status
        assert seen_metric
        stop = True
        set_consumer_quota(bs, None)

        def cleared() -> bool:  # (the source keeps writing a little: batches go on reading, and are judged)
            write(5)
            return _metric(cfg.spark.metrics_port, "cdc_merge_partitions_falling_behind") == 0
        wait_for(cleared, 300, interval=1.0, what="the pace warning cleared once reads run again",
                 state=lambda: _status(work / "pace.yaml")[-2000:])
        assert "is read at" not in _status(work / "pace.yaml")  # gone from cdc status too
        wait_for(lambda: _merged(cfg, run) == written, 300, what="every row merged once reads run again")
    finally:
        if not stop:
            set_consumer_quota(bs, None)
        producer.stop()
        job.stop()
