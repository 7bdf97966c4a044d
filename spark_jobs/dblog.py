"""The DBLog window rule (DESIGN.md, section 4): pure, I/O-free, Spark-free.

A snapshot chunk is read between an OPEN and a CLOSE marker, both written into the binlog,
so the chunk's SELECT saw the table as it was at some instant of the window
``open < t < close``.  A chunk row of key K is stale exactly when K changed inside the
window (the read may have happened before that change), so:

    a chunk row of key K is dropped if the same table logged a change of K at a position p
    with ``open(W) < p < close(W)``; otherwise it is emitted as of ``close(W)``.

Applying the stream changes plus the kept chunk rows in position order reproduces the
table.  The same rule as an upsert ranking: per key, keep the record of highest rank, where
a change ranks at its position, an *undeduplicated* chunk row at ``open(W)`` and a kept
(deduplicated) one at its own position just after ``close(W)``.

This module is the reference implementation: the Spark adapter wraps :class:`WindowBuffer`
(or :func:`dedupe_log` per batch), and the snapshot tests use it as their oracle.

Data model
----------
Plain frozen dataclasses with ``__slots__``, built field by field from a decoded record
(``df.itertuples()`` over a pandas/Arrow batch, or :func:`from_envelope` on a decoded
Debezium value):

* **key**: any hashable value identifying the row, the same for every record of that row:
  the tuple of primary-key values in key order (:func:`make_key`), or simply the raw Kafka
  record key bytes (the producer encodes a key the same way every time).
* **position**: the 30-digit string of ``BinlogPosition.encode()``; string order is
  position order.  The first 20 digits name the binlog *event* (file index, event
  position), the last 10 the row sequence inside it (``2*row`` / ``2*row + 1`` for the
  delete and create of a primary-key change).
* :class:`ChangeRecord` ``(key, op, row, position, window=None)``: a stream change
  (``op`` c/u/d, ``row`` = the after image, ``None`` for a delete), or, as output, a kept
  chunk row (``op`` ``r``, ``window`` set).
* :class:`Window` ``(snapshot_id, chunk_id, open, close)``: a chunk's window, i.e. the
  envelope's ``snapshot_window``.
* :class:`ChunkRow` ``(key, row, window, position)``: a row as read by a chunk's SELECT.
  Its ``position`` is ``chunk_row_position(window.close, i)`` for the row's index ``i`` in
  the chunk (the SELECT's order): the CLOSE marker's event, row sequence
  ``close.row + 1 + i``.  These sit after the CLOSE marker and before the next binlog
  event, unique and rising within the chunk ("chunk rows at their CLOSE position, ordered
  within the chunk").  The index is chunk-wide, not per Kafka partition.
* :class:`Marker` ``(kind, snapshot_id, chunk_id, position)``: an OPEN or CLOSE marker.

Every record may carry an opaque ``ref`` (the source envelope, a Kafka offset, a row
index of the Arrow batch...); it is passed through to the output and takes no part in
comparisons, so an adapter can map an output back to its input without re-encoding.
"""

from __future__ import annotations

import base64
import math
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, NamedTuple, Union

__all__ = [
    "POSITION_WIDTH",
    "EVENT_WIDTH",
    "DBLogError",
    "UnknownWindowError",
    "OrderingError",
    "Window",
    "ChangeRecord",
    "ChunkRow",
    "Marker",
    "Version",
    "chunk_row_position",
    "event_of",
    "make_key",
    "from_envelope",
    "dedupe_chunk",
    "dedupe_log",
    "merge_upsert",
    "live_rows",
    "apply_in_order",
    "WindowBuffer",
]

#: Width of an encoded position, and of its event part (file index + event position).
POSITION_WIDTH = 30
EVENT_WIDTH = 20
_ROW_LIMIT = 10**10

Key = Hashable
Row = Union[Mapping[str, Any], None]
CHANGE_OPS = frozenset("cud")


class DBLogError(ValueError):
    """Input that breaks the contract of this module."""


class UnknownWindowError(DBLogError):
    """A chunk row of a window whose OPEN marker the buffer never saw."""


class OrderingError(DBLogError):
    """A record arrived after a record of the other feed with a higher position."""


def _check_position(what: str, p: object) -> None:
    if type(p) is not str or len(p) != POSITION_WIDTH or not (p.isascii() and p.isdigit()):
        raise DBLogError(f"{what} must be a {POSITION_WIDTH}-digit position string, got {p!r}")


def event_of(position: str) -> str:
    """The binlog event part of a position (file index and event position)."""
    return position[:EVENT_WIDTH]


def chunk_row_position(close: str, index: int) -> str:
    """Position of the ``index``-th row (0-based, SELECT order) of a chunk closed at ``close``.

    The CLOSE marker's event with row sequence ``close.row + 1 + index``: above ``close``,
    below the next binlog event, rising with ``index``."""
    _check_position("close position", close)
    row = int(close[EVENT_WIDTH:]) + 1 + index
    if index < 0 or row >= _ROW_LIMIT:
        raise DBLogError(f"chunk row index {index} out of range for close position {close}")
    return f"{close[:EVENT_WIDTH]}{row:010d}"


