"""The stack the tests run against: embedded processes, or testcontainers with Docker."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pymysql

from cdc.stack.manager import SINK_DATABASE, read_stack, restart_mysql, stack_config, stack_down, stack_up
from cdc.stack.process import log_tail
from common.processes import pid_alive
from common.config import CDCConfig


@dataclass
class StackHandle:
    """Connection details of the test stack (same shape as the stack's ``stack.json``)."""

    data: dict
    state_dir: Path
    closer: Callable[[], None] = field(default=lambda: None)
    kind: str = "embedded"
    containers: dict = field(default_factory=dict)  # name -> testcontainers container (containers kind)

    @property
    def mysql(self) -> dict:
        return self.data["mysql"]

    @property
    def bootstrap(self) -> str:
        return self.data["kafka"]["bootstrap_servers"]

    @property
    def pg_dsn(self) -> str:
        return self.data["postgres"]["dsn"]

    def admin(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        m = self.mysql
        return pymysql.connect(host=m["host"], port=m["port"], user=m["admin_user"], password=m["admin_password"],
                               database=database, autocommit=True, charset="utf8mb4", **kw)

    def cdc(self, database: str | None = None, **kw) -> pymysql.connections.Connection:
        m = self.mysql
        return pymysql.connect(host=m["host"], port=m["port"], user=m["cdc_user"], password=m["cdc_password"],
                               database=database, autocommit=True, charset="utf8mb4", **kw)

    def config(self) -> CDCConfig:
        return stack_config(self.data, self.state_dir)

    def close(self) -> None:
        self.closer()

    def dead_servers(self) -> list[str]:
        """The embedded servers of this stack (as its ``stack.json`` records them now: a
        restarted server under its new pid) whose process has ended, each with the end of its
        log and the free space of the disk its data is on; ``[]`` when all run."""
        if self.kind != "embedded":
            return []
        data = read_stack(self.state_dir) or {}
        servers = [("mysql", data.get("mysql"))]
        servers += [(f"replica {i}", r) for i, r in enumerate(data.get("replicas") or [], start=1)]
        servers += [(f"mysql{i}", r) for i, r in enumerate(data.get("sources") or [], start=2)]
        kafka = data.get("kafka") or {}
        if kafka.get("embedded"):
            servers += [(f"Kafka node {n.get('id')}", n) for n in kafka.get("nodes") or []]
        pg = data.get("postgres") or {}
        if pg.get("embedded"):
            servers.append(("PostgreSQL", pg))
        dead = []
        for name, info in servers:
            if not info or not info.get("pid") or pid_alive(info["pid"]):
                continue
            log = Path(info.get("log") or "")
            free = shutil.disk_usage(log.parent if log.parent.exists() else self.state_dir).free
            dead.append(f"{name} (pid {info['pid']}) of the stack in {self.state_dir} is not running "
                        f"({free / 2**30:.1f} GB free on its disk); the end of {log}:\n{_tail(log)}")
        return dead

    def stack_up_beside(self, state_dir: Path, *args: str) -> subprocess.CompletedProcess:
        """``cdc stack up --state-dir STATE_DIR ARGS`` as a process, with this stack's Kafka and
        PostgreSQL (its own MariaDB servers only)."""
        return subprocess.run([sys.executable, "-m", "cdc.cli", "stack", "up", *args, "--state-dir", str(state_dir),
                               "--kafka-bootstrap", self.bootstrap, "--postgres-dsn", self.pg_dsn],
                              cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)

    def restart_source(self, down_s: float = 0.0) -> None:
        """Stop the source server, wait ``down_s``, start it again on the same address."""
        if self.kind == "embedded":
            self.data["mysql"] = restart_mysql(self.state_dir, down_s=down_s)
            return
        c = self.containers["mysql"].get_wrapped_container()  # pragma: no cover - needs Docker
        c.stop()
        time.sleep(down_s)
        c.start()
        port = int(self.containers["mysql"].get_exposed_port(3306))
        if port != self.mysql["port"]:
            raise RuntimeError(f"the MySQL container came back on port {port}, not {self.mysql['port']}")

    @contextlib.contextmanager
    def broker_frozen(self):
        """The broker stops answering (process or container paused) inside the block."""
        if self.kind == "embedded":
            nodes = self.data["kafka"]["nodes"]
            for node in nodes:
                if not _listens(node["pid"], node["port"]):
                    raise RuntimeError(f"the Kafka node on port {node['port']} is not process {node['pid']}: the "
                                       "stack's record is stale")
            try:
                for node in nodes:
                    os.kill(node["pid"], signal.SIGSTOP)
                for node in nodes:
                    _wait_stopped(node["pid"])
                yield
            finally:
                for node in nodes:
                    os.kill(node["pid"], signal.SIGCONT)
            return
        c = self.containers["kafka"].get_wrapped_container()  # pragma: no cover - needs Docker
        c.pause()
        try:
            yield
        finally:
            c.unpause()


def _tail(path: Path) -> str:
    try:
        return "\n".join(log_tail(path))
    except OSError as exc:
        return f"(unreadable: {exc})"


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on TCP ``port`` (Linux /proc; True
    where that cannot be told)."""
    try:
        inodes = set()
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(name) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":  # LISTEN
                        inodes.add(cols[9])
        fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return True
    return any(f"socket:[{i}]" in fds for i in inodes)


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Until every thread of ``pid`` is stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                      for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return
        if all(s == "T" for s in states):
            return
        time.sleep(0.01)
    raise RuntimeError(f"the broker (process {pid}) did not stop within {timeout:g}s")


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def start_test_stack(state_dir: Path) -> StackHandle:
    if os.environ.get("CDC_TEST_STACK") == "containers":
        if docker_available():
            return _start_containers(state_dir)
        print("CDC_TEST_STACK=containers but no Docker engine answers: using the embedded stack")
    info = stack_up(state_dir)
    return StackHandle(info.data, state_dir, closer=lambda: stack_down(state_dir), kind="embedded")


def start_source_stack(state_dir: Path, beside: StackHandle, flavor: str) -> StackHandle:
    """A source server of ``flavor`` (``cdc stack up --flavor``) in ``state_dir``, with the Kafka
    and PostgreSQL of the stack ``beside``; closing it stops that server only."""
    info = stack_up(state_dir, kafka_bootstrap=beside.bootstrap, postgres_dsn=beside.pg_dsn, flavor=flavor)
    return StackHandle(info.data, state_dir, closer=lambda: stack_down(state_dir), kind="embedded")


def _start_containers(state_dir: Path) -> StackHandle:  # pragma: no cover - needs a Docker engine
    """MySQL 8.4 with the binlog settings, Apache Kafka in KRaft mode, PostgreSQL."""
    from testcontainers.kafka import KafkaContainer
    from testcontainers.mysql import MySqlContainer
    from testcontainers.postgres import PostgresContainer

    from cdc.stack.mysql_server import cdc_user_statements

    mysql = MySqlContainer("mysql:8.4", username="root", password="root-test", dbname="mysql").with_command(
        "--log-bin=mysql-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL "
        "--server-id=1 --gtid-mode=ON --enforce-gtid-consistency=ON")
    kafka = KafkaContainer("apache/kafka:3.9.0").with_kraft()
    postgres = PostgresContainer("postgres:16")
    started = []
    try:
        for c in (mysql, kafka, postgres):
            c.start()
            started.append(c)
        host, port = mysql.get_container_host_ip(), int(mysql.get_exposed_port(3306))
        cdc_password = "cdc-test"
        signal_table = "cdc_control.cdc_signal"
        conn = pymysql.connect(host=host, port=port, user="root", password="root-test", autocommit=True)
        with conn.cursor() as cur:
            for stmt in cdc_user_statements(conn, "cdc", cdc_password, signal_table):
                cur.execute(stmt)
        conn.close()
        data = {
            "mysql": {"host": host, "port": port, "admin_user": "root", "admin_password": "root-test",
                      "cdc_user": "cdc", "cdc_password": cdc_password, "signal_table": signal_table,
                      "flavor": "mysql", "pid": None},
            "kafka": {"embedded": False, "bootstrap_servers": kafka.get_bootstrap_server(), "pid": None},
            "postgres": {"embedded": False, "pid": None,
                         "dsn": postgres.get_connection_url().replace("postgresql+psycopg2://", "postgresql://")},
        }
    except BaseException:
        for c in started:
            c.stop()
        raise

    def close() -> None:
        for c in started:
            c.stop()
    return StackHandle(data, state_dir, closer=close, kind="containers",
                       containers={"mysql": mysql, "kafka": kafka, "postgres": postgres})


__all__ = ["StackHandle", "start_source_stack", "start_test_stack", "SINK_DATABASE"]
