"""Snapshot window markers, on ``<prefix>._markers`` (one partition, JSON, key ``db.table``).

For every chunk an OPEN and a CLOSE marker::

    {"kind": "OPEN", "snapshot_id": "...", "chunk_id": 17, "db": "shop", "table": "orders",
     "key_range": {"lo": [...], "hi": [...]}, "position": "<30 digits>", "file": "mysql-bin.000003",
     "pos": 1234, "ts_ms": ...}

``position`` is the marker row's own binlog position (``lo`` exclusive, ``hi`` inclusive).
A snapshot with ``delete-missing`` adds, per table read completely, a DELETE_MISSING
marker whose ``below`` is the binlog position when the table's read began; it is written
after the table's last chunk rows.  A ``TRUNCATE TABLE`` adds a TRUNCATE marker whose
``below`` is the statement's own position: every row written before it is gone.  ``DROP
TABLE`` adds a DROP_TABLE marker, ``RENAME TABLE`` a RENAME_TABLE marker (``to_db``,
``to_table``).  These are *table markers*: the merge job applies them once every
partition of the table's topic is read past the marker (DELETE_MISSING and TRUNCATE: the
sinks delete the table's rows below ``below``; DROP_TABLE and RENAME_TABLE: as
``sinks.schema_changes`` says).  Readers keep markers as these dicts (the merge state
holds them); this module is where their fields are defined.
"""

from __future__ import annotations

import json
import time
from typing import Any

from contract.position import BinlogPosition
from contract.topics import markers_topic

OPEN, CLOSE, DELETE_MISSING, TRUNCATE = "OPEN", "CLOSE", "DELETE_MISSING", "TRUNCATE"
DROP_TABLE, RENAME_TABLE = "DROP_TABLE", "RENAME_TABLE"
#: A statement changed a table's rows without row events (a column added with a value for the
#: existing rows, renamed or retyped), read from Debezium's schema change topic (``reason``):
#: the table must be snapshotted again for the sinks to follow (our producer does it itself).
REFILL = "REFILL"
#: The markers of chunk windows (the DBLog rule's input).
WINDOW_KINDS = (OPEN, CLOSE)
#: The markers applied to a table's sinks once its partitions are read past them.
TABLE_KINDS = (DELETE_MISSING, TRUNCATE, DROP_TABLE, RENAME_TABLE, REFILL)

Marker = dict[str, Any]


def window_marker(kind: str, snapshot_id: str, chunk_id: int, table: str, key_range: dict,
                  position: BinlogPosition, **extra: Any) -> Marker:
    """An OPEN or CLOSE marker of chunk ``chunk_id`` of ``table`` (``db.table``); ``extra``:
    more fields (a read-only window's ``gtids_before``/``gtids_after``)."""
    db, name = table.split(".", 1)
    return {"kind": kind, "snapshot_id": snapshot_id, "chunk_id": chunk_id, "db": db, "table": name,
            "key_range": key_range, "position": position.encode(), "file": position.file_name, "pos": position.pos,
            "ts_ms": int(time.time() * 1000), **extra}


def delete_missing_marker(snapshot_id: str, table: str, below: BinlogPosition) -> Marker:
    """``table`` (``db.table``) was read completely by a delete-missing snapshot that began
    reading it at ``below``."""
    db, name = table.split(".", 1)
    return {"kind": DELETE_MISSING, "snapshot_id": snapshot_id, "chunk_id": 0, "db": db, "table": name,
            "key_range": None, "below": below.encode(), "position": below.encode(), "file": below.file_name,
            "pos": below.pos, "ts_ms": int(time.time() * 1000)}


def table_ddl_marker(kind: str, db: str, table: str, position: BinlogPosition, **extra: Any) -> Marker:
    """A TRUNCATE, DROP_TABLE or RENAME_TABLE (``to_db``, ``to_table``) marker of
    ``db.table``, at the statement's ``position`` (a TRUNCATE's rows below it are gone)."""
    return {"kind": kind, "snapshot_id": "", "chunk_id": 0, "db": db, "table": table, "key_range": None,
            "below": position.encode(), "position": position.encode(), "file": position.file_name,
            "pos": position.pos, "ts_ms": int(time.time() * 1000), **extra}


def is_table_marker(marker: Marker) -> bool:
    return marker.get("kind") in TABLE_KINDS


def marker_record(prefix: str, marker: Marker) -> tuple[str, bytes, bytes, str]:
    """``(topic, key, value, position)`` of a marker."""
    return (markers_topic(prefix), f"{marker['db']}.{marker['table']}".encode(), json.dumps(marker).encode(),
            marker["position"])


def decode_marker(value: bytes) -> Marker:
    return json.loads(value)


def is_window(marker: Marker) -> bool:
    return marker.get("kind") in WINDOW_KINDS


def window_of(marker: Marker) -> tuple[str, str, int, str]:
    """``(kind, snapshot_id, chunk_id, position)`` of a window marker."""
    return marker["kind"], marker["snapshot_id"], int(marker["chunk_id"]), marker["position"]
