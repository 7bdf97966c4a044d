"""The snapshot bookkeeping: key ranges, the frontier, the stored form."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from producer.snapshot.chunk_planner import even_split_step
from producer.snapshot.state import TableJob, decode_key, encode_key

key_values = st.one_of(
    st.none(), st.integers(-2**63, 2**64), st.text(), st.binary(),
    st.decimals(allow_nan=False, allow_infinity=False, places=6),
    st.datetimes(), st.dates(), st.timedeltas(min_value=dt.timedelta(days=-30), max_value=dt.timedelta(days=30)))


@given(st.lists(key_values, max_size=4))
def test_key_values_round_trip_through_json(values):
    stored = json.loads(json.dumps(encode_key(values)))
    assert decode_key(stored) == values
    assert [type(v) for v in decode_key(stored)] == [type(v) for v in values]


def test_decimal_keeps_its_digits():
    assert decode_key(encode_key([Decimal("12345678901234567890.000100")])) == [Decimal("12345678901234567890.000100")]


@settings(max_examples=300)
@given(st.integers(1, 300), st.lists(st.integers(1, 40), min_size=1, max_size=10), st.integers(0, 2**32),
       st.integers(1, 30))
def test_frontier_never_passes_an_unreleased_key(n, steps, seed, chunk):
    """Plan ranges over keys 1..n, read them in random order with LIMIT ``chunk`` (a full
    read leaves its rest outstanding), release in random order: every key at or below the
    frontier has been released, and when the job is done every key has been."""
    rnd = random.Random(seed)
    job = TableJob("d.t")
    job.start([n], n)
    released: set[int] = set()
    pending = []
    i = 0
    while not job.done:
        if not job.planned_all and (not pending or rnd.random() < 0.5):
            lo = job.planned_to[0] if job.planned_to else 0
            pending.append(job.plan([min(n, lo + steps[i % len(steps)])]))
            i += 1
        if pending and rnd.random() < 0.6:
            r = pending.pop(rnd.randrange(len(pending)))
            lo = r.lo[0] if r.lo else 0
            keys = list(range(lo + 1, r.hi[0] + 1))[:chunk]
            if rnd.random() < 0.1:  # DDL in the window: read again
                job.retry(r)
                pending.append(r)
                continue
            released.update(keys)
            rest = job.released(r, [keys[-1]] if keys else None, len(keys) >= chunk, len(keys))
            if rest is not None:
                pending.append(rest)
        f = job.frontier[0] if job.frontier else 0
        assert set(range(1, f + 1)) <= released
    assert released == set(range(1, n + 1))
    assert job.frontier == [n]


def test_restored_job_resumes_from_its_frontier():
    job = TableJob("d.t", condition="`x` > 1")
    job.start([100], 100)
    r = job.plan([100])
    job.released(r, [40], True, 40)
    back = TableJob.from_state(json.loads(json.dumps(job.to_state())))
    assert back.frontier == [40] and back.max_key == [100] and back.max_key_read and not back.started
    assert back.rows == 40 and back.condition == "`x` > 1"
    back.start(back.max_key, 100)
    assert back.plan([100]).lo == [40]


def test_empty_table_is_done_at_once():
    job = TableJob("d.t")
    job.start(None, 0)
    assert job.done


def test_even_split_step():
    assert even_split_step(1, 1000, 1000, 100) == 100
    assert even_split_step(1, 10_000, 1000, 100) == 1000  # sparse keys: wider steps
    assert even_split_step(1, 10**9, 10, 100) is None  # too sparse: ask the database
    assert even_split_step(1, 1000, 0, 100) is None  # no estimate


def test_delete_missing_and_its_position_survive_a_restart():
    job = TableJob("shop.orders", delete_missing=True, below="0" * 29 + "7")
    again = TableJob.from_state(job.to_state())
    assert again.delete_missing is True and again.below == "0" * 29 + "7"
    plain = TableJob.from_state(TableJob("shop.orders").to_state())
    assert plain.delete_missing is False and plain.below is None


def test_a_full_read_splits_its_range_for_the_next_chunk_before_its_release():
    """Read ahead: a chunk that hit the chunk size ends at its last row; the rest is the next
    range, readable at once; releasing the first leaves no rest, the frontier moves in order."""
    job = TableJob("db.t")
    job.start([100], 100)
    r = job.plan([100])
    rest = job.split(r, [40])
    assert (r.lo, r.hi) == (None, [40]) and (rest.lo, rest.hi) == ([40], [100])
    assert job.outstanding == [r, rest] and job.frontier is None
    assert job.released(rest, [80], True, 40) is not None  # the second chunk released first: full again
    assert job.frontier is None  # the first range still holds it back
    assert job.released(r, [40], True, 40) is None
    assert job.frontier == [80] and [(o.lo, o.hi) for o in job.outstanding] == [([80], [100])]
    assert job.split(job.outstanding[0], [100]) is None  # its last row is the range's end: nothing left
    job.retry(job.outstanding[0])
    assert not job.done


def test_a_saved_snapshot_comes_back_as_saved_its_chunk_counter_at_least_the_clock():
    from producer.snapshot.state import SavedSnapshot, TableJob
    saved = SavedSnapshot("s1", True, 7, [TableJob("db.t", frontier=[5], rows=9)], [("s1-1-2-close", "{}")])
    back = SavedSnapshot.from_state(saved.to_state(), now_ns=0)
    assert back == saved
    assert SavedSnapshot.from_state(saved.to_state(), now_ns=3_000_000).chunk_seq == 3000  # (3 ms: 3 x 1000)
    owed = SavedSnapshot.from_state({"unclosed": [["x-close", "{}"]]}, now_ns=0)
    assert owed.snapshot_id is None and owed.closes == [("x-close", "{}")]
