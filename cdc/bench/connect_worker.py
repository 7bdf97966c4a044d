"""A Kafka Connect worker as users run one: ``ConnectStandalone`` in a JVM of its own, on the
stack's Kafka, its connectors plugins of their own (``plugin.path``), driven through its REST
API.  The race's peers run in it (:mod:`cdc.bench.connect_race`, :mod:`cdc.bench.sink_race`).

The jars come from ``make jars``: the worker's from ``.jars/connect`` (java/connect/pom.xml),
each connector's from ``.jars/connect-plugins/<name>/`` (java/connect-debezium-*/pom.xml).
Nothing is fetched at run time.

A connector is created stopped, given its source offsets, then resumed (Kafka 3.9's
``initial_state`` and KIP-875's offsets API, both public REST calls), so a source connector
starts at exactly the binlog position the race gives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cdc.bench.harness import ProcessTreePeak
from cdc.errors import BenchError
from common.jars import jars_dir, module_classpath, java_binary

WORKER_MODULE = "connect"
PLUGINS_DIR = "connect-plugins"
STANDALONE = "org.apache.kafka.connect.cli.ConnectStandalone"

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def plugin_path() -> Path:
    """Where ``make jars`` put the connector plugins (one folder each)."""
    return jars_dir() / PLUGINS_DIR


def plugin_names() -> list[str]:
    """The connector plugins at hand (``debezium-mysql``, ``debezium-jdbc``, ...)."""
    folder = plugin_path()
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.jar"))) if folder.is_dir() else []


def require_plugins(*names: str) -> None:
    """A clear error when a plugin ``make jars`` should have fetched is missing."""
    missing = [n for n in names if n not in plugin_names()]
    if missing:
        raise BenchError(f"no Kafka Connect plugin {', '.join(missing)} in {plugin_path()}: run 'make jars' "
                         "(java/connect-debezium-*/pom.xml)")


def plugin_version(name: str, artifact_prefix: str) -> str:
    """The version of a plugin's main jar (``debezium-connector-mysql-3.6.1.Final.jar`` ->
    ``3.6.1.Final``), or ``?``."""
    for jar in sorted((plugin_path() / name).glob(f"{artifact_prefix}-*.jar")):
        rest = jar.stem[len(artifact_prefix) + 1:]
        if rest[:1].isdigit():
            return rest
    return "?"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def properties_text(props: dict[str, Any]) -> str:
    """``props`` as a Java properties file (values with ``\\`` escaped; keys are plain names)."""
    return "".join(f"{k}={str(v).replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())


class ConnectWorker:
    """One standalone worker: :meth:`start` launches it and waits for its REST API, the
    connector calls wrap that API, :meth:`stop` ends it (SIGTERM, then SIGKILL).  Its peak
    RSS (the JVM's ``VmHWM``, read from outside) is measured from the launch to :meth:`stop`.
    ``settings``: more worker properties (``producer.*`` overrides, ``offset.flush.interval.ms``,
    ...); ``heap``: the JVM's ``-Xmx`` (none: the JVM's default)."""

    def __init__(self, work: Path, bootstrap: str, *, heap: str | None = "1g",
                 settings: dict[str, Any] | None = None, log_level: str = "WARN") -> None:
        self.work, self.bootstrap, self.heap = Path(work), bootstrap, heap
        self.settings = dict(settings or {})
        self.log_level = log_level
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.launch_wall = self.launch_mono = 0.0
        self.peak: ProcessTreePeak | None = None
        self.rss_peak_mb: float | None = None

    # --- the process ----------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.work / "connect.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_properties(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.work / "offsets.dat"),
            "offset.flush.interval.ms": 10_000,
            "plugin.path": str(plugin_path()),
            "plugin.discovery": "only_scan",
            "listeners": f"http://127.0.0.1:{self.port}",
            **self.settings,
        }

    def start(self, timeout_s: float = 180.0) -> "ConnectWorker":
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        (self.work / "worker.properties").write_text(properties_text(self.worker_properties()))
        (self.work / "log4j2.properties").write_text(_LOG4J2.replace("{log}", str(self.log_path))
                                               .replace("{level}", self.log_level))
        argv = [java_binary(), *([f"-Xmx{self.heap}"] if self.heap else []),
                *os.environ.get("CDC_BENCH_JVM_OPTS", "").split(),
                f"-Dlog4j2.configurationFile={self.work / 'log4j2.properties'}",
                "-cp", module_classpath(WORKER_MODULE), STANDALONE, str(self.work / "worker.properties")]
        self.launch_wall, self.launch_mono = time.time(), time.monotonic()
        with open(self.work / "connect.out", "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.work)
        self.peak = ProcessTreePeak(self.proc.pid).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the Kafka Connect worker exited ({self.proc.returncode}) while starting; see "
                                 f"{self.log_path} and {self.work / 'connect.out'}:\n{self.tail()}")
            try:
                self.request("GET", "/")
                return self
            except (OSError, BenchError):
                time.sleep(0.1)
        self.stop()
        raise BenchError(f"the Kafka Connect worker did not answer on {self.url} within {timeout_s:.0f} s; "
                         f"see {self.log_path}")

    def tail(self, chars: int = 3000) -> str:
        text = ""
        for path in (self.log_path, self.work / "connect.out"):
            if path.exists():
                text += path.read_text(errors="replace")[-chars:]
        return text

    def stop(self) -> float | None:
        """Ends the worker; its peak RSS (MB)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.peak is not None:
            self.rss_peak_mb = self.peak.stop()
            self.peak = None
        return self.rss_peak_mb

    def __enter__(self) -> "ConnectWorker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the REST API ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise BenchError(f"Kafka Connect: {method} {path} answered {exc.code}: {detail[:2000]}") from exc
        return json.loads(text) if text.strip() else None

    def create(self, name: str, config: dict[str, Any], *, stopped: bool = False) -> None:
        body: dict[str, Any] = {"name": name, "config": {k: str(v) for k, v in config.items()}}
        if stopped:
            body["initial_state"] = "STOPPED"
        self.request("POST", "/connectors", body)

    def set_offsets(self, name: str, offsets: list[dict[str, Any]]) -> None:
        """A stopped source connector's offsets (``[{"partition": {...}, "offset": {...}}]``)."""
        self.wait_state(name, "STOPPED", tasks=False)
        self.request("PATCH", f"/connectors/{name}/offsets", {"offsets": offsets})

    def resume(self, name: str) -> None:
        self.request("PUT", f"/connectors/{name}/resume")

    def delete(self, name: str) -> None:
        self.request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/connectors/{name}/status")

    def check(self, name: str) -> dict[str, Any]:
        """The connector's status; a :class:`BenchError` with its trace when it or a task failed,
        or when the worker died."""
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(f"the Kafka Connect worker exited ({self.proc.returncode}); see {self.log_path}:\n"
                             f"{self.tail()}")
        st = self.status(name)
        for part in [st.get("connector") or {}, *(st.get("tasks") or [])]:
            if part.get("state") == "FAILED":
                raise BenchError(f"Kafka Connect connector {name} failed: {(part.get('trace') or '')[:3000]}")
        return st

    def wait_state(self, name: str, state: str, *, tasks: bool = True, timeout_s: float = 120.0) -> None:
        """Until the connector (and, with ``tasks``, at least one task and every task) is in ``state``."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.check(name)
            except BenchError as exc:
                if "answered 404" not in str(exc):
                    raise
                time.sleep(0.1)
                continue
            ts = last.get("tasks") or []
            if (last.get("connector") or {}).get("state") == state and \
                    (not tasks or (ts and all(t.get("state") == state for t in ts))):
                return
            time.sleep(0.1)
        raise BenchError(f"Kafka Connect connector {name} did not reach {state} within {timeout_s:.0f} s: {last}")
