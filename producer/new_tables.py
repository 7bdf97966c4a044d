"""Newly added tables: the tables a start finds matching the capture lists that the lists of
the producer's last run did not match (``snapshot.new_tables``; docs/operations.md, "Newly
added tables"). Pure: the caller lists the tables and keeps the lists in the offset record.

What the producer remembers of what it captured is the capture lists themselves (the source
settings :class:`~producer.capture_filter.CaptureFilter` decides by), stored with every offset
record under :data:`CAPTURE_LISTS`: a handful of patterns instead of every table's name, and
a table's having been captured is exactly its matching them. So a start snapshots a table only
when the lists changed to match it; a table created while the producer was down, under lists
that matched it already, is not: its CREATE and its rows are in the binlog after the stored
position, and are streamed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common.config import SourceConfig
from producer.capture_filter import CaptureFilter

#: The offset record's key of the capture lists the stored position was read under.
CAPTURE_LISTS = "capture_lists"

#: The source settings that decide which tables are captured (the signal table's database never is).
LIST_SETTINGS = ("include_databases", "exclude_databases", "include_tables", "exclude_tables", "signal_table")


def capture_lists(source: SourceConfig) -> dict[str, Any]:
    """The settings of ``source`` that decide which tables are captured, as stored."""
    return {k: getattr(source, k) for k in LIST_SETTINGS}


def newly_captured(tables: Iterable[tuple[str, str]], stored: dict[str, Any] | None,
                   source: SourceConfig) -> list[str]:
    """The tables (``db.table``, sorted) of ``tables`` that ``source``'s lists capture and the
    ``stored`` lists did not; none when nothing is stored (a first start, or a position stored
    before the lists were: nothing says which tables are new) or the lists did not change."""
    if not stored or stored == capture_lists(source):
        return []
    was = CaptureFilter(source.model_copy(update={k: v for k, v in stored.items() if k in LIST_SETTINGS}))
    now = CaptureFilter(source)
    return sorted(f"{d}.{t}" for d, t in tables if now.captures(d, t) and not was.captures(d, t))
