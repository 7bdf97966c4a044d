"""A table sink's maintenance of its tables, for the merge job's driver: the tombstones below
a horizon purged, the rows below a table marker's position deleted, sink tables dropped and
renamed (DROP and RENAME TABLE), and how far each table got.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from spark_jobs.sinks.naming import POSITION_COLUMN, TABLES, TOMBSTONES


class TableMaintenance:
    """A table sink's maintenance of its tables, for the merge job's driver: on the sink's
    connection (``db``: :class:`~spark_jobs.sinks.sink_connection.SinkConnection`) and its
    database's names and bookkeeping tables (``tables``: :class:`~spark_jobs.sinks.table_sink.SqlTables`)."""

    def __init__(self, db: Any, tables: Any) -> None:
        self.db = db
        self.tables = tables

    def purge_tombstones(self, before_position: str, db: str | None = None, table: str | None = None, *,
                         wanted: Callable[[str, str], bool] | None = None) -> int:
        """Drop tombstones older than ``before_position`` (of one table, of the registered
        tables ``wanted(source db, source table)`` says, or all); returns how many.

        Safe once no record below ``before_position`` can be applied again (the merge job
        calls it with such a horizon: :mod:`spark_jobs.maintenance.tombstone_horizon`).  A tombstone
        below its key's row (left by a batch applied without the guard, see :meth:`apply`)
        stops nothing the row's own position would not stop: a tombstone matters only while
        a record of its key below its position can still come, and only when the key has
        no row.
        """
        sql = f"DELETE FROM {self.tables.bookkeeping(TOMBSTONES)} WHERE position < %s"
        if wanted is None:
            args: list[Any] = [before_position]
            if db is not None and table is not None:
                sql += " AND table_name = %s"
                args.append(self.tables.table_name(db, table))
            with self.db.transaction() as cur:
                cur.execute(sql, args)
                return cur.rowcount
        # ``wanted(source db, source table)``: of the registered sink tables, those to purge
        n = 0
        with self.db.transaction() as cur:
            for name, source_db, source_table in self.tables.registered(cur):
                if wanted(source_db, source_table):
                    cur.execute(sql + " AND table_name = %s", [before_position, name])
                    n += cur.rowcount
        return n

    def delete_below(self, db: str, table: str, position: str, where: Mapping[str, str] | None = None) -> int:
        """Delete the rows of ``db.table`` whose position is below ``position`` (rows a
        snapshot with ``delete-missing`` did not refresh: deleted at the source while their
        changes were lost); returns how many.  Nothing when the table does not exist.
        ``where``: only the rows with these column values (a routed target: one shard's
        rows, by its origin values)."""
        conds = "".join(f" AND {self.tables.quote(c)} = %s" for c in (where or {}))
        with self.db.transaction() as cur:
            if not self.tables.has_table(cur, db, table):
                return 0
            self.tables.whole_turn(cur, self.tables.table_name(db, table))  # the writers' lock: ``apply`` waits
            cur.execute(f"DELETE FROM {self.tables.qualified_name(db, table)} "
                        f"WHERE {self.tables.quote(POSITION_COLUMN)} < %s"
                        + conds, [position, *(where or {}).values()])
            return cur.rowcount

    def registered_tables(self) -> list[tuple[str, str, str]]:
        """``(sink table, source db, source table)`` of every sink table, by sink table."""
        with self.db.transaction() as cur:
            return self.tables.registered(cur)

    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        """Drop the sink table of ``db.table`` and its bookkeeping (DROP TABLE at the source,
        ``drop_table: drop``); whether there was one.  With ``below`` (the DROP's position)
        only the rows below it go, and the table only when nothing is left: rows above it
        belong to a table created again under the same name."""
        name = self.tables.table_name(db, table)
        with self.db.transaction() as cur:
            if not self.tables.has_table(cur, db, table):
                return False
            self.tables.whole_turn(cur, name)
            qualified = self.tables.qualified_name(db, table)
            if below is not None:
                cur.execute(f"DELETE FROM {qualified} WHERE {self.tables.quote(POSITION_COLUMN)} < %s", [below])
                cur.execute(f"DELETE FROM {self.tables.bookkeeping(TOMBSTONES)} "
                            "WHERE table_name = %s AND position < %s",
                            [name, below])
                cur.execute(f"SELECT EXISTS (SELECT 1 FROM {qualified})")
                if cur.fetchone()[0]:
                    return True
            cur.execute(f"DROP TABLE IF EXISTS {qualified}")
            for book in (TABLES, TOMBSTONES):
                cur.execute(f"DELETE FROM {self.tables.bookkeeping(book)} WHERE table_name = %s", [name])
        return True

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        """The sink table of ``db.table`` becomes that of ``to_db.to_table`` (RENAME TABLE at
        the source, ``rename_table: rename``).  When the new one exists already (its rows
        came first), the old one is dropped instead: the producer snapshots a renamed table,
        so the new sink table fills either way.  With ``position`` (the RENAME's), a sink
        table holding a row written after it is left as it is: it is a table created again
        under the old name (a RENAME read long after, from Debezium's schema change topic).
        Returns what was done: ``renamed``, ``dropped`` or ``none``."""
        name, to_name = self.tables.table_name(db, table), self.tables.table_name(to_db, to_table)
        with self.db.transaction() as cur:
            if not self.tables.has_table(cur, db, table):
                return "none"
            if position is not None:
                cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self.tables.qualified_name(db, table)} "
                            f"WHERE {self.tables.quote(POSITION_COLUMN)} > %s)", [position])
                if cur.fetchone()[0]:
                    return "none"
            if self.tables.has_table(cur, to_db, to_table):
                done = "dropped"
            else:
                self.tables.whole_turn(cur, name)
                cur.execute(self.tables.rename_sql(db, table, to_db, to_table))
                cur.execute(f"UPDATE {self.tables.bookkeeping(TABLES)} SET table_name = %s, source_db = %s, "
                            "source_table = %s WHERE table_name = %s", [to_name, to_db, to_table, name])
                cur.execute(f"UPDATE {self.tables.bookkeeping(TOMBSTONES)} SET table_name = %s WHERE table_name = %s",
                            [to_name, name])
                done = "renamed"
        if done == "dropped":
            self.drop_table(db, table)
        return done

    def applied_positions(self) -> dict[tuple[str, str], str]:
        """``{(db, table): the highest position applied}`` of every sink table that has rows."""
        out: dict[tuple[str, str], str] = {}
        with self.db.transaction() as cur:
            for _, db, table in self.tables.registered(cur):
                cur.execute(f"SELECT max({self.tables.quote(POSITION_COLUMN)}) "
                            f"FROM {self.tables.qualified_name(db, table)}")
                top = cur.fetchone()[0]
                if top:
                    out[(db, table)] = str(top)
        return out

    def tombstones(self, db: str, table: str) -> list[tuple[str, str]]:
        """``(key_json, position)`` of the table's tombstones, per key its newest (a sink may
        keep a key's older ones until they are purged), in position order (for tests and tools)."""
        with self.db.transaction() as cur:
            cur.execute(f"SELECT key_json, max(position) AS top FROM {self.tables.bookkeeping(TOMBSTONES)} "
                        "WHERE table_name = %s GROUP BY key_json ORDER BY top, key_json",
                        [self.tables.table_name(db, table)])
            return [(k, p) for k, p in cur.fetchall()]
