"""Incremental snapshots on the real stack: signal rows in, chunk rows and markers out.

The oracle is the DBLog rule's reference implementation (``spark_jobs.task.dblog``): the table
topic, copies dropped by position, chunk rows deduplicated against the changes in their
windows, applied in position order, must equal the source table.
"""

from __future__ import annotations

import time

import pytest

from common.sql.sessions import connect, read_session
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
    replayed_equal,
    signal,
    snapshot,
    source_rows,
)


def _topic(cfg, db, table):
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


def _prepare(stack, config, test_db, kind, rows, chunk_size=50, parallelism=1):
    with stack.admin() as conn:
        keys = create_table(conn, test_db, "t", kind, rows)
    config.source.include_databases = [test_db]
    config.snapshot.chunk_size = chunk_size
    config.snapshot.parallelism = parallelism
    start_at_current(config)  # the rows loaded before are not in the stream: only the snapshot brings them
    return keys


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("kind", ["single", "composite", "string"])
def test_snapshot_under_concurrent_writes_equals_the_table(stack, config, test_db, kind, parallelism):
    keys = _prepare(stack, config, test_db, kind, rows=1500, chunk_size=150, parallelism=parallelism)
    with ProducerThread(config), WriteLoad(stack.admin, test_db, "t", kind, key_space=1700, seed=7) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        load.stop()
    run_until_caught_up(config)

    _, result = replayed_equal(stack, config, test_db, "t", keys)  # (no restart here: no copies either)
    assert result.chunk_rows >= 1500 * 0.8 and len(result.windows) >= 1500 // 150
    assert sum(load.ops.values()) > 100 and load.ops.get("reinsert") and load.ops.get("pk_change")
    windows = sorted(result.windows, key=lambda w: w.open)
    overlapping = sum(1 for a, b in zip(windows, windows[1:]) if b.open < a.close)
    print(f"{kind}/{parallelism}: {result.chunk_rows} chunk rows in {len(windows)} windows ({overlapping} overlapping), "
          f"{result.chunk_rows_dropped} dropped by the DBLog rule, {result.changes} changes, ops {load.ops}")

    # Markers: an OPEN and a CLOSE per chunk, at the positions the chunk rows carry.
    by_chunk = {}
    for m in markers(config):
        by_chunk.setdefault((m["snapshot_id"], m["chunk_id"]), {})[m["kind"]] = m["position"]
    for w in result.windows:
        assert by_chunk[(w.snapshot_id, w.chunk_id)] == {"OPEN": w.open, "CLOSE": w.close}
    # Marker rows are cleaned up from the signal table.
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {config.source.signal_table} WHERE data LIKE %s", (f"%{sid}%",))
        assert cur.fetchone()[0] == 0
    kinds = [n["type"] for n in notifications(config) if n["id"] == sid]
    assert kinds[0] == "STARTED" and "IN_PROGRESS" in kinds and kinds[-1] == "COMPLETED"
    assert "TABLE_SCAN_COMPLETED" in kinds


@pytest.mark.servers("mariadb", "mysql")
@pytest.mark.parametrize("kind", ["single", "string"])
def test_changes_inside_every_window_beat_the_chunk_rows(source_stack, config, test_db, kind):
    """A trigger on the signal table changes rows just before every CLOSE marker of this
    test's chunks: inside the window, after the chunk's SELECT.  The chunk rows of those
    keys are stale, so the replay only equals the table if they sit in the right window."""
    keys = _prepare(source_stack, config, test_db, kind, rows=600, chunk_size=100, parallelism=2)
    trigger = f"cdc_control.`w_{test_db}`"
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"""CREATE TRIGGER {trigger} BEFORE INSERT ON {config.source.signal_table} FOR EACH ROW
            BEGIN
              IF NEW.type = 'snapshot-window-close' AND NEW.data LIKE '%{test_db}.t%' THEN
                DO SLEEP(0.2);  -- a slow window: the other reader's window opens meanwhile
                UPDATE `{test_db}`.t SET n = n + 1, v = CONCAT(v, '+') WHERE n % 7 = 0;
                DELETE FROM `{test_db}`.t WHERE n % 13 = 0;
              END IF;
            END""")
    try:
        with ProducerThread(config):
            sid = snapshot(config, [f"{test_db}.t"])
            wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    finally:
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with source_stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows_dropped > 0
    assert result.table == expected
    windows = sorted(result.windows, key=lambda w: w.open)
    assert any(b.open < a.close for a, b in zip(windows, windows[1:])), "the two readers' windows never overlapped"


