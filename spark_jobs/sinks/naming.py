"""The names the table sinks give: sink tables and identifiers cut to a database's limit, the
position column, the bookkeeping tables."""

from __future__ import annotations

import hashlib

from spark_jobs.errors import SinkError

__all__ = ["POSITION_COLUMN", "TABLES", "TOMBSTONES", "sink_identifier", "sink_table_name"]

#: The column every sink table carries next to the source columns.
POSITION_COLUMN = "__cdc_position"
#: The bookkeeping table of which source table (and key) each sink table mirrors.
TABLES = "__cdc_tables"
#: The bookkeeping table of deleted keys (why: :mod:`spark_jobs.sinks.postgres`).
TOMBSTONES = "__cdc_tombstones"


def sink_identifier(name: str, max_bytes: int) -> str:
    """``name`` if it fits in ``max_bytes`` UTF-8 bytes, else a prefix + ``_`` + 8 hex of its hash."""
    if not name or "\0" in name:
        raise SinkError(f"invalid identifier {name!r}")
    raw = name.encode("utf-8")
    if len(raw) <= max_bytes:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:8]
    cut = raw[: max_bytes - 9].decode("utf-8", "ignore")
    return f"{cut}_{digest}"


def sink_table_name(db: str, table: str, max_bytes: int = 63) -> str:
    """The sink table of source table ``db.table``: ``<db>__<table>`` (shortened to fit)."""
    if not db or not table:
        raise SinkError(f"source database and table must be non-empty, got {db!r}.{table!r}")
    return sink_identifier(f"{db}__{table}", max_bytes)
