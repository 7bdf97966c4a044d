"""Rows encoded to Avro where they are read, on the real server: binlog row images in the
binlog reader process, snapshot chunk rows in the chunk read process.

Binlog: the same binlog range is read twice by :class:`BinlogReader`: once with the producer's
:class:`StreamEncoding` (rows of captured tables cross as Avro bodies, :class:`EncodedImages`),
once without (values).  Every rows event must give the same records either way, and the
tables must really be encoded where they are read: the benchmark's table and the many-types
table always, the all-types table for its rows without a value the encoder leaves to the
values' way (a zero date).

Snapshot: each table's chunks are read as the chunk read process reads them (its rows from
the SELECT's bytes, :class:`SelectRowEncoder`) and from their values; the producer's records
of both are the same, and the select encoder took the rows.
"""

from __future__ import annotations

import pytest


from common.sql.sessions import connect, read_session, row_session
from contract.position import BinlogPosition
from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges
from producer.binlog.row_decoder import EncodedImages, PackedRows
from producer.binlog.server import current_position
from producer.events.builder import EventBuilder
from producer.events.row_encoder import encode_rows
from producer.events.select_encoder import SelectRowEncoder
from producer.snapshot.chunk_process import read_encoded
from producer.snapshot.chunks import ReleasedChunk
from producer.snapshot.table_reader import chunk_statement, read_chunk_values, read_table_def
from tests.all_types import create_all_types, make_many_types_table
from tests.unit.producer.events.test_row_encoder import AvroOut

BENCH_DDL = """CREATE TABLE items (
  id INT NOT NULL PRIMARY KEY, name VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL,
  updated_at DATETIME(3) NOT NULL, qty INT NOT NULL, note TEXT NULL) DEFAULT CHARSET=utf8mb4"""


def _changes(config, start: tuple[str, int], end: tuple[str, int], encoding, mariadb: bool) -> list[RowChanges]:
    reader = BinlogReader(config.source, ResumePoint(*start), is_mariadb=mariadb, blocking=False, images=encoding)
    try:
        out = []
        for item in reader:
            if type(item) is RowChanges:
                out.append(item)
            if (reader.current_resume().file, reader.current_resume().pos) >= end:
                break
        return out
    finally:
        reader.close()


@pytest.mark.servers("mariadb", "mysql")
def test_encoded_images_give_the_records_values_give(source_stack, config, test_db, monkeypatch):
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)  # the envelope's ts_ms
    with source_stack.admin(test_db) as conn:
        mariadb = source_stack.mysql.get("flavor", "mariadb") == "mariadb"
        with connect(config.source) as src:
            start = current_position(src)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(BENCH_DDL)
            cur.execute("INSERT INTO items VALUES " + ",".join(
                f"({i}, 'item-{i}', {i * 7}.{i % 100:02d}, '2024-01-{1 + i % 28:02d} 10:{i % 60:02d}:00.{i % 1000:03d}', "
                f"{i}, {'NULL' if i % 5 == 0 else repr('note é ' * (i % 4))})" for i in range(1, 301)))
            cur.execute("UPDATE items SET qty = qty + 1, price = -price, updated_at = NOW(3) WHERE id <= 100")
            cur.execute("UPDATE items SET id = id + 1000 WHERE id > 290")  # key changes: a delete and a create each
            cur.execute("DELETE FROM items WHERE id BETWEEN 150 AND 180")
        create_all_types(conn, mariadb)
        with conn.cursor() as cur:
            cur.execute("UPDATE types SET vc = 'changed', id = id + 10")
            cur.execute("DELETE FROM types WHERE id = 13")
            cur.execute("DROP TABLE types")  # the many-types table comes under the same name: another version
    make_many_types_table(source_stack, test_db, n=40)
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE types SET vc = CONCAT(vc, '!'), d10 = d10 + 1")
        cur.execute("DELETE FROM types WHERE id % 20 = 0")
    with connect(config.source) as src:
        end = current_position(src)

    builder = EventBuilder(config.kafka.topic_prefix, "prod", 1)
    encoding = builder.stream_encoding({config.source.signal_table})
    encoded = _changes(config, start, end, encoding, mariadb)
    values = _changes(config, start, end, None, mariadb)
    assert [(c.table, c.kind, c.base) for c in encoded] == [(c.table, c.kind, c.base) for c in values]
    assert all(type(c.rows) is PackedRows for c in values)
    fused = {(c.table, c.kind) for c in encoded if type(c.rows) is EncodedImages}
    assert {("items", "insert"), ("items", "update"), ("items", "delete")} <= fused
    assert {("types", "insert"), ("types", "update"), ("types", "delete")} <= fused
    rows = 0
    for e, v in zip(encoded, values):
        assert len(e.rows) == len(v.rows)
        records = [builder.records(c, 0, len(c.rows), AvroOut()) for c in (e, v)]
        assert records[0] == records[1], (e.table, e.kind, e.base)
        rows += len(e.rows)
    assert rows > 400


