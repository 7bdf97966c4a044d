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

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, NamedTuple, Union

from contract.position import ENCODED_WIDTH, EVENT_WIDTH, event_of, is_position
from contract.position import chunk_row_position as contract_chunk_row_position
from spark_jobs.errors import DBLogError, OrderingError, UnknownWindowError

__all__ = [
    "DBLogError",
    "UnknownWindowError",
    "OrderingError",
    "Window",
    "ChangeRecord",
    "ChunkRow",
    "Marker",
    "Version",
    "chunk_row_position",
    "make_key",
    "from_envelope",
    "dedupe_chunk",
    "dedupe_log",
    "merge_upsert",
    "live_rows",
    "apply_in_order",
    "WindowBuffer",
]

Key = Hashable
Row = Union[Mapping[str, Any], None]
CHANGE_OPS = frozenset("cud")


def _check_position(what: str, p: object) -> None:
    if not is_position(p):
        raise DBLogError(f"{what} must be a {ENCODED_WIDTH}-digit position string, got {p!r}")


def chunk_row_position(close: str, index: int) -> str:
    """:func:`contract.position.chunk_row_position`, with a bad input as :class:`DBLogError`."""
    try:
        return contract_chunk_row_position(close, index)
    except ValueError as exc:
        raise DBLogError(str(exc)) from None


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
            self._change(item.key, item.op)
            return item
        if t is ChunkRow:
            self._data_high = pos
            return self._chunk_row(item)
        self._marker_high = pos
        self._marker(item)
        return None

    def push_change(self, key: Key, op: str, row: Row, position: str) -> bool:
        """``push(ChangeRecord(key, op, row, position))`` without building the record (the
        merge job's hot path): whether it is emitted (False: a copy).  Same checks, same
        errors."""
        if not (type(position) is str and len(position) == ENCODED_WIDTH and position.isdigit()
                and position.isascii()):  # (is_position, inline: once per record)
            _check_position("change position", position)
        if op not in CHANGE_OPS:
            raise DBLogError(f"a stream change has op c, u or d, got {op!r}")
        if (row is None) != (op == "d"):
            raise DBLogError(f"op {op!r} with row {row!r}: only a delete has no row")
        if position <= self._data_high:
            self.stats["copies"] += 1
            return False
        if position <= self._marker_high:
            raise OrderingError(
                f"ChangeRecord at {position} arrived after a record of the other feed at {self._marker_high}: "
                "the data and marker feeds must be merged by position"
            )
        self._data_high = position
        if self._windows:
            self._retire(position)
            self._note_change(key)  # (its op checked above)
        else:  # (no window to keep the key: only counted, without a call per record)
            self.stats["changes"] += 1
        return True

    def highs(self) -> tuple[str, str]:
        """``(data high, marker high)``: the highest position of each feed pushed so far (a
        change at or below the first is a copy; one at or below the second an ordering error)."""
        return self._data_high, self._marker_high

    def took_changes(self, data_high: str, changes: int, copies: int) -> None:
        """What ``push_change`` would have left after stream changes that a caller decided
        itself with this buffer's rule while no window is open (the merge task's native scan,
        :func:`spark_jobs.task.partition_merge.merge_partition`): ``changes`` emitted up to
        ``data_high``, ``copies`` dropped.  With no window open the rule keeps no key: a
        change is a copy at or below the data high, an ordering error at or below the marker
        high, else emitted."""
        if self._windows:
            raise DBLogError("changes decided outside the buffer while a window is open")
        if changes:
            if not data_high > max(self._data_high, self._marker_high):
                raise OrderingError(f"changes up to {data_high} taken after a record at "
                                    f"{max(self._data_high, self._marker_high)}")
            self._data_high = data_high
        self.stats["changes"] += changes
        self.stats["copies"] += copies

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
    def _change(self, key: Key, op: str) -> None:
        if op not in CHANGE_OPS:
            raise DBLogError(f"a stream change has op c, u or d, got {op!r}")
        self._note_change(key)

    def _note_change(self, key: Key) -> None:
        """A change of ``key`` counted, and kept by every window open at its position."""
        self.stats["changes"] += 1
        for w in self._windows.values():
            if w.close is None:  # OPEN seen (it is below this position), CLOSE not yet
                w.keys.add(key)

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
        ev = event_of(position)
        done = [wid for wid, w in self._windows.items() if w.close is not None and event_of(w.close) < ev]
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

