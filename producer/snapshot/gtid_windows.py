"""Read-only chunk windows (``snapshot.read_only``): bounded by GTID sets, not marker rows.

Nothing is written to the source.  A chunk is submitted only at a transaction boundary of
the binlog stream (its *anchor*: the binlog point the producer has handled, and the GTIDs
passed up to there).  Its reader (:meth:`ChunkReader.submit_quiet`) reads the executed GTID
set, SELECTs the chunk in a consistent snapshot that holds at least everything before the
anchor, then reads the GTID set and the binlog's end again.  From the anchor on, the
producer remembers the record keys of every change it writes for the chunk's table.  The
window closes at the first boundary where the binlog reader has passed every GTID of the
second set (or the binlog end read with it, which also covers transactions whose events
the reader filters out, and an idle binlog: heartbeats carry the server's binlog end).
When the two sets are equal and the reader stands there, that is at once.

At the close the producer applies the DBLog rule itself -- a chunk row whose key changed
between the anchor and the close is dropped (the change events carry the newer row) --
and writes the OPEN marker, the CLOSE marker and the kept rows together, at positions of
the close point (:class:`MarkerSlots`).  So the markers topic never holds an OPEN without
its CLOSE (a producer killed with chunks in flight leaves no window open downstream), the
window Kafka consumers see is empty of changes and every row of it is kept, and the merge
job and every consumer read the same contract as in the writable mode.

Positions of a close point: the point is the first byte of the next binlog event (a
resume point), below that event's own position and above every event before it; markers
and rows there take row numbers upward (:class:`MarkerSlots`), above ``floor`` (the last
marker a killed run may have written at the same point, read back from Kafka on start).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.gtid import GtidSet
from contract.position import BinlogPosition


@dataclass(frozen=True)
class Boundary:
    """A transaction boundary of the binlog stream: ``point`` the binlog coordinates
    there (the server's own file index), ``based`` the same as a position of this
    producer's (file base added), ``gtids`` the GTIDs passed."""

    point: BinlogPosition
    based: BinlogPosition
    gtids: GtidSet


def window_passed(end: tuple[str, int], gtids_after: GtidSet, at: Boundary) -> bool:
    """Whether the binlog reader, standing at ``at``, has passed a chunk read whose
    second GTID set is ``gtids_after`` and binlog end ``end``."""
    e = BinlogPosition.from_binlog(end[0], int(end[1]))
    if (at.point.file_index, at.point.pos) >= (e.file_index, e.pos):
        return True
    return bool(gtids_after) and at.gtids.covers(gtids_after)


class MarkerSlots:
    """Positions for markers and chunk rows at close points, unique and rising.

    At a point ``p`` (row 0) the first window takes OPEN ``p#k``, CLOSE ``p#k+1`` and its
    ``n`` rows ``p#k+2 ... p#k+1+n`` (:func:`contract.position.chunk_row_position`); the
    next window at the same point starts above them."""

    def __init__(self, floor: BinlogPosition | None = None) -> None:
        self._next: BinlogPosition | None = floor.next_row() if floor is not None else None

    def window(self, at: BinlogPosition, rows: int) -> tuple[BinlogPosition, BinlogPosition] | None:
        """(OPEN, CLOSE) positions of a window of ``rows`` rows closed at ``at``; None
        while the floor lies at a later binlog point than ``at`` (wait for the stream)."""
        if self._next is not None and (self._next.file_index, self._next.pos) > (at.file_index, at.pos):
            return None
        start = at if self._next is None or at > self._next else self._next
        open_ = start
        close = start.next_row()
        self._next = close.with_row(close.row + rows + 1)
        return open_, close

    def ready(self, at: BinlogPosition) -> bool:
        """Whether :meth:`window` has positions at ``at`` (the floor does not lie further on)."""
        return self._next is None or (self._next.file_index, self._next.pos) <= (at.file_index, at.pos)

    def reserve(self, at: BinlogPosition, rows: int) -> None:
        """A floor: a killed run may have used up to a window of ``rows`` rows at ``at``."""
        top = at.with_row(at.row + rows + 1)
        if self._next is None or top > self._next:
            self._next = top
