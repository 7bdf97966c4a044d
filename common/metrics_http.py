"""The metrics port of a long-running command: Prometheus metrics and health probes.

``serve_metrics(port, registry, health=..., ready=...)`` serves, on ``0.0.0.0:port`` in a
daemon thread:

* ``/metrics`` (and ``/``): the registry in Prometheus's text format (prometheus-client's
  exposition: ``# HELP`` and ``# TYPE`` lines, escaped label values, histograms);
* ``/healthz``: whether the process is alive and its loop not stuck (``health()``);
* ``/readyz``: whether it is connected and doing its work (``ready()``).

A probe answers ``200 ok`` or ``503`` with the reason in the body (one line). The registry
of :func:`process_registry` holds prometheus-client's process, platform and garbage
collector collectors besides the command's own. Each command makes a registry of its own,
so that several producers or jobs in one process (the tests) do not collide.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

log = logging.getLogger(__name__)

#: A probe's answer: ``(ok, reason)``; the reason says what is wrong when not ok.
Probe = Callable[[], tuple[bool, str]]


def process_registry() -> CollectorRegistry:
    """A registry with the process (``process_*``: CPU, memory, open files), platform
    (``python_info``) and garbage collector (``python_gc_*``) collectors."""
    disable_created_metrics()  # (no ``*_created`` series beside each counter and histogram)
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def _always_ok() -> tuple[bool, str]:
    return True, "ok"


def serve_metrics(port: int | None, registry: CollectorRegistry, *, health: Probe | None = None,
                  ready: Probe | None = None) -> ThreadingHTTPServer | None:
    """Serve ``registry`` and the probes on ``0.0.0.0:port`` in a daemon thread (nothing
    when no port); the server is returned for ``shutdown()``."""
    if not port:
        return None
    probes = {"/healthz": health or _always_ok, "/readyz": ready or _always_ok}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path in ("/metrics", "/"):
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in probes:
                try:
                    ok, reason = probes[path]()
                except Exception as exc:  # noqa: BLE001 - a probe that fails says so
                    ok, reason = False, f"the probe failed: {exc}"
                self._answer(200 if ok else 503, (("ok" if ok else reason) + "\n").encode(),
                             "text/plain; charset=utf-8")
            else:
                self._answer(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    log.info("metrics on :%d/metrics, probes on /healthz and /readyz", port)
    return server
