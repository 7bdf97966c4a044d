"""Each distinct TABLE_MAP parsed once (:class:`producer.binlog.table_map.TableMapCache`), on
the real server: the same binlog range -- single-row statements on a table of many types
(geometry, ENUM, SET, JSON, decimals, times...), each with its own TABLE_MAP, an ALTER TABLE
between them -- is read by :class:`BinlogReader` with the cache and with every event parsed;
each rows event gives the same table definition and the same rows, and the repeated
TABLE_MAPs came from the cache."""

from __future__ import annotations

from common.sql.sessions import connect
from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges
from producer.binlog.server import current_position
from producer.binlog.table_map import install_table_map_cache
from tests.all_types import make_many_types_table


def _read(config, db: str, start: tuple[str, int], end: tuple[str, int]) -> list[tuple]:
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, blocking=False)
    reader.lane.enabled = False  # (the packet lane skips a table id's repeated TABLE_MAP before the cache sees it)
    try:
        out = []
        for item in reader:
            if type(item) is RowChanges and item.db == db:
                out.append((item.table, item.kind, item.table_def, item.base,
                            [item.packed_images(i) if hasattr(item.rows, "images") else item.images(i)
                             for i in range(len(item.rows))]))
            if (reader.current_resume().file, reader.current_resume().pos) >= end:
                break
        return out
    finally:
        reader.close()


def test_repeated_table_maps_come_from_the_cache_and_read_as_parsed(stack, config, test_db):
    with connect(config.source) as src:
        start = current_position(src)
    make_many_types_table(stack, test_db, n=30)  # one INSERT (and TABLE_MAP) per row
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE types ADD COLUMN added VARCHAR(20) NULL DEFAULT 'new'")
        for i in range(1, 6):
            cur.execute("UPDATE types SET added = %s, vc = CONCAT(vc, '!') WHERE id = %s", (f"v{i}", i * 10))
        cur.execute("DELETE FROM types WHERE id = 20")
    with connect(config.source) as src:
        end = current_position(src)

    cache = install_table_map_cache()
    cache.parsed.clear()  # (what earlier tests in this process left cannot fill it mid-read)
    hits, misses = cache.hits, cache.misses
    cached = _read(config, test_db, start, end)
    hits, misses = cache.hits - hits, cache.misses - misses
    cache.enabled = False
    try:
        before = cache.hits
        parsed = _read(config, test_db, start, end)
        assert cache.hits == before  # (really parsed: the comparison below is not the cache's with itself)
    finally:
        cache.enabled = True

    assert len(cached) == 30 + 1 + 5 + 1, [c[:2] for c in cached]
    assert cached == parsed
    assert len({c[2].fingerprint() for c in cached}) == 2  # before and after the ALTER
    # 37 TABLE_MAPs of two versions of the table: 35 of them from the cache (other tests'
    # tables may share the range and add their own hits)
    assert hits >= 35, (hits, misses)


def test_table_ids_are_forgotten_at_each_new_binlog_file(stack, config, test_db):
    """What the reader keeps per table id starts again with each binlog file (ids are handed out
    whenever a table is reopened: kept for ever they grow with the server's uptime), and the
    rows of the new file read as before: its statements bring their own TABLE_MAPs."""
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v INT)")
    with connect(config.source) as src:
        start = current_position(src)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (1, 1)")
        cur.execute("INSERT INTO b VALUES (1, 1)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO b VALUES (2, 2)")
        conn.begin()  # one transaction, two tables: both TABLE_MAPs before their rows
        cur.execute("UPDATE a SET v = 2 WHERE id = 1")
        cur.execute("UPDATE b SET v = 3 WHERE id = 2")
        conn.commit()
    with connect(config.source) as src:
        end = current_position(src)
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=True, blocking=False)
    try:
        seen = []
        for item in reader:
            if type(item) is RowChanges and item.db == test_db:
                kept = {t.name for t in reader._tables.values() if t is not None and t.db == test_db}
                seen.append((item.file, item.table, item.kind, kept))
            if (reader.current_resume().file, reader.current_resume().pos) >= end:
                break
    finally:
        reader.close()
    first, second = start[0], end[0]
    assert first != second
    assert [s[:3] for s in seen] == [(first, "a", "insert"), (first, "b", "insert"), (second, "b", "insert"),
                                     (second, "a", "update"), (second, "b", "update")]
    # at b's first rows of the new file the reader knew b only: a's table id (the same id: the
    # tables were not reopened) was forgotten with the file before, and came back with a's TABLE_MAP
    assert [s[3] for s in seen] == [{"a"}, {"a", "b"}, {"b"}, {"a", "b"}, {"a", "b"}]
