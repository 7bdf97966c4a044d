"""Binlog positions: one totally ordered value per change event.

A :class:`BinlogPosition` is the triple ``(file_index, pos, row)``:

* ``file_index`` -- the numeric suffix of the binlog file (``mysql-bin.000123`` -> 123);
  it only grows, a rotation moves to the next index;
* ``pos`` -- the byte offset of the event inside that file (the event's start or end
  position, whichever the reader records -- it only has to be consistent);
* ``row`` -- the index of the row inside a multi-row event (0 for the first row).

Positions compare as the tuple ``(file_index, pos, row)``.  The binlog file stem
(``mysql-bin``) is carried along so the file name can be rebuilt, but it takes no part
in comparisons, equality or hashing: one server writes one stem.

Wire form
---------
:meth:`BinlogPosition.encode` gives exactly 30 ASCII decimal digits,
``f"{file_index:010d}{pos:010d}{row:010d}"``.  Because the width is fixed, comparing two
encoded strings (bytewise, as Kafka tooling, Spark and PostgreSQL ``text`` with the C
collation do) gives the same answer as comparing the positions.  This string is the
position stored in Kafka records, Spark state and sink tables.  Each part must satisfy
``0 <= x < 10**10``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

__all__ = [
    "BinlogPosition",
    "based",
    "resume_floor",
    "ENCODED_WIDTH",
    "EVENT_WIDTH",
    "PART_LIMIT",
    "DEFAULT_STEM",
    "is_position",
    "event_of",
    "chunk_row_position",
    "describe_position",
    "CopyFilter",
]

#: Exclusive upper bound of each of the three parts.
PART_LIMIT = 10**10
#: Width of one encoded part, and of the whole encoded position.
_PART_WIDTH = 10
ENCODED_WIDTH = 3 * _PART_WIDTH
#: Width of the part of an encoded position that names the binlog *event* (file index and
#: event position); the rest is the row sequence inside that event.
EVENT_WIDTH = 2 * _PART_WIDTH
#: Binlog file stem used when none is known (MySQL's and MariaDB's packaged default).
DEFAULT_STEM = "mysql-bin"
#: MySQL and MariaDB zero-pad the file index to at least 6 digits.
_MIN_INDEX_DIGITS = 6

_ENCODED_RE = re.compile(r"[0-9]{%d}" % ENCODED_WIDTH)
_INDEX_RE = re.compile(r"[0-9]+")


def _check_part(name: str, value: object) -> None:
    # bool is an int subclass; a True/False position is always a bug upstream.
    if type(value) is not int:
        raise ValueError(f"BinlogPosition.{name} must be an int, got {type(value).__name__} {value!r}")
    if not 0 <= value < PART_LIMIT:
        raise ValueError(f"BinlogPosition.{name} must be in [0, 10**10), got {value!r}")


@dataclass(frozen=True, order=True, slots=True)
class BinlogPosition:
    """A totally ordered binlog coordinate ``(file_index, pos, row)``.

    >>> p = BinlogPosition.from_binlog("mysql-bin.000123", 4567, 2)
    >>> p.file_name, p.encode()
    ('mysql-bin.000123', '000000012300000045670000000002')
    """

    file_index: int
    pos: int
    row: int = 0
    stem: str = field(default=DEFAULT_STEM, compare=False)

    def __post_init__(self) -> None:
        _check_part("file_index", self.file_index)
        _check_part("pos", self.pos)
        _check_part("row", self.row)
        if not isinstance(self.stem, str) or not self.stem:
            raise ValueError(f"BinlogPosition.stem must be a non-empty string, got {self.stem!r}")

    # ------------------------------------------------------------------ binlog names
    @classmethod
    def from_binlog(cls, file_name: str, pos: int, row: int = 0) -> "BinlogPosition":
        """Build a position from a binlog file name such as ``mysql-bin.000123``.

        A directory part (``/var/lib/mysql/binlog.000001``) is ignored.  The index is the
        all-digit suffix after the last dot; anything else raises ``ValueError``.
        """
        if not isinstance(file_name, str):
            raise ValueError(f"binlog file name must be a string, got {type(file_name).__name__} {file_name!r}")
        base = os.path.basename(file_name)
        stem, dot, suffix = base.rpartition(".")
        if not dot or not stem or not _INDEX_RE.fullmatch(suffix):
            raise ValueError(
                f"not a binlog file name: {file_name!r} "
                "(expected '<stem>.<digits>', e.g. 'mysql-bin.000123')"
            )
        index = int(suffix)
        if index >= PART_LIMIT:
            raise ValueError(f"binlog file index of {file_name!r} is too large (must be < 10**10)")
        return cls(index, pos, row, stem)

    @property
    def file_name(self) -> str:
        """The binlog file name, e.g. ``mysql-bin.000123`` (index zero-padded to 6 digits)."""
        return f"{self.stem}.{self.file_index:0{_MIN_INDEX_DIGITS}d}"

    # ------------------------------------------------------------------ wire form
    def encode(self) -> str:
        """The 30-digit wire form; string order equals position order."""
        return f"{self.file_index:010d}{self.pos:010d}{self.row:010d}"

    @classmethod
    def decode(cls, encoded: str, stem: str = DEFAULT_STEM) -> "BinlogPosition":
        """Inverse of :meth:`encode`.  ``stem`` is not part of the wire form."""
        if not isinstance(encoded, str) or not _ENCODED_RE.fullmatch(encoded):
            raise ValueError(
                f"not an encoded binlog position: {encoded!r} "
                f"(expected exactly {ENCODED_WIDTH} ASCII digits)"
            )
        return cls(int(encoded[0:10]), int(encoded[10:20]), int(encoded[20:30]), stem)

    # ------------------------------------------------------------------ helpers
    def with_row(self, row: int) -> "BinlogPosition":
        """The same event position with another row index."""
        return BinlogPosition(self.file_index, self.pos, row, self.stem)

    def encode_row(self, row: int) -> str:
        """``self.with_row(row).encode()`` without building that position (the per-row hot path).

        ``row`` is a row index of a binlog event (or twice one, plus one), far below the limit."""
        return f"{self.file_index:010d}{self.pos:010d}{row:010d}"

    def next_row(self) -> "BinlogPosition":
        """The position of the next row of the same event."""
        return BinlogPosition(self.file_index, self.pos, self.row + 1, self.stem)

    def __reduce__(self):
        # Pickled as its constructor's arguments (checked again when unpickled): half the cost
        # of the generated state methods of a frozen dataclass with slots, for the positions
        # the binlog reader process hands over with every transaction.
        return BinlogPosition, (self.file_index, self.pos, self.row, self.stem)

    def __str__(self) -> str:
        return f"{self.file_name}:{self.pos}#{self.row}"


def based(p: BinlogPosition, file_base: int) -> BinlogPosition:
    """``p`` with ``file_base`` added to its file index.  Positions must rise across
    servers too: after a failover the new server's binlog files are numbered on their
    own, so the producer adds a base that puts them above everything written before
    (stored with its offsets, see :mod:`producer.startup`)."""
    return BinlogPosition(p.file_index + file_base, p.pos, p.row, p.stem) if file_base else p


def resume_floor(record: object) -> str | None:
    """Of a producer's stored offset record (``<prefix>._offsets``: ``{"resume": {"file",
    "pos", "last"}, "file_base": n, ...}``), the encoded position of its resume point (row
    0, file base added): at or below every change the producer writes from there on (it
    reads the binlog again from that point after a restart).  None for a record that
    names none: a reset (no record), a start by GTID before any event was read, or a
    record of another shape."""
    if not isinstance(record, dict) or not isinstance(record.get("resume"), dict):
        return None
    r = record["resume"]
    try:
        if not r.get("file"):
            return None
        return based(BinlogPosition.from_binlog(str(r["file"]), int(r["pos"])), int(record.get("file_base") or 0)).encode()
    except (KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------------- the wire form
def is_position(p: object) -> bool:
    """Whether ``p`` is an encoded position: a string of exactly 30 ASCII digits."""
    return type(p) is str and len(p) == ENCODED_WIDTH and p.isascii() and p.isdigit()


def event_of(position: str) -> str:
    """The binlog event part of an encoded position (file index and event position)."""
    return position[:EVENT_WIDTH]


def chunk_row_position(close: str, index: int) -> str:
    """The position of the ``index``-th row (0-based, in the SELECT's order) of a snapshot
    chunk whose CLOSE marker is at ``close``: the CLOSE marker's event with row sequence
    ``close.row + 1 + index``.  Above ``close``, below the next binlog event, rising with
    ``index``: chunk rows are written "at their CLOSE position, ordered within the chunk"."""
    if not is_position(close):
        raise ValueError(f"close position must be a {ENCODED_WIDTH}-digit position string, got {close!r}")
    row = int(close[EVENT_WIDTH:]) + 1 + index
    if index < 0 or row >= PART_LIMIT:
        raise ValueError(f"chunk row index {index} out of range for close position {close}")
    return f"{close[:EVENT_WIDTH]}{row:0{_PART_WIDTH}d}"


def chunk_row_positions(close: str, count: int) -> list[str]:
    """:func:`chunk_row_position` of rows ``0`` to ``count - 1``, checked once."""
    if count <= 0:
        return []
    chunk_row_position(close, count - 1)  # (the checks)
    event, first = close[:EVENT_WIDTH], int(close[EVENT_WIDTH:]) + 1
    # Run by run of rows with as many digits: the event, the zeros, then the row's digits
    # (a format per row cost more than the rest of a chunk row's envelope).
    out: list[str] = []
    low, high = first, first + count
    while low < high:
        digits = len(str(low))
        top = min(high, 10 ** digits)
        head = event + "0" * (_PART_WIDTH - digits)
        out += [head + str(row) for row in range(low, top)]
        low = top
    return out


def describe_position(position: str) -> str:
    """An encoded position as a reader can place it in the binlog."""
    if is_position(position):
        return f"{position} (binlog file #{int(position[:_PART_WIDTH])}, pos {int(position[_PART_WIDTH:EVENT_WIDTH])})"
    return position


class CopyFilter:
    """Drops copies: a record whose position is not above the highest one seen in its
    partition (a producer restart or an aborted transaction wrote it again; DESIGN.md
    section 4).  One position of state per partition."""

    __slots__ = ("highest", "copies")

    def __init__(self, highest: dict | None = None) -> None:
        self.highest: dict = dict(highest or {})
        self.copies = 0

    def keep(self, partition, position: str) -> bool:
        """Whether the record at ``position`` of ``partition`` is new (and remember it)."""
        top = self.highest.get(partition)
        if top is not None and position <= top:
            self.copies += 1
            return False
        self.highest[partition] = position
        return True

