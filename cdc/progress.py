"""Snapshot progress for humans: following the notifications topic, drawing bars.

``cdc snapshot --follow`` reads ``<prefix>._notifications`` from the moment the signal was
sent and draws a bar per table until every table of the signal is done (or the signal was
refused); ``cdc status`` draws the same bars from the producer's status file.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from common.config import CDCConfig
from common.kafka.offsets import end_offsets
from contract.notifications import Notification
from contract.topics import notifications_topic


def progress_bars(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("rows"), TimeElapsedColumn(), console=console)


def draw_status_bars(console: Console, snapshot: dict) -> None:
    """Bars of the status file's ``snapshot`` entry (a still picture)."""
    with progress_bars(console) as bars:
        for t in snapshot.get("tables", []):
            label = t["table"] + (" (paused)" if snapshot.get("paused") else "")
            bars.add_task(label, total=max(t["estimated"], t["rows"], 1), completed=t["rows"])


@dataclass
class FollowResult:
    done: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (table, reason)
    refused: str | None = None
    timed_out: bool = False


class NotificationFollower:
    """Reads the notifications topic from its end at construction time."""

    def __init__(self, cfg: CDCConfig) -> None:
        self.topic = notifications_topic(cfg.kafka.topic_prefix)
        self.consumer = Consumer({"bootstrap.servers": cfg.kafka.bootstrap_servers,
                                  "group.id": f"cdc-follow-{uuid.uuid4().hex}", "enable.auto.commit": False,
                                  "isolation.level": "read_committed", **cfg.kafka.client_settings()})
        try:
            (_, end), = end_offsets(cfg.kafka.bootstrap_servers, [(self.topic, 0)],
                                    client_config=cfg.kafka.client_settings()).values()
        except Exception:  # noqa: BLE001 - no topic yet: the producer creates it with the first notification
            end = 0
        self.consumer.assign([TopicPartition(self.topic, 0, max(end, 0))])

    def poll(self, timeout: float = 0.5) -> list[Notification]:
        return [Notification.decode(msg.value()) for msg in self.consumer.consume(500, timeout)
                if msg.error() is None and msg.value()]

    def close(self) -> None:
        self.consumer.close()

    def follow(self, console: Console, signal_id: str, timeout: float | None) -> FollowResult:
        """Draw bars until every table the signal ``signal_id`` snapshots completed or was
        aborted, or the signal was refused.  The tables (the signal may name them by regular
        expressions) come from the producer's STARTED notification for the signal, which
        the single-partition topic delivers before any progress of them."""
        result = FollowResult()
        pending: set[str] | None = None  # known once the producer said which tables
        deadline = None if timeout is None else time.monotonic() + timeout
        with progress_bars(console) as bars:
            tasks: dict[str, int] = {}
            while pending is None or pending:
                if deadline is not None and time.monotonic() >= deadline:
                    result.timed_out = True
                    break
                for n in self.poll():
                    kind, data = n.type, n.data
                    if kind == "SKIPPED" and n.snapshot_id == signal_id:
                        if data.get("table"):  # one table skipped, the others go on
                            result.skipped.append((data["table"], data.get("reason", "")))
                            console.print(f"[yellow]skipped[/yellow] {data['table']}: {data.get('reason', '')}")
                            continue
                        result.refused = data.get("reason", "refused")
                        return result
                    if kind == "STARTED" and (data.get("signal") or n.snapshot_id) == signal_id and pending is None:
                        pending = set(data.get("tables", []))
                        tasks = {t: bars.add_task(t, total=None) for t in data.get("tables", [])}
                    elif pending is not None:
                        self._progress(bars, tasks, pending, result, n)
        return result

    @staticmethod
    def _progress(bars: Progress, tasks: dict[str, int], pending: set[str], result: FollowResult,
                  n: Notification) -> None:
        kind, data = n.type, n.data
        table = data.get("table")
        if kind == "IN_PROGRESS" and table in tasks:
            bars.update(tasks[table], completed=data.get("rows", 0),
                        total=max(int(data.get("estimated") or 0), int(data.get("rows", 0)), 1))
        elif kind == "TABLE_SCAN_COMPLETED" and table in pending:
            rows = int(data.get("rows", 0))
            bars.update(tasks[table], completed=rows, total=max(rows, 1))
            pending.discard(table)
            result.done.append(table)
        elif kind == "ABORTED":
            for t in data.get("tables", []):
                if t in pending:
                    pending.discard(t)
                    result.aborted.append(t)
