"""Topics written by Debezium itself (``kafka.input: debezium``): positions and shape checks.

Debezium's MySQL (and MariaDB) connector writes a table's changes to
``<topic.prefix>.<db>.<table>`` in the envelope our producer writes too, but without our
``position`` field, without window markers and without a schemas topic.  The merge job and
``cdc verify --changelog`` read such topics with a position derived here from each record's
``source`` block and its Kafka offset.

The position (:mod:`contract.position`'s 30-digit form: file index, event position,
sequence) of a Debezium record:

* a change (``op`` ``c``, ``u``, ``d``, ``t``): the binlog file index and event position
  of ``source.file`` / ``source.pos`` (the rows event), sequence
  ``READS_BELOW + 2 * source.row``, plus one for a create.  A key-changing UPDATE becomes a
  delete of the old key and a create of the new one with the same ``source``; the create
  ranks above its delete (a rows event holds updates, or inserts, or deletes: a plain
  insert's ``+1`` meets nothing);
* a snapshot read (``op: r``): every row of one incremental-snapshot chunk carries the same
  ``source``, the coordinates of the event at which Debezium closed the chunk's window
  (its close row in the signal table; with a read-only snapshot, the event past the
  window, whose changes Debezium writes after the chunk), and every row of an initial
  snapshot the binlog position the stream goes on from.  Debezium wrote those rows
  deduplicated, as of that point: the read ranks at that event, *below* the event's own
  changes, sequence = the record's Kafka offset in its partition (``< READS_BELOW``).

So, within a partition, positions rise in offset order and are unique (Debezium writes a
key's records to one partition, in binlog order), a change made after a chunk's window
ranks above the chunk's row of its key, one made before it below; a record Debezium wrote
again after a restart (from its last committed offset) has the position of its first
copy, and the merge job drops it as a copy.  Replays read the same offsets, so they rank
the same.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from common.sql.ddl import renamed_tables, rows_rewritten
from contract.errors import SerdeError
from contract.markers import DROP_TABLE, REFILL, RENAME_TABLE, Marker, table_ddl_marker
from contract.position import PART_LIMIT, BinlogPosition

#: Sequences below this are snapshot reads (their Kafka offset); changes are above it.
READS_BELOW = PART_LIMIT // 2

#: What a Debezium user sets for the merge job to read their topics.
SCHEMAS_REQUIRED = ("kafka.input: debezium reads Debezium's JSON converter with schemas: set "
                    "value.converter.schemas.enable=true (Kafka Connect's default) on the connector; the merge job "
                    "builds the sink tables from each record's embedded schema")

_OPS = frozenset("cudrt")


@lru_cache(maxsize=64)
def _file_index(name: str) -> int:
    """The index of a binlog file name (parsed once per file)."""
    return BinlogPosition.from_binlog(name, 4).file_index


def debezium_position(value: Any, offset: int) -> str:
    """The 30-digit position of a decoded Debezium envelope at ``offset`` in its Kafka
    partition (see the module docstring); :class:`SerdeError` naming what is missing."""
    if not isinstance(value, dict):
        raise SerdeError(f"a Debezium record's value is an object, got {type(value).__name__}")
    op = value.get("op")
    if op not in _OPS:
        raise SerdeError(f"a Debezium change event has op c, u, d, r or t, got {op!r}")
    src = value.get("source")
    if not isinstance(src, dict) or not src.get("file") or src.get("pos") is None:
        raise SerdeError("a Debezium record without source.file and source.pos: the merge job orders records by "
                         "their binlog coordinates (Debezium's MySQL and MariaDB connectors write them)")
    pos = src["pos"]
    try:
        index = _file_index(str(src["file"]))
    except ValueError as exc:
        raise SerdeError(f"a Debezium record's source.file cannot place it in the binlog: {exc}") from None
    if type(pos) is not int or not 0 <= pos < PART_LIMIT:
        raise SerdeError(f"a Debezium record's source.pos {pos!r} is not a binlog position")
    if op == "r":
        if not 0 <= offset < READS_BELOW:
            raise SerdeError(f"a snapshot read at Kafka offset {offset}: positions hold offsets below {READS_BELOW}")
        seq = offset
    else:
        row = src.get("row") or 0
        if type(row) is not int or not 0 <= row < (PART_LIMIT - READS_BELOW) // 2:
            raise SerdeError(f"a Debezium record's source.row {row!r} is not a row index")
        seq = READS_BELOW + 2 * row + (op == "c")
    return f"{index:010d}{pos:010d}{seq:010d}"


def not_connect_shape(data: bytes) -> SerdeError:
    """The error for a record value that is not a JSON converter record with its schema."""
    if data[:64].lstrip()[:1] != b"{":
        return SerdeError(f"the record's value is not JSON (first bytes {data[:4].hex()}): {SCHEMAS_REQUIRED}")
    return SerdeError(f"the record's value is JSON without an embedded schema (a schemaless Debezium record, "
                      f"value.converter.schemas.enable=false?): {SCHEMAS_REQUIRED}")


_TABLE_ID = re.compile(r'"((?:[^"]|"")*)"')


def _table_id(text: Any) -> tuple[str, str] | None:
    """``(db, table)`` of a Debezium table id (``"db"."table"``, double-quoted parts)."""
    parts = [p.replace('""', '"') for p in _TABLE_ID.findall(text)] if isinstance(text, str) else []
    return (parts[0], parts[-1]) if len(parts) >= 2 else None


def debezium_table_markers(value: Any) -> list[Marker]:
    """The DROP_TABLE, RENAME_TABLE and REFILL markers (:mod:`contract.markers`) of one record
    of Debezium's schema change topic (``<topic.prefix>``, ``include.schema.changes``, the
    connector's default), decoded from the JSON converter's shape: its ``payload``.

    A ``tableChanges`` entry of type ``DROP`` is a dropped table; one of type ``ALTER``
    whose table a ``RENAME TABLE`` or ``ALTER TABLE ... RENAME`` statement (``ddl``) gives
    its new name is a renamed table (Debezium names only the new table); any other ``ALTER``
    whose statement changed the table's rows without row events (a column added with a value
    for the existing rows, renamed or retyped: :func:`common.sql.ddl.rows_rewritten`) is a
    REFILL, with the reason.  The marker's
    position is the statement's binlog event (``source.file`` / ``source.pos``), below the
    changes that follow it.  Records the connector writes while it captures the schema
    (``source.snapshot`` other than ``false``: a ``DROP TABLE IF EXISTS`` before each
    ``CREATE TABLE``) change nothing and give none; so do CREATE, other ALTERs and database
    statements.  :class:`SerdeError` for a record that is not a schema change event."""
    payload = value.get("payload", value) if isinstance(value, dict) else None
    if not isinstance(payload, dict) or not isinstance(payload.get("tableChanges"), list):
        raise SerdeError("a record of Debezium's schema change topic has payload.tableChanges (a list); got "
                         f"{type(payload).__name__ if not isinstance(payload, dict) else sorted(payload)}")
    src = payload.get("source") or {}
    if str(src.get("snapshot", "false")).lower() not in ("false", "none"):
        return []
    changes = [(c.get("type"), _table_id(c.get("id"))) for c in payload["tableChanges"] if isinstance(c, dict)]
    ddl = str(payload.get("ddl") or "")
    rewritten = rows_rewritten("alter", ddl) if ddl.lstrip()[:5].upper() == "ALTER" else None
    if not any(kind in ("DROP", "ALTER") and tid for kind, tid in changes):
        return []
    try:
        position = BinlogPosition.from_binlog(str(src.get("file")), int(src.get("pos")))
    except (TypeError, ValueError) as exc:
        raise SerdeError(f"a Debezium schema change event without a binlog position (source.file, source.pos): "
                         f"{exc}") from None
    default_db = payload.get("databaseName") or ""
    renames = {(to_db or default_db, to_table): (db or default_db, table)
               for (db, table), (to_db, to_table) in renamed_tables(str(payload.get("ddl") or ""), default_db)}
    out: list[Marker] = []
    for kind, tid in changes:
        if tid is None:
            continue
        if kind == "DROP":
            out.append(table_ddl_marker(DROP_TABLE, tid[0], tid[1], position))
        elif kind == "ALTER" and tid in renames:
            old_db, old_table = renames[tid]
            out.append(table_ddl_marker(RENAME_TABLE, old_db, old_table, position, to_db=tid[0], to_table=tid[1]))
        elif kind == "ALTER" and rewritten:
            out.append(table_ddl_marker(REFILL, tid[0], tid[1], position, reason=rewritten))
    return out
