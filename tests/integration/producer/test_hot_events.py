"""The per-transaction events built directly (:mod:`producer.binlog.hot_events`) are the
library's, on the real server: one binlog range -- single-row statements on a table of many
types (each with its own GTID, TABLE_MAP and XID), multi-row updates and deletes, a
transaction of several statements, an ALTER TABLE, and changes in a database the stream
filters out -- is read through python-mysql-replication's stream twice, with the hot events
(and the TABLE_MAP cache) and with every event built by the library; each event has the same
class and attributes, its packet was read to the same point, and its rows decode the same."""

from __future__ import annotations

from pymysqlreplication.row_event import RowsEvent, TableMapEvent

from common.sql.sessions import connect
from producer.binlog.hot_events import install_hot_events
from producer.binlog.reader import BinlogReader, ResumePoint
from producer.binlog.row_decoder import row_data
from producer.binlog.server import current_position
from producer.binlog.table_map import table_def_from_table_map
from tests.all_types import make_many_types_table

#: Attributes holding objects shared by every event (the stream's connection, its table map).
_SHARED = {"packet", "table_map", "_ctl_connection"}


def _events(config, db: str, start: tuple[str, int], end: tuple[str, int]) -> list[tuple]:
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, blocking=False, only_schemas=[db])
    try:
        out = []
        for ev in reader._stream:  # the library's stream, as the reader iterates it
            w = ev.packet
            wrapper = (w.timestamp, w.event_type, w.server_id, w.event_size, w.log_pos, w.flags)
            if isinstance(ev, TableMapEvent):  # (from the cache: its packet is not read further)
                seen = (ev.table_id, ev.schema, ev.table, table_def_from_table_map(ev), ev.event_size)
            else:
                attrs = {k: v for k, v in ev.__dict__.items() if k not in _SHARED}
                seen = (attrs, w.read_bytes)
                if isinstance(ev, RowsEvent):
                    seen += (row_data(ev), ev.rows, w.read_bytes)
            out.append((type(ev).__name__, wrapper, seen))
            ev.packet.event = None
            if (w.log_pos or 0) >= end[1] and reader._stream.log_file == end[0]:
                break
        return out
    finally:
        reader.close()


def test_hot_events_are_the_library_events(stack, config, test_db, unique):
    other = unique("db")
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{other}`")
        cur.execute(f"CREATE TABLE `{other}`.t (id INT PRIMARY KEY, v INT)")
    try:
        with connect(config.source) as src:
            start = current_position(src)
        make_many_types_table(stack, test_db, n=12)  # ids 10-120 and 5; one INSERT (GTID, TABLE_MAP, rows, XID) each
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{other}`.t VALUES (1, 1), (2, 2)")  # filtered out by the stream
            cur.execute("UPDATE types SET vc = CONCAT(vc, '!') WHERE id <= 60")
            cur.execute("ALTER TABLE types ADD COLUMN added VARCHAR(20) NULL DEFAULT 'new'")
            conn.begin()
            cur.execute("UPDATE types SET added = 'x' WHERE id = 70")
            cur.execute(f"UPDATE `{other}`.t SET v = 3 WHERE id = 1")
            cur.execute("DELETE FROM types WHERE id IN (20, 30)")
            conn.commit()
        with connect(config.source) as src:
            end = current_position(src)

        hot = install_hot_events()
        built = hot.built
        fast = _events(config, test_db, start, end)
        built = hot.built - built
        hot.enabled = hot.tables.enabled = False
        try:
            before = hot.built, hot.tables.hits
            library = _events(config, test_db, start, end)
            assert (hot.built, hot.tables.hits) == before  # (the library built every event of this read)
        finally:
            hot.enabled = hot.tables.enabled = True
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{other}`")

    kinds = [k for k, _, _ in fast]
    assert kinds.count("WriteRowsEvent") >= 13 and kinds.count("UpdateRowsEvent") >= 2, kinds
    assert kinds.count("DeleteRowsEvent") == 1 and "MariadbGtidEvent" in kinds and "XidEvent" in kinds, kinds
    assert fast == library
    # 13 inserts, 2 updates and a delete of the table, each after a GTID and a TABLE_MAP, and
    # their XIDs: built directly, not by the library
    assert built >= 3 * 16, built
