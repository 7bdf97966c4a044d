"""The Kafka signal channel on the real stack: signals as records of ``<prefix>._signals``
keyed by the producer's name, acted on once (also across kill -9), bad ones reported."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from common.config import dump_config
from common.kafka.clients import delete_topics, ensure_topics
from contract.topics import signals_topic
from producer.app import ProducerApp
from producer.errors import ProducerStopped
from tests.producer_helpers import (
    ROOT,
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
    kafka_signal,
    kafka_snapshot,
    notifications,
    signal_channel_record,
    snapshot,
    source_rows,
    stored_signal_offset,
)


def _topic(cfg, db, table):
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


def _prepare(stack, config, test_db, kind="single", rows=500, chunk_size=50, channels=("source", "kafka")):
    with stack.admin() as conn:
        keys = create_table(conn, test_db, "t", kind, rows)
    config.source.include_databases = [test_db]
    config.source.signal_channels = list(channels)
    config.snapshot.chunk_size = chunk_size
    # Heartbeats commit at idle moments: the stored offset record shows the producer reads
    # the channel (a producer reads signals sent after it first started).
    config.producer.heartbeat_interval_s = 0.3
    start_at_current(config)
    return keys


def _reading_signals(config) -> int:
    """Wait until the producer's stored offset record holds its signal channel offset."""
    wait_for(lambda: stored_signal_offset(config) is not None, timeout=60, what="the signal channel offset stored")
    return stored_signal_offset(config)


def _chunk_rows(config, db, table="t") -> int:
    try:
        return sum(1 for _, _, v in read_events(config, _topic(config, db, table)) if v["op"] == "r")
    except Exception:  # noqa: BLE001 - no topic yet
        return 0


def _of(config, sid) -> list[dict]:
    return [n for n in notifications(config) if n["id"] == sid or n["additionalData"].get("signal") == sid]


def test_snapshot_through_the_kafka_channel_equals_the_table(stack, config, test_db):
    keys = _prepare(stack, config, test_db, "composite", rows=1200, chunk_size=100)
    with ProducerThread(config), WriteLoad(stack.admin, test_db, "t", "composite", key_space=1400, seed=3) as load:
        _reading_signals(config)
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = kafka_snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        load.stop()
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows >= 1200 * 0.8 and len(result.windows) >= 12
    kinds = [n["type"] for n in notifications(config) if n["id"] == sid]
    assert kinds[0] == "STARTED" and "IN_PROGRESS" in kinds and kinds[-1] == "COMPLETED"
    [started] = [n for n in notifications(config) if n["id"] == sid and n["type"] == "STARTED"]
    assert started["additionalData"]["signal"] == sid and started["additionalData"]["tables"] == [f"{test_db}.t"]
    # The signal went through Kafka only: no row of it in the signal table.
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {config.source.signal_table} WHERE id = %s", (sid,))
        assert cur.fetchone()[0] == 0


def test_pause_resume_and_stop_through_the_kafka_channel(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=3000, chunk_size=20)
    with stack.admin() as conn:
        create_table(conn, test_db, "u", "string", 300)
    start_at_current(config)
    with ProducerThread(config) as producer:
        _reading_signals(config)
        sid = kafka_snapshot(config, [f"{test_db}.t", f"{test_db}.u"])
        wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
        kafka_signal(config, "pause-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(config, "PAUSED", id=sid), timeout=30, what="PAUSED")
        wait_for(lambda: _chunk_rows(config, test_db) == _chunk_rows(config, test_db), what="in-flight chunks released")
        paused_at = _chunk_rows(config, test_db)
        time.sleep(2.0)
        assert _chunk_rows(config, test_db) == paused_at < 3000, "chunks were read while paused"
        kafka_signal(config, "resume-snapshot")  # no data at all: none is needed
        wait_for(lambda: has_notification(config, "RESUMED", id=sid), timeout=30, what="RESUMED")
        wait_for(lambda: _chunk_rows(config, test_db) > paused_at, timeout=30, what="chunks after resume")
        kafka_signal(config, "stop-snapshot", {"type": "incremental", "data-collections": [f"{test_db}.t"]})
        wait_for(lambda: has_notification(config, "ABORTED", id=sid), timeout=30, what="ABORTED")
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="u completed")
        assert producer.thread.is_alive()
    assert paused_at < _chunk_rows(config, test_db) < 3000
    assert _chunk_rows(config, test_db, "u") == 300
    kinds = [n["type"] for n in notifications(config) if n["id"] == sid]
    assert kinds.index("PAUSED") < kinds.index("RESUMED") < kinds.index("ABORTED") < kinds.index("COMPLETED")
    assert kinds.count("PAUSED") == kinds.count("RESUMED") == 1


