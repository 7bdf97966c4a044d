"""The merge job's tombstone horizon (pure): when a sighting is passed, what it allows."""

from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.position import BinlogPosition
from spark_jobs.maintenance.tombstone_horizon import MAX_SIGHTINGS, TombstoneHorizon, TombstonePurge, lowest_resume

A, B = ("t.a", 0), ("t.b", 1)


def P(n: int) -> str:
    return BinlogPosition(1, n).encode()


def record(pos: int, base: int = 0) -> bytes:
    return json.dumps({"resume": {"file": "mysql-bin.000001", "pos": pos}, "file_base": base}).encode()


def test_lowest_resume_of_the_producers():
    assert lowest_resume({b"p1": json.loads(record(500)), b"p2": json.loads(record(300))}) == P(300)
    assert lowest_resume({}) is None  # no producer: nothing known
    assert lowest_resume({b"p1": json.loads(record(500)), b"p2": None}) is None  # one reset: unknown


def test_a_sighting_passes_once_every_partition_still_read_committed_its_end():
    h = TombstoneHorizon()
    h.sight(P(100), {A: 10, B: 5})
    assert h.passed({A: 10, B: 4}, [A, B]) is None  # B behind
    assert h.passed({A: 9}, [A, B]) is None  # B not committed at all: behind
    assert h.passed({A: 10, B: 5}, [A, B]) == P(100)
    assert h.sightings == [] and h.passed({A: 99, B: 99}, [A, B]) is None  # used once


def test_a_partition_no_longer_read_does_not_hold_the_horizon():
    h = TombstoneHorizon()
    h.sight(P(100), {A: 10, B: 5})
    assert h.passed({A: 10}, [A]) == P(100)  # topic of B deleted


def test_sightings_pass_in_order_the_highest_passed_wins_and_unknown_ones_are_not_kept():
    h = TombstoneHorizon()
    h.sight(None, {A: 1})
    assert h.sightings == []
    h.sight(P(100), {A: 10})
    h.sight(P(200), {A: 20})
    h.sight(P(300), {A: 30})
    assert h.passed({A: 25}, [A]) == P(200)
    assert h.passed({A: 30}, [A]) == P(300)
    for i in range(MAX_SIGHTINGS + 3):
        h.sight(P(i), {A: 100 + i})
    assert len(h.sightings) == MAX_SIGHTINGS  # bounded: the oldest kept


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.dictionaries(st.sampled_from([A, B]), st.integers(0, 100),
                                                                   min_size=1)), max_size=12),
       st.dictionaries(st.sampled_from([A, B]), st.integers(0, 100)), st.sets(st.sampled_from([A, B])))
def test_the_horizon_never_passes_a_sighting_whose_ends_are_not_committed(sightings, committed, reading):
    h = TombstoneHorizon()
    for pos, ends in sightings:
        h.sight(P(pos), ends)
    kept = list(h.sightings)
    horizon = h.passed(committed, reading)
    gone = kept[:len(kept) - len(h.sightings)]
    for s in gone:  # every dropped sighting was passed ...
        assert all(tp in committed and committed[tp] >= end for tp, end in s.ends.items() if tp in reading)
    assert horizon == (max(s.resume for s in gone) if gone else None)  # ... and the horizon is theirs
    if h.sightings:  # the first one kept is not passed
        first = h.sightings[0]
        assert not all(tp in committed and committed[tp] >= end for tp, end in first.ends.items() if tp in reading)


class _Sink:
    def __init__(self):
        self.calls = []

    def purge_tombstones(self, before, *, wanted):
        self.calls.append((before, wanted("db", "t")))
        return 3


def test_the_purge_reads_the_resume_point_before_the_ends_and_purges_after_they_are_committed():
    order, sink = [], _Sink()
    stored = [(b"producer", record(700))]

    def read_offsets(start):
        order.append("offsets")
        out, stored[:] = list(stored), []
        return out, {0: start.get(0, 0) + len(out)}

    def ends(partitions):
        order.append("ends")
        return {tp: 50 for tp in partitions}

    purge = TombstonePurge(0.001, read_offsets, ends, lambda: [("pg", sink)], lambda db, table: True)
    assert purge.after_batch([A], None) == 0  # nothing committed yet: a sighting only
    assert order == ["offsets", "ends"]
    time.sleep(0.005)  # (a sighting is due again after interval_s)
    assert purge.after_batch([A], {A: 49}) == 0 and sink.calls == []
    time.sleep(0.005)
    assert purge.after_batch([A], {A: 50}) == 3
    assert sink.calls == [(P(700), True)] and purge.purged == 3
    # the producer's latest record is kept between reads: a later sighting has its point still
    assert purge.horizon.sightings and purge.horizon.sightings[-1].resume == P(700)
    # switched off: nothing at all
    off = TombstonePurge(0, read_offsets, ends, lambda: [("pg", sink)], lambda db, table: True)
    assert off.after_batch([A], {A: 50}) == 0 and off.horizon.sightings == []