def make_key(key: Any) -> Key:
    """A hashable key: a mapping (decoded key record) becomes the tuple of its values in
    field order; a list becomes a tuple; anything else hashable is kept."""
    if isinstance(key, Mapping):
        return tuple(_freeze(v) for v in key.values())
    return _freeze(key)


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, Mapping):
        return tuple((k, _freeze(x)) for k, x in v.items())
    return v


# ---------------------------------------------------------------------------- data model
@dataclass(frozen=True, slots=True)
class Window:
    """A chunk's window: the positions of its OPEN and CLOSE markers."""

    snapshot_id: str
    chunk_id: int
    open: str
    close: str

    def __post_init__(self) -> None:
        _check_position("window open position", self.open)
        _check_position("window close position", self.close)
        if not self.open < self.close:
            raise DBLogError(f"window {self.snapshot_id}/{self.chunk_id}: open {self.open} is not below close {self.close}")

    @property
    def id(self) -> tuple[str, int]:
        return (self.snapshot_id, self.chunk_id)

    def contains(self, position: str) -> bool:
        """``open < position < close``: a change at ``position`` beats this window's rows."""
        return self.open < position < self.close

    def row_position(self, index: int) -> str:
        return chunk_row_position(self.close, index)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Window":
        """From the envelope's ``snapshot_window`` record."""
        return cls(str(d["snapshot_id"]), int(d["chunk_id"]), d["open_position"], d["close_position"])


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """A changelog record: a stream change (c/u/d) or a kept chunk row (r, ``window`` set).

    ``row`` is the after image (``None`` for a delete)."""

    key: Key
    op: str
    row: Row
    position: str
    window: Window | None = None
    ref: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_position("change position", self.position)
        if self.op == "r":
            if self.window is None:
                raise DBLogError("an op 'r' record needs its window")
        elif self.op not in CHANGE_OPS:
            raise DBLogError(f"unknown op {self.op!r} (expected c, u, d or r)")
        if (self.row is None) != (self.op == "d"):
            raise DBLogError(f"op {self.op!r} with row {self.row!r}: only a delete has no row")


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A row read by a chunk's SELECT, at its position just after the window's CLOSE."""

    key: Key
    row: Mapping[str, Any]
    window: Window
    position: str
    ref: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_position("chunk row position", self.position)
        if self.row is None:
            raise DBLogError("a chunk row has a row")
        close = self.window.close
        if not (event_of(self.position) == event_of(close) and self.position > close):
            raise DBLogError(
                f"chunk row position {self.position} is not at its window's CLOSE {close} "
                "(expected chunk_row_position(close, index))"
            )

    @classmethod
    def at(cls, key: Key, row: Mapping[str, Any], window: Window, index: int, ref: Any = None) -> "ChunkRow":
        """The ``index``-th row (SELECT order) of the chunk of ``window``."""
        return cls(key, row, window, window.row_position(index), ref)

    @property
    def index(self) -> int:
        return int(self.position[EVENT_WIDTH:]) - int(self.window.close[EVENT_WIDTH:]) - 1

    def as_record(self) -> ChangeRecord:
        """This row as a changelog record: op ``r`` at its own position (as of CLOSE)."""
        return ChangeRecord(self.key, "r", self.row, self.position, self.window, self.ref)


OPEN = "OPEN"
CLOSE = "CLOSE"
_MARKER_KINDS = {"OPEN": OPEN, "CLOSE": CLOSE, "snapshot-window-open": OPEN, "snapshot-window-close": CLOSE}


@dataclass(frozen=True, slots=True)
class Marker:
    """An OPEN or CLOSE marker of a chunk, at the marker row's own binlog position.

    ``kind`` accepts ``OPEN``/``CLOSE`` and Debezium's ``snapshot-window-open``/``-close``."""

    kind: str
    snapshot_id: str
    chunk_id: int
    position: str
    ref: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_position("marker position", self.position)
        kind = _MARKER_KINDS.get(self.kind)
        if kind is None:
            raise DBLogError(f"unknown marker kind {self.kind!r} (expected OPEN or CLOSE)")
        object.__setattr__(self, "kind", kind)

    @property
    def id(self) -> tuple[str, int]:
        return (self.snapshot_id, self.chunk_id)


def from_envelope(key: Any, value: Mapping[str, Any], ref: Any = None) -> ChangeRecord | ChunkRow:
    """A decoded Debezium envelope (``op``, ``before``, ``after``, ``position``,
    ``snapshot_window``) with its decoded record key, as a record of this module."""
    if key is None:
        raise DBLogError("the DBLog rule needs a key (primary or surrogate key)")
    op, position = value["op"], value["position"]
    k = make_key(key)
    if op == "r":
        sw = value.get("snapshot_window")
        if sw is None:
            raise DBLogError("an op 'r' record without snapshot_window is not a chunk row")
        return ChunkRow(k, value["after"], Window.from_dict(sw), position, ref)
    return ChangeRecord(k, op, None if op == "d" else value["after"], position, None, ref)


