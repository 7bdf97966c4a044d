"""The Iceberg sink's expiry cutoffs (spark_jobs.sinks.iceberg_maintenance.expiry_cutoffs):
by age, and by the snapshot cap, with the margin that spares the files of a commit under way."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.sinks.iceberg_maintenance import COMMIT_MARGIN, expiry_cutoffs

NOW = datetime(2026, 11, 25, 19, 0, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)


def ms(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def test_by_age_alone_without_a_cap_or_under_it():
    stamps = [NOW_MS - 1000 * i for i in range(10)]
    hour_ago = NOW - timedelta(hours=1)
    assert expiry_cutoffs(stamps, NOW, 1, None) == (hour_ago, hour_ago)
    assert expiry_cutoffs(stamps, NOW, 1, 10) == (hour_ago, hour_ago)
    assert expiry_cutoffs(stamps, NOW, 0, 3) == (NOW, NOW)  # (the age keeps fewer than the cap)


def test_the_cap_keeps_the_newest_and_the_files_of_the_last_minutes():
    stamps = [NOW_MS - 1000 * i for i in range(200)]  # a commit a second for 200 s
    snapshots, files = expiry_cutoffs(stamps, NOW, 1, 100)
    assert snapshots == NOW - timedelta(seconds=99)  # the 100th newest stays, the older go
    assert sum(1 for s in stamps if s >= ms(snapshots)) == 100
    assert files == NOW - COMMIT_MARGIN  # (files that young may be a commit's under way)
    old = [NOW_MS - 3_600_000 - 1000 * i for i in range(200)]  # the cap's cut older than the margin
    snapshots, files = expiry_cutoffs(old + stamps[:5], NOW, 2, 10)
    assert snapshots == files == datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=old[4])


@given(st.lists(st.integers(NOW_MS - 10 * 3_600_000, NOW_MS), max_size=300),
       st.integers(0, 5), st.one_of(st.none(), st.integers(1, 150)))
def test_never_more_than_the_cap_nor_less_than_the_age_keeps(stamps, hours, cap):
    snapshots, files = expiry_cutoffs(stamps, NOW, hours, cap)
    by_age = NOW - timedelta(hours=hours)
    kept = [s for s in stamps if s >= ms(snapshots)]
    assert snapshots >= by_age and files >= by_age  # never keeps more than the age says
    assert files <= snapshots  # a file a kept snapshot may name is never older than the cut
    if cap is not None and kept:
        ties = sum(1 for s in stamps if s == min(kept))
        assert len(kept) <= cap + ties - 1  # the newest cap (and those of the same millisecond)
    if cap is None or len(stamps) <= cap:
        assert snapshots == files == by_age
    else:  # every snapshot the age keeps and the cap allows stays
        assert len(kept) >= min(cap, sum(1 for s in stamps if s >= ms(by_age)))
