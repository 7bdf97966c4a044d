"""Which jobs of a running snapshot stay when tables join it (pure)."""

from __future__ import annotations

from producer.snapshot.actions import jobs_kept
from producer.snapshot.state import TableJob


def test_a_signal_adds_tables_and_keeps_every_running_job():
    running = [TableJob("db.a", rows=5), TableJob("db.b")]
    assert jobs_kept(running, [TableJob("db.a"), TableJob("db.c")], after_ddl=False, delete_missing=False) == running


def test_after_ddl_the_tables_are_read_again_from_their_start_keeping_delete_missing():
    running = [TableJob("db.a", rows=5, delete_missing=True), TableJob("db.b", rows=7)]
    added = [TableJob("db.a"), TableJob("db.c")]
    assert jobs_kept(running, added, after_ddl=True, delete_missing=False) == [running[1]]
    assert added[0].delete_missing and not added[1].delete_missing


def test_delete_missing_replaces_a_plain_job_of_the_table_only():
    running = [TableJob("db.a", rows=5), TableJob("db.b", delete_missing=True), TableJob("db.c")]
    kept = jobs_kept(running, [TableJob("db.a", delete_missing=True), TableJob("db.b", delete_missing=True)],
                     after_ddl=False, delete_missing=True)
    assert kept == running[1:]