# ---------------------------------------------------------------------------- batch form
def dedupe_chunk(chunk_rows: Iterable[ChunkRow], changes_in_window: Iterable[ChangeRecord]) -> list[ChangeRecord]:
    """The kept rows of one chunk, as op ``r`` records at their positions, in position order.

    ``chunk_rows``: rows of a single window (all of the chunk, or those of one partition).
    ``changes_in_window``: the table's changes; those outside ``open < p < close`` are
    ignored, so passing every change of the table is fine."""
    rows = list(chunk_rows)
    if not rows:
        return []
    w = rows[0].window
    for r in rows:
        if r.window != w:
            raise DBLogError(f"dedupe_chunk got rows of two windows: {w} and {r.window}")
    changed = {c.key for c in changes_in_window if w.open < c.position < w.close}
    kept = [r.as_record() for r in rows if r.key not in changed]
    kept.sort(key=_position)
    return kept


def dedupe_log(changes: Iterable[ChangeRecord], chunk_rows: Iterable[ChunkRow]) -> list[ChangeRecord]:
    """The whole clean changelog: every change plus every kept chunk row, in position order.

    The batch reference for :class:`WindowBuffer` (whose output, per partition, is this
    function's output restricted to that partition)."""
    changes = sorted(changes, key=_position)
    positions = [c.position for c in changes]
    by_window: dict[Window, list[ChunkRow]] = {}
    for r in chunk_rows:
        by_window.setdefault(r.window, []).append(r)
    out = list(changes)
    for w, rows in by_window.items():
        inside = changes[bisect_right(positions, w.open):bisect_left(positions, w.close)]
        out.extend(dedupe_chunk(rows, inside))
    out.sort(key=_position)
    _check_unique(out)
    return out


def _position(r: Any) -> str:
    return r.position


def _check_unique(ordered: list[Any]) -> None:
    for a, b in zip(ordered, ordered[1:]):
        if a.position == b.position:
            raise DBLogError(f"two records at position {a.position}: {a} and {b}")


# ---------------------------------------------------------------------------- sinks
class Version(NamedTuple):
    """A sink row: its rank (position) and its row; ``row is None`` is a tombstone."""

    position: str
    row: Row


def merge_upsert(records: Iterable[ChangeRecord | ChunkRow],
                 state: dict[Key, Version] | None = None) -> dict[Key, Version]:
    """Upsert ``records`` into ``state`` (a new dict if ``None``), in any order.

    Per key the record of highest rank wins: a :class:`ChangeRecord` (c/u/d, or a kept
    chunk row ``r``) ranks at its position; a raw, undeduplicated :class:`ChunkRow` ranks
    at its window's OPEN.  A delete leaves a tombstone with its position so an older
    record arriving later cannot resurrect the row.  Equal rank never replaces, so
    replaying a batch changes nothing."""
    state = {} if state is None else state
    for rec in records:
        if type(rec) is ChunkRow:
            rank, row = rec.window.open, rec.row
        elif type(rec) is ChangeRecord:
            rank, row = rec.position, (None if rec.op == "d" else rec.row)
        else:
            raise TypeError(f"merge_upsert takes ChangeRecord or ChunkRow, got {type(rec).__name__}")
        cur = state.get(rec.key)
        if cur is None or rank > cur.position:
            state[rec.key] = Version(rank, row)
    return state


def live_rows(state: Mapping[Key, Version]) -> dict[Key, Row]:
    """The table a merge state stands for: its rows without the tombstones."""
    return {k: v.row for k, v in state.items() if v.row is not None}


def apply_in_order(records: Iterable[ChangeRecord]) -> dict[Key, Row]:
    """Apply a changelog in position order to an empty table: c/u/r upsert, d removes.

    Positions must be unique (drop copies first)."""
    ordered = sorted(records, key=_position)
    _check_unique(ordered)
    table: dict[Key, Row] = {}
    for r in ordered:
        if type(r) is not ChangeRecord:
            raise TypeError(f"apply_in_order takes ChangeRecord, got {type(r).__name__} (dedupe chunk rows first)")
        if r.op == "d":
            table.pop(r.key, None)
        else:
            table[r.key] = r.row
    return table


# ---------------------------------------------------------------------------- streaming form
class _WindowState:
    __slots__ = ("open", "close", "keys")

    def __init__(self, open: str, close: str | None = None, keys: set | None = None) -> None:
        self.open = open
        self.close = close
        self.keys: set = set() if keys is None else keys


