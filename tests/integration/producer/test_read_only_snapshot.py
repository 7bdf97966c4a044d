"""Read-only incremental snapshots (``snapshot.read_only``) on the real source_stack.

The producer runs as a CDC user with REPLICATION SLAVE, REPLICATION CLIENT and SELECT only:
it cannot write to the source, so a snapshot that completes wrote nothing.  Signals are
rows inserted by another user (the signal table is read through the binlog).  The oracle is
the DBLog rule's reference implementation (``spark_jobs.task.dblog``) over the table topic: it
must equal the source table, under concurrent writes with key changes and delete +
re-insert, for single, composite and string keys, one or several readers, and kill -9.
Hot keys, an idle binlog and kill -9 on MySQL 9.7 too (its GTID windows).
"""

from __future__ import annotations

import secrets
import time

import pytest

from contract.signals import execute_snapshot_data, send_signal
from tests.producer_helpers import (
    ProducerProcess,
    ProducerThread,
    read_events,
    run_until_caught_up,
    start_at_current,
    wait_for,
)
from tests.snapshot_helpers import (
    WriteLoad,
    create_table,
    dblog_replay,
    has_notification,
    markers,
    notifications,
    source_rows,
)


@pytest.fixture
def ro_config(source_stack, config, unique):
    """``config`` for a CDC user that cannot write anything, with ``snapshot.read_only``."""
    user, password = unique("ro")[-30:], secrets.token_hex(12)
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        cur.execute(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO `{user}`@'%'")
    config.source.user = user
    config.source.password = password
    config.snapshot.read_only = True
    yield config
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))


def _snapshot(source_stack, cfg, tables: list[str]) -> str:
    """An execute-snapshot signal row, inserted by the admin (the CDC user cannot)."""
    with source_stack.admin() as conn:
        return send_signal(conn, cfg.source.signal_table, "execute-snapshot", execute_snapshot_data(tables))


def _prepare(source_stack, cfg, db, kind, rows, chunk_size, parallelism=1):
    with source_stack.admin() as conn:
        keys = create_table(conn, db, "t", kind, rows)
    cfg.source.include_databases = [db]
    cfg.snapshot.chunk_size = chunk_size
    cfg.snapshot.parallelism = parallelism
    start_at_current(cfg)
    return keys


def _topic(cfg, db):
    return f"{cfg.kafka.topic_prefix}.{db}.t"


def _rows_read(cfg, sid) -> int:
    progress = [n for n in notifications(cfg) if n["id"] == sid and n["type"] == "IN_PROGRESS"]
    return max(int((n.get("additionalData") or {}).get("rows", 0)) for n in progress)


def _check_markers(cfg, result):
    """An OPEN and a CLOSE per chunk, both written (with the GTID sets that bound the read)
    at the positions the chunk rows carry: no window is left open."""
    by_chunk: dict = {}
    for m in markers(cfg):
        assert m.get("read_only") is True and "gtids_after" in m, m
        by_chunk.setdefault((m["snapshot_id"], m["chunk_id"]), {})[m["kind"]] = m["position"]
    assert all(set(v) == {"OPEN", "CLOSE"} for v in by_chunk.values())
    for w in result.windows:
        assert by_chunk.get((w.snapshot_id, w.chunk_id)) == {"OPEN": w.open, "CLOSE": w.close}, str(w)


def _snapshot_under_writes(source_stack, cfg, db, kind, keys, *, key_space, seed):
    """A snapshot of ``db.t`` while a write load runs; the topic replayed by the DBLog rule
    must equal the table.  Returns (snapshot id, the load, the replay)."""
    with ProducerThread(cfg), WriteLoad(source_stack.admin, db, "t", kind, key_space=key_space, seed=seed) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = _snapshot(source_stack, cfg, [f"{db}.t"])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        load.stop()
    run_until_caught_up(cfg)
    result = dblog_replay(cfg, _topic(cfg, db))
    with source_stack.admin() as conn:
        assert result.table == source_rows(conn, db, "t", keys)
    return sid, load, result


