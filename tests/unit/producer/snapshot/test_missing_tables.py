"""A snapshot's missing tables: waited for, and taken for dropped only after the grace (pure)."""

from __future__ import annotations

from producer.snapshot.missing_tables import GRACE_S, MissingTables


def test_a_missing_table_is_waited_for_until_the_grace_ends():
    m = MissingTables()
    assert m.waits("db.t", 100.0) and m.waits("db.t", 100.0 + GRACE_S - 0.1)
    assert not m.waits("db.t", 100.0 + GRACE_S)
    assert m.waits("db.t", 500.0)  # (forgotten when given up: a new absence waits afresh)


def test_a_table_back_starts_its_next_absence_afresh():
    m = MissingTables()
    assert m.waits("db.t", 0.0) and m.waits("db.u", 0.0)
    m.found("db.t")
    assert m.waits("db.t", GRACE_S + 1) and not m.waits("db.u", GRACE_S + 1)
    m.found("db.never-missing")  # (nothing to forget)
