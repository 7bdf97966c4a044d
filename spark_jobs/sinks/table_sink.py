"""What the PostgreSQL and MySQL sinks share: :class:`TableSink`, a row sink made of three
parts passed in, and the frame of ``apply`` over them.

- the **connection** (:class:`~spark_jobs.sinks.sink_connection.SinkConnection`): one
  connection, opened on first use and again after it was closed or lost, every statement in a
  transaction; it pickles without it, so Spark ships sinks to its executors and each opens
  its own (use one sink object per thread);
- the **tables** (:class:`SqlTables`): the database's names, catalogue and DDL (a table
  made or altered and registered, its plan), and the table's turn;
- the **writer** (:class:`TableWriter`): a reduced batch's statements (PostgreSQL: COPY into
  stage tables, :mod:`~spark_jobs.sinks.postgres_copy`; MySQL: multi-row INSERTs).

Every statement runs in a transaction (:meth:`SinkConnection.transaction
<spark_jobs.sinks.sink_connection.SinkConnection.transaction>`): committed when the block
ends, rolled back when it raises, and a connection the error broke is dropped (the next
call opens a new one).  The driver's errors of a database out of reach
(``UNAVAILABLE_ERRORS``, narrowed by :meth:`SinkConnection.out_of_reach
<spark_jobs.sinks.sink_connection.SinkConnection.out_of_reach>`: the server went away, the
connection was lost or could not be made, a deadlock) leave the sink as
:class:`~spark_jobs.errors.SinkUnavailable`: the merge job then fails the batch, to be
retried, instead of applying it record by record and dead-lettering what the sink refuses.
The driver's table operations (markers, DROP and RENAME, tombstones) are
:class:`~spark_jobs.sinks.table_maintenance.TableMaintenance`'s, on the same parts.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

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
    """What ``apply`` needs for one version of one sink table, built once (a database's
    plan adds its statements)."""

    signature: tuple
    name: str
    qualified: str
    layout: TableLayout


class SqlTables:
    """A database's sink tables: their names, the catalogue, the DDL that makes or alters a
    table and registers it (its plan built), and a table's turn.  A database's own
    (:class:`~spark_jobs.sinks.postgres.PostgresTables`,
    :class:`~spark_jobs.sinks.mysql.MySQLTables`) gives :meth:`quote`, :meth:`qualified_name`,
    :meth:`bookkeeping`, :meth:`registered`, :meth:`has_table`, :meth:`rename_sql` and
    :meth:`prepare`, on ``db`` (its connection)."""

    #: The database's identifier limit in bytes.
    MAX_IDENT = 64

    def __init__(self, db: SinkConnection) -> None:
        self.db = db
        #: ALTER statements the last :meth:`prepare` ran (empty when the table already matched).
        self.last_alters: list[str] = []

    def table_name(self, db: str, table: str) -> str:
        """The sink table name of ``db.table`` (unquoted): ``<db>__<table>``, shortened to fit."""
        return sink_table_name(db, table, self.MAX_IDENT)

    def quote(self, name: str) -> str:  # pragma: no cover - abstract
        """``name`` as a quoted identifier."""
        raise NotImplementedError

    def qualified_name(self, db: str, table: str) -> str:  # pragma: no cover - abstract
        """The quoted, qualified sink table of ``db.table``."""
        raise NotImplementedError

    def bookkeeping(self, name: str) -> str:  # pragma: no cover - abstract
        """The quoted, qualified bookkeeping table ``name`` (:data:`TABLES`, :data:`TOMBSTONES`)."""
        raise NotImplementedError

    def registered(self, cur: Any) -> list[tuple[str, str, str]]:  # pragma: no cover - abstract
        """``(sink table, source db, source table)`` of every registered table, by sink table."""
        raise NotImplementedError

    def has_table(self, cur: Any, db: str, table: str) -> bool:  # pragma: no cover - abstract
        """Whether the sink holds a table of ``db.table``."""
        raise NotImplementedError

    def rename_sql(self, db: str, table: str, to_db: str, to_table: str) -> str:  # pragma: no cover - abstract
        """The statement that renames the sink table of ``db.table`` to that of ``to_db.to_table``."""
        raise NotImplementedError

    def prepare(self, db: str, table: str, layout: TableLayout, rekey: bool = False
                ) -> Any:  # pragma: no cover - abstract
        """Create or alter the sink table of ``db.table`` for ``layout`` (``rekey``:
        :meth:`TableSink.ensure_table`); its new plan."""
        raise NotImplementedError

    def take_turn(self, cur: Any, name: str, partition: int | None) -> bool:
        """An apply's turn of sink table ``name``: here always :meth:`whole_turn` (a database
        with turns per Kafka partition takes ``partition``'s, see
        :attr:`~spark_jobs.sinks.interface.RowSink.turn_partition`); whether the table is registered."""
        return self.whole_turn(cur, name)

    def whole_turn(self, cur: Any, name: str) -> bool:
        """Lock sink table ``name``'s row in :data:`TABLES` (``SELECT ... FOR UPDATE``), so
        writers of one table take turns; whether the table is registered."""
        cur.execute(f"SELECT 1 FROM {self.bookkeeping(TABLES)} WHERE table_name = %s FOR UPDATE", [name])
        return cur.fetchone() is not None

    def has_tombstones(self, cur: Any, plan: Any, lowest: str) -> bool:
        """Whether the table has a tombstone at or above position ``lowest`` (the answer
        holds while the table's turn is taken: :meth:`TableSink.begin_write`)."""
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {self.bookkeeping(TOMBSTONES)} WHERE table_name = %s "
                    "AND position >= %s)", [plan.name, lowest])
        return bool(cur.fetchone()[0])

    def check_registration(self, cur: Any, name: str, qualified: str, db: str, table: str,
                           key_names: list[str], rekey: bool = False) -> bool:
        """Whether sink table ``name`` is registered; :class:`SinkError` when it mirrors another
        source table, or has another key and ``rekey`` is off (on: the table is dropped, to be
        created again with the new key; the caller holds the DDL lock)."""
        cur.execute(f"SELECT source_db, source_table, key_columns FROM {self.bookkeeping(TABLES)} "
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
                cur.execute(f"DELETE FROM {self.bookkeeping(book)} WHERE table_name = %s", [name])
            return False
        return True

    def alter_and_register(self, cur: Any, alters: list[str], registered: bool, name: str, db: str, table: str,
                           key_names: list[str]) -> None:
        """Run the ``alters`` (kept as :attr:`last_alters`); unless ``registered``, record that
        sink table ``name`` mirrors ``db.table`` with key ``key_names`` (every prepare holds the
        DDL lock: nobody registers it meanwhile)."""
        for stmt in alters:
            cur.execute(stmt)
        self.last_alters = alters
        if registered:
            return
        cur.execute(f"INSERT INTO {self.bookkeeping(TABLES)} (table_name, source_db, source_table, key_columns) "
                    "VALUES (%s, %s, %s, %s)", [name, db, table, json.dumps(key_names)])


class TableWriter:
    """A reduced batch's statements in a database (:class:`TableSink` hands them the open
    transaction; a database's own: :class:`~spark_jobs.sinks.postgres_copy.PostgresCopyWriter`,
    :class:`~spark_jobs.sinks.mysql.MySQLWriter`)."""

    def write_reduced(self, sink: "TableSink", cur: Any, plan: Any, lowest: str, upserts: list, deletes: list,
                      result: ApplyResult) -> None:
        """A reduced batch (``(change, key values)`` pairs, lowest position ``lowest``)
        written in :meth:`TableSink.apply`'s transaction: the table's turn taken
        (:meth:`TableSink.begin_write`), then :meth:`write`.  (A writer that can prepare part
        of the write before the turn does this otherwise.)"""
        self.write(cur, plan, upserts, deletes, sink.begin_write(cur, plan, lowest), result)

    def write(self, cur: Any, plan: Any, upserts: list, deletes: list, has_tombstones: bool,
              result: ApplyResult) -> None:  # pragma: no cover - abstract
        """Write a reduced batch in the open transaction under the table's turn, counting into ``result``."""
        raise NotImplementedError

    def apply_encoded(self, sink: "TableSink", db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[Any], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """:meth:`TableSink.apply_encoded`; None: the writer does not (the caller decodes)."""
        return None


class TableSink(RowSink):
    """A row sink (:class:`~spark_jobs.sinks.interface.RowSink`) of source tables into tables
    of one database schema: a connection, the database's tables and its writer passed in
    (see the module docstring); :class:`~spark_jobs.sinks.postgres.PostgresSink` and
    :class:`~spark_jobs.sinks.mysql.MySQLSink` build them from their settings."""

    def __init__(self, db: SinkConnection, tables: SqlTables, writer: TableWriter, *, serialize: bool) -> None:
        self.db = db
        self.tables = tables
        self.writer = writer
        self.maintenance = TableMaintenance(db, tables)
        self.serialize = serialize
        self._plans: dict[tuple[str, str], TablePlan] = {}
        self._layouts: dict[tuple[str, tuple], TableLayout] = {}
        #: Seconds spent waiting for tables' turns (``serialize``), summed since the sink was made.
        self.turn_wait_s = 0.0
        #: The Kafka partition whose turn the next writes take instead of the table's whole
        #: turn (a merge task whose records are all where Kafka's partitioner puts their
        #: keys, :mod:`common.kafka.partitioner`), where the sink has such turns
        #: (:class:`~spark_jobs.sinks.postgres.PostgresSink`); None: the whole turn.
        self.turn_partition: int | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_plans": {}, "_layouts": {}, "turn_wait_s": 0.0, "turn_partition": None}

    def __enter__(self) -> "TableSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ the connection and names
    def connection(self) -> Any:
        """The sink's connection, opened when there is none or it was closed."""
        return self.db.connection()

    def close(self) -> None:
        self.db.close()

    def table_name(self, db: str, table: str) -> str:
        """The sink table name of ``db.table`` (unquoted)."""
        return self.tables.table_name(db, table)

    def qualified_name(self, db: str, table: str) -> str:
        """The quoted, qualified sink table of ``db.table``."""
        return self.tables.qualified_name(db, table)

    @property
    def last_alters(self) -> list[str]:
        """ALTER statements the last :meth:`ensure_table` ran (empty when the table already matched)."""
        return self.tables.last_alters

    # ------------------------------------------------------------------ DDL
    def layout(self, value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
        """The layout of a value schema and key (cached per sink)."""
        return cached_layout(self._layouts, value_schema, key_columns)

    def ensure_table(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], *,
                     rekey: bool = False) -> str:
        """Create the sink table of ``db.table`` (or add the columns a newer schema has);
        ``rekey``: ``key_columns`` is the table's newest key, so a sink table with another key
        is dropped and created again (else that is a :class:`SinkError`).

        Returns the quoted, qualified table name.
        """
        return self.plan(db, table, self.layout(value_schema, key_columns), rekey).qualified

    def plan(self, db: str, table: str, layout: TableLayout, rekey: bool = False) -> Any:
        """The plan of ``db.table`` for ``layout``: the one built before for the same
        layout, or a new one (the table created or altered first)."""
        plan = self._plans.get((db, table))
        if plan is None or plan.signature != layout.signature():
            plan = self._plans[(db, table)] = self.tables.prepare(db, table, layout, rekey)
        return plan

    def prepared_plan(self, db: str, table: str) -> Any:
        """The plan of ``db.table`` built last (None: none yet; for tests and tools)."""
        return self._plans.get((db, table))

    # ------------------------------------------------------------------ apply
    def apply(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
              records: Iterable[Any], *, rekey: bool = False) -> ApplyResult:
        """Apply one batch of changes of ``db.table``; see the sink's module docstring
        (``rekey``: :meth:`ensure_table`)."""
        layout = self.layout(value_schema, key_columns)
        plan = self.plan(db, table, layout, rekey)
        reduced = reduce_for_layout(records, layout)
        result = ApplyResult(superseded=reduced.superseded)
        if not reduced.upserts and not reduced.deletes:
            return result
        with self.db.transaction() as cur:
            lowest = min(pairs[0][0].position for pairs in (reduced.upserts, reduced.deletes) if pairs)  # (rising)
            self.writer.write_reduced(self, cur, plan, lowest, reduced.upserts, reduced.deletes, result)
        return result

    def apply_encoded(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[Any], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """:meth:`apply` for changes whose row images are still Avro bytes
        (:class:`~spark_jobs.sinks.batch.EncodedChange`, one per key: the caller reduced
        them, all of envelope writer schema ``writer_schema``, read as ``value_schema``
        without resolution), written without decoding them into values, by the writer
        (:meth:`TableWriter.apply_encoded`); None when it does not (MySQL's; PostgreSQL's
        for the column kinds :mod:`~spark_jobs.sinks.copy_text` does not write): the caller
        then decodes them and calls :meth:`apply`.

        ``fresh``: the first ``fresh`` changes are upserts of keys whose first record in the
        caller's batch was an insert, so the sink most likely holds no row of them (it may,
        after a replay or when a key's records were in two partitions).  A sink may try them
        as plain inserts first; it must give the same result as upserting them."""
        return self.writer.apply_encoded(self, db, table, value_schema, key_columns, changes, writer_schema,
                                         rekey=rekey, fresh=fresh)

    def begin_write(self, cur: Any, plan: Any, lowest: str) -> bool:
        """In the apply's transaction: the table's turn (``serialize``), and whether the
        tombstone guard is needed for a batch whose lowest position is ``lowest``.

        Only a tombstone at or above a record's position can stop it (every comparison is
        strict); with none at or above the batch's lowest position, the batch is applied
        without the guard (no key hashes, no anti-join), and the tombstones it leaves below
        its rows stay until purged (harmless: see :meth:`purge_tombstones`).  Indexed by
        (table_name, position)."""
        if self.serialize:
            t0 = time.monotonic()
            registered = self.tables.take_turn(cur, plan.name, self.turn_partition)
            self.turn_wait_s += time.monotonic() - t0
            if not registered:
                raise SinkError(f"sink table {plan.qualified} is not registered in {TABLES}")
        return self.tables.has_tombstones(cur, plan, lowest)

    def forget_plans(self) -> None:
        """Forget the tables prepared so far (another process dropped or renamed some)."""
        self._plans.clear()

    # ------------------------------------------------------------------ the driver's table operations
    def purge_tombstones(self, before_position: str, db: str | None = None, table: str | None = None, *,
                         wanted: Callable[[str, str], bool] | None = None) -> int:
        return self.maintenance.purge_tombstones(before_position, db, table, wanted=wanted)

    def delete_below(self, db: str, table: str, position: str, where: Mapping[str, str] | None = None) -> int:
        return self.maintenance.delete_below(db, table, position, where)

    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        done = self.maintenance.drop_table(db, table, below)
        self._plans.pop((db, table), None)
        return done

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        done = self.maintenance.rename_table(db, table, to_db, to_table, position)
        self._plans.pop((db, table), None)
        self._plans.pop((to_db, to_table), None)
        return done

    def applied_positions(self) -> dict[tuple[str, str], str]:
        return self.maintenance.applied_positions()

    def registered_tables(self) -> list[tuple[str, str, str]]:
        """``(sink table, source db, source table)`` of every sink table, by sink table."""
        return self.maintenance.registered_tables()

    def tombstones(self, db: str, table: str) -> list[tuple[str, str]]:
        """``(key_json, position)`` of the table's tombstones, per key its newest (for tests and tools)."""
        return self.maintenance.tombstones(db, table)
