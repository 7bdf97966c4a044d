"""Flink CDC's incremental snapshot in the peers' race (:mod:`cdc.bench.peers_race`).

Flink CDC's MySQL source (``flink-connector-mysql-cdc``, Flink's own implementation of the
chunked, lock-free snapshot our producer's is modelled on) reads the bench table in a local
MiniCluster in a JVM of its own, at a given parallelism, and Flink's Kafka sink writes each
row as Kafka Connect's JsonConverter would (key and value with schemas) to one topic.  The
runner is ``java/FlinkCdcSnapshot.java``, compiled here at run time against ``.jars/flink-cdc``
(``make jars``, java/flink-cdc/pom.xml); its jars are never on another JVM's class path (they
bring Debezium 1.9.8).

On MariaDB its MySQL Connector/J 8.0 needs the server to report a MySQL version before 5.7.20
(:data:`cdc.bench.debezium.SERVER_VERSION_ARG`).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from cdc.bench.connect_worker import properties_text
from cdc.bench.harness import ProcessTreePeak
from cdc.bench.javac import compiled_classes
from cdc.errors import BenchError
from common.jars import java_binary, module_jars

MODULE = "flink-cdc"
RUNNER_SOURCE = Path(__file__).with_name("java") / "FlinkCdcSnapshot.java"
RUNNER_CLASS = "FlinkCdcSnapshot"
#: Flink CDC's jars first: ``flink-connector-mysql-cdc`` carries patched copies of Debezium
#: 1.9.8 classes that must win over ``debezium-connector-mysql``'s own.
_FIRST = ("flink-connector-mysql-cdc-", "flink-connector-debezium-", "flink-cdc-")
#: What Flink 1.20 opens on Java 17 (its own ``env.java.opts.all`` defaults, in part).
JVM_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.util", "java.util.concurrent", "java.io", "java.net", "java.nio", "java.lang.reflect",
    "java.text", "java.time", "java.math", "sun.nio.ch")]


def classpath(extra: Path | None = None) -> str:
    jars = module_jars(MODULE)
    first = [j for prefix in _FIRST for j in jars if j.name.startswith(prefix)]
    rest = [j for j in jars if j not in first]
    return os.pathsep.join(([str(extra)] if extra else []) + [str(j) for j in first + rest])


def versions() -> dict[str, str]:
    """The versions of Flink CDC, Flink and the Debezium it bundles, from the jars' names."""
    out = {}
    for name, prefix in (("flink_cdc", "flink-connector-mysql-cdc-"), ("flink", "flink-runtime-"),
                         ("debezium", "debezium-connector-mysql-"), ("kafka_sink", "flink-connector-kafka-")):
        jar = next((j for j in module_jars(MODULE) if j.name.startswith(prefix) and j.name[len(prefix)].isdigit()),
                   None)
        out[name] = jar.name[len(prefix):-4] if jar else "?"
    return out


def compile_runner(cache: Path) -> Path:
    """``FlinkCdcSnapshot.java`` compiled once per source text and class path: its class dir."""
    cp = classpath()
    return compiled_classes(RUNNER_SOURCE, RUNNER_CLASS, cp, cache, "flink", depends=cp.encode())


def runner_properties(mysql: dict, db: str, table: str, *, parallelism: int, chunk_size: int, bootstrap: str,
                      topic: str, producer: dict[str, Any], server_id_base: int) -> dict[str, Any]:
    if parallelism < 1:
        raise BenchError(f"Flink CDC's parallelism must be at least 1, not {parallelism}")
    return {"host": mysql["host"], "port": mysql["port"], "user": mysql["admin_user"],
            "password": mysql["admin_password"], "database": db, "table": table,
            "server.ids": f"{server_id_base}-{server_id_base + parallelism}", "parallelism": parallelism,
            "chunk.size": chunk_size, "fetch.size": 1024, "bootstrap": bootstrap, "topic": topic,
            **{f"producer.{k}": v for k, v in producer.items()}}


class FlinkCdcRun:
    """One Flink CDC job in its JVM: :meth:`start` launches it (``launch``: the monotonic time
    just before), :meth:`finish` waits for its end and returns its peak RSS."""

    def __init__(self, work: Path, props: dict[str, Any], *, heap: str | None, cache: Path) -> None:
        self.work, self.props, self.heap, self.cache = Path(work), props, heap, cache
        self.proc: subprocess.Popen | None = None
        self.peak: ProcessTreePeak | None = None
        self.launch = 0.0

    def start(self) -> "FlinkCdcRun":
        classes = compile_runner(self.cache)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "flink.properties").write_text(properties_text(self.props))
        argv = [java_binary(), *([f"-Xmx{self.heap}"] if self.heap else []), *JVM_OPENS,
                *os.environ.get("CDC_BENCH_JVM_OPTS", "").split(), "-cp", classpath(classes), RUNNER_CLASS,
                str(self.work / "flink.properties")]
        self.launch = time.monotonic()
        with open(self.work / "flink.log", "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        self.peak = ProcessTreePeak(self.proc.pid).start()
        return self

    def check(self) -> None:
        """Raises when the JVM ended before its records were all there."""
        if self.proc is not None and self.proc.poll() is not None and self.proc.returncode != 0:
            raise BenchError(f"Flink CDC's job failed (exit {self.proc.returncode}); see {self.work / 'flink.log'}:\n"
                             f"{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        path = self.work / "flink.log"
        if not path.exists():
            return ""
        lines = [ln for ln in path.read_text(errors="replace").splitlines()
                 if not ln.lstrip().startswith(("at ", "..."))]
        return "\n".join(lines)[-chars:]

    def finish(self, timeout_s: float = 15.0) -> float | None:
        """Ends the JVM: its job's end awaited ``timeout_s`` (the records are counted already; at
        parallelism 2 a reader left without a chunk can keep a snapshot-only job from ending),
        then SIGTERM, then SIGKILL; its peak RSS (MB)."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        return self.peak.stop() if self.peak else None