def test_bad_kafka_signals_are_skipped_and_the_producer_goes_on(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=200, chunk_size=50)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{test_db}`.nopk (x INT)")
    name = config.producer.name.encode()
    with ProducerThread(config) as producer:
        _reading_signals(config)
        not_json = signal_channel_record(config, name, b"execute-snapshot please")
        no_value = signal_channel_record(config, name, None)
        bad = {
            "bad-type": {"type": "launch-rockets", "data": {}},
            "bad-no-data": {"type": "execute-snapshot"},
            "bad-data-json": {"type": "execute-snapshot", "data": "{\"data-collections\": ["},
            "bad-unknown-table": {"type": "execute-snapshot", "data": {"data-collections": [f"{test_db}.nope"]}},
            "bad-no-pk": {"type": "execute-snapshot", "data": {"data-collections": [f"{test_db}.nopk"]}},
            "bad-marker": {"type": "snapshot-window-close", "data": json.dumps({"snapshot_id": "x", "chunk_id": 1})},
        }
        for sid, doc in bad.items():
            signal_channel_record(config, name, json.dumps({"id": sid, **doc}).encode())
        # Not this producer's: another producer's name, and no key at all.
        other = {"id": "for-another", "type": "execute-snapshot", "data": {"data-collections": [f"{test_db}.t"]}}
        signal_channel_record(config, b"another-producer", json.dumps(other).encode())
        signal_channel_record(config, None, json.dumps({**other, "id": "keyless"}).encode())
        # A good one after them, with no id: named by its offset.
        good = signal_channel_record(config, name, json.dumps({
            "type": "execute-snapshot", "data": {"data-collections": [f"{test_db}.t"]}}).encode())
        wait_for(lambda: has_notification(config, "COMPLETED", id=f"kafka-{good}"), timeout=60, what="good signal")
        assert producer.thread.is_alive()
    reasons = {n["id"]: n["additionalData"].get("reason", "") for n in notifications(config) if n["type"] == "SKIPPED"}
    assert "is not JSON" in reasons[f"kafka-{not_json}"] and "has no value" in reasons[f"kafka-{no_value}"]
    assert "unknown signal type" in reasons["bad-type"]
    assert "data-collections" in reasons["bad-no-data"]
    assert "not valid JSON" in reasons["bad-data-json"]
    assert "unknown or not captured" in reasons["bad-unknown-table"]
    assert "no primary key" in reasons["bad-no-pk"]
    assert "window marker" in reasons["bad-marker"]
    assert set(reasons) == {f"kafka-{not_json}", f"kafka-{no_value}", *bad}
    assert not _of(config, "for-another") and not _of(config, "keyless")
    assert _chunk_rows(config, test_db) == 200  # the good signal's snapshot only


def test_a_kafka_signal_is_acted_on_once_across_kill9(stack, config, test_db, tmp_path):
    """The channel's next offset is stored with the position, in the transaction of what the
    signal caused: a producer killed and started again does not act on it twice.  A producer
    with no stored offset starts at the channel's end: a signal sent before it first
    started is not acted on."""
    keys = _prepare(stack, config, test_db, "single", rows=6000, chunk_size=50)
    early = kafka_snapshot(config, [f"{test_db}.t"])  # before the producer's first start
    proc = ProducerProcess(config, tmp_path)
    proc.start()
    try:
        first = _reading_signals(config)
        assert first >= 1  # after the early signal
        sid = kafka_snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "STARTED", id=sid), timeout=60, what="STARTED")
        wait_for(lambda: _chunk_rows(config, test_db) >= 500, timeout=60, what="500 chunk rows")
        proc.kill9()  # mid-snapshot: the snapshot resumes from its stored state, the signal is not read again
        proc.start()
        assert not has_notification(config, "COMPLETED", id=sid), "the snapshot ended before the kill"
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=180, what="snapshot completed")
        proc.kill9()  # after it: the stored offset is past the signal
        # A signal sent while the producer is down is acted on when it is back (it reads from
        # its stored offset, not from the channel's end); once it is, the producer has read
        # the channel past the first one.
        later = kafka_signal(config, "log", {"message": "sent while the producer was down"})
        proc.start()
        wait_for(lambda: has_notification(config, "LOG", id=later), timeout=60, what="LOG of the later signal")
    finally:
        if proc.alive():
            assert proc.stop() == 0
    assert [n["type"] for n in notifications(config) if n["type"] == "STARTED"] == ["STARTED"]
    assert len([n for n in _of(config, sid) if n["type"] == "STARTED"]) == 1
    assert len([n for n in _of(config, sid) if n["type"] == "COMPLETED"]) == 1
    assert not _of(config, early)
    assert stored_signal_offset(config) >= first + 2
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows < 6000 * 2  # resumed, not read again from the start


def test_a_channel_topic_created_again_is_read_from_its_start(stack, config, test_db):
    """The stored offset is past the end of a signal topic deleted and created again while
    the producer was down: the producer reads the new topic from its oldest record (it
    neither waits at an offset the topic does not have nor skips to its end)."""
    _prepare(stack, config, test_db, "single", rows=50)
    with ProducerThread(config):
        _reading_signals(config)
        ids = [kafka_signal(config, "log", {"message": f"m{i}"}) for i in range(3)]
        wait_for(lambda: has_notification(config, "LOG", id=ids[-1]), timeout=30, what="the last LOG")
    assert stored_signal_offset(config) >= 3
    topic = signals_topic(config.kafka.topic_prefix)
    delete_topics(config.kafka, [topic])
    admin = AdminClient({"bootstrap.servers": config.kafka.bootstrap_servers})
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 30, what=f"{topic} deleted")
    ensure_topics(config.kafka, [topic], partitions=1)
    sid = kafka_snapshot(config, [f"{test_db}.t"])  # offset 0 of the new topic, sent while the producer is down
    with ProducerThread(config):
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    assert stored_signal_offset(config) == 1
    assert _chunk_rows(config, test_db) == 50


def test_source_channel_off_ignores_signal_table_rows_and_kafka_works(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=300, chunk_size=50, channels=("kafka",))
    with ProducerThread(config):
        _reading_signals(config)
        ignored = snapshot(config, [f"{test_db}.t"])  # a row of the signal table
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{test_db}`.t VALUES (100000, 'after the signal row', 1)")
        wait_for(lambda: any(v["op"] == "c" for _, _, v in read_events(config, _topic(config, test_db, "t"))),
                 timeout=30, what="the producer streamed past the signal row")
        # Window markers of the producer's own chunks still come through the signal table.
        sid = kafka_snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    assert not _of(config, ignored)
    assert _chunk_rows(config, test_db) == 301
    assert [n["type"] for n in notifications(config) if n["type"] == "STARTED"] == ["STARTED"]


