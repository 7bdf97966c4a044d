"""The merge job's figures as the job serves them (its batch report's, every source's job's), and the
topics it reads."""

from __future__ import annotations

import json
import urllib.request

from common.config import CDCConfig
from common.metrics_http import serve_metrics
from contract.topics import table_topic_pattern
from spark_jobs.merge_job import MergeJob


def _job(tmp_path) -> MergeJob:
    cfg = CDCConfig()
    cfg.state_dir = str(tmp_path / "state")
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    return MergeJob(cfg)


def test_batch_figures_are_aggregated_and_exposed(tmp_path):
    job = _job(tmp_path)
    stats = [{"input": 100, "emitted": 90, "dropped": 7, "copies": 3, "dead": 0, "upserted": 80, "deleted": 10,
              "latencies_ms": [[float(i), 1] for i in range(1, 101)]},
             {"input": 50, "emitted": 50, "dropped": 0, "copies": 0, "dead": 1, "upserted": 50, "deleted": 0,
              "latencies_ms": [[500.0, 1]]}]
    job._report(7, stats, markers=4, seconds=0.5)
    status = json.loads((tmp_path / "state" / "merge-status.json").read_text())
    lb = status["last_batch"]
    assert lb["input"] == 150 and lb["dropped"] == 7 and lb["copies"] == 3 and lb["dead"] == 1
    assert lb["rows_per_second"] == 300.0 and lb["latency_p50_ms"] == 51.0 and lb["latency_p99_ms"] == 100.0
    text = job.prometheus()
    assert "cdc_merge_input_total 150" in text and "cdc_merge_dropped_total 7" in text
    assert "cdc_merge_last_batch_latency_p99_ms 100.0" in text
    server = serve_metrics(_free_port(), job.prometheus)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert body == text


def test_every_sources_job_is_served_labelled_with_its_source(tmp_path):
    from common.config import NamedSourceConfig
    from spark_jobs.batch_report import prometheus_text
    cfg = CDCConfig()
    cfg.state_dir = str(tmp_path / "state")
    cfg.spark.checkpoint_dir = str(tmp_path / "ckpt")
    cfg.sources = [NamedSourceConfig(name="east"), NamedSourceConfig(name="west", server_id=2)]
    east, west = (MergeJob(cfg, c) for c in cfg.captured_sources())
    east._report(1, [{"input": 10, "held": 4}], markers=0, seconds=1.0)
    west._report(1, [{"input": 3}], markers=0, seconds=1.0)
    east._report(2, [{"input": 1, "held": 0}], markers=0, seconds=1.0)
    assert (east.held, east.held_peak) == (0, 4)
    text = prometheus_text([east, west])
    assert text.count("# TYPE cdc_merge_input_total counter") == 1
    assert 'cdc_merge_input_total{source="east"} 11' in text and 'cdc_merge_input_total{source="west"} 3' in text
    assert 'cdc_merge_held_records{source="east"} 0' in text
    assert json.loads((tmp_path / "state" / "merge-status-west.json").read_text())["totals"]["input"] == 3
    assert "source=" not in prometheus_text([west])


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