class WindowBuffer:
    """The DBLog rule over one ordered feed, with state bounded by the open windows.

    One buffer per (table, Kafka partition of the table's topic).

    Input contract
    --------------
    ``push`` receives, one by one, the merge by position of two feeds:

    * **data**: the partition's records in the order the producer wrote them: change
      events (:class:`ChangeRecord` c/u/d) and chunk rows (:class:`ChunkRow`).  The producer
      writes a partition in rising position order with each chunk row at
      ``chunk_row_position(close, i)`` (DESIGN.md, section 4); so a chunk row comes after
      every change at or before its CLOSE (section 3) *and* before every later change.
    * **markers**: every OPEN and CLOSE :class:`Marker` of the table (all of them, in every
      partition's buffer: a marker is not keyed by row), in rising position order.

    The merged sequence rises strictly, except for copies: a data record at or below the
    highest data position seen, or a marker at or below the highest marker position seen,
    is a copy (producer restart, aborted transaction, replay) and is dropped (``None``).  A
    record below the *other* feed's highest position breaks the merge order: it raises
    :class:`OrderingError` rather than drop it or decide wrongly.  The adapter must
    therefore hand over a record at position q only when both feeds have delivered
    everything below q (e.g. gate both by the producer's committed offset position).

    Every chunk row's window must have been OPENed in this buffer
    (:class:`UnknownWindowError` otherwise: start the job before the snapshot, or where no
    window is open).  The CLOSE position is known without the CLOSE marker, since a chunk
    row carries its window; the CLOSE marker is still needed to stop collecting keys for a
    window when this partition gets no row of that chunk.

    Output
    ------
    ``push`` returns the record to emit, or ``None``: a change is emitted as is; a chunk
    row is dropped if its key changed inside its window, else emitted as an op ``r``
    :class:`ChangeRecord` at its own position; markers and copies emit nothing.  Outputs
    rise in position order, so a consumer applying them in arrival order, or a sink
    ranking by position, ends equal to the source.  Decisions are immediate: when a chunk
    row arrives every change of its window is already in, so no chunk row is ever buffered.

    State
    -----
    Per live window: its OPEN and CLOSE positions and the keys changed in it since OPEN
    (until CLOSE); plus the highest position of each feed.  A closed window is dropped as
    soon as the input passes the CLOSE marker's binlog event (no row of that chunk can
    follow), or on :meth:`advance`.  Nothing grows with the table.  The output depends on
    the input sequence only: a replay gives the same output, and ``to_state`` /
    ``from_state`` round-trip the state at any point (a checkpoint).
    """

    __slots__ = ("_windows", "_data_high", "_marker_high", "stats")

    def __init__(self) -> None:
        self._windows: dict[tuple[str, int], _WindowState] = {}
        self._data_high = ""  # below every position
        self._marker_high = ""
        self.stats = {"changes": 0, "rows_kept": 0, "rows_dropped": 0, "copies": 0,
                      "markers": 0, "reopened": 0, "unknown_close": 0}

    # ------------------------------------------------------------------ feeding
    def push(self, item: ChangeRecord | ChunkRow | Marker) -> ChangeRecord | None:
        """Take the next record of the merged feed; return what to emit, if anything."""
        t = type(item)
        pos = item.position
        if t is Marker:
            own, other = self._marker_high, self._data_high
        elif t is ChangeRecord or t is ChunkRow:
            own, other = self._data_high, self._marker_high
        else:
            raise TypeError(f"WindowBuffer takes ChangeRecord, ChunkRow or Marker, got {t.__name__}")
        if pos <= own:
            self.stats["copies"] += 1
            return None
        if pos <= other:
            raise OrderingError(
                f"{t.__name__} at {pos} arrived after a record of the other feed at {other}: "
                "the data and marker feeds must be merged by position"
            )
        self._retire(pos)
        if t is ChangeRecord:
            self._data_high = pos
            return self._change(item)
        if t is ChunkRow:
            self._data_high = pos
            return self._chunk_row(item)
        self._marker_high = pos
        self._marker(item)
        return None

    def feed(self, items: Iterable[ChangeRecord | ChunkRow | Marker]) -> list[ChangeRecord]:
        """``push`` each item; the emitted records, in order."""
        out = []
        for item in items:
            r = self.push(item)
            if r is not None:
                out.append(r)
        return out

    def advance(self, position: str) -> None:
        """Declare the input complete up to ``position`` (no later record but copies will be
        at or below it): windows whose CLOSE event lies before it are dropped.  Call it
        with a partition's end (or ``"9" * 30`` at end of input) to empty closed windows."""
        _check_position("advance position", position)
        self._retire(position)

    # ------------------------------------------------------------------ rule
    def _change(self, c: ChangeRecord) -> ChangeRecord:
        if c.op not in CHANGE_OPS:
            raise DBLogError(f"a stream change has op c, u or d, got {c.op!r}")
        self.stats["changes"] += 1
        key = c.key
        for w in self._windows.values():
            if w.close is None:  # OPEN seen (it is below this position), CLOSE not yet
                w.keys.add(key)
        return c

    def _chunk_row(self, r: ChunkRow) -> ChangeRecord | None:
        win = r.window
        w = self._windows.get(win.id)
        if w is None:
            raise UnknownWindowError(
                f"chunk row at {r.position} of window {win.snapshot_id}/{win.chunk_id} "
                f"(open {win.open}) whose OPEN marker this buffer never saw"
            )
        if w.open != win.open:
            raise DBLogError(f"chunk row's window opens at {win.open}, its OPEN marker is at {w.open}")
        if w.close is None:
            # The row is past CLOSE and so is every change pushed before it: CLOSE is known.
            w.close = win.close
        elif w.close != win.close:
            raise DBLogError(f"chunk row's window closes at {win.close}, its CLOSE marker is at {w.close}")
        if r.key in w.keys:
            self.stats["rows_dropped"] += 1
            return None
        self.stats["rows_kept"] += 1
        return r.as_record()

    def _marker(self, m: Marker) -> None:
        self.stats["markers"] += 1
        if m.kind == OPEN:
            if m.id in self._windows:
                # The same chunk opened again (re-read after a producer restart): the new
                # window replaces the old one, whose rows can no longer come.
                self.stats["reopened"] += 1
            self._windows[m.id] = _WindowState(m.position)
            return
        w = self._windows.get(m.id)
        if w is None:
            self.stats["unknown_close"] += 1  # its OPEN came before this buffer started
        elif w.close is None:
            w.close = m.position
        elif w.close != m.position:
            raise DBLogError(f"CLOSE marker of {m.snapshot_id}/{m.chunk_id} at {m.position}, "
                             f"its rows said {w.close}")

    def _retire(self, position: str) -> None:
        if not self._windows:
            return
        ev = position[:EVENT_WIDTH]
        done = [wid for wid, w in self._windows.items() if w.close is not None and w.close[:EVENT_WIDTH] < ev]
        for wid in done:
            del self._windows[wid]

    # ------------------------------------------------------------------ introspection
    @property
    def window_count(self) -> int:
        return len(self._windows)

    @property
    def tracked_keys(self) -> int:
        return sum(len(w.keys) for w in self._windows.values())

    @property
    def is_empty(self) -> bool:
        """No window state left (the feed highs are one number each and always kept)."""
        return not self._windows

    def windows(self) -> list[tuple[str, int, str, str | None, int]]:
        """``(snapshot_id, chunk_id, open, close or None, keys changed)`` of each live window."""
        return [(sid, cid, w.open, w.close, len(w.keys)) for (sid, cid), w in self._windows.items()]

    # ------------------------------------------------------------------ checkpoint
    def to_state(self) -> dict[str, Any]:
        """The whole state as plain data (lists, strings, ints; keys as given)."""
        return {
            "version": 1,
            "data_high": self._data_high,
            "marker_high": self._marker_high,
            "windows": [[sid, cid, w.open, w.close, list(w.keys)] for (sid, cid), w in self._windows.items()],
            "stats": dict(self.stats),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "WindowBuffer":
        """A buffer continuing from ``to_state()``'s output (also after a JSON round trip:
        list keys become tuples again)."""
        if state.get("version") != 1:
            raise DBLogError(f"unknown WindowBuffer state version {state.get('version')!r}")
        buf = cls()
        buf._data_high = state["data_high"]
        buf._marker_high = state["marker_high"]
        for sid, cid, open_, close, keys in state["windows"]:
            buf._windows[(sid, cid)] = _WindowState(open_, close, {_freeze(k) for k in keys})
        buf.stats.update(state.get("stats", {}))
        return buf


# ---------------------------------------------------------------------------- marker-free form
class WindowTooOldError(DBLogError):
    """A chunk row that :class:`PartitionDeduper` cannot decide exactly any more.

    Its window opened before ``forgotten_up_to``: a change of its key inside the window
    may have been forgotten (pruned by the time-to-live), so keeping the row could
    resurrect a stale row and dropping it could lose one.  Nothing is guessed: the adapter
    sends the record to a dead-letter topic (re-read that chunk, or raise ``ttl_ms``).
    The record counts as consumed: a later copy of it is a ``"copy"``."""

    def __init__(self, key: Any, position: str, window: Window, forgotten_up_to: str) -> None:
        self.key, self.position, self.window, self.forgotten_up_to = key, position, window, forgotten_up_to
        super().__init__(
            f"chunk row at {position} of window {window.snapshot_id}/{window.chunk_id} opened at {window.open}, "
            f"but this partition's changes up to {forgotten_up_to} are forgotten and the key {key!r} has no "
            "change tracked since: the row cannot be decided exactly (window longer than ttl_ms?)"
        )

    def __reduce__(self):  # picklable (Spark ships exceptions between processes)
        return (type(self), (self.key, self.position, self.window, self.forgotten_up_to))


def _position_before(p: str) -> str:
    """The position just below ``p`` (``""``, below every position, for position 0)."""
    n = int(p)
    return f"{n - 1:0{POSITION_WIDTH}d}" if n else ""


def _encode_key(k: Any) -> Any:
    t = type(k)
    if t is bytes:
        return {"b64": base64.b64encode(k).decode("ascii")}
    if t is str or t is int or t is bool or k is None:
        return k
    if t is float:
        if not math.isfinite(k):
            raise DBLogError(f"cannot checkpoint the non-finite float key {k!r}")
        return k
    if t is tuple:
        return [_encode_key(x) for x in k]
    raise DBLogError(f"cannot checkpoint a key of type {t.__name__} ({k!r}): keys must be bytes, str, int, "
                     "float, bool, None or tuples of those")


def _decode_key(v: Any) -> Any:
    if type(v) is list:
        return tuple(_decode_key(x) for x in v)
    if type(v) is dict:
        if len(v) != 1 or type(v.get("b64")) is not str:
            raise DBLogError(f"unknown key encoding {v!r} in PartitionDeduper state")
        return base64.b64decode(v["b64"], validate=True)
    return v


class PartitionDeduper:
    """The DBLog rule over one Kafka partition of a table topic, without markers.

    One deduper per (table topic, partition), fed the partition's records in offset order
    with :meth:`push`: change events (op ``c``/``u``/``d``) and chunk rows (op ``r`` with
    their :class:`Window`).  It needs no OPEN/CLOSE marker feed: a chunk row carries its
    window, and the partition itself holds every change that can beat it.

    Why the partition alone decides (the contract of DESIGN.md sections 3-4)
    ------------------------------------------------------------------------
    * Partitioning is by key, so every change of key K is in K's partition, in position
      order.  A chunk row R of K sits at ``q = chunk_row_position(close, i)``, inside the
      CLOSE marker's binlog event, after every change at or before CLOSE and before every
      later change (section 3).
    * So when R arrives, every record before it is below q, and every *change* before it
      is below ``close``: a change in ``(close, q)`` would share the CLOSE marker's binlog
      event, which holds only the signal-table row.  (Checked: a change at or above the
      CLOSE of a later chunk row raises :class:`OrderingError`.)  Every change of K inside
      ``(open, close)`` has therefore arrived before R, and every change of K after R is
      above ``close`` and is irrelevant to R.
    * Hence the latest change of K seen so far, L, decides: if ``L > open`` then
      ``open < L < close`` and R is dropped; if ``L <= open`` (or K never changed) no
      change of K lies in ``(open, close)`` and R is kept.  A key changed twice, deleted
      and re-inserted, or moved by a primary-key change (a ``d`` of the old key and a
      ``c`` of the new one, each in its own key's partition) needs nothing more: only
      the latest position per key matters.

    Forgetting (bounded state)
    --------------------------
    The state is ``key -> (position of the key's latest change, clock at that change)``,
    ordered by that position (an ``OrderedDict``: a key changed again moves to the end).
    The *clock* is the highest source timestamp (``ts_ms`` of the binlog event) of the
    changes pushed so far.  A key is forgotten once the clock is more than ``ttl_ms``
    above the clock at its latest change; pruning pops from the front, so it is amortised
    O(1) per record, and ``forgotten_up_to`` (F) is the highest position forgotten.
    Because the entries are popped in position order, *a key is tracked exactly when its
    latest change is above F*; an untracked key's changes are all at or below F.  So for
    a chunk row R of K, window ``(open, close)``:

    * K tracked, latest change ``L > open``: drop (certain, whatever F);
    * K tracked, ``L <= open``: keep (certain: L is K's latest change, whatever F);
    * K untracked, ``F <= open``: keep (every change of K is at or below F, so outside
      the window; ``F == open`` cannot even happen, F being a change's position and open
      a marker's);
    * K untracked, ``F > open``: a change of K in ``(open, F]`` may have been forgotten:
      :class:`WindowTooOldError`, never a guess.

    The decisions therefore never differ from :func:`dedupe_log` (restricted to the
    partition); the TTL only decides whether the deduper can answer.  A change is aged
    from the clock at its arrival, not from its own timestamp, which only ever retains
    longer: MySQL stamps a row event with the time its *statement started*, so a long
    transaction's events can be older than events logged before them; ages are in whole
    seconds on MySQL (``ts_ms`` is a multiple of 1000).  With timestamps that rise with
    the position, every chunk row is decided exactly when its window is no longer than
    the TTL: ``ts(close) - ts(open) <= ttl_ms`` in binlog timestamps (of the marker
    events, which bound those of the changes between them).  Chunk rows' own ``ts_ms``
    is ignored: the producer stamps them with the wall clock at release
    (``EventBuilder.chunk_records``), which runs ahead of the binlog's timestamps while
    the binlog reader lags and would otherwise prune the window being decided.
    The memory is the number of keys changed within the last ``ttl_ms`` of the clock.

    Copies and errors
    -----------------
    A record at or below the highest position pushed is a copy (producer restart, aborted
    transaction, replay): ``"copy"``, no other effect, so a feed with copies gives the same
    decisions and the same state as one without.  Malformed input raises
    :class:`DBLogError` (a chunk row without a window or not at its window's CLOSE event,
    a change with a window, an unknown op, a change without an integer ``ts_ms``, a ``None``
    key), broken order raises :class:`OrderingError`; both leave the state unchanged.
    :class:`WindowTooOldError` (also a :class:`DBLogError`) consumes the record.

    History
    -------
    By default the feed is taken to start at the partition's beginning (nothing was
    missed).  An adapter starting a partition mid-stream with no saved state (startingOffsets
    latest or a given offset, or records deleted by retention) passes
    ``complete_history=False``: changes before the first record pushed then count as
    forgotten, and chunk rows of windows opened before it raise :class:`WindowTooOldError`
    unless their key was changed since.

    Keys are compared as given (hashable); :meth:`to_state` can checkpoint bytes (the raw
    Kafka record key, the adapter's choice), str, int, float (finite), bool, None and
    tuples of those (as :func:`make_key` builds them).
    """

    EMIT = "emit"
    DROP = "drop"
    COPY = "copy"
    TOO_OLD = "too_old"  # only in push_many(..., too_old="mark")

    __slots__ = ("ttl_ms", "_high", "_change_high", "_clock", "_forgotten", "_tracked", "_pending_start", "_n")

    def __init__(self, ttl_ms: int = 600_000, *, complete_history: bool = True) -> None:
        if type(ttl_ms) is not int or ttl_ms < 0:
            raise DBLogError(f"ttl_ms must be an int >= 0, got {ttl_ms!r}")
        self.ttl_ms = ttl_ms
        self._high = ""  # highest position pushed, below every position at first
        self._change_high = ""  # highest change position pushed
        self._clock: int | None = None  # highest ts_ms of a change pushed
        self._forgotten = ""  # forgotten_up_to
        self._tracked: OrderedDict[Key, tuple[str, int]] = OrderedDict()
        self._pending_start = not complete_history
        self._n = {"changes": 0, "rows_kept": 0, "rows_dropped": 0, "copies": 0, "too_old": 0, "forgotten": 0}

    # ------------------------------------------------------------------ feeding
    def push(self, key: Key, op: str, position: str, ts_ms: int | None, window: Window | Mapping | None = None) -> str:
        """Take the partition's next record; return ``"emit"``, ``"drop"`` or ``"copy"``.

        ``ts_ms``: the binlog event's timestamp (``source.ts_ms``), an int, for a change;
        ignored (may be ``None``) for a chunk row.  ``window``: the chunk row's
        :class:`Window` (or its ``snapshot_window`` mapping); ``None`` for a change."""
        _check_position("position", position)
        if key is None:
            raise DBLogError(f"record at {position} has no key: the DBLog rule needs a key")
        if op in CHANGE_OPS:
            if window is not None:
                raise DBLogError(f"a change (op {op!r}) at {position} carries a window: only chunk rows (op 'r') do")
            if type(ts_ms) is not int:
                raise DBLogError(f"change at {position} needs its source ts_ms as an int, got {ts_ms!r}")
            if position <= self._high:
                self._n["copies"] += 1
                return "copy"
            self._start(position)
            self._change(key, position, ts_ms)
            return "emit"
        if op != "r":
            raise DBLogError(f"unknown op {op!r} at {position} (expected c, u, d or r)")
        if window is None:
            raise DBLogError(f"chunk row (op 'r') at {position} without its window")
        if type(window) is not Window:
            if not isinstance(window, Mapping):
                raise DBLogError(f"chunk row at {position}: window must be a Window or a snapshot_window mapping")
            window = Window.from_dict(window)
        close = window.close
        if not (position > close and position[:EVENT_WIDTH] == close[:EVENT_WIDTH]):
            raise DBLogError(f"chunk row position {position} is not at its window's CLOSE {close} "
                             "(expected chunk_row_position(close, index))")
        if position <= self._high:
            self._n["copies"] += 1
            return "copy"
        if self._change_high >= close:
            raise OrderingError(f"chunk row at {position} of window {window.snapshot_id}/{window.chunk_id} came after "
                                f"a change at {self._change_high}, at or above its CLOSE {close}: a chunk row must "
                                "precede every change after its CLOSE")
        self._start(position)
        return self._chunk_row(key, position, window)

    def push_record(self, record: ChangeRecord | ChunkRow, ts_ms: int | None = None) -> str:
        """:meth:`push` of a :class:`ChangeRecord` (c/u/d) or a :class:`ChunkRow`."""
        return self.push(record.key, record.op if type(record) is ChangeRecord else "r", record.position,
                         ts_ms, record.window)

    def push_many(self, records: Iterable[tuple], *, too_old: str = "raise") -> list[str]:
        """:meth:`push` each ``(key, op, position, ts_ms, window)``; the decisions, in order.

        ``too_old="mark"`` gives ``"too_old"`` for a :class:`WindowTooOldError` and goes on
        (the row is consumed either way); ``"raise"`` lets it through, leaving the records
        before it pushed."""
        if too_old not in ("raise", "mark"):
            raise ValueError(f"too_old must be 'raise' or 'mark', got {too_old!r}")
        out = []
        push = self.push
        for rec in records:
            try:
                out.append(push(*rec))
            except WindowTooOldError:
                if too_old == "raise":
                    raise
                out.append("too_old")
        return out

    # ------------------------------------------------------------------ rule
    def _start(self, position: str) -> None:
        if self._pending_start:  # history before the first record is unknown
            self._pending_start = False
            self._forgotten = _position_before(position)

    def _change(self, key: Key, position: str, ts_ms: int) -> None:
        clock = self._clock
        advanced = clock is None or ts_ms > clock
        if advanced:
            self._clock = clock = ts_ms
        tracked = self._tracked
        tracked[key] = (position, clock)
        tracked.move_to_end(key)
        self._high = self._change_high = position
        self._n["changes"] += 1
        if advanced:
            self._prune()

    def _prune(self) -> None:
        tracked = self._tracked
        limit = self._clock - self.ttl_ms  # forget a key whose clock is below: more than ttl_ms behind
        n = 0
        while tracked:
            key = next(iter(tracked))
            position, at = tracked[key]
            if at >= limit:
                break
            del tracked[key]
            self._forgotten = position
            n += 1
        if n:
            self._n["forgotten"] += n

    def _chunk_row(self, key: Key, position: str, window: Window) -> str:
        latest = self._tracked.get(key)
        self._high = position
        if latest is not None:
            if latest[0] > window.open:  # and below close (checked in push)
                self._n["rows_dropped"] += 1
                return "drop"
        elif self._forgotten > window.open:
            self._n["too_old"] += 1
            raise WindowTooOldError(key, position, window, self._forgotten)
        self._n["rows_kept"] += 1
        return "emit"

    # ------------------------------------------------------------------ introspection
    @property
    def high(self) -> str:
        """The highest position pushed (``""`` before any)."""
        return self._high

    @property
    def forgotten_up_to(self) -> str:
        """The highest change position forgotten (``""`` if none): a chunk row whose window
        opened below it is decided only if its key is still tracked."""
        return self._forgotten

    @property
    def clock(self) -> int | None:
        """The highest source ``ts_ms`` of the changes pushed (``None`` before any)."""
        return self._clock

    @property
    def tracked_keys(self) -> int:
        return len(self._tracked)

    def last_change(self, key: Key) -> str | None:
        """Position of ``key``'s latest change if it is still tracked."""
        latest = self._tracked.get(key)
        return None if latest is None else latest[0]

    @property
    def stats(self) -> dict[str, int]:
        """Counters (changes, rows_kept, rows_dropped, copies, too_old, forgotten) and
        tracked_keys."""
        return {**self._n, "tracked_keys": len(self._tracked)}

    # ------------------------------------------------------------------ checkpoint
    def to_state(self) -> dict[str, Any]:
        """The whole state as JSON-serialisable data (bytes keys as ``{"b64": ...}``, tuple
        keys as lists); :class:`DBLogError` for a key of another type."""
        return {
            "version": 1,
            "kind": "PartitionDeduper",
            "ttl_ms": self.ttl_ms,
            "high": self._high,
            "change_high": self._change_high,
            "clock": self._clock,
            "forgotten_up_to": self._forgotten,
            "pending_start": self._pending_start,
            "tracked": [[_encode_key(k), p, at] for k, (p, at) in self._tracked.items()],
            "stats": dict(self._n),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], ttl_ms: int | None = None) -> "PartitionDeduper":
        """A deduper continuing from :meth:`to_state`'s output (also after a JSON round
        trip).  ``ttl_ms`` overrides the saved TTL (a shorter one prunes right away)."""
        if state.get("version") != 1 or state.get("kind") != "PartitionDeduper":
            raise DBLogError(f"not a PartitionDeduper state (version {state.get('version')!r}, "
                             f"kind {state.get('kind')!r})")
        d = cls(state["ttl_ms"] if ttl_ms is None else ttl_ms)
        d._high, d._change_high, d._forgotten = state["high"], state["change_high"], state["forgotten_up_to"]
        d._clock = state["clock"]
        d._pending_start = bool(state.get("pending_start", False))
        prev, prev_at = d._forgotten, None
        for enc, p, at in state["tracked"]:
            k = _decode_key(enc)
            if not (prev < p <= d._change_high) or (prev_at is not None and at < prev_at) or k in d._tracked:
                raise DBLogError(f"corrupt PartitionDeduper state at tracked entry {[enc, p, at]!r}")
            d._tracked[k] = (p, at)
            prev, prev_at = p, at
        d._n.update(state.get("stats", {}))
        if d._clock is not None:
            d._prune()
        return d


__all__ += ["WindowTooOldError", "PartitionDeduper"]