def test_kafka_channel_off_reads_no_kafka_signal(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=100, channels=("source",))
    with ProducerThread(config):
        ignored = kafka_snapshot(config, [f"{test_db}.t"])
        sid = snapshot(config, [f"{test_db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
        time.sleep(1.0)
    assert not _of(config, ignored)
    assert stored_signal_offset(config) is None


def _cli(config_file, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(config_file), "snapshot", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def test_cdc_snapshot_through_the_kafka_channel(stack, config, test_db, tmp_path):
    _prepare(stack, config, test_db, "single", rows=2000, chunk_size=20)
    with stack.admin() as conn:
        create_table(conn, test_db, "s", "single", 100)
    start_at_current(config)
    forced = tmp_path / "forced.yaml"
    forced.write_text(dump_config(config))
    # The configuration of a read-only source: the command picks the Kafka channel itself.
    read_only = config.model_copy(deep=True)
    read_only.snapshot.read_only = True
    auto = tmp_path / "read_only.yaml"
    auto.write_text(dump_config(read_only))
    # Slow windows on t (0.1 s each, 100 chunks): the snapshot of t is still running when
    # the --pause command (a new process) sends its signal.
    trigger = f"cdc_control.`slow_{test_db}`"
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"""CREATE TRIGGER {trigger} BEFORE INSERT ON {config.source.signal_table} FOR EACH ROW
            BEGIN
              IF NEW.type = 'snapshot-window-close' AND NEW.data LIKE '%"{test_db}.t"%' THEN
                DO SLEEP(0.1);
              END IF;
            END""")
    try:
        with ProducerThread(config):
            _reading_signals(config)
            out = _cli(forced, f"{test_db}.s", "--channel", "kafka", "--follow", "--timeout", "120")
            assert out.returncode == 0, out.stdout + out.stderr
            assert "execute-snapshot" in out.stdout and "sent to" in out.stdout and "._signals" in out.stdout
            assert f"done: {test_db}.s" in out.stdout
            # Paused and resumed, every signal through the channel.
            out = _cli(auto, f"{test_db}.t")
            assert out.returncode == 0 and "sent to" in out.stdout, out.stdout + out.stderr
            sid = out.stdout.split()[1]
            wait_for(lambda: has_notification(config, "IN_PROGRESS", id=sid), timeout=30, what="first chunk")
            assert _cli(auto, "--pause").returncode == 0
            wait_for(lambda: has_notification(config, "PAUSED", id=sid), timeout=30, what="PAUSED")
            assert not has_notification(config, "COMPLETED", id=sid)
            assert _cli(auto, "--resume").returncode == 0
            wait_for(lambda: has_notification(config, "RESUMED", id=sid), timeout=30, what="RESUMED")
            wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="COMPLETED")
            # A bad signal through the channel is refused, and --follow says so.
            bad = _cli(forced, f"{test_db}.s", "--where", "id > 0; DROP TABLE t", "--channel", "kafka", "--follow",
                       "--timeout", "60", timeout=120)
            assert bad.returncode == 1 and "refused" in bad.stderr, bad.stdout + bad.stderr
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    assert _chunk_rows(config, test_db, "s") == 100 and _chunk_rows(config, test_db) == 2000
    with stack.admin() as conn, conn.cursor() as cur:  # nothing went through the signal table
        cur.execute(f"SELECT COUNT(*) FROM {config.source.signal_table} WHERE id = %s", (sid,))
        assert cur.fetchone()[0] == 0
    # The Kafka channel switched off: the command says so instead of sending.
    off = config.model_copy(deep=True)
    off.source.signal_channels = ["source"]
    path = tmp_path / "off.yaml"
    path.write_text(dump_config(off))
    out = _cli(path, f"{test_db}.t", "--channel", "kafka")
    assert out.returncode == 1 and "kafka signal channel is off" in out.stderr and "Traceback" not in out.stderr


def test_a_channel_topic_of_several_partitions_is_refused(stack, config, test_db):
    _prepare(stack, config, test_db, "single", rows=1)
    ensure_topics(config.kafka, [signals_topic(config.kafka.topic_prefix)], partitions=2)
    with pytest.raises(ProducerStopped, match="has 2 partitions: it needs exactly one"):
        ProducerApp(config).run(idle_exit_s=1.0)


def test_read_only_producer_snapshots_on_a_signal_from_kafka(stack, config, test_db, tmp_path, unique):
    """The source read-only (a CDC user without any write, snapshot.read_only), signals from
    Kafka only: cdc snapshot picks the Kafka channel by itself, and the snapshot equals the
    table."""
    user, password = unique("ro")[-30:], secrets.token_hex(12)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        cur.execute(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO `{user}`@'%'")
    try:
        config.source.user, config.source.password = user, password
        config.snapshot.read_only = True
        keys = _prepare(stack, config, test_db, "string", rows=800, chunk_size=100, channels=("kafka",))
        path = tmp_path / "cdc.yaml"
        path.write_text(dump_config(config))
        with ProducerThread(config), WriteLoad(stack.admin, test_db, "t", "string", key_space=900, seed=5) as load:
            _reading_signals(config)
            wait_for(lambda: sum(load.ops.values()) > 30, what="writes running")
            out = _cli(path, f"{test_db}.t", "--follow", "--timeout", "120")
            assert out.returncode == 0, out.stdout + out.stderr
            assert "sent to" in out.stdout and f"done: {test_db}.t" in out.stdout
            load.stop()
        run_until_caught_up(config)
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))
    result = dblog_replay(config, _topic(config, test_db, "t"))
    with stack.admin() as conn:
        assert result.table == source_rows(conn, test_db, "t", keys)
    assert result.chunk_rows >= 800 * 0.8
