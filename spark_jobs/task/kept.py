"""A kept record: one the DBLog rule let through, on its way to the clean changelog and the
sinks, with what they need of it (its row image, decoded where a sink needs it)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any

from spark_jobs.sinks.batch import EncodedChange


@dataclass(slots=True)
class Kept:
    """A record the DBLog rule kept: its op, row image and position, its writer schema (id
    and the reader schema the sinks lay tables out by), the source's commit time, its Kafka
    offset and bytes, and its source table."""

    op: str
    row: dict | None
    position: str
    schema_id: str
    schema: Any
    ts_ms: int
    offset: int
    key_bytes: bytes | None
    value_bytes: bytes | None
    table: tuple[str, str] = ("", "")  # the source's (db, table), from ``source``
    old_key: bool = False  # keyed as before the table's primary key changed: changelog only
    envelope: dict | None = None  # the decoded record (a routed table's: for the merged clean changelog)
    # For a record read by its header: where its (non-null) row image starts in
    # ``value_bytes`` (0: not so read), and while the image is not decoded (``row`` None
    # then) the writer schema's row reader; :func:`row_of_kept` decodes it.  The sinks
    # decode only the images they apply, or write them from their bytes (decoded or not).
    row_reader: Any = None
    row_at: int = 0


#: The window buffer's row for a record whose image is not decoded (it only tells it is not null)
LAZY = object()
#: A record's Kafka offset (``(offset, key, value)``)
OFFSET = itemgetter(0)
ROW_AT = attrgetter("row_at")
#: ``EncodedChange(k.op, k.position, k.value_bytes, k.row_at)`` of a :class:`Kept` ``k``, as
#: ``ENCODED(ENCODED_FIELDS(k))``: built in C (a NamedTuple's constructor is a Python function)
ENCODED_FIELDS = attrgetter("op", "position", "value_bytes", "row_at")
ENCODED = partial(tuple.__new__, EncodedChange)


def row_of_kept(k: Kept) -> dict | None:
    """``k``'s row image, decoded now if it was not (once: kept for the next sink)."""
    if k.row_reader is not None:
        k.row, k.row_reader = k.row_reader(k.value_bytes, k.row_at), None
    return k.row


def row_of(envelope: dict, op: str) -> dict | None:
    """The row image a sink applies of a whole envelope: ``before`` for a delete, else ``after``."""
    return envelope.get("before") if op == "d" else envelope.get("after")


#: ``Kept``'s slots in its fields' order: what the native scan fills (``scan_changes``)
KEPT_MEMBERS = tuple(Kept.__dict__[f.name] for f in dataclass_fields(Kept))
