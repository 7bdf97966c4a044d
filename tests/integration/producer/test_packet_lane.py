"""The binlog reader's packet lane (:mod:`producer.binlog.packet_lane`) on the real server.

One binlog range -- single-row autocommit changes (a GTID, a TABLE_MAP, a rows event and an XID
each), multi-row statements, a transaction of several statements on two tables, a rolled back
one, an ALTER TABLE mid-range, a table whose rows cross as values, changes in a database the
reader does not capture -- is read by :class:`BinlogReader` with the lane and without it (every event
through python-mysql-replication); both give the same items, field by field, and the lane
handled most packets itself.  The same from resume points inside the range (the middle of a
transaction, the middle of a multi-row event).  And a connection the server drops while the
lane reads is given back to the library, which reconnects: nothing lost, nothing twice.
"""

from __future__ import annotations

import os
import threading
import time

from common.sql.sessions import connect
from contract.signals import send_signal
from producer.binlog.packet_lane import ENV
from producer.binlog.reader import BinlogReader, Idle, ResumePoint, RowChanges, TransactionEnd
from producer.binlog.row_decoder import EncodedImages
from producer.binlog.server import current_position
from producer.events.builder import EventBuilder
from tests.all_types import make_many_types_table

ITEMS_DDL = """CREATE TABLE items (
  id INT NOT NULL PRIMARY KEY, name VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL,
  qty INT NOT NULL, note TEXT NULL) DEFAULT CHARSET=utf8mb4"""


def _encoding(config):
    return EventBuilder(config.kafka.topic_prefix, "prod", 1).stream_encoding({config.source.signal_table})


def _plain(item) -> tuple:
    """An item as comparable values (a RowChanges' rows and table by what they hold)."""
    if type(item) is RowChanges:
        rows = item.rows
        rows = ((rows.ident, rows.update, tuple(rows.bodies)) if type(rows) is EncodedImages else
                tuple(repr(rows[i]) for i in range(len(rows))))
        return ("rows", item.kind, item.db, item.table, item.table_def.fingerprint(), item.base, rows, item.first,
                item.ts_ms, item.gtid, item.thread, item.file, item.resume_file, item.resume_pos, item.size,
                item.event_pos, item.resume)
    return (type(item).__name__, item)


def _read(config, start: ResumePoint, end: tuple[str, int], *, lane: bool,
          other: str) -> tuple[list[tuple], BinlogReader]:
    saved, os.environ[ENV] = os.environ.get(ENV), "1" if lane else "0"  # (the operator's switch)
    try:
        reader = BinlogReader(config.source, start, is_mariadb=True, blocking=False, images=_encoding(config),
                              wants=lambda db, table: db != other)
    finally:
        if saved is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = saved
    assert reader.lane.enabled == lane
    try:
        out = []
        for item in reader:
            if type(item) is not Idle:
                out.append(_plain(item))
            here = reader.current_resume()
            if (here.file, here.pos) >= end:
                break
        return out, reader
    finally:
        reader.close()