@pytest.mark.servers("mariadb", "mysql")
def test_chunk_rows_carry_the_debezium_snapshot_shape(source_stack, config, test_db):
    _prepare(source_stack, config, test_db, "single", rows=10, chunk_size=4)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    events = read_events(config, _topic(config, test_db, "t"))
    assert len(events) == 10
    _, key, value = events[0]
    assert value["op"] == "r" and value["before"] is None and value["source"]["snapshot"] == "incremental"
    assert key == {"id": value["after"]["id"]}
    w = value["snapshot_window"]
    assert w["snapshot_id"] == sid and w["open_position"] < w["close_position"] < value["position"]
    assert value["source"]["file"] and value["source"]["pos"] == int(w["close_position"][10:20])
    assert len({v["snapshot_window"]["chunk_id"] for _, _, v in events}) == 3  # 4 + 4 + 2


@pytest.mark.servers("mariadb", "mysql")
def test_additional_conditions_and_surrogate_key(source_stack, config, test_db):
    _prepare(source_stack, config, test_db, "single", rows=200, chunk_size=30)
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.nopk (code VARCHAR(10) NOT NULL UNIQUE, qty INT)")
        cur.executemany(f"INSERT INTO `{test_db}`.nopk VALUES (%s, %s)", [(f"c{i:03d}", i) for i in range(45)])
        conn.commit()
    config.source.key_columns = {f"{test_db}.nopk": ["code"]}
    start_at_current(config)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.t"], where="n % 10 = 3 AND v LIKE 'v%'")
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="filtered snapshot")
        sid2 = snapshot(config, [f"{test_db}.nopk"], surrogate_key="code")
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid2), timeout=60, what="surrogate-key snapshot")
    rows = [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "t"))]
    assert sorted(r["n"] for r in rows) == [i for i in range(200) if i % 10 == 3]
    nopk = read_events(config, _topic(config, test_db, "nopk"))
    assert sorted(v["after"]["code"] for _, _, v in nopk) == [f"c{i:03d}" for i in range(45)]
    assert all(k == {"code": v["after"]["code"]} for _, k, v in nopk)


