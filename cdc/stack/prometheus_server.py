"""Prometheus for the embedded stack (``cdc stack up --monitoring``): the machine's
``prometheus`` binary (Debian's package, installed like MariaDB by
scripts/ensure-system-deps.sh) on loopback, scraping the stack's producers and merge job on
the metrics ports written into ``cdc.yaml``, with the alert rules of
``cdc/monitoring/alerts.yml`` (the file docker/compose.yaml mounts too).

Its configuration and data live under ``<state>/prometheus``. A Prometheus already running
keeps its port and data, and is told to read its configuration again (``/-/reload``) when
the targets changed.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from cdc.errors import StackError
from cdc.stack.process import free_port, pid_alive, port_open, spawn, stop_pid, wait_until

#: The alert rules (and the Grafana dashboard beside them), shipped with the package.
MONITORING_DIR = Path(__file__).resolve().parents[1] / "monitoring"
ALERTS_FILE = MONITORING_DIR / "alerts.yml"
#: How often the stack's Prometheus scrapes and evaluates its rules (s): short, for a laptop.
SCRAPE_INTERVAL_S = 2


def find_prometheus() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise StackError("no 'prometheus' binary on this machine: install it with 'sudo apt-get install -y "
                         "prometheus' (scripts/ensure-system-deps.sh does: make demo, make test), or leave out --monitoring")
    return path


def prometheus_config(targets: dict[str, list[tuple[str, dict[str, str]]]], self_port: int,
                      rules: Path = ALERTS_FILE, interval_s: int = SCRAPE_INTERVAL_S) -> dict:
    """Prometheus's configuration: a scrape job per entry of ``targets`` (job name ->
    ``[(host:port, labels)]``), itself, and the alert rules ``rules``."""
    jobs = [{"job_name": job, "static_configs": [{"targets": [address], "labels": labels} for address, labels in found]}
            for job, found in targets.items() if found]
    jobs.append({"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{self_port}"]}]})
    return {"global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
            "rule_files": [str(rules)], "scrape_configs": jobs}


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class EmbeddedPrometheus:
    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "prometheus"
        self.config_path = self.root / "prometheus.yml"
        self.data = self.root / "data"
        self.log = self.root / "prometheus.log"

    def start(self, targets: dict[str, list[tuple[str, dict[str, str]]]], previous: dict | None = None) -> dict:
        """Start (or reconfigure the running) Prometheus scraping ``targets``; its record for stack.json."""
        if not ALERTS_FILE.exists():
            raise StackError(f"the alert rules file {ALERTS_FILE} is missing")
        self.root.mkdir(parents=True, exist_ok=True)
        running = bool(previous) and pid_alive(previous.get("pid")) and _ready(previous.get("url", ""))
        port = previous["port"] if previous else free_port()
        if not running and port_open("127.0.0.1", port):  # taken by something else meanwhile
            port = free_port()
        text = yaml.safe_dump(prometheus_config(targets, port), sort_keys=False)
        changed = not self.config_path.exists() or self.config_path.read_text() != text
        self.config_path.write_text(text)
        url = f"http://127.0.0.1:{port}"
        if running:
            if changed:
                urllib.request.urlopen(urllib.request.Request(f"{url}/-/reload", method="POST"), timeout=10).close()
            return {**previous, "targets": _json_targets(targets)}
        argv = [find_prometheus(), f"--config.file={self.config_path}", f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=7d"]
        pid = spawn(argv, self.log)
        wait_until(lambda: _ready(url), 60, f"Prometheus on port {port}", pid=pid, log_path=self.log)
        return {"embedded": True, "url": url, "port": port, "pid": pid, "config": str(self.config_path),
                "log": str(self.log), "targets": _json_targets(targets)}

    def stop(self, info: dict) -> bool:
        return stop_pid(info.get("pid"), str(self.config_path))


def _json_targets(targets: dict[str, list[tuple[str, dict[str, str]]]]) -> dict[str, list[str]]:
    return {job: [address for address, _ in found] for job, found in targets.items()}


def prometheus_status(info: dict) -> tuple[bool, str]:
    """Whether the stack's Prometheus answers, and how many of its targets are up."""
    url = info.get("url", "")
    if not pid_alive(info.get("pid")) or not _ready(url):
        return False, f"Prometheus (pid {info.get('pid')}) is not running"
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as resp:
            active = json.loads(resp.read())["data"]["activeTargets"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        return False, f"{url} does not answer: {exc}"
    up = [t for t in active if t.get("health") == "up"]
    down = sorted(t["labels"].get("job", "?") + " " + t["scrapeUrl"] for t in active if t.get("health") != "up")
    return True, f"{url}, {len(up)} of {len(active)} targets up" + (f" (down: {', '.join(down)})" if down else "")