def _workload(stack, config, test_db, unique) -> tuple[tuple[str, int], tuple[str, int], str]:
    other = unique("db")
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{other}`")
        cur.execute(f"CREATE TABLE `{other}`.t (id INT PRIMARY KEY, v INT)")
    with connect(config.source) as src:
        start = current_position(src)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(ITEMS_DDL)
        for i in range(1, 41):  # single-row autocommit transactions
            cur.execute("INSERT INTO items VALUES (%s, %s, %s, %s, %s)", (i, f"item-{i}", i * 1.5, i, "é" * (i % 3)))
        for i in range(1, 41, 3):
            cur.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (i,))
        cur.execute("DELETE FROM items WHERE id = 7")
        cur.execute(f"INSERT INTO `{other}`.t VALUES (1, 1), (2, 2)")  # filtered out by the stream
        cur.execute("INSERT INTO items VALUES " + ",".join(f"({i}, 'm', 1.25, {i}, NULL)" for i in range(100, 400)))
        cur.execute("UPDATE items SET price = price + 1 WHERE id >= 100")  # multi-row
        conn.begin()
        cur.execute("UPDATE items SET name = 'in-txn' WHERE id = 2")
        cur.execute(f"UPDATE `{other}`.t SET v = 3 WHERE id = 1")
        cur.execute("DELETE FROM items WHERE id BETWEEN 300 AND 320")
        conn.commit()
        conn.begin()
        cur.execute("UPDATE items SET name = 'rolled back' WHERE id = 3")
        conn.rollback()
        cur.execute("ALTER TABLE items ADD COLUMN added VARCHAR(20) NULL DEFAULT 'new'")
        for i in range(41, 61):
            cur.execute("INSERT INTO items (id, name, price, qty) VALUES (%s, 'after', 2, 1)", (i,))
    make_many_types_table(stack, test_db, n=12)  # many types, one INSERT each
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        send_signal(conn, config.source.signal_table, "log", {"message": "x"})  # its rows cross as values
        cur.execute("UPDATE types SET vc = CONCAT(vc, '!') WHERE id <= 60")
    with connect(config.source) as src:
        end = current_position(src)
    return start, end, other


def test_the_lane_gives_the_items_the_library_gives(stack, config, test_db, unique):
    start, end, other = _workload(stack, config, test_db, unique)
    try:
        fast, reader = _read(config, ResumePoint(*start), end, lane=True, other=other)
        assert reader.lane.taken >= 4 * 60, (reader.lane.taken, reader.lane.given)  # 60 single-row inserts alone
        library, off = _read(config, ResumePoint(*start), end, lane=False, other=other)
        assert off.lane.taken == 0
        assert fast == library
        tables = {(k[2], k[3]) for k in fast if k[0] == "rows"}
        assert (test_db, "items") in tables and (test_db, "types") in tables
        assert not any(k[2] == other for k in fast if k[0] == "rows")
        assert sum(1 for k in fast if k[0] == "TransactionEnd") >= 90
        assert any(k[0] == "SchemaChange" for k in fast)

        # From resume points inside the range: after the first change of the transaction of
        # several statements, and half way through a rows event of the multi-row update.
        in_txn = next(k for k, after in zip(fast, fast[1:]) if k[:2] == ("rows", "update")
                      and after[:2] == ("rows", "delete") and k[3] == after[3] == "items")
        multi = max((k for k in fast if k[:2] == ("rows", "update") and k[3] == "items"), key=lambda k: len(k[6][2]))
        half = len(multi[6][2]) // 8  # (an update's bodies: a key and a row body per image, two images a row)
        assert half >= 10
        for point in (in_txn[16], ResumePoint(multi[12], multi[13], multi[5].encode_row(2 * half + 1))):
            fast_from, _ = _read(config, point, end, lane=True, other=other)
            library_from, _ = _read(config, point, end, lane=False, other=other)
            assert fast_from == library_from
            assert len(fast_from) < len(fast)
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{other}`")


def _kill_dump_threads(stack) -> int:
    killed = 0
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
        for (thread_id,) in cur.fetchall():
            try:
                cur.execute(f"KILL {int(thread_id)}")
                killed += 1
            except Exception:  # noqa: BLE001 - ended by itself meanwhile
                pass
    return killed


def test_a_connection_lost_while_the_lane_reads_is_resumed_by_the_library(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(ITEMS_DDL)
    with connect(config.source) as src:
        start = current_position(src)
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, heartbeat_s=0.1,
                          images=_encoding(config), wants=lambda db, table: db == test_db)
    seen: list[tuple] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def write(first: int, last: int) -> None:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            for i in range(first, last):
                cur.execute("INSERT INTO items VALUES (%s, 'x', 1, 1, NULL)", (i,))

    def consume() -> None:
        try:
            for item in reader:
                if type(item) is RowChanges:
                    seen.extend((item.base.encode_row(2 * i), i) for i in range(item.first, len(item.rows)))
                if len(seen) >= 200:
                    return
        except Exception as exc:  # noqa: BLE001 - reported below (or the reader closed under it)
            failed.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:
        write(0, 100)
        deadline = time.monotonic() + 30
        while len(seen) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        taken = reader.lane.taken
        # (at least the GTID, rows and XID of each; a connection's first TABLE_MAP is the library's)
        assert taken >= 3 * 100
        assert _kill_dump_threads(stack) >= 1  # while the lane waits for the next packet
        time.sleep(0.3)
        write(100, 200)
        assert done.wait(60), len(seen)
    finally:
        reader.close()
        thread.join(10)
    assert not failed, failed
    assert len(seen) == 200 and len({p for p, _ in seen}) == 200  # nothing lost, nothing twice
    assert reader.lane.errors >= 1  # the lost connection reached the library through the lane
    assert reader.lane.taken > taken + 4 * 90  # and the lane read again once it reconnected
