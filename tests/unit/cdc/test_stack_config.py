"""The embedded stack's configurations with monitoring and Spark's UI: the metrics ports its
Prometheus scrapes (a port per source's producer) and the UI port."""

from __future__ import annotations

from pathlib import Path

import yaml

from cdc.stack.manager import stack_config, stack_sources_config
from cdc.stack.prometheus_server import prometheus_config

MYSQL = {"host": "127.0.0.1", "port": 3306, "cdc_user": "cdc", "cdc_password": "pw", "signal_table": "c.s",
         "admin_user": "root", "admin_password": "pw"}
DATA = {"mysql": MYSQL, "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
        "postgres": {"dsn": "postgresql://postgres@127.0.0.1:5432/postgres"}}


def test_without_monitoring_no_port_is_set(tmp_path: Path):
    cfg = stack_config(DATA, tmp_path)
    assert (cfg.producer.metrics_port, cfg.spark.metrics_port, cfg.spark.ui_port) == (None, None, None)


def test_monitoring_ports_reach_every_sources_producer_and_the_merge_job(tmp_path: Path):
    data = {**DATA, "sources": [{**MYSQL, "port": 3307}], "spark_ui_port": 4041,
            "monitoring": {"producer_port": 9100, "merge_port": 9200}}
    cfg = stack_config(data, tmp_path)
    assert (cfg.producer.metrics_port, cfg.spark.metrics_port, cfg.spark.ui_port) == (9100, 9200, 4041)
    several = stack_sources_config(data, tmp_path)
    assert [several.for_source(s.name).producer.metrics_port for s in several.sources] == [9100, 9101]
    # what start_monitoring hands Prometheus for two sources
    conf = prometheus_config({"cdc-producer": [("127.0.0.1:9100", {}), ("127.0.0.1:9101", {})],
                              "cdc-merge": [("127.0.0.1:9200", {})]}, 9090)
    targets = {j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]] for j in conf["scrape_configs"]}
    assert targets == {"cdc-producer": ["127.0.0.1:9100", "127.0.0.1:9101"], "cdc-merge": ["127.0.0.1:9200"],
                       "prometheus": ["127.0.0.1:9090"]}
    assert yaml.safe_load(yaml.safe_dump(conf))["global"]["scrape_interval"] == "2s"
