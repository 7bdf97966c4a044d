"""Reading tables for snapshots: definitions from information_schema, keyset chunks.

The sessions read in UTC (``SET time_zone = '+00:00'``: TIMESTAMP values come back
as UTC wall clock, as the binlog gives them) and FLOAT columns are read as DOUBLE
(MariaDB's text protocol prints FLOAT with 6 significant digits).  Definitions and keys are
read on a read session (pymysql), a chunk's rows on a row session (the project's own
connection, :mod:`common.sql.row_reads`).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import pymysql

from common.sql.quoting import quote_ident
from common.sql.row_reads import RowSession
from producer.snapshot.chunk_queries import boundary_query, chunk_query, max_key_query
from producer.table_schema import ColumnDef, TableDef


# A statement on a name that is not (or no longer) there, or not the session's to read: the
# definition's own query answers for it (no table, or none visible to the session).
_NO_TABLE_ERRORS = (1044, 1049, 1142, 1143, 1146)
LOCK_WAIT_TIMEOUT = 1205
#: How long a definition's read waits for a DDL on the table to commit; then it reads what
#: information_schema says, as it did without waiting (a DDL queued behind a long transaction
#: holds each read up that long at most; the chunk's own SELECT waits for it anyway).
DDL_COMMIT_WAIT_S = 10


def read_table_def(conn, db: str, table: str) -> TableDef | None:
    """``db.table``'s definition (None: no such table), once the DDL on the name in flight, if
    any, has committed.  A server hands the binlog to a replica once an event is written (after
    the binlog's flush or sync, before the engine's commit: MySQL's ordered commit), so a DDL
    event can come while its table is not yet there, or not yet changed.  The DDL holds its
    metadata locks on the names until it has committed; MySQL's information_schema takes none,
    a statement on the table does: ``SELECT ... LIMIT 0`` waits for them (at most
    :data:`DDL_COMMIT_WAIT_S`)."""
    with conn.cursor() as cur:
        _wait_for_ddl(cur, conn.get_server_info(), db, table)
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, ORDINAL_POSITION, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table))
        rows = cur.fetchall()
        if not rows:
            return None
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s AND "
            "TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION", (db, table))
        pk = [r[0] for r in cur.fetchall()]
    cols = [ColumnDef(name=r[0], data_type=r[1], column_type=r[2], nullable=r[3] == "YES", ordinal=int(r[4]),
                      numeric_precision=r[5], numeric_scale=r[6], datetime_precision=r[7], character_set=r[8],
                      char_max_length=r[9]) for r in rows]
    return TableDef(db=db, name=table, columns=cols, primary_key=pk)


def _wait_for_ddl(cur, server: str, db: str, table: str) -> None:
    select = f"1 FROM {quote_ident(db)}.{quote_ident(table)} LIMIT 0"
    try:
        if "MariaDB" in server:
            cur.execute(f"SET STATEMENT lock_wait_timeout = {DDL_COMMIT_WAIT_S} FOR SELECT {select}")
        else:
            cur.execute(f"SELECT /*+ SET_VAR(lock_wait_timeout = {DDL_COMMIT_WAIT_S}) */ {select}")
        cur.fetchall()
    except pymysql.err.MySQLError as exc:
        if not exc.args or exc.args[0] not in (*_NO_TABLE_ERRORS, LOCK_WAIT_TIMEOUT):
            raise


def list_tables(conn) -> list[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
                    "ORDER BY TABLE_SCHEMA, TABLE_NAME")
        return [(r[0], r[1]) for r in cur.fetchall()]


def estimated_rows(conn, db: str, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (db, table))
        row = cur.fetchone()
    return int(row[0] or 0) if row else 0


def max_key(conn, table: TableDef, keys: Sequence[str]) -> tuple | None:
    with conn.cursor() as cur:
        cur.execute(max_key_query(table.db, table.name, keys))
        row = cur.fetchone()
    return tuple(row) if row else None


def _key_exprs(table: TableDef, keys: Sequence[str], values: Sequence[Any] | None
               ) -> tuple[dict[str, str], list[Any] | None]:
    """ENUM and SET key columns sort by their index, not their text: compare ``col+0``
    with the index of the value (a SET's bit mask)."""
    exprs: dict[str, str] = {}
    out = list(values) if values is not None else None
    for i, k in enumerate(keys):
        col = table.column(k)
        if col.data_type not in ("enum", "set"):
            continue
        exprs[k] = f"({quote_ident(k)}+0)"
        if out is not None and isinstance(out[i], (str, set, frozenset)):
            members = list(col.enum_values)
            if col.data_type == "enum":
                out[i] = members.index(out[i]) + 1 if out[i] in members else 0
            else:
                chosen = out[i].split(",") if isinstance(out[i], str) else out[i]
                out[i] = sum(1 << members.index(m) for m in chosen if m in members)
    return exprs, out


def min_key(conn, table: TableDef, keys: Sequence[str]) -> tuple | None:
    with conn.cursor() as cur:
        cur.execute(max_key_query(table.db, table.name, keys, lowest=True))
        row = cur.fetchone()
    return tuple(row) if row else None


def boundary_key(conn, table: TableDef, keys: Sequence[str], *, after: Sequence[Any] | None,
                 upto: Sequence[Any], rows: int) -> tuple | None:
    """The key ``rows`` rows after ``after`` (None: fewer rows than that up to ``upto``)."""
    exprs, after_v = _key_exprs(table, keys, after)
    _, upto_v = _key_exprs(table, keys, upto)
    sql, params = boundary_query(table.db, table.name, keys, after=after_v, upto=upto_v, rows=rows,
                                 key_exprs=exprs)
    with conn.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return tuple(row) if row else None


def read_chunk(session: RowSession, table: TableDef, keys: Sequence[str], *, after: Sequence[Any] | None,
               upto: Sequence[Any] | None, condition: str | None, limit: int) -> list[dict[str, Any]]:
    """The rows of one keyset chunk, as dicts by column name."""
    names = table.column_names
    return [dict(zip(names, r)) for r in read_chunk_values(session, table, keys, after=after, upto=upto,
                                                           condition=condition, limit=limit)]


def read_whole(session: RowSession, table: TableDef, *, condition: str | None,
               batch: int) -> Iterator[list[dict[str, Any]]]:
    """The rows of a table without a key (those matching ``condition``), one SELECT read
    unbuffered, ``batch`` rows at a time, as dicts by column name (:meth:`RowSession.value_batches`:
    memory bounded by ``batch``, not by the table)."""
    names = table.column_names
    sql, params = chunk_statement(table, [], after=None, upto=None, condition=condition, limit=None)
    for values in session.value_batches(sql, params, batch):
        yield [dict(zip(names, r)) for r in values]


def chunk_statement(table: TableDef, keys: Sequence[str], *, after: Sequence[Any] | None,
                    upto: Sequence[Any] | None, condition: str | None, limit: int | None) -> tuple[str, list[Any]]:
    """The SELECT of one keyset chunk and its parameters: the table's columns in order."""
    exprs = {c.name: f"CAST({quote_ident(c.name)} AS DOUBLE)"
             for c in table.columns if c.data_type == "float"}
    kexprs, after_v = _key_exprs(table, keys, after)
    _, upto_v = _key_exprs(table, keys, upto)
    return chunk_query(table.db, table.name, table.column_names, keys, after=after_v, upto=upto_v,
                       condition=condition, limit=limit, select_exprs=exprs, key_exprs=kexprs)


def read_chunk_values(session: RowSession, table: TableDef, keys: Sequence[str], *, after: Sequence[Any] | None,
                      upto: Sequence[Any] | None, condition: str | None, limit: int) -> list[tuple]:
    """The rows of one keyset chunk, as tuples of values in ``table.column_names``' order, read
    on a row session (:func:`common.sql.sessions.row_session`: its values pymysql's)."""
    sql, params = chunk_statement(table, keys, after=after, upto=upto, condition=condition, limit=limit)
    return session.values(sql, params)
