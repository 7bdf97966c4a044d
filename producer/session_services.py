"""What the stream session (:class:`~producer.session.StreamSession`) and its parts use of
each other, as protocols: the producer that runs a session (:class:`ProducerParts`), and the
session its parts (its start, newly added tables, schema changes and blocking snapshots) are
handed (:class:`SessionServices`): they read its settings and state, write and count records
through it, notify and commit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from common.config import CDCConfig
from contract.notifications import Notification
from producer.binlog.reader import ResumePoint
from producer.binlog.server import ServerInfo
from producer.capture_filter import CaptureFilter
from producer.events.builder import EventBuilder
from producer.events.outbox import OutboxRouter
from producer.kafka_writer import KafkaWriter
from producer.metrics import ProducerMetrics
from producer.offset_store import LocalOffsetCopy, OffsetStore
from producer.online_schema_change import OnlineSchemaChanges
from producer.record_encoder import RecordEncoder
from producer.snapshot.chunks import ReleasedChunk
from producer.snapshot.coordinator import SnapshotCoordinator
from producer.snapshot.gtid_windows import Boundary, MarkerSlots
from producer.startup import ProducerState, Startup


class ProducerParts(Protocol):
    """What a session uses of the producer that runs it (:class:`producer.app.ProducerApp`)."""

    cfg: CDCConfig
    filter: CaptureFilter
    metrics: ProducerMetrics
    store: OffsetStore
    local: LocalOffsetCopy
    state_dir: Path
    status_file: Path
    stopping: threading.Event
    outbox: OutboxRouter | None
    startup: Startup
    online_schema_changes: OnlineSchemaChanges

    def marker_slots(self) -> MarkerSlots: ...


class SessionServices(Protocol):
    """What a session's parts use of the session."""

    app: ProducerParts
    cfg: CDCConfig
    prefix: str
    state: ProducerState
    info: ServerInfo
    coord: SnapshotCoordinator
    writer: KafkaWriter
    builder: EventBuilder
    encoder: RecordEncoder
    outbox: OutboxRouter | None
    #: records written since the last commit (a part that writes counts its records here)
    batch_events: int

    def current_resume(self) -> ResumePoint: ...

    def boundary(self, item) -> Boundary | None: ...

    def commit(self, resume: ResumePoint) -> None: ...

    def notify(self, n: Notification) -> None: ...

    def write_marker(self, marker: dict) -> None: ...

    def write_chunk(self, chunk: ReleasedChunk) -> int: ...
