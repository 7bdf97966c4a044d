"""The binlog reader on the project's own client against the reader on python-mysql-replication.

One binlog range -- single-row autocommit changes (a GTID, a TABLE_MAP, a rows event and an XID
each), multi-row statements, a transaction of several statements on two tables, a rolled back
one, an ALTER TABLE mid-range, the many-types table, a table whose rows cross as values,
changes in a database the reader does not capture, a binlog rotation -- is read by
:class:`BinlogReader` (the own client) and :class:`LibraryBinlogReader` (the library's public
API); both give the same items, field by field (rows, transaction ends, schema changes, resume
points).  The same from resume points inside the range (the middle of a transaction, the middle
of a multi-row event), from a MariaDB GTID start, and while blocking with heartbeats.  And a
connection the server drops while the own reader reads is read again from the open
transaction's start: nothing lost, nothing twice.
"""

from __future__ import annotations

import threading
import time

import pytest

from common.sql.sessions import connect
from contract.signals import send_signal
from producer.binlog.library_reader import LibraryBinlogReader
from producer.binlog.reader import BinlogReader, Idle, ResumePoint, RowChanges
from producer.binlog.readers import CLIENT_ENV, open_reader
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


def _read(reader_class, config, start: ResumePoint, end: tuple[str, int], *, other: str = "",
          encode: bool = True, mariadb: bool = True) -> list[tuple]:
    reader = reader_class(config.source, start, is_mariadb=mariadb, blocking=False,
                          images=_encoding(config) if encode else None, wants=lambda db, table: db != other)
    try:
        out = []
        for item in reader:
            if type(item) is not Idle:
                out.append(_plain(item))
            here = reader.current_resume()
            if (here.file, here.pos) >= end:
                break
        return out
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
        cur.execute("UPDATE items SET id = id + 1000 WHERE id = 5")  # a key change
        cur.execute("DELETE FROM items WHERE id = 7")
        cur.execute(f"INSERT INTO `{other}`.t VALUES (1, 1), (2, 2)")  # not captured
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
        cur.execute("FLUSH BINARY LOGS")  # a rotation
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


