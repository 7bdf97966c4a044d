"""Debezium's MySQL envelope, as every record of a table topic carries it.

Value: ``before``, ``after``, ``source``, ``op`` (``c``/``u``/``d``, ``r`` for snapshot
rows, ``t`` for a truncate: no key, ``before`` and ``after`` null), ``ts_ms``,
``transaction``, plus ours: ``position`` (:mod:`contract.position`) and
``snapshot_window`` (a snapshot row's chunk window).  Names and op codes are Debezium's, so a
consumer written for Debezium reads ours.  The ``source`` block is built here only
(:func:`source_block`), for change events, snapshot rows and schema changes alike; the
``.avsc`` files of its parts are in :mod:`schemas`.  Every record also carries its position
in the header :data:`POSITION_HEADER`.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import schemas
from contract.topics import table_topic

try:
    CONNECTOR_VERSION = version("mysql-cdc")
except PackageNotFoundError:  # run from a source tree that was never installed
    CONNECTOR_VERSION = "0.0.0"
CONNECTOR = "mysql"

#: Row event kind -> Debezium op code; a snapshot row is ``r``.
OPS = {"insert": "c", "update": "u", "delete": "d"}
SNAPSHOT_OP = "r"
TRUNCATE_OP = "t"
#: ``source.snapshot`` of a change event and of an incremental snapshot's row.
NOT_SNAPSHOT, INCREMENTAL_SNAPSHOT = "false", "incremental"

#: The Kafka header holding a record's 30-digit position.
POSITION_HEADER = "cdc.position"


def source_block(name: str, server_id: int, *, db: str | None, table: str | None, ts_ms: int | None,
                 file: str, pos: int, row: int = 0, gtid: str | None = None, thread: int | None = None,
                 snapshot: str = NOT_SNAPSHOT) -> dict[str, Any]:
    """Debezium's ``source`` block, fields in the schema's order."""
    return {"version": CONNECTOR_VERSION, "connector": CONNECTOR, "name": name, "ts_ms": ts_ms, "snapshot": snapshot,
            "db": db, "sequence": None, "table": table, "server_id": server_id, "gtid": gtid, "file": file,
            "pos": pos, "row": row, "thread": thread, "query": None}


def envelope_schema(row_schema: dict, name: str) -> dict:
    """Debezium's envelope around a row schema, plus our position and snapshot window."""
    row_name = row_schema["name"]
    return {
        "type": "record", "name": name, "connect.version": 2, "connect.name": name,
        "fields": [
            {"name": "before", "type": ["null", row_schema], "default": None},
            {"name": "after", "type": ["null", row_name], "default": None},
            {"name": "source", "type": schemas.load("source")},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", schemas.load("transaction_block")], "default": None},
            {"name": "position", "type": "string",
             "doc": "30-digit binlog position (file index, event position, sequence): unique and rising per partition"},
            {"name": "snapshot_window", "type": ["null", schemas.load("snapshot_window")], "default": None},
        ],
    }


# Avro names of a table's records
_AVRO_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INVALID_NAME_CHARS_RE = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str) -> str:
    """``name`` made into a valid Avro name (unchanged if it already is one)."""
    if _AVRO_NAME_RE.match(name):
        return name
    fixed = _INVALID_NAME_CHARS_RE.sub("_", name)
    if not fixed or fixed[0].isdigit():
        fixed = "_" + fixed
    return fixed


def unique_avro_names(names: "list[str] | tuple[str, ...]") -> dict[str, str]:
    """Each of ``names`` (a record's column names, in order) -> a unique valid Avro name.

    Names that are valid already never change; an invalid one becomes :func:`avro_name` of
    it, with ``_2``, ``_3``... when that is taken (Debezium's ``field.name.adjustment.mode=avro``
    rule, made unique in column order).
    """
    used = {n for n in names if avro_name(n) == n}
    out: dict[str, str] = {}
    for n in names:
        if avro_name(n) == n:
            out[n] = n
            continue
        base = avro_name(n)
        cand, k = base, 2
        while cand in used:
            cand = f"{base}_{k}"
            k += 1
        used.add(cand)
        out[n] = cand
    return out


def avro_fullname(name: str) -> str:
    """A dotted Avro full name with each part made valid (``my-db.t`` -> ``my_db.t``)."""
    return ".".join(avro_name(part) for part in name.split("."))


def record_names(prefix: str, db: str, table: str) -> tuple[str, str, str]:
    """The Avro full names of ``db.table``'s key, row and envelope records
    (``<topic>.Key``, ``<topic>.Value``, ``<topic>.Envelope``, Debezium's)."""
    ns = avro_fullname(table_topic(prefix, db, table))
    return f"{ns}.Key", f"{ns}.Value", f"{ns}.Envelope"
