"""Snapshot bookkeeping, pure: table jobs, their key ranges and frontier, the stored form.

A table's key space is cut into ranges ``(lo, hi]`` in key order (``lo`` None: from the
start).  Ranges are planned one after the other, read by chunk readers (possibly several
at once), and *released* when the binlog reader passes their chunk's CLOSE marker.  A
range read with ``LIMIT chunk_size`` that had more rows than that is released up to its
last row, and its remainder ``(last, hi]`` takes its place in the queue.

The **frontier** is the key up to which every range is released: the ``lo`` of the first
range still outstanding, or the end of the planned key space when none is.  Only the
frontier is stored (with the producer's offsets): after a restart the table is read again
from there.  Ranges released beyond it are read twice then, which the DBLog rule allows (a
later read in a later window is just as valid).  No key is compared in Python: ranges stay
in the order they were planned, which is key order.  A range whose read hit the chunk size
is split at its last row as soon as the read is done (:meth:`TableJob.split`), so the next
chunk can be read before this one is released.

Key values come from the database (int, str, Decimal, datetime, bytes ...); the stored
form tags the ones JSON cannot carry so they round-trip exactly.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


# -- key values <-> JSON ----------------------------------------------------------------------
def encode_key(values: list | tuple | None) -> list | None:
    """Key values as JSON-safe values (tagged where JSON has no such type)."""
    if values is None:
        return None
    out: list[Any] = []
    for v in values:
        if v is None or isinstance(v, (bool, int, float, str)):
            out.append(v)
        elif isinstance(v, Decimal):
            out.append({"decimal": str(v)})
        elif isinstance(v, dt.datetime):
            out.append({"datetime": v.isoformat()})
        elif isinstance(v, dt.date):
            out.append({"date": v.isoformat()})
        elif isinstance(v, dt.timedelta):
            out.append({"timedelta_us": (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds})
        elif isinstance(v, (bytes, bytearray)):
            out.append({"bytes": base64.b64encode(bytes(v)).decode()})
        elif isinstance(v, (set, frozenset)):  # a SET column (pymysql gives a set of members)
            out.append({"set": sorted(v)})
        else:
            raise TypeError(f"key value {v!r} of type {type(v).__name__} cannot be stored")
    return out


def decode_key(values: list | None) -> list | None:
    if values is None:
        return None
    out: list[Any] = []
    for v in values:
        if isinstance(v, dict):
            (tag, x), = v.items()
            out.append({"decimal": Decimal, "datetime": dt.datetime.fromisoformat, "date": dt.date.fromisoformat,
                        "timedelta_us": lambda us: dt.timedelta(microseconds=us),
                        "bytes": base64.b64decode, "set": set}[tag](x))
        else:
            out.append(v)
    return out


# -- table jobs ---------------------------------------------------------------------------------
@dataclass
class KeyRange:
    """``(lo, hi]`` in key order; ``lo`` None: from the first key."""

    lo: list | None
    hi: list
    failures: int = 0  # reads that failed while the server answered


@dataclass
class TableJob:
    table: str  # db.table
    condition: str | None = None  # validated filter
    surrogate_key: str | None = None
    max_key: list | None = None  # the key space read: up to the maximum key when the table started
    frontier: list | None = None  # every row with a key <= frontier has been released
    rows: int = 0
    chunks: int = 0
    estimated: int = 0
    started: bool = False  # in this process (the key space is planned from the frontier)
    max_key_read: bool = False  # the maximum key was read (when the table's snapshot began)
    # delete-missing: once the table is read, the sinks delete its rows below ``below`` (the
    # binlog position when the table's snapshot began) that the snapshot did not refresh
    delete_missing: bool = False
    below: str | None = None
    keyless: bool = False  # no key to read it by: a blocking snapshot reads it whole (producer.snapshot.blocking)
    # in memory only: ranges planned and not yet released (key order), and how far planning got
    outstanding: list[KeyRange] = field(default_factory=list)
    planned_to: list | None = None
    planned_all: bool = False

    @property
    def db_table(self) -> tuple[str, str]:
        db, table = self.table.split(".", 1)
        return db, table

    def start(self, max_key: list | None, estimated: int) -> None:
        self.max_key, self.estimated, self.started, self.max_key_read = max_key, estimated, True, True
        self.planned_to = self.frontier
        self.planned_all = max_key is None or (self.frontier is not None and self.frontier == max_key)

    def plan(self, hi: list) -> KeyRange:
        """Add the range from where planning got to ``hi`` (``max_key`` ends the planning)."""
        r = KeyRange(self.planned_to, hi)
        self.outstanding.append(r)
        self.planned_to = hi
        if hi == self.max_key:
            self.planned_all = True
        return r

    def released(self, r: KeyRange, last_key: list | None, full: bool, rows: int) -> KeyRange | None:
        """Range ``r`` was released with ``rows`` rows, the last of key ``last_key``;
        ``full``: it hit the chunk size, so ``(last_key, r.hi]`` remains, returned (and kept
        in ``r``'s place)."""
        i = self._index(r)
        self.rows += rows
        self.chunks += 1
        rest = None
        if full and last_key is not None and last_key != r.hi:
            rest = KeyRange(last_key, r.hi)
            self.outstanding[i] = rest
        else:
            self.outstanding.pop(i)
        self._advance_frontier()
        return rest

    def split(self, r: KeyRange, last_key: list) -> KeyRange | None:
        """Range ``r``'s read hit the chunk size at ``last_key`` before it was released: ``r``
        now ends there, and ``(last_key, r.hi]`` is planned right after it (returned; None
        when ``last_key`` is ``r``'s end).  Its release then leaves no rest."""
        i = self._index(r)
        if last_key == r.hi:
            return None
        rest = KeyRange(last_key, r.hi)
        r.hi = last_key
        self.outstanding.insert(i + 1, rest)
        return rest

    def retry(self, r: KeyRange) -> KeyRange:
        """``r`` was not released (read failed, DDL inside its window): it stays outstanding."""
        self._index(r)
        return r

    def _index(self, r: KeyRange) -> int:
        for i, o in enumerate(self.outstanding):
            if o is r:
                return i
        raise KeyError("range not outstanding")

    def _advance_frontier(self) -> None:
        self.frontier = self.outstanding[0].lo if self.outstanding else self.planned_to

    @property
    def done(self) -> bool:
        return self.started and self.planned_all and not self.outstanding

    def to_state(self) -> dict:
        return {"table": self.table, "condition": self.condition, "surrogate_key": self.surrogate_key,
                "max_key": encode_key(self.max_key), "frontier": encode_key(self.frontier), "rows": self.rows,
                "chunks": self.chunks, "estimated": self.estimated, "max_key_read": self.max_key_read,
                "delete_missing": self.delete_missing, "below": self.below, "keyless": self.keyless}

    @classmethod
    def from_state(cls, st: dict) -> "TableJob":
        # After a restart the maximum key stays the one read when the table began.
        return cls(st["table"], st.get("condition"), st.get("surrogate_key"), decode_key(st.get("max_key")),
                   decode_key(st.get("frontier")), int(st.get("rows", 0)), int(st.get("chunks", 0)),
                   int(st.get("estimated", 0)), started=False, max_key_read=bool(st.get("max_key_read")),
                   delete_missing=bool(st.get("delete_missing")), below=st.get("below"),
                   keyless=bool(st.get("keyless")))


@dataclass
class SavedSnapshot:
    """What the offset record keeps of a producer's running snapshot (the coordinator's
    ``state()``), and what a restarted coordinator takes back from it: the snapshot, whether
    it was paused, its chunk counter, its tables' jobs, and the CLOSE marker rows it owes
    (windows opened downstream that no CLOSE closed: written when it starts again)."""

    snapshot_id: str | None
    paused: bool
    chunk_seq: int
    jobs: list[TableJob]
    closes: list[tuple[str, str]]

    def to_state(self) -> dict:
        return {"snapshot_id": self.snapshot_id, "paused": self.paused, "chunk_seq": self.chunk_seq,
                "jobs": [j.to_state() for j in self.jobs], "unclosed": [list(c) for c in self.closes]}

    @classmethod
    def from_state(cls, st: dict, now_ns: int) -> "SavedSnapshot":
        """The saved snapshot; its chunk counter at least the clock's (``now_ns``) in
        milliseconds x 1000: chunk ids an earlier process used after its last stored state
        must not be used again (its markers may still come through the binlog)."""
        return cls(st.get("snapshot_id"), bool(st.get("paused", False)),
                   max(int(st.get("chunk_seq", 0)), now_ns // 1_000_000 * 1000),
                   [TableJob.from_state(j) for j in st.get("jobs", [])],
                   [(str(i), str(d)) for i, d in st.get("unclosed", [])])
