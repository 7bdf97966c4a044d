"""A Spark standalone cluster on this machine, from pip's pyspark: a master and workers.

What ``docker compose`` runs as ``spark-master`` and ``spark-worker``, started here as
plain processes on loopback (``spark-class`` of the installed pyspark), for the tests and
the merge benchmark's scale-out run::

    with standalone_cluster(log_dir, workers=2, cores=1) as master:
        ...  # build_session(master) or spark-submit --master <master>
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from cdc.errors import StackError
from cdc.stack.process import free_port


def spark_env(log_dir: Path) -> dict[str, str]:
    """The environment of the cluster's processes (and of a driver talking to it)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(log_dir), "SPARK_WORKER_DIR": str(log_dir / "work")}


def _wait_for_line(path: Path, text: str, proc: subprocess.Popen, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = path.read_text(errors="replace")[-2000:]
    raise StackError(f"{what} did not start (see {path}):\n{tail}")


@contextlib.contextmanager
def standalone_cluster(log_dir: Path, *, workers: int = 1, cores: int = 1, memory: str = "1g") -> Iterator[str]:
    """A master and ``workers`` workers of ``cores`` cores each; yields the master's URL
    (``spark://127.0.0.1:<port>``); everything is stopped on exit."""
    import pyspark

    home = Path(pyspark.__file__).parent
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = spark_env(log_dir)
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def spawn(argv: list[str], log: Path) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        procs.append(p)
        return p

    try:
        log = log_dir / "master.log"
        p = spawn([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(port), "--webui-port", str(free_port())], log)
        _wait_for_line(log, "I have been elected leader", p, "the Spark master")
        started = []  # (the workers' JVMs start side by side: each then waited for in turn)
        for n in range(workers):
            log = log_dir / f"worker-{n}.log"
            started.append((log, spawn([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                                        "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                        "--webui-port", str(free_port()), "--work-dir", str(log_dir / f"work-{n}"),
                                        master], log)))
        for n, (log, p) in enumerate(started):
            _wait_for_line(log, "Successfully registered with master", p, f"Spark worker {n}")
        yield master
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
