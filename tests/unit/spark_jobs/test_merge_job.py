"""The merge job's figures as the job serves them (its batch report's, every source's job's), and the
topics it reads."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from common.config import CDCConfig
from common.metrics_http import serve_metrics
from contract.topics import table_topic_pattern
from spark_jobs.report.batch_report import KafkaLag
from spark_jobs.merge_job import MergeJob, job_metrics, jobs_alive, queries_running


def _job(tmp_path) -> MergeJob:
    cfg = CDCConfig()
    cfg.state_dir = str(tmp_path / "state")
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    return MergeJob(cfg)


def test_batch_figures_are_aggregated_and_exposed(tmp_path):
    job = _job(tmp_path)
    job.report.kafka_lag = None  # (no Kafka here: see the next test)
    stats = [{"topic": "cdc.shop.t", "partition": 0, "input": 100, "emitted": 90, "dropped": 7, "copies": 3,
              "dead": 0, "upserted": 80, "deleted": 10, "sink_rows": {"postgres|shop.t": 90},
              "latencies_ms": [[float(i), 1] for i in range(1, 101)]},
             {"topic": "cdc.shop.t", "partition": 1, "input": 50, "emitted": 50, "dropped": 0, "copies": 0,
              "dead": 1, "upserted": 50, "deleted": 0, "sink_rows": {"postgres|shop.t": 50, "mysql|shop.t": 50},
              "latencies_ms": [[500.0, 1]]}]
    states = {"cdc.shop.t|0": {"buffer": {"windows": [["s1", 1, "0001", None, [[1], [2]]]]}}, "cdc.shop.t|1": {}}
    job._report(7, stats, markers=4, seconds=0.5, ranges={"cdc.shop.t[0]": (0, 100), "cdc.shop.t[1]": (0, 50)},
                states=states)
    status = json.loads((tmp_path / "state" / "merge-status.json").read_text())
    lb = status["last_batch"]
    assert lb["input"] == 150 and lb["dropped"] == 7 and lb["copies"] == 3 and lb["dead"] == 1
    assert lb["rows_per_second"] == 300.0 and lb["latency_p50_ms"] == 51.0 and lb["latency_p99_ms"] == 100.0
    text = job.prometheus()
    assert "# HELP cdc_merge_input_total Records read from the table topics" in text
    assert "# TYPE cdc_merge_input_total counter" in text
    assert "cdc_merge_input_total 150.0" in text and "cdc_merge_dropped_total 7.0" in text
    assert "cdc_merge_last_batch_latency_p99_ms 100.0" in text
    assert 'cdc_merge_sink_rows_total{sink="postgres",table="shop.t"} 140.0' in text
    assert 'cdc_merge_sink_rows_total{sink="mysql",table="shop.t"} 50.0' in text
    assert "cdc_merge_open_windows 1.0" in text and "cdc_merge_window_keys 2.0" in text
    # histograms: 101 latencies, 100 of them at most 0.1 s, one of 0.5 s; one batch of 0.5 s
    assert 'cdc_merge_latency_seconds_bucket{le="0.1"} 100.0' in text
    assert 'cdc_merge_latency_seconds_bucket{le="0.5"} 101.0' in text and "cdc_merge_latency_seconds_count 101.0" in text
    assert 'cdc_merge_batch_seconds_bucket{le="0.25"} 0.0' in text and 'cdc_merge_batch_seconds_bucket{le="0.5"} 1.0' in text
    server = serve_metrics(_free_port(), job_metrics(job))
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert text in body and "process_cpu_seconds_total" in body  # (and the process's own)


def test_the_kafka_lag_is_each_partitions_log_end_past_the_last_read(tmp_path):
    job = _job(tmp_path)
    asked = []

    def end_offsets(parts):
        asked.append(sorted(parts))
        return {("cdc.shop.t", 0): (0, 130), ("cdc.shop.t", 1): (0, 50)}
    job.report.kafka_lag = KafkaLag(end_offsets)
    job._report(1, [{"input": 1}], markers=0, seconds=0.1, ranges={"cdc.shop.t[0]": (0, 100), "cdc.shop.t[1]": (0, 50)})
    text = job.prometheus()
    assert 'cdc_merge_kafka_lag{partition="0",topic="cdc.shop.t"} 30.0' in text
    assert 'cdc_merge_kafka_lag{partition="1",topic="cdc.shop.t"} 0.0' in text
    job.prometheus()
    assert asked == [[("cdc.shop.t", 0), ("cdc.shop.t", 1)]]  # (looked up at most every INTERVAL_S)


def test_probes_say_why_the_job_is_not_ready_or_stuck(tmp_path):
    job = _job(tmp_path)
    assert queries_running([job]) == (False, "the merge query of source cdc is not running: not started yet")
    job.report.query_running = True
    assert queries_running([job]) == (True, "ok") and jobs_alive([job], 60) == (True, "ok")
    job.running.starts(5, time.monotonic() - 120, {})
    ok, reason = jobs_alive([job], 60)
    assert not ok and "batch 5 of source cdc has run for 120s" in reason
    server = serve_metrics(_free_port(), job_metrics(job), health=lambda: jobs_alive([job], 60),
                           ready=lambda: queries_running([job]))
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/healthz", timeout=5)
        assert err.value.code == 503 and "has run for" in err.value.read().decode()
    finally:
        server.shutdown()


def test_every_sources_job_is_served_labelled_with_its_source(tmp_path):
    from common.config import NamedSourceConfig
    cfg = CDCConfig()
    cfg.state_dir = str(tmp_path / "state")
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    cfg.sources = [NamedSourceConfig(name="east"), NamedSourceConfig(name="west", server_id=2)]
    east, west = (MergeJob(cfg, c) for c in cfg.captured_sources())
    east._report(1, [{"input": 10, "held": 4}], markers=0, seconds=1.0)
    west._report(1, [{"input": 3}], markers=0, seconds=1.0)
    east._report(2, [{"input": 1, "held": 0}], markers=0, seconds=1.0)
    assert (east.held, east.held_peak) == (0, 4)
    east.peers = west.peers = [east, west]
    text = east.prometheus()
    assert text.count("# TYPE cdc_merge_input_total counter") == 1
    assert 'cdc_merge_input_total{source="east"} 11.0' in text and 'cdc_merge_input_total{source="west"} 3.0' in text
    assert 'cdc_merge_held_records{source="east"} 0.0' in text
    assert 'cdc_merge_batch_seconds_count{source="west"} 1.0' in text
    assert json.loads((tmp_path / "state" / "merge-status-west.json").read_text())["totals"]["input"] == 3
    west.peers = [west]
    assert "source=" not in west.prometheus()


def test_table_topic_pattern_takes_only_table_topics():
    import re
    rx = re.compile(table_topic_pattern("cdc"))
    assert rx.fullmatch("cdc.shop.orders")
    for other in ("cdc", "cdc._schemas", "cdc._markers", "cdc.transaction", "cdc.clean.shop.orders", "cdcx.shop.t",
                  "other.shop.orders"):
        assert not rx.fullmatch(other), other


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
