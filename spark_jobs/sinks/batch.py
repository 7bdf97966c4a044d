"""Batches of changes: one record per key (:func:`reduce_batch`), and what applying one did
(:class:`ApplyResult`).

A change is ``(key, op, row, position)``: ``key`` a dict of key column -> Avro value (or a
tuple of the key values in key order), ``op`` one of ``c u r d``, ``row`` the after image
(``None`` for ``d``), ``position`` the 30-digit position string (string order = log order).
:func:`reduce_batch` keeps, per key, the record with the highest position, which is the
DBLog upsert rule of ``docs/DESIGN.md`` section 4.  Two records with the same key and the
same position are copies of one event (the producer never gives two events one position).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from contract.position import ENCODED_WIDTH, is_position
from spark_jobs.errors import SinkError
from spark_jobs.sinks.keys import freeze_key
from spark_jobs.sinks.layout import TableLayout

__all__ = [
    "Change",
    "EncodedChange",
    "Reduced",
    "KeyedReduced",
    "ApplyResult",
    "check_position",
    "reduce_batch",
    "reduce_for_layout",
]

_OPS = frozenset(("c", "u", "r", "d"))


def check_position(p: Any) -> str:
    if not is_position(p):
        raise SinkError(f"a position must be a string of {ENCODED_WIDTH} ASCII digits, got {p!r}")
    return p


class Change(NamedTuple):
    """One change of one row: the input of the sinks."""

    key: Any
    op: str
    row: Mapping[str, Any] | None
    position: str


class EncodedChange(NamedTuple):
    """A change whose row image is still in its Avro bytes: the merge job's records, for a
    sink that writes images straight from them (:meth:`~spark_jobs.sinks.table_sink.TableSink.apply_encoded`).
    ``data`` is the change event (single-object framing), ``row_at`` where the image
    (``before`` for a delete, else ``after``: its ``["null", row]`` union) starts in it."""

    op: str
    position: str
    data: bytes
    row_at: int


class Reduced(NamedTuple):
    """A batch reduced to one record per key: the upserts, the deletes, how many were dropped."""

    upserts: list[Change]
    deletes: list[Change]
    superseded: int


def _as_change(rec: Any) -> Change:
    if isinstance(rec, Change):
        return rec
    if isinstance(rec, (tuple, list)):
        if len(rec) != 4:
            raise SinkError(f"a change is (key, op, row, position), got {len(rec)} items: {rec!r}")
        return Change(*rec)
    try:
        return Change(rec.key, rec.op, rec.row, rec.position)
    except AttributeError:
        raise SinkError(f"not a change record: {rec!r}") from None


def _reduce(records: Iterable[Any], keyer: Callable[[Change], tuple[Any, Any]]) -> tuple[list, list, int]:
    best: dict[Any, tuple[Change, Any]] = {}
    n = 0
    ops = _OPS
    for rec in records:
        n += 1
        if type(rec) is not Change:
            rec = _as_change(rec)
        _, op, row, pos = rec
        if op not in ops:
            raise SinkError(f"unknown op {op!r} (expected c, u, r or d)")
        if not (type(pos) is str and len(pos) == ENCODED_WIDTH and pos.isdigit() and pos.isascii()):
            check_position(pos)  # (is_position, inline: once per record)
        if row is None and op != "d":
            raise SinkError(f"a {op!r} change without a row image at position {pos}")
        k, payload = keyer(rec)
        cur = best.get(k)
        if cur is None or cur[0][3] < pos:
            best[k] = (rec, payload)
    upserts: list = []
    deletes: list = []
    for item in sorted(best.values(), key=lambda it: it[0][3]):
        (deletes if item[0][1] == "d" else upserts).append(item)
    return upserts, deletes, n - len(best)


def reduce_batch(records: Iterable[Any], key_of: Callable[[Change], Any] | None = None) -> Reduced:
    """Per key, the record with the highest position; split into upserts and deletes.

    ``records`` are :class:`Change` or ``(key, op, row, position)`` tuples (or objects with
    those attributes) in any order, copies included.  ``key_of`` maps a change to a
    hashable key (default: the change's ``key``, dicts and lists frozen).  Ops ``c``, ``u``
    and ``r`` are upserts (``row`` required), ``d`` a delete.  Output order: rising position.
    """
    if key_of is None:
        def keyer(ch: Change) -> tuple[Any, Any]:
            return freeze_key(ch.key), None
    else:
        def keyer(ch: Change) -> tuple[Any, Any]:
            return key_of(ch), None
    ups, dels, superseded = _reduce(records, keyer)
    return Reduced([u[0] for u in ups], [d[0] for d in dels], superseded)


class KeyedReduced(NamedTuple):
    """:func:`reduce_for_layout`'s result: ``(change, key values)`` pairs."""

    upserts: list[tuple[Change, tuple]]
    deletes: list[tuple[Change, tuple]]
    superseded: int


def reduce_for_layout(records: Iterable[Any], layout: TableLayout) -> KeyedReduced:
    """:func:`reduce_batch` keyed by the layout's key columns, keeping each winner's key values.

    The key values are the Avro values in key order (:meth:`TableLayout.key_values`: from
    the change's key, else from its row).
    """
    key_values = layout.key_values
    names = [lookup[0] for lookup in layout.key_lookup]

    def keyer(ch: Change) -> tuple[Any, Any]:
        row = ch.row
        if ch.key is None and type(row) is dict:  # the merge job's changes: the key columns from the row
            try:
                kv = tuple([row[n] for n in names])
            except KeyError:
                kv = key_values(None, row)
        else:
            kv = key_values(ch.key, row)
        return freeze_key(kv), kv
    return KeyedReduced(*_reduce(records, keyer))


@dataclass
class ApplyResult:
    """What one ``apply`` did, counted in input records.

    ``upserted`` rows inserted or updated; ``deleted`` deletes applied (the row removed, or
    remembered as a tombstone when the sink did not hold it); ``skipped`` records the sink
    already had at the same or a newer position (replays, late older records);
    ``superseded`` records dropped because the batch held a newer record of the same key.
    The four add up to the number of records given.  Of ``upserted``, ``inserted`` were
    written as plain inserts (``apply_encoded``'s ``fresh`` changes), and ``fresh_refused``
    counts the statements of such changes that met a row of their key and were upserted
    instead.
    """

    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    superseded: int = 0
    inserted: int = 0
    fresh_refused: int = 0

    @property
    def total(self) -> int:
        return self.upserted + self.deleted + self.skipped + self.superseded

    def __iter__(self):  # (upserted, deleted, skipped) = result
        return iter((self.upserted, self.deleted, self.skipped))
