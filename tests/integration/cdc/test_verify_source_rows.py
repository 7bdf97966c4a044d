"""``cdc verify``'s source reads on a row session (the project's own connection) against the
same reads through pymysql's public API, on the real server: every type at its edges, keys
of every kind (keyset bounds and key lookups written as parameters), many rows; and a server
that drops the session mid-verify gives a clear error."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from cdc.verify.source import SourceTable
from cdc.verify.spec import TableSpec, table_spec
from common.errors import ServerGone
from common.sql.sessions import read_session, row_session
from tests.all_types import create_all_types, make_many_types_table

KEYS_DDL = """CREATE TABLE k (
  dt DATETIME(6) NOT NULL, d DECIMAL(12,3) NOT NULL, vb VARBINARY(8) NOT NULL, e ENUM('zz','aa','mm') NOT NULL,
  s SET('x','y','z') NOT NULL, b BIT(5) NOT NULL, day DATE NOT NULL, name VARCHAR(40) NOT NULL, v TEXT,
  PRIMARY KEY (dt, d, vb, e, s, b, day, name)) DEFAULT CHARSET=utf8mb4"""
NAMES = ["a'b", 'q"q', "back\\slash", "caf\u00e9", "\U0001F600", "%s %% 100%", "tab\tnl\n", ""]


class PymysqlValues:
    """A read session (pymysql, the values' reference) with a row session's ``values``."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def values(self, sql: str, params=None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())


def _chunks(source: SourceTable, size: int) -> list[tuple]:
    return [(c.index, c.lo, c.hi, c.rows, c.checksum.hex) for c in source.chunks(size)]


def _same_reads(spec: TableSpec, ours: SourceTable, theirs: SourceTable, sizes: tuple[int, ...]) -> int:
    rows = 0
    for size in sizes:
        got, expected = _chunks(ours, size), _chunks(theirs, size)
        assert got == expected, (spec.name, size)
        rows = sum(len(c[3]) for c in got)
    keys = [k for c in _chunks(theirs, 100_000) for k in c[3]]
    assert ours.lookup(keys) == theirs.lookup(keys) == set(keys)
    return rows


@pytest.mark.servers("mariadb", "mysql")
def test_verify_source_reads_are_pymysqls(source_stack, config, test_db):
    mariadb = source_stack.mysql.get("flavor", "mariadb") == "mariadb"
    with source_stack.admin(test_db) as conn:
        create_all_types(conn, mariadb)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(KEYS_DDL)
            cur.executemany("INSERT INTO k VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", [
                (datetime(2024, 1 + i % 12, 1 + i % 28, i % 24, i % 60, i % 60, i * 37 % 1_000_000),
                 Decimal(i * 7) / 8 - 50, bytes([i % 256, 0, 255 - i % 256]), ("zz", "aa", "mm")[i % 3],
                 ",".join(m for j, m in enumerate("xyz") if i >> j & 1), i % 32, date(2000 + i % 30, 1, 1 + i % 28),
                 NAMES[i % len(NAMES)] + str(i % 5), None if i % 4 == 0 else "v" * i)
                for i in range(120)])
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{test_db}_m`")
    make_many_types_table(source_stack, f"{test_db}_m", n=200)
    conn, session = read_session(config.source, binary_prefix=True), row_session(config.source)
    try:
        for db, table, sizes, at_least in [(test_db, "types", (1, 2, 10), 3), (test_db, "k", (1, 7, 50, 1000), 120),
                                           (f"{test_db}_m", "types", (13, 100, 10_000), 200)]:
            spec = table_spec(conn, config, db, table)
            assert isinstance(spec, TableSpec), spec
            assert _same_reads(spec, SourceTable(session, spec), SourceTable(PymysqlValues(conn), spec),
                               sizes) >= at_least
    finally:
        session.close()
        conn.close()
        with source_stack.admin() as admin, admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{test_db}_m`")


@pytest.mark.servers("mariadb", "mysql")
def test_a_source_session_killed_mid_verify_is_a_clear_error(source_stack, config, test_db):
    make_many_types_table(source_stack, test_db, n=50)
    conn, session = read_session(config.source, binary_prefix=True), row_session(config.source)
    try:
        spec = table_spec(conn, config, test_db, "types")
        chunks = SourceTable(session, spec).chunks(10)
        next(chunks)
        with source_stack.admin() as admin, admin.cursor() as cur:
            cur.execute(f"KILL {session.conn.handshake.connection_id}")
        with pytest.raises(ServerGone, match=r"the server at .* (closed|dropped) the connection"):
            next(chunks)
        assert session.closed
    finally:
        session.close()
        conn.close()