@pytest.mark.parametrize("kind, parallelism", [("single", 1), ("composite", 3), ("string", 2)])
def test_read_only_snapshot_under_concurrent_writes_equals_the_table(source_stack, ro_config, test_db, kind, parallelism):
    cfg = ro_config
    keys = _prepare(source_stack, cfg, test_db, kind, rows=1500, chunk_size=150, parallelism=parallelism)
    sid, load, result = _snapshot_under_writes(source_stack, cfg, test_db, kind, keys, key_space=1700, seed=5)
    assert load.ops.get("reinsert") and load.ops.get("pk_change")
    read = _rows_read(cfg, sid)
    print(f"{kind}/{parallelism}: read {read} rows in {len(result.windows)} windows, published {result.chunk_rows} "
          f"(the producer dropped {read - result.chunk_rows} changed inside their window), ops {load.ops}")
    assert result.chunk_rows <= read and len(result.windows) >= 1500 // 150
    _check_markers(cfg, result)
    # Nothing written to the source: no marker row in the signal table (and the user could not).
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {cfg.source.signal_table} WHERE type LIKE 'snapshot-window-%%' AND "
                    "data LIKE %s", (f"%{sid}%",))
        assert cur.fetchone()[0] == 0


@pytest.mark.servers("mariadb", "mysql")
def test_hot_keys_changed_inside_windows_are_dropped_by_the_producer(source_stack, ro_config, test_db):
    """Writes on a small key space, without pauses, while slow-ish chunks are read by two
    readers: many chunk rows change inside their window, and the producer drops them."""
    cfg = ro_config
    keys = _prepare(source_stack, cfg, test_db, "single", rows=3000, chunk_size=500, parallelism=2)
    sid, load, result = _snapshot_under_writes(source_stack, cfg, test_db, "single", keys, key_space=3000, seed=9)
    read = _rows_read(cfg, sid)
    assert result.chunk_rows_dropped == 0  # the windows in Kafka are empty of changes: dropped before
    assert result.chunk_rows < read, f"no chunk row was changed inside its window ({read} read, ops {load.ops})"


@pytest.mark.servers("mariadb", "mysql")
def test_an_idle_binlog_does_not_stall_a_read_only_snapshot(source_stack, ro_config, test_db):
    cfg = ro_config
    keys = _prepare(source_stack, cfg, test_db, "composite", rows=700, chunk_size=100)
    with ProducerThread(cfg):
        time.sleep(1.0)
        sid = _snapshot(source_stack, cfg, [f"{test_db}.t"])  # the last write: nothing moves the binlog after it
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    run_until_caught_up(cfg)
    result = dblog_replay(cfg, _topic(cfg, test_db))
    with source_stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows == 700 and len(result.windows) == 7


@pytest.mark.servers("mariadb", "mysql")
def test_read_only_kill9_mid_snapshot_resumes_and_loses_nothing(source_stack, ro_config, test_db, tmp_path):
    cfg = ro_config
    rows = 12000
    keys = _prepare(source_stack, cfg, test_db, "composite", rows=rows, chunk_size=50, parallelism=2)
    proc = ProducerProcess(cfg, tmp_path)
    proc.start()
    with WriteLoad(source_stack.admin, test_db, "t", "composite", key_space=rows + 500, seed=13) as load:
        time.sleep(2.0)
        sid = _snapshot(source_stack, cfg, [f"{test_db}.t"])
        for before_kill in (600, 1500, 2400):
            wait_for(lambda n=before_kill: _chunk_rows(cfg, test_db) >= n, timeout=120, what=f"{before_kill} chunk rows")
            proc.kill9()
            proc.start()
            assert not has_notification(cfg, "COMPLETED", id=sid), "the snapshot ended before the kill"
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
        load.stop()
    assert proc.stop() == 0
    run_until_caught_up(cfg)
    result = dblog_replay(cfg, _topic(cfg, test_db))
    with source_stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows < rows * 2, result.chunk_rows  # resumed from the stored frontier
    _check_markers(cfg, result)


def _chunk_rows(cfg, db) -> int:
    try:
        return sum(1 for _, _, v in read_events(cfg, _topic(cfg, db)) if v["op"] == "r")
    except Exception:  # noqa: BLE001 - no topic yet
        return 0
