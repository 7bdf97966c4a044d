"""When the table sinks' tombstones may go: the merge job's tombstone horizon.

A delete leaves a tombstone ``(table, key, position)`` in ``__cdc_tombstones``, so that an
older upsert of the key applied again later does not bring the row back
(:mod:`spark_jobs.sinks.postgres`).  "Applied again later" is a record below the
tombstone's position reaching the sinks after the delete did, and two things bring one:

* the merge job running a micro-batch again after a failure: every record at or above the
  checkpoint's committed offsets may be read again;
* the producer writing copies after a restart: it reads the binlog again from its stored
  resume point, and the copies land at new offsets of the table topics.

So a horizon below which no such record can come is known once three things happened, in
this order (a *sighting* is the first two):

1. ``R``, the lowest resume point the producers of the topic prefix have stored
   (``<prefix>._offsets``, :func:`contract.position.resume_floor`), was read.  Whatever a
   producer writes from then on is at or above ``R``: a resume point is stored only after
   every change below it was acknowledged, and a restart reads from the stored point;
2. then ``E``, the end offsets of every table partition, were read: a record at or above
   ``E`` was written after ``R`` was stored, so it is at or above ``R`` (Kafka's end under
   ``read_committed``: a transaction still open then lies above it);
3. and the checkpoint's committed offsets reached ``E`` on every one of those partitions
   (a partition gone since, a topic deleted, brings nothing any more): no record below
   ``E`` is read again.

Then every tombstone below ``R`` can go.  The merge job takes a sighting every
``sinks.tombstone_purge_s`` seconds (at most :data:`MAX_SIGHTINGS` wait at once) and purges
when one is passed (:class:`TombstonePurge`).

Left out on purpose: a producer started by hand at an older binlog position
(``startup.mode: position``) or a merge checkpoint deleted by hand re-apply history; the
sinks end at the same rows once the replay passes the deletes, but a deleted row may show
in between.  Not purged: a routed target's tombstones (its rows come from several sources,
whose positions do not compare), nor anything when the input is Debezium's (no stored
resume point to read) or when a producer's stored record names no resume point.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.position import resume_floor

log = logging.getLogger(__name__)

__all__ = ["MAX_SIGHTINGS", "Sighting", "TombstoneHorizon", "TombstonePurge", "lowest_resume"]

TP = tuple[str, int]

#: Sightings waiting for the committed offsets to pass them: a job far behind keeps the
#: oldest ones (each passed one purges) and takes a new one when there is room.
MAX_SIGHTINGS = 8


def lowest_resume(records: Mapping[bytes, Any]) -> str | None:
    """The lowest resume point of the producers' latest stored offset records (by key;
    ``None`` values: a producer reset), or None when one of them names none (the horizon
    is then unknown) or there is no producer."""
    floors = [resume_floor(v) for v in records.values()]
    if not floors or any(f is None for f in floors):
        return None
    return min(floors)


@dataclass(frozen=True)
class Sighting:
    """A resume point ``resume`` read, then the table partitions' ``ends`` (exclusive)."""

    resume: str
    ends: Mapping[TP, int]

    def passed(self, committed: Mapping[TP, int], reading: Iterable[TP]) -> bool:
        """Whether the committed offsets reached every end of a partition the job still
        reads (``reading``: a topic deleted since brings nothing any more)."""
        reading = set(reading)
        return all(tp in committed and committed[tp] >= end for tp, end in self.ends.items() if tp in reading)


class TombstoneHorizon:
    """The sightings taken and not yet passed (pure: no I/O).  :meth:`passed` gives the
    horizon the committed offsets reached, if any."""

    def __init__(self) -> None:
        self.sightings: list[Sighting] = []

    def room(self) -> bool:
        return len(self.sightings) < MAX_SIGHTINGS

    def sight(self, resume: str | None, ends: Mapping[TP, int]) -> None:
        """Keep a sighting (nothing when ``resume`` is unknown or there is no room)."""
        if resume is not None and self.room():
            self.sightings.append(Sighting(resume, dict(ends)))

    def passed(self, committed: Mapping[TP, int], reading: Iterable[TP]) -> str | None:
        """The highest resume point of the sightings ``committed`` passed (they are
        dropped), or None when it passed none; ``reading``: the partitions the job reads
        now.  Sightings are passed in the order taken."""
        reading = set(reading)
        horizon = None
        while self.sightings and self.sightings[0].passed(committed, reading):
            s = self.sightings.pop(0)
            horizon = s.resume if horizon is None else max(horizon, s.resume)
        return horizon


class TombstonePurge:
    """The merge job's purge (driver side): every ``interval_s`` a sighting (the offsets
    topic read on from where it was last read, then the table partitions' ends), and after
    a batch the tombstones below a passed sighting's resume point dropped from the tables
    ``wanted(db, table)`` of every table sink.

    ``read_offsets(start) -> (records, next)``: the offsets topic's records from ``start``
    (``{partition: offset}``) as ``(key, value)`` pairs, and where to read on;
    ``end_offsets(partitions) -> {tp: end}``; ``sinks``: ``(name, sink)`` pairs."""

    def __init__(self, interval_s: float, read_offsets: Callable[[dict[int, int]], tuple[Iterable, dict[int, int]]],
                 end_offsets: Callable[[list[TP]], Mapping[TP, int]], sinks: Callable[[], list[tuple[str, Any]]],
                 wanted: Callable[[str, str], bool]) -> None:
        self.interval_s = interval_s
        self.horizon = TombstoneHorizon()
        self._read_offsets, self._end_offsets, self._sinks, self._wanted = read_offsets, end_offsets, sinks, wanted
        self._latest: dict[bytes, Any] = {}  # producer name -> its latest offset record
        self._next: dict[int, int] = {}
        self._last = float("-inf")
        self.purged = 0

    def _read_producers(self) -> None:
        records, self._next = self._read_offsets(self._next)
        for key, value in records:
            try:
                self._latest[key] = json.loads(value) if value else None
            except ValueError:
                self._latest[key] = None  # unreadable: the horizon stays unknown

    def after_batch(self, partitions: list[TP], committed: Mapping[TP, int] | None) -> int:
        """After a batch: take a sighting when one is due, purge when ``committed`` (the
        checkpoint's committed offsets, None: none yet) passed one.  Returns the
        tombstones dropped."""
        if not self.interval_s:
            return 0
        dropped = 0
        horizon = self.horizon.passed(committed, partitions) if committed else None
        if horizon is not None:
            for name, sink in self._sinks():
                n = sink.purge_tombstones(horizon, wanted=self._wanted)
                dropped += n
                if n:
                    log.info("sink %s: %d tombstone(s) below position %s dropped (nothing below it can be applied "
                             "again)", name, n, horizon)
            self.purged += dropped
        now = time.monotonic()
        if partitions and now - self._last >= self.interval_s and self.horizon.room():
            self._last = now
            self._read_producers()
            resume = lowest_resume(self._latest)  # (first: the ends are read after it)
            if resume is not None:
                self.horizon.sight(resume, self._end_offsets(partitions))
        return dropped
