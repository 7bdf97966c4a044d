"""Reading a table's definition right after its DDL came through the binlog.

MySQL hands an event to the binlog's readers once it is written, before the statement has
committed: with ``sync_binlog`` other than 1 the readers see it after the binlog's flush, and
the commit follows the sync stage, which ``binlog_group_commit_sync_delay`` holds (the server's
ordered commit).  A producer caught up with the source reads a DDL event in that window; what it
reads of the table then (a snapshot of a table renamed into place, after a rewriting ALTER, at
gh-ost's cut-over) must be the table the DDL leaves.  The window is microseconds on an idle
server and longer on a busy one; here the delay holds it open for a second."""

from __future__ import annotations

import pytest

from contract.topics import table_topic
from tests.producer_helpers import ProducerThread, read_events, start_at_current, wait_caught_up, wait_for
from tests.snapshot_helpers import create_table, has_notification, notifications

ROWS = 40


def _renamed_into_place(cfg) -> list[dict]:
    return [n for n in notifications(cfg) if n["type"] == "STARTED"
            and "renamed from" in (n.get("additionalData") or {}).get("reason", "")]


@pytest.mark.servers("mysql")
def test_a_table_renamed_into_place_is_snapshotted_though_its_event_came_before_the_commit(
        source_stack, config, test_db):
    """``staged`` (not captured) renamed to the captured ``t`` while the server holds the
    RENAME's commit for a second after the event reached the producer: the producer reads ``t``
    once the RENAME committed (not as missing), snapshots it, and every row reaches t's topic."""
    config.source.include_tables = [f"{test_db}.t"]
    start_at_current(config)
    with source_stack.admin() as conn:
        create_table(conn, test_db, "staged", "single", ROWS)
    with ProducerThread(config) as producer, source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.binlog_group_commit_sync_delay")
        sync_binlog, delay = cur.fetchone()
        wait_caught_up(config, conn)  # (streaming: it reads the RENAME as soon as the server gives it)
        cur.execute("SET GLOBAL sync_binlog = 0, GLOBAL binlog_group_commit_sync_delay = 1000000")
        try:
            cur.execute(f"RENAME TABLE `{test_db}`.staged TO `{test_db}`.t")  # (returns once committed)
        finally:
            cur.execute("SET GLOBAL sync_binlog = %s, GLOBAL binlog_group_commit_sync_delay = %s",
                        (sync_binlog, delay))
        wait_caught_up(config, conn)  # (the RENAME read, and the snapshot it calls for begun)
        started = _renamed_into_place(config)
        assert started, f"no snapshot of {test_db}.t after its RENAME: {notifications(config)}"
        wait_for(lambda: has_notification(config, "COMPLETED", id=started[0]["id"]), timeout=120,
                 what="the snapshot of the table renamed into place completed", state=producer.state)
        cur.execute(f"SELECT id FROM `{test_db}`.t")
        ids = sorted(r[0] for r in cur.fetchall())
    events = read_events(config, table_topic(config.kafka.topic_prefix, test_db, "t"))
    assert len(ids) == ROWS
    assert sorted(v["after"]["id"] for _, _, v in events if v and v["op"] == "r") == ids
