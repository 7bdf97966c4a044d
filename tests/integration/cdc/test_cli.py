"""The cdc command as a user runs it: produce, status, metrics, SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from cdc.stack.process import free_port
from tests.producer_helpers import ROOT, ProducerProcess, read_events, start_at_current, wait_for


def test_produce_status_metrics_and_clean_stop(stack, config, test_db, tmp_path):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    config.producer.metrics_port = free_port()
    start_at_current(config)
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    try:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(50)])
        topic = f"{config.kafka.topic_prefix}.{test_db}.t"
        wait_for(lambda: len(read_events(config, topic)) == 50, 60, what="50 events")

        def metrics() -> str:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{config.producer.metrics_port}/metrics",
                                              timeout=2).read().decode()
            except OSError:
                return ""
        wait_for(lambda: "cdc_producer_events_total 50.0" in metrics(), 30, what="metrics")
        text = metrics()
        assert "cdc_producer_seconds_behind_source" in text
        assert f'cdc_producer_events_seen_total{{op="c",table="{test_db}.t"}} 50.0' in text
        name = config.producer.name
        assert (f'debezium_metrics_Connected{{context="streaming",name="{name}",plugin="mysql"}} 1.0' in text)
        ready = urllib.request.urlopen(f"http://127.0.0.1:{config.producer.metrics_port}/readyz", timeout=2)
        assert ready.status == 200
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(proc.path), "status"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "stored position" in out.stdout and "mysql-bin." in out.stdout and "50" in out.stdout
    finally:
        assert proc.stop() == 0  # SIGTERM: commits and exits cleanly


def test_missing_config_and_bad_source_are_clear_errors(tmp_path, config, config_file):
    out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(tmp_path / "nope.yaml"), "produce"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "not found" in out.stderr and "Traceback" not in out.stderr
    text = config_file.read_text().replace(f"user: {config.source.user}", "user: nobody")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(bad), "produce"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "nobody" in out.stderr and "Traceback" not in out.stderr