@pytest.mark.servers("mariadb", "mysql")
def test_the_own_client_gives_the_items_the_library_gives(source_stack, config, test_db, unique):
    start, end, other = _workload(source_stack, config, test_db, unique)
    mariadb = source_stack.mysql.get("flavor", "mariadb") == "mariadb"

    def read(*args, **kw):
        return _read(*args, mariadb=mariadb, **kw)
    try:
        own = read(BinlogReader, config, ResumePoint(*start), end, other=other)
        library = read(LibraryBinlogReader, config, ResumePoint(*start), end, other=other)
        assert own == library
        tables = {(k[2], k[3]) for k in own if k[0] == "rows"}
        assert (test_db, "items") in tables and (test_db, "types") in tables
        assert not any(k[2] == other for k in own if k[0] == "rows")
        assert sum(1 for k in own if k[0] == "TransactionEnd") >= 90
        assert any(k[0] == "SchemaChange" for k in own)
        assert len({k[11] for k in own if k[0] == "rows"}) == 2  # (rows read in both files)
        # Without the image encoders: every row decoded as values (PackedRows), the same.
        assert read(BinlogReader, config, ResumePoint(*start), end, other=other, encode=False) == read(
            LibraryBinlogReader, config, ResumePoint(*start), end, other=other, encode=False)

        # From resume points inside the range: after the first change of the transaction of
        # several statements, and half way through a rows event of the multi-row update.
        in_txn = next(k for k, after in zip(own, own[1:]) if k[:2] == ("rows", "update")
                      and after[:2] == ("rows", "delete") and k[3] == after[3] == "items")
        multi = max((k for k in own if k[:2] == ("rows", "update") and k[3] == "items"), key=lambda k: len(k[6][2]))
        half = len(multi[6][2]) // 8  # (an update's bodies: a key and a row body per image, two images a row)
        assert half >= 10
        for point in (in_txn[16], ResumePoint(multi[12], multi[13], multi[5].encode_row(2 * half + 1))):
            own_from = read(BinlogReader, config, point, end, other=other)
            assert own_from == read(LibraryBinlogReader, config, point, end, other=other)
            assert 0 < len(own_from) < len(own)
    finally:
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{other}`")


def test_a_start_by_mariadb_gtid_gives_the_same_items(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(ITEMS_DDL)
        cur.execute("INSERT INTO items VALUES (1, 'a', 1, 1, NULL)")
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
        for i in range(2, 12):
            cur.execute("INSERT INTO items VALUES (%s, 'b', 2, 2, NULL)", (i,))
        cur.execute("UPDATE items SET qty = 5")
    with connect(config.source) as src:
        end = current_position(src)
    own = _read(BinlogReader, config, ResumePoint("", 4, gtid_set=gtid), end)
    assert own == _read(LibraryBinlogReader, config, ResumePoint("", 4, gtid_set=gtid), end)
    rows = [k for k in own if k[0] == "rows" and k[3] == "items"]
    assert [k[1] for k in rows] == ["insert"] * 10 + ["update"]  # after the GTID given, not before


def _blocking_items(reader_class, config, test_db, start, writes) -> list:
    """The items (Idle as its type) of a blocking reader while ``writes()`` runs, until two
    heartbeats came after the last change."""
    reader = reader_class(config.source, ResumePoint(*start), is_mariadb=True, heartbeat_s=0.1,
                          wants=lambda db, table: db == test_db)
    out: list = []
    try:
        writes()
        idle_after = 0
        for item in reader:
            out.append("Idle" if type(item) is Idle else _plain(item))
            idle_after = idle_after + 1 if type(item) is Idle else 0
            if idle_after >= 2 and any(k[0] == "rows" for k in out if k != "Idle"):
                return out
    finally:
        reader.close()
    return out


def test_heartbeats_while_blocking_are_idle_items_with_the_binlog_end(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(ITEMS_DDL)
    with connect(config.source) as src:
        start = current_position(src)

    def writes() -> None:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            for i in range(5):
                cur.execute("INSERT INTO items VALUES (%s, 'x', 1, 1, NULL)", (i,))

    own = [k for k in _blocking_items(BinlogReader, config, test_db, start, writes) if k != "Idle"]
    library = [k for k in _blocking_items(LibraryBinlogReader, config, test_db, start, lambda: None) if k != "Idle"]
    assert own == library and sum(1 for k in own if k[0] == "rows") == 5
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, heartbeat_s=0.1)
    try:
        idle = next(item for item in reader if type(item) is Idle)
        with connect(config.source) as src:
            assert (idle.resume.file, idle.resume.pos) == current_position(src)  # the binlog's end
    finally:
        reader.close()


def test_the_client_is_selected_by_the_environment(config, monkeypatch):
    monkeypatch.delenv(CLIENT_ENV, raising=False)
    assert type(open_reader(config.source, ResumePoint("x.000001", 4), is_mariadb=True)) is BinlogReader
    monkeypatch.setenv(CLIENT_ENV, "library")
    reader = open_reader(config.source, ResumePoint("x.000001", 4), is_mariadb=True)
    assert type(reader) is LibraryBinlogReader
    reader.close()
    monkeypatch.setenv(CLIENT_ENV, "pymysql")
    with pytest.raises(ValueError, match="CDC_BINLOG_CLIENT"):
        open_reader(config.source, ResumePoint("x.000001", 4), is_mariadb=True)


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


def test_a_lost_connection_is_read_again_from_the_open_transaction(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(ITEMS_DDL)
    with connect(config.source) as src:
        start = current_position(src)
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, heartbeat_s=0.1,
                          images=_encoding(config), wants=lambda db, table: db == test_db)
    seen: list[tuple] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def write(first: int, last: int, per_txn: int = 1) -> None:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            for i in range(first, last, per_txn):
                conn.begin()
                for j in range(i, i + per_txn):
                    cur.execute("INSERT INTO items VALUES (%s, 'x', 1, 1, NULL)", (j,))
                conn.commit()

    def consume() -> None:
        try:
            for item in reader:
                if type(item) is RowChanges:
                    seen.extend((item.base.encode_row(2 * i), i) for i in range(item.first, len(item.rows)))
                if len(seen) >= 400:
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
        assert _kill_dump_threads(stack) >= 1  # while it waits for the next event
        time.sleep(0.3)
        killer = threading.Thread(target=lambda: (time.sleep(0.2), _kill_dump_threads(stack)))
        killer.start()
        write(100, 400, per_txn=20)  # (transactions of 20 statements: one is killed in its middle, likely)
        killer.join()
        assert done.wait(60), len(seen)
    finally:
        reader.close()
        thread.join(10)
    assert not failed, failed
    assert len(seen) == 400 and len({p for p, _ in seen}) == 400  # nothing lost, nothing twice
    assert reader.reconnects >= 1


def test_the_pre_5_6_temporal_types_read_as_the_library_reads_them(stack, config, test_db):
    """MariaDB's pre-5.6 DATETIME, TIME and TIMESTAMP (``mysql56_temporal_format=OFF``):
    the same rows from both readers."""
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE old_times (id INT PRIMARY KEY, at DATETIME, t TIME, ts TIMESTAMP NULL)")
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL mysql56_temporal_format = ON")
    with connect(config.source) as src:
        start = current_position(src)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO old_times VALUES (1, '2024-02-29 13:05:09', '-12:34:56', '2038-01-19 03:14:07'),"
                    " (2, '1000-01-01 00:00:00', '838:59:59', NULL), (3, NULL, '00:00:00', '1970-01-01 00:00:01')")
        cur.execute("UPDATE old_times SET at = '9999-12-31 23:59:59' WHERE id = 2")
    with connect(config.source) as src:
        end = current_position(src)
    own = _read(BinlogReader, config, ResumePoint(*start), end, encode=False)
    assert own == _read(LibraryBinlogReader, config, ResumePoint(*start), end, encode=False)
    assert [k[1:4] for k in own if k[0] == "rows"] == [("insert", test_db, "old_times"), ("update", test_db, "old_times")]
    # (with the image encoders: the own client encodes them, the library's reader too, where its rows fit)
    assert _read(BinlogReader, config, ResumePoint(*start), end) == _read(
        LibraryBinlogReader, config, ResumePoint(*start), end)