@pytest.mark.parametrize("data, reason", [
    ("{not json", "not valid JSON"),
    ('{"data-collections": ["nosuchdb.nosuchtable"]}', "unknown or not captured"),
    ('{"data-collections": []}', "non-empty list"),
    ('{"data-collections": ["{db}.nopk"]}', "no primary key"),
    ('{"data-collections": ["{db}.t"], "surrogate-key": "nope"}', "not a column"),
    ('{"data-collections": ["{db}.t"], "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "1=1; DROP TABLE t"}]}', "refused"),
    ('{"data-collections": ["{db}.t"], "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "id IN (SELECT id FROM mysql.user)"}]}', "refused"),
    ('{"data-collections": ["{db}.t"], "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "id = 1 -- comment"}]}', "refused"),
    ('{"data-collections": ["{db}.t"], "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "SLEEP(5) = 0"}]}', "refused"),
    ('{"data-collections": ["{db}.t"], "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "other.col = 1"}]}', "refused"),
    ('{"data-collections": ["{db}.t"], "type": "blocking", "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "SELECT id FROM {db}.t"}]}', "SELECT * FROM"),
    ('{"data-collections": ["{db}.t"], "type": "blocking", "additional-conditions": [{"data-collection": "{db}.t", '
     '"filter": "SELECT * FROM {db}.t WHERE id IN (SELECT id FROM mysql.user)"}]}', "refused"),
])
def test_bad_signals_are_reported_and_streaming_goes_on(stack, config, test_db, data, reason):
    _prepare(stack, config, test_db, "single", rows=5)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.nopk (x INT)")
        conn.commit()
    with ProducerThread(config):
        # A raw INSERT, as a user would type it (the data is not built by our code).
        conn = connect(config.source)
        try:
            with conn.cursor() as cur:
                sid = "bad-" + test_db
                cur.execute(f"INSERT INTO {config.source.signal_table} (id, type, data) VALUES (%s, %s, %s)",
                            (sid, "execute-snapshot", data.replace("{db}", test_db)))
            conn.commit()
        finally:
            conn.close()
        wait_for(lambda: has_notification(config, "SKIPPED", id=sid), timeout=30, what="SKIPPED notification")
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{test_db}`.t VALUES (100000, 'after the bad signal', 1)")
            conn.commit()
        wait_for(lambda: any(v["op"] == "c" for _, _, v in read_events(config, _topic(config, test_db, "t"))),
                 timeout=30, what="streaming continues")
    [n] = [n for n in notifications(config) if n["id"] == sid]
    assert reason in n["additionalData"]["reason"]
    # Nothing was read: no chunk rows.
    assert not any(v["op"] == "r" for _, _, v in read_events(config, _topic(config, test_db, "t")))


def test_unknown_signal_type_is_reported(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=1)
    with ProducerThread(config):
        sid = signal(config, "launch-rockets", {})
        wait_for(lambda: has_notification(config, "SKIPPED", id=sid), timeout=30, what="SKIPPED notification")
    [n] = [n for n in notifications(config) if n["id"] == sid]
    assert "unknown signal type" in n["additionalData"]["reason"]


def test_a_dropped_database_stops_its_tables_in_the_running_snapshot(stack, config, test_db):
    """DROP DATABASE names no table: the stream stops the running snapshot's tables of that
    database when it reads the statement (ABORTED naming them), not a grace period later as
    tables the server stopped showing (TABLE_SCAN_COMPLETED with ``dropped``); the snapshot's
    other tables are read whole."""
    other = f"{test_db}_gone"
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{other}`")
        create_table(conn, other, "b", "single", 500)
    _prepare(stack, config, test_db, "single", rows=300, chunk_size=20)
    config.source.include_databases = [test_db, other]
    with ProducerThread(config):
        sid = snapshot(config, [f"{other}.b", f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
        signal(config, "pause-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(config, "PAUSED", id=sid), timeout=30, what="PAUSED")
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{other}`")
        wait_for(lambda: has_notification(config, "ABORTED", id=sid), timeout=30, what="ABORTED")
        signal(config, "resume-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="t completed")
    found = [n for n in notifications(config) if n["id"] == sid]
    assert [n["additionalData"]["tables"] for n in found if n["type"] == "ABORTED"] == [[f"{other}.b"]]
    assert not any(n["additionalData"].get("dropped") for n in found if n["type"] == "TABLE_SCAN_COMPLETED")
    assert len([v for _, _, v in read_events(config, _topic(config, test_db, "t")) if v["op"] == "r"]) == 300


def config_file_for(config):
    from pathlib import Path
    return Path(config.state_dir).parent / "status.yaml"


def test_pause_resume_and_stop(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=3000, chunk_size=20)
    with stack.admin() as conn:
        create_table(conn, test_db, "u", "string", 300)
    start_at_current(config)
    with ProducerThread(config) as producer:
        sid = snapshot(config, [f"{test_db}.t", f"{test_db}.u"])
        wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
        signal(config, "pause-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(config, "PAUSED", id=sid), timeout=30, what="PAUSED")
        coord_rows = lambda: len([1 for _, _, v in read_events(config, _topic(config, test_db, "t"))  # noqa: E731
                                  if v["op"] == "r"])
        wait_for(lambda: coord_rows() == coord_rows(), what="in-flight chunks released")
        paused_at = coord_rows()
        time.sleep(2.0)
        assert coord_rows() == paused_at < 3000, "chunks were read while paused"
        # cdc status draws a bar per table of the running snapshot.
        import subprocess
        import sys

        from common.config import dump_config
        from tests.producer_helpers import ROOT
        cfg_path = config_file_for(config)
        cfg_path.write_text(dump_config(config))
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(cfg_path), "status"], capture_output=True,
                             text=True, cwd=ROOT, timeout=60, env={**__import__("os").environ, "COLUMNS": "160"})
        assert out.returncode == 0, out.stderr
        assert f"{test_db}.t" in out.stdout and f"{test_db}.u" in out.stdout and "paused" in out.stdout, out.stdout
        signal(config, "resume-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(config, "RESUMED", id=sid), timeout=30, what="RESUMED")
        wait_for(lambda: coord_rows() > paused_at, timeout=30, what="chunks after resume")
        signal(config, "stop-snapshot", {"type": "incremental", "data-collections": [f"{test_db}.t"]})
        wait_for(lambda: has_notification(config, "ABORTED", id=sid), timeout=30, what="ABORTED")
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="u completed")
        assert producer.thread.is_alive()
    t_rows = coord_rows()
    assert paused_at < t_rows < 3000
    u_rows = [v for _, _, v in read_events(config, _topic(config, test_db, "u")) if v["op"] == "r"]
    assert len(u_rows) == 300
    kinds = [n["type"] for n in notifications(config) if n["id"] == sid]
    assert kinds.index("PAUSED") < kinds.index("RESUMED") < kinds.index("ABORTED") < kinds.index("COMPLETED")


def test_ddl_during_the_snapshot_loses_no_row(stack, config, test_db):
    keys = _prepare(stack, config, test_db, "single", rows=2000, chunk_size=25)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE `{test_db}`.t ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'dflt'")
            cur.execute(f"UPDATE `{test_db}`.t SET extra = 'set' WHERE id % 100 = 0")
            conn.commit()
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", keys)
    # Rows read before the ALTER have no 'extra'; every row read after has it, and the
    # replay (later versions win) has every row with the value the table holds.
    assert set(result.table) == set(expected)
    late = {k: r for k, r in result.table.items() if "extra" in r}
    assert late, "no chunk was read with the new schema"
    for k, r in late.items():
        assert r == expected[k]


def test_initial_startup_snapshots_every_captured_table(stack, config, test_db):
    with stack.admin() as conn:
        create_table(conn, test_db, "a", "single", 120)
        create_table(conn, test_db, "b", "composite", 80)
        with conn.cursor() as cur:  # no key: cannot be snapshotted incrementally, skipped alone
            cur.execute(f"CREATE TABLE `{test_db}`.c (x INT)")
            cur.execute(f"INSERT INTO `{test_db}`.c VALUES (1), (2)")
        conn.commit()
    config.source.include_databases = [test_db]
    config.snapshot.chunk_size = 50
    config.producer.startup.mode = "initial"
    with ProducerThread(config):
        wait_for(lambda: has_notification(config, "COMPLETED"), timeout=60, what="initial snapshot completed")
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{test_db}`.c VALUES (3)")
            conn.commit()
        wait_for(lambda: any(v["op"] == "c" for _, _, v in read_events(config, _topic(config, test_db, "c"))),
                 timeout=30, what="the key-less table streams")
    a = read_events(config, _topic(config, test_db, "a"))
    b = read_events(config, _topic(config, test_db, "b"))
    assert len([1 for _, _, v in a if v["op"] == "r"]) == 120
    assert len([1 for _, _, v in b if v["op"] == "r"]) == 80
    [skipped] = [n["additionalData"] for n in notifications(config) if n["type"] == "SKIPPED"]
    assert skipped["table"] == f"{test_db}.c" and "no primary key" in skipped["reason"]


def test_reader_connection_reads_utc_and_read_committed(config):
    conn = read_session(config.source)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@session.time_zone")
            assert cur.fetchone()[0] == "+00:00"
    finally:
        conn.close()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_kill9_mid_snapshot_resumes_and_loses_nothing(stack, config, test_db, tmp_path, parallelism):
    """SIGKILL the producer process several times while a snapshot runs under writes; each
    restart resumes the snapshot from the stored frontier (not from the start)."""
    # Large enough that the snapshot (about 13 ms a chunk here) is still running at each kill.
    rows = 12000
    keys = _prepare(stack, config, test_db, "composite", rows=rows, chunk_size=50, parallelism=parallelism)
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    kills = 0
    with WriteLoad(stack.admin, test_db, "t", "composite", key_space=rows + 500, seed=11) as load:
        time.sleep(2.0)  # the producer connects and streams the writes
        sid = snapshot(config, [f"{test_db}.t"])
        for rows_before_kill in (600, 1500, 2400):
            wait_for(lambda n=rows_before_kill: _chunk_rows(config, test_db) >= n, timeout=120,
                     what=f"{rows_before_kill} chunk rows")
            proc.kill9()
            kills += 1
            proc.start()
            assert not has_notification(config, "COMPLETED", id=sid), "the snapshot ended before the kill"
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
        load.stop()
    assert proc.stop() == 0
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", keys)
    assert kills == 3
    assert result.table == expected
    # Resumed, not restarted: far fewer chunk rows than 3 extra full passes would give.
    assert result.chunk_rows < rows * 2, result.chunk_rows
    started = [n for n in notifications(config) if n["type"] == "STARTED" and n["id"] == sid]
    assert len(started) >= 1


def _chunk_rows(config, db) -> int:
    try:
        return sum(1 for _, _, v in read_events(config, _topic(config, db, "t")) if v["op"] == "r")
    except Exception:  # noqa: BLE001 - no topic yet
        return 0


def test_cdc_snapshot_command_follows_progress(stack, config, config_file, test_db):
    import subprocess
    import sys

    from tests.producer_helpers import ROOT
    _prepare(stack, config, test_db, "single", rows=500, chunk_size=100)
    config_file.write_text(__import__("common.config", fromlist=["dump_config"]).dump_config(config))
    with ProducerThread(config):
        out = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(config_file), "snapshot", f"{test_db}.t",
                              "--follow", "--timeout", "120"], capture_output=True, text=True, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "execute-snapshot" in out.stdout and f"{test_db}.t" in out.stdout
        bad = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(config_file), "snapshot", f"{test_db}.t",
                              "--where", "id > 0; DROP TABLE t", "--follow", "--timeout", "60"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert bad.returncode == 1 and "refused" in bad.stderr, bad.stdout + bad.stderr
        # Tables named by a regular expression: the bars are the tables the producer found.
        rx = subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(config_file), "snapshot", f"{test_db}\\..*",
                             "--follow", "--timeout", "120"], capture_output=True, text=True, cwd=ROOT, timeout=180)
        assert rx.returncode == 0, rx.stdout + rx.stderr
        assert f"done: {test_db}.t" in rx.stdout
    rows = [v for _, _, v in read_events(config, _topic(config, test_db, "t")) if v["op"] == "r"]
    assert len(rows) == 1000  # two snapshots of 500 rows


