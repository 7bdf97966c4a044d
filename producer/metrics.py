"""Producer figures: events, rate, position, lag behind the source.

Exposed three ways: structured log lines, a status file ``<state_dir>/producer-status.json``
(``producer-status-<source>.json`` for the producer of a ``sources`` entry, :func:`status_file`)
read by ``cdc status``, and Prometheus text format on ``producer.metrics_port``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from common.metrics_http import serve_metrics

log = logging.getLogger(__name__)


class ProducerMetrics:
    def __init__(self) -> None:
        self.events_total = 0
        self.commits_total = 0
        self.last_event_source_ms = 0
        self.last_commit_file = ""
        self.last_commit_pos = 0
        self.started = time.time()
        self._window: list[tuple[float, int]] = [(time.monotonic(), 0)]
        self._idle = False
        self._last_log = time.monotonic()
        self._lock = threading.Lock()
        # Snapshot progress: {"snapshot_id", "paused", "tables": [{table, rows, estimated, chunks}]} or None.
        self.snapshot_progress: dict | None = None

    def event(self, source_ts_ms: int, n: int = 1) -> None:
        """``n`` events written, the last from a change made at ``source_ts_ms``."""
        self.events_total += n
        self.last_event_source_ms = source_ts_ms
        self._idle = False

    def idle(self) -> None:
        self._idle = True

    def events_per_second(self) -> float:
        now = time.monotonic()
        with self._lock:
            self._window.append((now, self.events_total))
            while len(self._window) > 2 and now - self._window[0][0] > 10:
                self._window.pop(0)
            t0, n0 = self._window[0]
        return (self.events_total - n0) / (now - t0) if now > t0 else 0.0

    def seconds_behind_source(self) -> float:
        if self._idle or not self.last_event_source_ms:
            return 0.0
        return max(0.0, time.time() - self.last_event_source_ms / 1000)

    def committed(self, resume) -> None:
        self.commits_total += 1
        self.last_commit_file, self.last_commit_pos = resume.file, resume.pos
        now = time.monotonic()
        if now - self._last_log >= 10:
            self._last_log = now
            log.info("position %s:%d events=%d rate=%.0f/s behind=%.1fs", resume.file, resume.pos,
                     self.events_total, self.events_per_second(), self.seconds_behind_source())

    def snapshot(self) -> dict:
        return {"events_total": self.events_total, "commits_total": self.commits_total,
                "events_per_second": round(self.events_per_second(), 1),
                "seconds_behind_source": round(self.seconds_behind_source(), 3),
                "file": self.last_commit_file, "pos": self.last_commit_pos, "pid": os.getpid(),
                "updated_at": time.time(), "snapshot": self.snapshot_progress}

    def write_status(self, path: Path, resume) -> None:  # noqa: ARG002
        """Write the figures to ``path`` (:func:`status_file`), replacing it atomically."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(self.snapshot()))
            os.replace(tmp, path)
        except OSError as exc:  # status is best effort; never stop streaming for it
            log.debug("cannot write status file: %s", exc)

    def prometheus(self) -> str:
        s = self.snapshot()
        return "".join([
            "# TYPE cdc_producer_events_total counter\n",
            f"cdc_producer_events_total {s['events_total']}\n",
            "# TYPE cdc_producer_commits_total counter\n",
            f"cdc_producer_commits_total {s['commits_total']}\n",
            "# TYPE cdc_producer_events_per_second gauge\n",
            f"cdc_producer_events_per_second {s['events_per_second']}\n",
            "# TYPE cdc_producer_seconds_behind_source gauge\n",
            f"cdc_producer_seconds_behind_source {s['seconds_behind_source']}\n",
            "# TYPE cdc_producer_binlog_position gauge\n",
            f'cdc_producer_binlog_position{{file="{s["file"]}"}} {s["pos"]}\n',
            "# TYPE cdc_snapshot_rows_total counter\n",
            *(f'cdc_snapshot_rows_total{{table="{t["table"]}"}} {t["rows"]}\n'
              for t in (s["snapshot"] or {}).get("tables", [])),
        ])

    def start_server(self, port: int | None) -> None:
        serve_metrics(port, self.prometheus)


def status_file(cfg) -> Path:
    """The producer's status file: ``<state_dir>/producer-status.json``, or
    ``producer-status-<name>.json`` for the producer of a ``sources`` entry (the view
    :meth:`common.config.CDCConfig.for_source` gives), so producers sharing a state
    directory do not overwrite each other's."""
    name = cfg.source_name
    return Path(cfg.state_dir) / ("producer-status.json" if name is None else f"producer-status-{name}.json")
