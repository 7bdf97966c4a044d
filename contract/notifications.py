"""Snapshot notifications: Debezium's notification shape, on ``<prefix>._notifications``.

JSON, key = the snapshot id::

    {"aggregateType": "Incremental Snapshot", "type": "IN_PROGRESS", "id": "<snapshot id>",
     "additionalData": {"table": "shop.orders", "rows": 8192, ...}, "timestamp": <epoch ms>}

Types: STARTED (``tables``, ``signal``, ``added``), IN_PROGRESS (``table``, ``chunk``,
``rows``, ``estimated``), TABLE_SCAN_COMPLETED (``table``, ``rows`` or ``dropped``),
COMPLETED (``aborted_tables``), PAUSED, RESUMED, ABORTED (``tables``, ``reason``),
SKIPPED (``reason``, ``table``: a signal refused, or one of its tables left out), LOG
(``message``).  A blocking snapshot's are Debezium's for it: aggregate type "Initial Snapshot",
its keys (``producer/session_blocking.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from contract.topics import notifications_topic

AGGREGATE_TYPE = "Incremental Snapshot"


@dataclass
class Notification:
    type: str
    snapshot_id: str
    data: dict[str, Any] = field(default_factory=dict)
    #: Debezium's: "Incremental Snapshot", or "Initial Snapshot" for a blocking snapshot's
    aggregate_type: str = AGGREGATE_TYPE

    def to_json(self) -> dict:
        return {"aggregateType": self.aggregate_type, "type": self.type, "id": self.snapshot_id,
                "additionalData": self.data, "timestamp": int(time.time() * 1000)}

    @classmethod
    def from_json(cls, doc: dict) -> "Notification":
        return cls(str(doc.get("type") or ""), str(doc.get("id") or ""), dict(doc.get("additionalData") or {}),
                   str(doc.get("aggregateType") or AGGREGATE_TYPE))

    @classmethod
    def decode(cls, value: bytes) -> "Notification":
        return cls.from_json(json.loads(value))

    def record(self, prefix: str) -> tuple[str, bytes, bytes, None]:
        """``(topic, key, value, position)`` of this notification."""
        return notifications_topic(prefix), self.snapshot_id.encode(), json.dumps(self.to_json(), default=str).encode(), None