def test_source_restart_mid_snapshot(stack, config, test_db):
    """The server goes away while chunks are read: the producer reconnects, the snapshot
    goes on (chunks in flight read again), and every window opened is closed in the
    markers topic, so none stays open downstream."""
    keys = _prepare(stack, config, test_db, "single", rows=4000, chunk_size=50, parallelism=2)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: _chunk_rows(config, test_db) >= 500, timeout=60, what="500 chunk rows")
        stack.restart_source(down_s=1.0)
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", keys)
    assert result.table == expected
    kinds: dict = {}
    for m in markers(config):
        kinds.setdefault((m["snapshot_id"], m["chunk_id"]), set()).add(m["kind"])
    assert all("CLOSE" in k for k in kinds.values()), [w for w, k in kinds.items() if "CLOSE" not in k]


def test_a_new_signal_adds_its_tables_to_the_running_snapshot(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=2000, chunk_size=20)
    with stack.admin() as conn:
        create_table(conn, test_db, "late", "composite", 150)
    start_at_current(config)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
        snapshot(config, [f"{test_db}.late"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
    late = [v for _, _, v in read_events(config, _topic(config, test_db, "late")) if v["op"] == "r"]
    assert len(late) == 150 and {v["snapshot_window"]["snapshot_id"] for v in late} == {sid}
    done = [n["additionalData"]["table"] for n in notifications(config)
            if n["id"] == sid and n["type"] == "TABLE_SCAN_COMPLETED"]
    assert done == [f"{test_db}.t", f"{test_db}.late"]  # in order: the running table first


@pytest.mark.servers("mariadb", "mysql")
def test_enum_and_set_keys_are_chunked_in_their_index_order(source_stack, config, test_db):
    """ENUM/SET sort by index, not by text: every row exactly once with tiny chunks."""
    _prepare(source_stack, config, test_db, "single", rows=1)
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.ek (id INT, e ENUM('zz','aa','mm'), s SET('q','b','x') NOT NULL, "
                    "v INT, PRIMARY KEY (id, e, s))")
        rows = [(i, e, st, i) for i in range(3) for e in ("zz", "aa", "mm") for st in ("q", "b,x", "")]
        cur.executemany(f"INSERT INTO `{test_db}`.ek VALUES (%s, %s, %s, %s)", rows)
        conn.commit()
    config.snapshot.chunk_size = 2
    for parallelism in (1, 3):
        start_at_current(config)
        config.snapshot.parallelism = parallelism
        config.kafka.topic_prefix = config.producer.name = f"{config.kafka.topic_prefix}p{parallelism}"
        with ProducerThread(config):
            sid = snapshot(config, [f"{test_db}.ek"])
            wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
        got = [(v["after"]["id"], v["after"]["e"], v["after"]["s"])
               for _, _, v in read_events(config, _topic(config, test_db, "ek")) if v["op"] == "r"]
        assert sorted(got) == sorted((i, e, st) for i, e, st, _ in rows), parallelism
    # Streamed from the binlog, an empty SET in the key (the binlog says None, "empty set") is '' too.
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{test_db}`.ek SET v = 100 WHERE id = 0 AND s = ''")
        cur.execute(f"DELETE FROM `{test_db}`.ek WHERE id = 1 AND s = ''")
    run_until_caught_up(config)
    streamed = [(v["op"], k["s"]) for _, k, v in read_events(config, _topic(config, test_db, "ek")) if v["op"] in "ud"]
    assert sorted(streamed) == [("d", "")] * 3 + [("u", "")] * 3


def _chunk_read_processes(pid: int) -> list[int]:
    """The producer's chunk read processes (producer.snapshot.chunk_process)."""
    from cdc.bench.harness import child_pids
    found = []
    for child in child_pids(pid):
        try:
            if b"producer.snapshot.chunk_process" in open(f"/proc/{child}/cmdline", "rb").read():
                found.append(int(child))
        except OSError:
            continue  # gone meanwhile
    return found


def test_a_killed_chunk_read_process_is_replaced_and_loses_nothing(stack, config, test_db, tmp_path):
    """Chunk rows are read and encoded in a child process per reader (Avro): SIGKILL it several
    times while a snapshot runs under writes; each failed read is read again by a new one,
    the snapshot completes and the replay equals the table."""
    import os
    import signal
    rows = 30000
    keys = _prepare(stack, config, test_db, "single", rows=rows, chunk_size=50)
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    killed: set[int] = set()
    with WriteLoad(stack.admin, test_db, "t", "single", key_space=rows + 500, seed=5) as load:
        time.sleep(2.0)
        sid = snapshot(config, [f"{test_db}.t"])
        for _ in range(3):
            # the reader's process, a new one after each kill (started by the read after the failed one)
            wait_for(lambda: [c for c in _chunk_read_processes(proc.proc.pid) if c not in killed], timeout=120,
                     what="a chunk read process")
            children = _chunk_read_processes(proc.proc.pid)
            assert len(children) == 1, children  # one reader: one process
            assert not has_notification(config, "COMPLETED", id=sid), "the snapshot ended before the kill"
            os.kill(children[0], signal.SIGKILL)
            killed.add(children[0])
            time.sleep(0.3)
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
        load.stop()
    assert len(killed) == 3  # a new process each time
    assert not set(_chunk_read_processes(proc.proc.pid)) & killed
    assert proc.stop() == 0
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        expected = source_rows(conn, test_db, "t", keys)
    assert result.table == expected
    assert "chunk read process exited" in proc.log.read_text()


def test_one_reader_reads_the_next_chunk_before_the_last_is_released(stack, config, test_db):
    """Keyset read ahead: once a chunk's read filled the chunk size, the coordinator starts the
    next chunk's read (after its last row) without waiting for the chunk's CLOSE marker to come
    through the binlog; never more than one chunk read ahead per reader."""
    from producer.snapshot.coordinator import SnapshotCoordinator
    _prepare(stack, config, test_db, "single", rows=500, chunk_size=100)
    coord = SnapshotCoordinator(signal_table=config.source.signal_table, chunk_size=100, captures=lambda d, t: True,
                                connect=lambda: read_session(config.source), source=config.source)
    try:
        coord.add_tables([f"{test_db}.t"], "read-ahead")
        coord.poll()
        assert len(coord.inflight) == 1
        first = next(iter(coord.inflight.values()))
        first.future.result(timeout=60)  # read; its CLOSE not seen: the chunk is not released
        coord.poll()
        assert len(coord.inflight) == 2  # the next chunk is read meanwhile
        second = [c for c in coord.inflight.values() if c is not first][0]
        assert second.key_range.lo == first.key_range.hi == [first.future.result()[-1]["id"]]
        second.future.result(timeout=60)
        coord.poll()
        assert len(coord.inflight) == 2  # one reader: one chunk ahead at most
    finally:
        coord.close()


def _run_until_idle(config, idle_exit_s: float) -> None:
    """``ProducerApp.run(idle_exit_s=...)`` in a thread: fails if it has not returned in
    three minutes (stopped then)."""
    import threading

    from producer.app import ProducerApp

    app = ProducerApp(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            app.run(idle_exit_s=idle_exit_s)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(180)
    if thread.is_alive():
        app.stop()
        thread.join(60)
        raise AssertionError("the producer did not exit when idle")
    assert not errors, errors


def test_exit_when_idle_waits_for_the_snapshot_and_not_for_a_paused_one(stack, config, test_db):
    """``cdc produce --exit-when-idle``: a snapshot under way is work even when no binlog
    event comes for longer than the idle time (its chunks are read between them), so the
    producer exits only once it has completed; a paused snapshot is not, so it exits."""
    _prepare(stack, config, test_db, "single", rows=1500, chunk_size=25)
    sid = snapshot(config, [f"{test_db}.t"])
    _run_until_idle(config, 0.01)  # (shorter than the gap between any two chunks' markers)
    assert has_notification(config, "COMPLETED", id=sid)
    assert len([1 for _, _, v in read_events(config, _topic(config, test_db, "t")) if v["op"] == "r"]) == 1500

    with stack.admin() as conn:
        create_table(conn, test_db, "u", "string", 1500)
    paused = snapshot(config, [f"{test_db}.u"])
    signal(config, "pause-snapshot", {"type": "incremental"})
    _run_until_idle(config, 0.5)
    assert has_notification(config, "PAUSED", id=paused)
    assert not has_notification(config, "COMPLETED", id=paused)
