"""What the PostgreSQL and MySQL sinks share: table naming, the layout and plan caches, the
DDL and the frame of ``apply``; on the connection's lifecycle and the transaction around
every statement (:mod:`~spark_jobs.sinks.sink_connection`) and the maintenance of the
bookkeeping tables (:mod:`~spark_jobs.sinks.table_maintenance`).

A sink holds one connection, opened on first use and again after it was closed or lost; a
sink pickles without it (its constructor's arguments only), so Spark ships sinks to its
executors and each opens its own.  Use one sink object per thread.

Every statement runs in a transaction (:meth:`SinkConnection._transaction
<spark_jobs.sinks.sink_connection.SinkConnection._transaction>`): committed when the block
ends, rolled back when it raises, and a connection the error broke is dropped (the next
call opens a new one).  The driver's errors of a database out of reach
(``UNAVAILABLE_ERRORS``, narrowed by :meth:`SinkConnection.out_of_reach
<spark_jobs.sinks.sink_connection.SinkConnection.out_of_reach>`: the server went away, the
connection was lost or could not be made, a deadlock) leave the sink as
:class:`~spark_jobs.errors.SinkUnavailable`: the merge job then fails the batch, to be
retried, instead of applying it record by record and dead-lettering what the sink refuses.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from spark_jobs.errors import SinkError
from spark_jobs.sinks.batch import ApplyResult, reduce_for_layout
from spark_jobs.sinks.interface import RowSink
from spark_jobs.sinks.layout import TableLayout, cached_layout
from spark_jobs.sinks.naming import TABLES, TOMBSTONES, sink_table_name
from spark_jobs.sinks.sink_connection import SinkConnection
from spark_jobs.sinks.table_maintenance import TableMaintenance

log = logging.getLogger(__name__)


@dataclass
class TablePlan:
    """What ``apply`` needs for one version of one sink table, built once (subclasses add
    their statements)."""

    signature: tuple
    name: str
    qualified: str
    layout: TableLayout


class TableSinkBase(SinkConnection, TableMaintenance, RowSink):
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
        return cached_layout(self._layouts, value_schema, key_columns)

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

    def forget_plans(self) -> None:
        """Forget the tables prepared so far (another process dropped or renamed some)."""
        self._plans.clear()
