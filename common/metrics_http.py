"""A Prometheus text endpoint (``/metrics``) for a long-running command."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)


def serve_metrics(port: int | None, render: Callable[[], str]) -> ThreadingHTTPServer | None:
    """Serve ``render()`` on ``0.0.0.0:port`` in a daemon thread (nothing when no port)."""
    if not port:
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = render().encode()
            self.send_response(200 if self.path in ("/metrics", "/") else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    log.info("metrics on :%d/metrics", port)
    return server