def _chunk(table, rows) -> ReleasedChunk:
    return ReleasedChunk("snap-1", 3, table, rows, BinlogPosition.from_binlog("mysql-bin.000002", 400),
                         BinlogPosition.from_binlog("mysql-bin.000002", 900), list(table.primary_key))


@pytest.mark.servers("mariadb", "mysql")
def test_snapshot_rows_encoded_from_the_selects_bytes_give_the_records_values_give(source_stack, config, test_db,
                                                                                   monkeypatch):
    """The chunk read process's reads (a row session: the project's own connection) against
    pymysql's (a read session, its public API): the same rows' values, the same records."""
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(BENCH_DDL)
        cur.execute("INSERT INTO items VALUES " + ",".join(
            f"({i}, 'item-{i} \u00e9', {-i * 7}.{i % 100:02d}, '20{i % 100:02d}-0{1 + i % 9}-{1 + i % 28:02d} "
            f"{i % 24}:{i % 60:02d}:01.{i % 1000:03d}', {i}, {'NULL' if i % 5 == 0 else repr('note ' * (i % 4))})"
            for i in range(1, 2001)))
        mariadb = source_stack.mysql.get("flavor", "mariadb") == "mariadb"
        create_all_types(conn, mariadb)
        cur.execute(f"CREATE DATABASE `{test_db}_m`")
    make_many_types_table(source_stack, f"{test_db}_m", n=60)
    builder = EventBuilder(config.kafka.topic_prefix, "prod", 1)
    session = read_session(config.source)
    rows_session = row_session(config.source)
    encoders: dict = {}
    try:
        for db, name, rows, first in [(test_db, "items", 2000, 1), (test_db, "types", 3, 1),
                                      (f"{test_db}_m", "types", 61, 5)]:
            table = read_table_def(session, db, name)
            encoding = builder.read_encoding(table)
            te = builder.read_table_events(table)
            keys = list(table.primary_key)
            # whole; a first chunk; a later one up to a key; with a condition (its % doubled for the driver)
            for after, upto, condition, limit in [(None, None, None, 5000), (None, None, None, 7),
                                                  ((first,), (first + 40,), None, 1000),
                                                  (None, None, "id % 3 = 1 OR id LIKE '1%'", 5000)]:
                encoded = read_encoded(rows_session, encoding, te, keys, after, upto, condition, limit, encoders)
                sql, params = chunk_statement(table, keys, after=after, upto=upto, condition=condition, limit=limit)
                with session.cursor() as cur:  # pymysql's values (its public API)
                    cur.execute(sql, params)
                    values = list(cur.fetchall())
                ours = read_chunk_values(rows_session, table, keys, after=after, upto=upto, condition=condition,
                                         limit=limit)
                assert ours == values and [list(map(type, r)) for r in ours] == [list(map(type, r)) for r in values]
                by_values = encode_rows(te.encoder, encoding.ident, tuple(table.column_names), values)
                assert len(encoded) == len(values) and encoded.last == dict(zip(table.column_names, values[-1]))
                records = [builder.chunk_records(_chunk(table, r), AvroOut()) for r in (encoded, by_values)]
                assert records[0] == records[1], (db, name, after, limit)
            if name == "items":
                assert len(read_encoded(rows_session, encoding, te, keys, None, None, None, 5000,
                                        encoders).bodies) == rows
        assert sum(type(e) is SelectRowEncoder for e in encoders.values()) == 3
    finally:
        session.close()
        rows_session.close()
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{test_db}_m`")
