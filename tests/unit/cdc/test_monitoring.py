"""The monitoring files, checked by Prometheus's own tool: the alert rules load and fire on the
series they are about (``promtool test rules``), the embedded stack's and compose's Prometheus
configurations load, and the Grafana dashboard's queries parse."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from cdc.stack.prometheus_server import ALERTS_FILE, prometheus_config
from tests.monitoring_helpers import DASHBOARD, dashboard_queries, metric_names

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/ensure-system-deps.sh installs Debian's prometheus"
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_alert_rules_load_and_fire_on_their_series():
    out = _promtool("check", "rules", str(ALERTS_FILE))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 11 rules found" in out.stdout
    out = _promtool("test", "rules", "alerts_test.yml", cwd=HERE)
    assert out.returncode == 0, out.stdout + out.stderr
    tested = {t["alertname"] for group in yaml.safe_load((HERE / "alerts_test.yml").read_text())["tests"]
              for t in group["alert_rule_test"]}
    rules = {r["alert"] for g in yaml.safe_load(ALERTS_FILE.read_text())["groups"] for r in g["rules"]}
    assert tested == rules  # every alert has a test


def test_a_broken_rule_is_refused(tmp_path):
    broken = ALERTS_FILE.read_text().replace("expr: cdc_merge_partitions_falling_behind > 0",
                                             "expr: cdc_merge_partitions_falling_behind >")
    path = tmp_path / "alerts.yml"
    path.write_text(broken)
    assert _promtool("check", "rules", str(path)).returncode != 0


def test_the_embedded_and_compose_prometheus_configurations_load(tmp_path):
    embedded = tmp_path / "embedded.yml"
    embedded.write_text(yaml.safe_dump(prometheus_config(
        {"cdc-producer": [("127.0.0.1:9100", {}), ("127.0.0.1:9101", {})], "cdc-merge": [("127.0.0.1:9200", {})]},
        9090)))
    out = _promtool("check", "config", str(embedded))
    assert out.returncode == 0, out.stdout + out.stderr
    compose = yaml.safe_load((ROOT / "docker" / "prometheus" / "prometheus.yml").read_text())
    assert compose["rule_files"] == ["/etc/prometheus/alerts.yml"]  # (where compose mounts ALERTS_FILE)
    compose["rule_files"] = [str(ALERTS_FILE)]
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump(compose))
    out = _promtool("check", "config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    # the same job names: the alert rules and the dashboard name them
    jobs = {j["job_name"] for j in compose["scrape_configs"]}
    assert jobs == {j["job_name"] for j in yaml.safe_load(embedded.read_text())["scrape_configs"]}


def test_the_dashboard_names_the_provisioned_data_source_and_our_metrics():
    dash = json.loads(DASHBOARD.read_text())
    ds = yaml.safe_load((ROOT / "docker" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"]["uid"] == uid for p in panels)
    queries = dashboard_queries(dash)
    assert len(queries) >= 20
    names = set().union(*(metric_names(q) for q in queries))
    assert {"debezium_metrics_MilliSecondsBehindSource", "debezium_metrics_RowsScanned", "cdc_merge_kafka_lag",
            "cdc_merge_latency_seconds_bucket", "cdc_merge_lost_records_total"} <= names
    assert metric_names('histogram_quantile(0.99, sum by (le, job) (rate(x_bucket{job=~"a.*"}[5m]))) / on (job) '
                        'group_left y offset 5m and bool z') == {"x_bucket", "y", "z"}
