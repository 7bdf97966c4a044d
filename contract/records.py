"""The pipeline's records besides table changes and snapshot control: Debezium's schema
change events (DDL topic), transaction metadata (``<prefix>.transaction``) and heartbeats.

Each builder returns ``(topic, key, value, position)`` ready for the producer's writer.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from typing import Any, Callable

import schemas
from contract.topics import ddl_topic, heartbeat_topic, transaction_topic

Record = tuple[str, "bytes | None", "bytes | None", "str | None"]


@lru_cache(maxsize=None)
def schema_change_schema() -> dict:
    """The value schema of the DDL topic's records (Debezium's schema change event)."""
    base = schemas.load("schema_change")
    return {**base, "fields": [{"name": "source", "type": schemas.load("source")}, *base["fields"][1:]]}


def schema_change_record(prefix: str, source: dict, *, db: str | None, ddl: str, position: str,
                         encode: Callable[[dict, Any, str, str], bytes | None]) -> Record:
    """A schema change event of ``db`` (``encode(schema, record, topic, role)``: the framing)."""
    topic = ddl_topic(prefix)
    value = {"source": source, "ts_ms": int(time.time() * 1000), "databaseName": db, "schemaName": None, "ddl": ddl,
             "position": position}
    return topic, json.dumps({"databaseName": db}).encode(), encode(schema_change_schema(), value, topic, "value"), \
        position


def transaction_record(prefix: str, status: str, txn_id: str, position: str, *, event_count: int | None = None,
                       data_collections: dict[str, int] | None = None) -> Record:
    """Debezium's transaction metadata: BEGIN, or END with its event counts (JSON)."""
    value = {"status": status, "id": txn_id, "ts_ms": int(time.time() * 1000), "event_count": event_count,
             "data_collections": None if data_collections is None else
             [{"data_collection": k, "event_count": v} for k, v in data_collections.items()]}
    return transaction_topic(prefix), json.dumps({"id": txn_id}).encode(), json.dumps(value).encode(), position


def heartbeat_record(prefix: str, name: str, file: str, pos: int) -> Record:
    """A heartbeat of producer ``name``, at binlog ``file``:``pos`` (JSON)."""
    value = {"ts_ms": int(time.time() * 1000), "file": file, "pos": pos}
    return heartbeat_topic(prefix), name.encode(), json.dumps(value).encode(), None
