"""The batch the merge query runs now, as the progress watch sees it: when it started and
its partitions' ranges, what a failed one was on (a restart that starts there again is a
warning), and a thread that looks at it every few seconds (a batch that runs long, or never
ends, is a warning in the log and the status file while it runs)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from spark_jobs.report.batch_report import BatchReport
from spark_jobs.input.kafka_offsets import offsets_from_json

log = logging.getLogger(__name__)

#: (batch id, time.monotonic() at its start, {"topic[partition]": (start, end)})
Batch = tuple[int, float, dict[str, tuple[int, int]]]


class RunningBatch:
    """The running batch of one job, told to its report's progress watch."""

    #: How often the watcher thread looks at the running batch.
    INTERVAL_S = 5.0

    def __init__(self, report: BatchReport) -> None:
        self.report = report
        self.current: Batch | None = None
        self.failed: Batch | None = None  # the batch whose tasks failed last
        self._stopped = threading.Event()

    def starts(self, batch_id: int, t0: float, ranges: dict[str, tuple[int, int]]) -> None:
        """Batch ``batch_id`` (started at ``t0``) reads ``ranges`` now."""
        self.current = (batch_id, t0, ranges)
        for w in self.report.watch.batch_started(t0, {k: a for k, (a, _) in ranges.items()}):
            log.warning("batch %d: %s", batch_id, w.message)

    def ends(self, ok: bool) -> None:
        """The running batch's tasks are done (``ok``: without failing)."""
        if not ok:
            self.failed = self.current
        self.current = None

    def restarted(self, error: str) -> None:
        """The query failed with ``error`` and restarts: the batch it failed on is noted."""
        failed, self.failed = self.failed, None
        self.report.watch.restarted({k: a for k, (a, _) in failed[2].items()} if failed else None, error)

    def look(self) -> None:
        """A batch that runs long is a warning, logged once and written to the status file."""
        running = self.current
        if running is None:
            return
        batch_id, started, ranges = running
        for w in self.report.watch.running(time.monotonic(), started, batch_id, ranges):
            log.warning("%s", w.message)
            self.report.rewrite()

    def watch(self, name: str) -> None:
        """Look at the running batch every :attr:`INTERVAL_S` in a thread until :meth:`stop`."""
        self._stopped.clear()
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self.INTERVAL_S):
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - a watcher must not take the job down
                log.debug("progress watch: %s", exc)


def progress_figures(query: Any) -> tuple[dict[str, int], dict]:
    """From a streaming query's last progress report: the log's end offsets its source saw
    (by ``topic[partition]``; empty when not known) and Spark's own phases (``durationMs``)."""
    try:
        progress = (query.lastProgress if query is not None else None) or {}
    except Exception:  # noqa: BLE001 - a query stopping meanwhile
        return {}, {}
    try:
        latest = progress.get("sources", [{}])[0].get("latestOffset")
        doc = json.loads(latest) if isinstance(latest, str) else latest
        ends = {f"{t}[{p}]": o for (t, p), o in offsets_from_json(doc).items()}
    except Exception:  # noqa: BLE001 - a report of another shape: rates from the planned ends
        ends = {}
    return ends, dict(progress.get("durationMs") or {})
