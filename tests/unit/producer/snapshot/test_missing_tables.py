"""A snapshot's missing tables: waited for, and taken for dropped only after the grace (pure)."""

from __future__ import annotations

from producer.snapshot.missing_tables import GRACE_S, MissingTables


def test_a_missing_table_is_waited_for_until_the_grace_ends():
    m = MissingTables()
    now = 100.0
    while now < 100.0 + GRACE_S:  # (looked at every 0.2 s while its chunks wait)
        assert m.waits("db.t", now)
        now += 0.2
    assert not m.waits("db.t", now)
    assert m.waits("db.t", 500.0)  # (forgotten when given up: a new absence waits afresh)


def test_a_table_back_starts_its_next_absence_afresh():
    m = MissingTables()
    assert m.waits("db.t", 0.0) and m.waits("db.u", 0.0) and m.waits("db.u", GRACE_S / 2)
    m.found("db.t")
    assert m.waits("db.t", GRACE_S + 1) and not m.waits("db.u", GRACE_S + 1)
    m.found("db.never-missing")  # (nothing to forget)


def test_an_absence_not_looked_at_for_the_grace_is_a_new_one():
    """A table dropped mid-snapshot (its job stopped by the stream: no more looks), made again
    later and missing for a moment in another snapshot: waited for afresh, not taken for
    dropped at once."""
    m = MissingTables()
    assert m.waits("db.t", 0.0) and m.waits("db.t", 1.0)
    assert m.waits("db.t", 1.0 + GRACE_S) and m.waits("db.t", 1.0 + GRACE_S + 0.2)
