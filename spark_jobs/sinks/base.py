"""What the PostgreSQL and MySQL sinks share: table naming, the layout and plan caches, the
connection's lifecycle, the transaction around every statement, the frame of ``apply`` and
the bookkeeping-table maintenance.

A sink holds one connection, opened on first use and again after it was closed or lost; a
sink pickles without it (its constructor's arguments only), so Spark ships sinks to its
executors and each opens its own.  Use one sink object per thread.

Every statement runs in a transaction (:meth:`TableSinkBase._transaction`): committed when
the block ends, rolled back when it raises, and a connection the error broke is dropped
(the next call opens a new one).  The driver's errors of a database out of reach
(``UNAVAILABLE_ERRORS``, narrowed by :meth:`TableSinkBase.out_of_reach`: the server went
away, the connection was lost or could not be made, a deadlock) leave the sink as
:class:`~spark_jobs.errors.SinkUnavailable`: the merge job then fails the batch, to be
retried, instead of applying it record by record and dead-lettering what the sink refuses.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.batch import ApplyResult, reduce_for_layout
from spark_jobs.sinks.interface import RowSink
from spark_jobs.sinks.layout import TableLayout, table_layout
from spark_jobs.sinks.naming import POSITION_COLUMN, TABLES, TOMBSTONES, sink_table_name

log = logging.getLogger(__name__)


@dataclass
class TablePlan:
    """What ``apply`` needs for one version of one sink table, built once (subclasses add
    their statements)."""

    signature: tuple
    name: str
    qualified: str
    layout: TableLayout


class TableSinkBase(RowSink):
    """A row sink (:class:`~spark_jobs.sinks.interface.RowSink`) of source tables into tables
    of one database schema.

    Subclasses set ``MAX_IDENT`` (the database's identifier limit in bytes), ``SETTINGS``
    (their constructor's argument names), ``DRIVER_ERROR`` and ``UNAVAILABLE_ERRORS`` (the
    driver's exceptions), call ``super().__init__(serialize)``, and implement the hooks:
    ``_connect``, ``_is_open``, ``_drop_broken``, ``_transaction_cursor`` (the connection),
    ``_quote``, ``qualified_name``, ``_bookkeeping``, ``_registered``, ``_has_table`` (names
    and catalogue), ``_prepare`` (DDL and plan) and ``_write`` (one batch's statements).
    """

    MAX_IDENT = 64
    #: The constructor's arguments, by name: what a pickled sink keeps (never its connection).
    SETTINGS: tuple[str, ...] = ()
    #: The driver's base exception (``close`` ignores it: the connection is dropped anyway).
    DRIVER_ERROR: type[Exception] = Exception
    #: The driver's exceptions of a database out of reach: raised as :class:`SinkUnavailable`.
    UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = ()

    def __init__(self, serialize: bool) -> None:
        self.serialize = serialize
        self._conn: Any = None
        self._plans: dict[tuple[str, str], TablePlan] = {}
        self._layouts: dict[tuple[str, tuple], TableLayout] = {}
        #: ALTER statements the last ensure_table ran (empty when the table already matched).
        self.last_alters: list[str] = []
        #: Seconds spent waiting for tables' turns (``serialize``), summed since the sink was made.
        self.turn_wait_s = 0.0
        #: The Kafka partition whose turn the next writes take instead of the table's whole
        #: turn (a merge task whose records are all where Kafka's partitioner puts their
        #: keys, :mod:`common.kafka.partitioner`), where the sink has such turns
        #: (:class:`~spark_jobs.sinks.postgres.PostgresSink`); None: the whole turn.
        self.turn_partition: int | None = None

    # ------------------------------------------------------------------ lifecycle
    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in self.SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __enter__(self) -> "TableSinkBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connection(self) -> Any:
        """The sink's connection, opened when there is none or it was closed."""
        if self._conn is None or not self._is_open(self._conn):
            try:
                self._conn = self._connect()
            except self.UNAVAILABLE_ERRORS as exc:
                if not self.out_of_reach(exc):
                    raise
                raise self._unavailable(exc) from exc
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except self.DRIVER_ERROR:
                pass
            finally:
                self._conn = None

    def out_of_reach(self, exc: Exception) -> bool:
        """Whether ``exc`` (one of ``UNAVAILABLE_ERRORS``) says the database is out of reach
        (retry the batch) rather than that it refuses this data (dead-letter the record)."""
        return True

    def _unavailable(self, exc: Exception) -> SinkUnavailable:
        return SinkUnavailable(f"{type(self).__name__}: {type(exc).__name__}: {exc}")

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Drop the connection when the block broke it; a database out of reach raises
        :class:`SinkUnavailable`."""
        try:
            yield
        except self.UNAVAILABLE_ERRORS as exc:
            self._drop_broken()
            if not self.out_of_reach(exc):
                raise
            raise self._unavailable(exc) from exc
        except BaseException:
            self._drop_broken()
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor in a transaction: committed when the block ends, rolled back (and a
        broken connection dropped) when it raises."""
        conn = self.connection()
        with self._guarded(), self._transaction_cursor(conn) as cur:
            yield cur

    def _connect(self) -> Any:  # pragma: no cover - abstract
        """A new connection, set up for the sink's statements."""
        raise NotImplementedError

    def _is_open(self, conn: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _drop_broken(self) -> None:  # pragma: no cover - abstract
        """After an error: end the transaction, and close the connection when it is broken."""
        raise NotImplementedError

    def _transaction_cursor(self, conn: Any) -> contextlib.AbstractContextManager:  # pragma: no cover - abstract
        """A context manager: a cursor in a new transaction of ``conn``, committed on exit
        without an error."""
        raise NotImplementedError

    # ------------------------------------------------------------------ names
    def table_name(self, db: str, table: str) -> str:
        """The sink table name of ``db.table`` (unquoted): ``<db>__<table>``, shortened to fit."""
        return sink_table_name(db, table, self.MAX_IDENT)

    def _quote(self, name: str) -> str:  # pragma: no cover - abstract
        """``name`` as a quoted identifier."""
        raise NotImplementedError

    def qualified_name(self, db: str, table: str) -> str:  # pragma: no cover - abstract
        """The quoted, qualified sink table of ``db.table``."""
        raise NotImplementedError

    def _bookkeeping(self, name: str) -> str:  # pragma: no cover - abstract
        """The quoted, qualified bookkeeping table ``name`` (:data:`TABLES`, :data:`TOMBSTONES`)."""
        raise NotImplementedError

    def _registered(self, cur: Any) -> list[tuple[str, str, str]]:  # pragma: no cover - abstract
        """``(sink table, source db, source table)`` of every registered table, by sink table."""
        raise NotImplementedError

    def _has_table(self, cur: Any, db: str, table: str) -> bool:  # pragma: no cover - abstract
        """Whether the sink holds a table of ``db.table``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ DDL
    def _layout(self, value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
        text = value_schema if isinstance(value_schema, str) else json.dumps(value_schema, sort_keys=True, default=str)
        ck = (text, tuple(key_columns))
        layout = self._layouts.get(ck)
        if layout is None:
            if len(self._layouts) > 256:
                self._layouts.clear()
            layout = self._layouts[ck] = table_layout(value_schema, key_columns)
        return layout

    def ensure_table(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], *,
                     rekey: bool = False) -> str:
        """Create the sink table of ``db.table`` (or add the columns a newer schema has);
        ``rekey``: ``key_columns`` is the table's newest key, so a sink table with another key
        is dropped and created again (else that is a :class:`SinkError`).

        Returns the quoted, qualified table name.
        """
        return self._ensure(db, table, self._layout(value_schema, key_columns), rekey).qualified

    def _ensure(self, db: str, table: str, layout: TableLayout, rekey: bool = False) -> Any:
        """The plan of ``db.table`` for ``layout``: the one built before for the same
        layout, or a new one (the table created or altered first)."""
        plan = self._plans.get((db, table))
        if plan is None or plan.signature != layout.signature():
            plan = self._plans[(db, table)] = self._prepare(db, table, layout, rekey)
        return plan

    def _prepare(self, db: str, table: str, layout: TableLayout, rekey: bool = False
                 ) -> Any:  # pragma: no cover - abstract
        """Create or alter the sink table of ``db.table`` for ``layout``; its new plan."""
        raise NotImplementedError

    def _check_registration(self, cur: Any, name: str, qualified: str, db: str, table: str,
                            key_names: list[str], rekey: bool = False) -> bool:
        """Whether sink table ``name`` is registered; :class:`SinkError` when it mirrors another
        source table, or has another key and ``rekey`` is off (on: the table is dropped, to be
        created again with the new key; the caller holds the DDL lock)."""
        cur.execute(f"SELECT source_db, source_table, key_columns FROM {self._bookkeeping(TABLES)} "
                    "WHERE table_name = %s", [name])
        reg = cur.fetchone()
        if reg is None:
            return False
        if (reg[0], reg[1]) != (db, table):
            raise SinkError(f"sink table {qualified} already mirrors {reg[0]}.{reg[1]}, not {db}.{table}")
        if json.loads(reg[2]) != key_names:
            if not rekey:
                raise SinkError(f"sink table {qualified} has key {reg[2]}, the schema now says "
                                f"{json.dumps(key_names)}: a changed primary key needs the sink table rebuilt")
            log.warning("%s.%s: the primary key changed from %s to %s: sink table %s is dropped and created again "
                        "with the new key (the producer snapshots the table after such DDL)", db, table, reg[2],
                        json.dumps(key_names), qualified)
            cur.execute(f"DROP TABLE IF EXISTS {qualified}")
            for book in (TABLES, TOMBSTONES):
                cur.execute(f"DELETE FROM {self._bookkeeping(book)} WHERE table_name = %s", [name])
            return False
        return True

    def _alter_and_register(self, cur: Any, alters: list[str], registered: bool, name: str, db: str, table: str,
                            key_names: list[str]) -> None:
        """Run the ``alters`` (kept as ``last_alters``); unless ``registered``, record that sink
        table ``name`` mirrors ``db.table`` with key ``key_names`` (every ensure holds the DDL
        lock: nobody registers it meanwhile)."""
        for stmt in alters:
            cur.execute(stmt)
        self.last_alters = alters
        if registered:
            return
        cur.execute(f"INSERT INTO {self._bookkeeping(TABLES)} (table_name, source_db, source_table, key_columns) "
                    "VALUES (%s, %s, %s, %s)", [name, db, table, json.dumps(key_names)])

    # ------------------------------------------------------------------ apply
    def apply(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
              records: Iterable[Any], *, rekey: bool = False) -> ApplyResult:
        """Apply one batch of changes of ``db.table``; see the sink's module docstring
        (``rekey``: :meth:`ensure_table`)."""
        layout = self._layout(value_schema, key_columns)
        plan = self._ensure(db, table, layout, rekey)
        reduced = reduce_for_layout(records, layout)
        result = ApplyResult(superseded=reduced.superseded)
        if not reduced.upserts and not reduced.deletes:
            return result
        with self._transaction() as cur:
            lowest = min(pairs[0][0].position for pairs in (reduced.upserts, reduced.deletes) if pairs)  # (rising)
            self._write_reduced(cur, plan, lowest, reduced.upserts, reduced.deletes, result)
        return result

    def _write_reduced(self, cur: Any, plan: Any, lowest: str, upserts: list, deletes: list,
                       result: ApplyResult) -> None:
        """A reduced batch (``(change, key values)`` pairs, lowest position ``lowest``)
        written in :meth:`apply`'s transaction: the table's turn taken, then :meth:`_write`.
        (A sink that can prepare part of the write before the turn overrides this.)"""
        self._write(cur, plan, upserts, deletes, self._begin_write(cur, plan, lowest), result)

    def apply_encoded(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[Any], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """:meth:`apply` for changes whose row images are still Avro bytes
        (:class:`~spark_jobs.sinks.batch.EncodedChange`, one per key: the caller reduced
        them, all of envelope writer schema ``writer_schema``, read as ``value_schema``
        without resolution), written without decoding them into
        values; None when the sink does not (this one; :class:`PostgresSink` does for the
        column kinds :mod:`~spark_jobs.sinks.copy_text` writes): the caller then decodes
        them and calls :meth:`apply`.

        ``fresh``: the first ``fresh`` changes are upserts of keys whose first record in the
        caller's batch was an insert, so the sink most likely holds no row of them (it may,
        after a replay or when a key's records were in two partitions).  A sink may try them
        as plain inserts first; it must give the same result as upserting them."""
        return None

    def _begin_write(self, cur: Any, plan: Any, lowest: str) -> bool:
        """In the apply's transaction: the table's turn (``serialize``), and whether the
        tombstone guard is needed for a batch whose lowest position is ``lowest``.

        Only a tombstone at or above a record's position can stop it (every comparison is
        strict); with none at or above the batch's lowest position, the batch is applied
        without the guard (no key hashes, no anti-join), and the tombstones it leaves below
        its rows stay until purged (harmless: see :meth:`purge_tombstones`).  Indexed by
        (table_name, position)."""
        if self.serialize:
            t0 = time.monotonic()
            registered = self._take_turn(cur, plan.name)
            self.turn_wait_s += time.monotonic() - t0
            if not registered:
                raise SinkError(f"sink table {plan.qualified} is not registered in {TABLES}")
        return self._has_tombstones(cur, plan, lowest)

    def _has_tombstones(self, cur: Any, plan: Any, lowest: str) -> bool:
        """Whether the table has a tombstone at or above position ``lowest`` (the answer
        holds while the table's turn is taken: :meth:`_begin_write`)."""
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self._bookkeeping(TOMBSTONES)} WHERE table_name = %s "
                    "AND position >= %s)", [plan.name, lowest])
        return bool(cur.fetchone()[0])

    def _take_turn(self, cur: Any, name: str) -> bool:
        """An apply's turn of sink table ``name``: here always :meth:`_whole_turn` (a sink
        with turns per partition overrides this, see ``turn_partition``); whether the table
        is registered."""
        return self._whole_turn(cur, name)

    def _whole_turn(self, cur: Any, name: str) -> bool:
        """Lock sink table ``name``'s row in :data:`TABLES` (``SELECT ... FOR UPDATE``), so
        writers of one table take turns; whether the table is registered."""
        cur.execute(f"SELECT 1 FROM {self._bookkeeping(TABLES)} WHERE table_name = %s FOR UPDATE", [name])
        return cur.fetchone() is not None

    def _write(self, cur: Any, plan: Any, upserts: list, deletes: list, has_tombstones: bool,
               result: ApplyResult) -> None:  # pragma: no cover - abstract
        """Write a reduced batch (``(change, key values)`` pairs) in the open transaction,
        counting into ``result`` (what the default :meth:`_write_reduced` calls once the
        table's turn is taken)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ maintenance
    def purge_tombstones(self, before_position: str, db: str | None = None, table: str | None = None, *,
                         wanted: Callable[[str, str], bool] | None = None) -> int:
        """Drop tombstones older than ``before_position`` (of one table, of the registered
        tables ``wanted(source db, source table)`` says, or all); returns how many.

        Safe once no record below ``before_position`` can be applied again (the merge job
        calls it with such a horizon: :mod:`spark_jobs.tombstone_horizon`).  A tombstone
        below its key's row (left by a batch applied without the guard, see :meth:`apply`)
        stops nothing the row's own position would not stop: a tombstone matters only while
        a record of its key below its position can still come, and only when the key has
        no row.
        """
        sql = f"DELETE FROM {self._bookkeeping(TOMBSTONES)} WHERE position < %s"
        if wanted is None:
            args: list[Any] = [before_position]
            if db is not None and table is not None:
                sql += " AND table_name = %s"
                args.append(self.table_name(db, table))
            with self._transaction() as cur:
                cur.execute(sql, args)
                return cur.rowcount
        # ``wanted(source db, source table)``: of the registered sink tables, those to purge
        n = 0
        with self._transaction() as cur:
            for name, source_db, source_table in self._registered(cur):
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
        conds = "".join(f" AND {self._quote(c)} = %s" for c in (where or {}))
        with self._transaction() as cur:
            if not self._has_table(cur, db, table):
                return 0
            self._whole_turn(cur, self.table_name(db, table))  # the writers' lock: ``apply`` waits
            cur.execute(f"DELETE FROM {self.qualified_name(db, table)} WHERE {self._quote(POSITION_COLUMN)} < %s"
                        + conds, [position, *(where or {}).values()])
            return cur.rowcount

    def registered_tables(self) -> list[tuple[str, str, str]]:
        """``(sink table, source db, source table)`` of every sink table, by sink table."""
        with self._transaction() as cur:
            return self._registered(cur)

    def forget_plans(self) -> None:
        """Forget the tables prepared so far (another process dropped or renamed some)."""
        self._plans.clear()

    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        """Drop the sink table of ``db.table`` and its bookkeeping (DROP TABLE at the source,
        ``drop_table: drop``); whether there was one.  With ``below`` (the DROP's position)
        only the rows below it go, and the table only when nothing is left: rows above it
        belong to a table created again under the same name."""
        name = self.table_name(db, table)
        with self._transaction() as cur:
            if not self._has_table(cur, db, table):
                return False
            self._whole_turn(cur, name)
            qualified = self.qualified_name(db, table)
            if below is not None:
                cur.execute(f"DELETE FROM {qualified} WHERE {self._quote(POSITION_COLUMN)} < %s", [below])
                cur.execute(f"DELETE FROM {self._bookkeeping(TOMBSTONES)} WHERE table_name = %s AND position < %s",
                            [name, below])
                cur.execute(f"SELECT EXISTS (SELECT 1 FROM {qualified})")
                if cur.fetchone()[0]:
                    return True
            cur.execute(f"DROP TABLE IF EXISTS {qualified}")
            for book in (TABLES, TOMBSTONES):
                cur.execute(f"DELETE FROM {self._bookkeeping(book)} WHERE table_name = %s", [name])
        self._plans.pop((db, table), None)
        return True

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        """The sink table of ``db.table`` becomes that of ``to_db.to_table`` (RENAME TABLE at
        the source, ``rename_table: rename``).  When the new one exists already (its rows
        came first), the old one is dropped instead: the producer snapshots a renamed table,
        so the new sink table fills either way.  With ``position`` (the RENAME's), a sink
        table holding a row written after it is left as it is: it is a table created again
        under the old name (a RENAME read long after, from Debezium's schema change topic).
        Returns what was done: ``renamed``, ``dropped`` or ``none``."""
        name, to_name = self.table_name(db, table), self.table_name(to_db, to_table)
        with self._transaction() as cur:
            if not self._has_table(cur, db, table):
                return "none"
            if position is not None:
                cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self.qualified_name(db, table)} "
                            f"WHERE {self._quote(POSITION_COLUMN)} > %s)", [position])
                if cur.fetchone()[0]:
                    return "none"
            if self._has_table(cur, to_db, to_table):
                done = "dropped"
            else:
                self._whole_turn(cur, name)
                cur.execute(self._rename_sql(db, table, to_db, to_table))
                cur.execute(f"UPDATE {self._bookkeeping(TABLES)} SET table_name = %s, source_db = %s, "
                            "source_table = %s WHERE table_name = %s", [to_name, to_db, to_table, name])
                cur.execute(f"UPDATE {self._bookkeeping(TOMBSTONES)} SET table_name = %s WHERE table_name = %s",
                            [to_name, name])
                done = "renamed"
        if done == "dropped":
            self.drop_table(db, table)
        self._plans.pop((db, table), None)
        self._plans.pop((to_db, to_table), None)
        return done

    def _rename_sql(self, db: str, table: str, to_db: str, to_table: str) -> str:  # pragma: no cover - abstract
        """The statement that renames the sink table of ``db.table`` to that of ``to_db.to_table``."""
        raise NotImplementedError

    def applied_positions(self) -> dict[tuple[str, str], str]:
        """``{(db, table): the highest position applied}`` of every sink table that has rows."""
        out: dict[tuple[str, str], str] = {}
        with self._transaction() as cur:
            for _, db, table in self._registered(cur):
                cur.execute(f"SELECT max({self._quote(POSITION_COLUMN)}) FROM {self.qualified_name(db, table)}")
                top = cur.fetchone()[0]
                if top:
                    out[(db, table)] = str(top)
        return out

    def tombstones(self, db: str, table: str) -> list[tuple[str, str]]:
        """``(key_json, position)`` of the table's tombstones, per key its newest (a sink may
        keep a key's older ones until they are purged), in position order (for tests and tools)."""
        with self._transaction() as cur:
            cur.execute(f"SELECT key_json, max(position) AS top FROM {self._bookkeeping(TOMBSTONES)} "
                        "WHERE table_name = %s GROUP BY key_json ORDER BY top, key_json", [self.table_name(db, table)])
            return [(k, p) for k, p in cur.fetchall()]
