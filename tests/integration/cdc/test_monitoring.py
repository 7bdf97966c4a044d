"""``cdc stack up --monitoring`` with a producer and a merge job running as a user runs them:
Prometheus scrapes both, their series move under a load, the alert rules are loaded, the
health probes answer, and every query of the Grafana dashboard names series the running
processes export (read through this test's Prometheus); and Spark's UI of the merge job
(``--spark-ui``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pymysql
import pytest

from cdc.stack.manager import read_stack, stack_down
from cdc.stack.process import pid_alive
from common.config import dump_config, load_config
from contract.signals import execute_snapshot_data
from tests.monitoring_helpers import (
    DASHBOARD,
    dashboard_queries,
    metric_names,
    prometheus_get,
    prometheus_query,
    prometheus_series,
)
from tests.producer_helpers import ROOT, wait_for


class Watched:
    """The monitored stack: its Prometheus, its server, and the producer and merge job processes."""

    def __init__(self, state: Path, data: dict, cfg_path: Path, db: str) -> None:
        self.state, self.data, self.cfg_path, self.db = state, data, cfg_path, db
        self.cfg = load_config(cfg_path)
        self.url = data["monitoring"]["prometheus"]["url"]
        self.procs: dict[str, subprocess.Popen] = {}

    def admin(self) -> pymysql.connections.Connection:
        m = self.data["mysql"]
        return pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                               database=self.db, autocommit=True)

    def start(self, name: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
        with open(self.state / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(self.cfg_path), *args],
                                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def insert(self, start: int, n: int) -> None:
        with self.admin() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t (id, v) VALUES (%s, %s)", [(i, f"v{i}") for i in range(start, start + n)])
            cur.execute("UPDATE t SET v = CONCAT(v, '!') WHERE id >= %s AND id < %s", (start, start + 5))

    def value(self, expr: str) -> float:
        found = prometheus_query(self.url, expr)
        return sum(float(r["value"][1]) for r in found) if found else -1.0

    def probe(self, port: int, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status
        except OSError as exc:
            return getattr(exc, "code", 0)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


@pytest.fixture(scope="module")
def watched(stack, tmp_path_factory) -> Iterator[Watched]:
    state = tmp_path_factory.mktemp("monitored")
    out = stack.stack_up_beside(state, "--monitoring", "--spark-ui")
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        data = read_stack(state)
        assert "prometheus" in out.stdout and data["monitoring"]["prometheus"]["pid"]
        run = state.name.replace("-", "_")
        cfg = load_config(state / "cdc.yaml")
        assert cfg.producer.metrics_port == data["monitoring"]["producer_port"]
        assert cfg.spark.metrics_port == data["monitoring"]["merge_port"]
        assert cfg.spark.ui_port == data["spark_ui_port"] and "spark ui" in out.stdout
        cfg.kafka.topic_prefix = cfg.producer.name = f"mon_{run}"
        cfg.sinks.postgres.schema_name = f"mon_{run}"
        cfg.spark.master, cfg.spark.trigger_interval_s = "local[2]", 0.5
        cfg_path = state / "watched.yaml"
        cfg_path.write_text(dump_config(cfg))
        w = Watched(state, data, cfg_path, "shop")
        m = data["mysql"]
        with pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                             autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40))")
        w.insert(0, 500)  # before the producer: only a snapshot brings these rows
        w.start("producer", "produce")
        wait_for(lambda: w.probe(cfg.producer.metrics_port, "/readyz") == 200, 120, what="the producer ready")
        w.start("merge", "merge")
        wait_for(lambda: w.probe(cfg.spark.metrics_port, "/readyz") == 200, 240, what="the merge query running")
        with w.admin() as conn, conn.cursor() as cur:
            table = data["mysql"]["signal_table"]
            cur.execute(f"INSERT INTO {table} (id, type, data) VALUES ('mon-1', 'execute-snapshot', %s)",
                        (json.dumps(execute_snapshot_data(["shop.t"])),))
        for i in range(10):  # a load while the snapshot runs
            w.insert(1000 + 100 * i, 100)
            time.sleep(0.5)
        wait_for(lambda: w.value('debezium_metrics_SnapshotCompleted{context="snapshot"}') == 1, 180,
                 what="the snapshot completed, seen by Prometheus")
        # 500 snapshot rows at least and 1,050 changes: each process's figure as Prometheus last scraped it
        # (the two targets are scraped at different instants: one may be a scrape behind the other)
        wait_for(lambda: w.value("cdc_merge_input_total") >= 1550, 240, what="the merge job's batches, in Prometheus")
        wait_for(lambda: w.value('debezium_metrics_TotalNumberOfEventsSeen{context="streaming"}') >= 1550, 60,
                 what="the producer's events, in Prometheus")
        yield w
    finally:
        try:
            if "w" in locals():
                w.stop()
        finally:
            stopped = stack_down(state)
    assert "prometheus" in stopped and not pid_alive(data["monitoring"]["prometheus"]["pid"])


def test_prometheus_scrapes_the_producer_and_merge_job_and_their_series_move(watched):
    w, cfg = watched, watched.cfg
    targets = prometheus_get(w.url, "/api/v1/targets")["activeTargets"]
    assert {t["labels"]["job"]: t["health"] for t in targets} == {"cdc-producer": "up", "cdc-merge": "up",
                                                                   "prometheus": "up"}
    rules = [r["name"] for g in prometheus_get(w.url, "/api/v1/rules")["groups"] for r in g["rules"]]
    assert len(rules) == 11 and "CDCDataLoss" in rules and "CDCLakeStale" in rules
    assert w.value('debezium_metrics_RowsScanned{context="snapshot",table="shop.t"}') >= 500

    events = w.value('debezium_metrics_TotalNumberOfEventsSeen{context="streaming"}')
    merged = w.value("cdc_merge_input_total")
    applied = w.value('sum(cdc_merge_sink_rows_total{table="shop.t"})')
    assert events >= 1550 and merged >= 1550 and applied > 0
    w.insert(5000, 300)
    wait_for(lambda: w.value('debezium_metrics_TotalNumberOfEventsSeen{context="streaming"}') >= events + 300, 60,
             what="the producer's events moving in Prometheus")
    wait_for(lambda: w.value("cdc_merge_input_total") >= merged + 300, 120,
             what="the merge job's input moving in Prometheus")
    wait_for(lambda: w.value('sum(cdc_merge_sink_rows_total{table="shop.t"})') > applied, 60,
             what="the sinks' rows moving in Prometheus")
    assert w.value('cdc_producer_events_seen_total{table="shop.t",op="c"}') >= 1300
    assert w.value('cdc_merge_latency_seconds_count') > 0 and w.value("cdc_merge_batch_seconds_count") > 0
    assert w.value('debezium_metrics_Connected{context="streaming"}') == 1 and w.value("cdc_merge_query_running") == 1
    assert w.value('process_resident_memory_bytes{job="cdc-merge"}') > 0
    firing = [a["labels"]["alertname"] for a in prometheus_get(w.url, "/api/v1/alerts")["alerts"]
              if a["state"] == "firing"]
    assert firing == []
    for port in (cfg.producer.metrics_port, cfg.spark.metrics_port):
        assert (w.probe(port, "/healthz"), w.probe(port, "/readyz")) == (200, 200)


def test_the_merge_jobs_spark_ui_answers_on_the_stacks_port(watched):
    with urllib.request.urlopen(f"http://127.0.0.1:{watched.cfg.spark.ui_port}/api/v1/applications", timeout=10) as r:
        apps = json.loads(r.read())
    assert [a["name"] for a in apps] == [f"cdc-merge-{watched.cfg.kafka.topic_prefix}"]


def test_every_dashboard_query_names_series_the_processes_export(watched):
    w = watched
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    missing = [f"{name} (in {expr})" for expr in queries for name in sorted(metric_names(expr))
               if not prometheus_series(w.url, name)]
    assert missing == []

    def empty() -> list[str]:
        return [expr for expr in queries if not prometheus_query(w.url, expr)]

    # a rate over [1m] answers once its series has two samples: a series born a scrape ago has one
    wait_for(lambda: not empty(), 20, interval=1, what="every dashboard query answering", state=empty)


def test_stack_status_shows_prometheus_and_its_targets(watched):
    assert pid_alive(watched.data["monitoring"]["prometheus"]["pid"])
    status = subprocess.run([sys.executable, "-m", "cdc.cli", "stack", "status", "--state-dir", str(watched.state)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "prometheus" in status.stdout and "3 of 3 targets up" in status.stdout, status.stdout
