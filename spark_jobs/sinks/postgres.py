"""PostgreSQL table sink: upserts ordered by position, deletes with tombstones (psycopg 3).

Layout
======
All sink tables of one :class:`PostgresSink` live in one schema (``schema_name``, default
``public``, created if missing).  Source table ``db.table`` becomes
``"<schema>"."<db>__<table>"`` (:func:`~spark_jobs.sinks.naming.sink_table_name`;
names over 63 bytes are cut and suffixed with 8 hex digits of their SHA-1, because
PostgreSQL would silently truncate them).  A table has the source columns (named as in the
source, types in :mod:`~spark_jobs.sinks.types`), the primary key = the source key,
and ``__cdc_position char(30) COLLATE "C" NOT NULL``: the position of the change that
wrote the row.  Non-key columns are nullable, so that rows written by a schema that lacks
a column (older, or after the source dropped it) can be stored.

Two bookkeeping tables per schema:

* ``__cdc_tables (table_name PK, source_db, source_table, key_columns)``: which source each
  sink table mirrors (two sources mapping to one name are refused) and its key.  Every
  ``apply`` locks its table's row (``SELECT ... FOR UPDATE``), so writers of one table take
  turns (``serialize=True``, see below); a merge task whose records all carry their
  table's one key schema and are in the partition Kafka's partitioner gives their keys
  shares the row with the other partitions' (``FOR SHARE``) and takes a turn of its
  partition instead (``_take_turn``).
* ``__cdc_tombstones (table_name, key_hash, key_json, position)``: deleted keys.

Why tombstones
==============
The DBLog rule is "per key, the highest position wins".  For a row present in the sink the
stored ``__cdc_position`` enforces it.  A *deleted* row leaves nothing to compare with:
after ``delete K @ p`` is applied, a replay of an older ``insert K @ q < p`` (a micro-batch
re-run after a failure between the sink commit and the Spark checkpoint, a producer copy,
a late partition) would find no row and insert it: the deleted row comes back.  So a
delete leaves ``(table, key, p)`` in ``__cdc_tombstones``; an upsert of K is applied only
if no tombstone of K is at or above its position, and an applied newer upsert removes the
tombstone (the row's own position then protects the key).  A batch with no tombstone of
its table at or above its lowest position skips that guard (``apply``): a re-inserted key
then keeps a tombstone below its row, which stops nothing the row would not.  The merge job
purges tombstones below a position no replay can reach (:mod:`spark_jobs.tombstone_horizon`,
:meth:`PostgresSink.purge_tombstones`).  The key is identified by a 16-byte hash of its canonical JSON
(:func:`~spark_jobs.sinks.keys.key_json`), so one tombstone table serves keys of
any types and lengths.

Applying a batch
================
``apply`` reduces the batch to one record per key (highest position), then in one
transaction: COPY the upserts into a temporary table, ``INSERT ... SELECT ... ON CONFLICT
(key) DO UPDATE SET ... WHERE t.__cdc_position < EXCLUDED.__cdc_position`` (skipping keys
with a newer tombstone), prune the tombstones the applied upserts supersede; COPY the
deletes into a second temporary table, ``DELETE ... USING`` with the position guard, and
record tombstones for keys the sink does not hold at a newer position.  COPY + one
set-based statement measured 1.3-1.5x faster than ``executemany`` of the upsert statement
(which psycopg pipelines), timing the whole ``apply`` (reduction and conversion included)
against ``executemany`` alone; see ``docs/sinks.md``.  Every comparison is strict, so
replaying a batch changes nothing and an older batch after a newer one changes nothing.
``apply`` runs ``ensure_table`` itself (once per table and schema version per sink object).

Limits: PostgreSQL ``text`` cannot hold the NUL character and ``jsonb`` cannot hold
``\u0000``; a MySQL string containing one makes ``apply`` fail (loudly, the batch rolls back).
A sink object holds one connection: use one per thread (it pickles without it).

Concurrency: writers are expected to hold disjoint keys (Kafka partitions by key), but a
speculative or zombie Spark task can replay a batch concurrently with a newer one; row
locks alone would then let an older insert slip in after a concurrent delete.  With
``serialize=True`` (default) every ``apply`` first locks its table's ``__cdc_tables`` row,
which makes that impossible; ``serialize=False`` lets partitions of one table write in
parallel when no such overlap can happen.  ``apply`` and ``apply_encoded`` (the merge job's
common path) write their stage tables (session-local: the COPY lines, the Python side's
work) before they take the turn, so that under the turn only PostgreSQL's statements run;
whether the upserts need the tombstone guard's key hashes is looked at before and again
under the turn (a tombstone another writer left meanwhile: the upserts are staged again
with them).

DDL (``ensure_table``) runs in its own transaction under an advisory lock per schema:
``CREATE SCHEMA/TABLE IF NOT EXISTS``, ``ADD COLUMN IF NOT EXISTS`` for columns a newer
schema adds, ``ALTER COLUMN ... TYPE`` when a column's type changed.  Columns are never
dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, Callable, Iterator, Sequence

import psycopg

from contract.codecs.avro_decoder import compile_decoder
from contract.errors import NotCompiled
from spark_jobs.errors import SinkError
from spark_jobs.sinks.base import TablePlan, TableSinkBase
from spark_jobs.sinks.batch import ApplyResult, Change, EncodedChange
from spark_jobs.sinks.copy_text import compile_copy_encoder, copy_lines_of, stage_column
from spark_jobs.sinks.keys import key_hash, key_json_and_hash
from spark_jobs.sinks.layout import TableLayout
from spark_jobs.sinks.naming import POSITION_COLUMN, TABLES, TOMBSTONES, sink_identifier
from spark_jobs.sinks.registry import register_sink
from spark_jobs.sinks.types import postgres_type
from spark_jobs.sinks.values import is_pass_through, postgres_converter, row_error, row_getter

__all__ = ["PostgresSink", "quote_pg"]

KEY_HASH = "__cdc_key_hash"
KEY_JSON = "__cdc_key_json"
_STAGE_UPSERTS = "__cdc_stage_upserts"
_STAGE_DELETES = "__cdc_stage_deletes"
_STAGE_INSERTS = "__cdc_stage_inserts"
# (The stage tables are not ANALYZEd: without statistics the planner still sizes a temp
# table by its pages, and it then probes the sink table's primary key for the deletes and
# the tombstones instead of hashing the whole table, which the statistics' row count made
# it do.  Measured on PostgreSQL 15, a batch of 30,000 upserts and 5,000 deletes into a
# table of 200,000 rows: 0.25 s of the backend's CPU against 0.37 s with ANALYZE
# (docs/merge-performance.md).)
#: apply_encoded's COPY lines sent per write
_COPY_LINES = 2000
_MAX_IDENT = 63
#: An :class:`EncodedChange`'s event bytes, and their writer schema's fingerprint (single-object framing)
_DATA = attrgetter("data")
_OP = attrgetter("op")
_FINGERPRINT = itemgetter(slice(2, 10))


def quote_pg(name: str) -> str:
    """Quote a PostgreSQL identifier (embedded double quotes doubled)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise SinkError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def _lock_id(text: str) -> int:
    """A signed 64-bit advisory lock id for ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


@dataclass
class _Plan(TablePlan):
    """Everything ``apply`` needs for one table version, built once."""

    col_names: list[str]            # quoted sink column names, in row order
    converters: list                # per column
    fields: list[str]               # per column: the row dict key
    getter: Any                     # row dict -> tuple of the fields' values
    active: list                    # (index, converter) of the columns that need converting
    key_idx: list[int]              # positions of the key columns in ``columns``
    stage_upserts_ddl: str
    stage_deletes_ddl: str
    upsert_sql: str
    upsert_tomb_sql: str
    prune_sql: str
    delete_sql: str
    tombstone_sql: str
    # Rows written straight from their Avro bytes (apply_encoded, spark_jobs.sinks.copy_text):
    # the stage table of their COPY text, the upserts from it; per writer fingerprint the
    # COPY encoder and the key columns' decoder (None: not for this schema).
    encoded_stage_ddl: str = ""
    encoded_upsert_sql: str = ""
    encoded_upsert_tomb_sql: str = ""
    # apply_encoded's fresh changes: their own stage table, plain INSERTs from it (with and
    # without the tombstone guard), the upserts from it when an INSERT meets a row, the
    # tombstones they supersede pruned
    inserts_stage_ddl: str = ""
    insert_sql: str = ""
    insert_tomb_sql: str = ""
    inserts_upsert_sql: str = ""
    inserts_upsert_tomb_sql: str = ""
    inserts_prune_sql: str = ""
    #: The tombstone guard and pruning match a key's JSON text, built by PostgreSQL from the
    #: staged key columns (integer keys: see _key_json_sql), instead of its hash: the
    #: upserts are then staged without key hashes.
    json_guard: bool = False
    encoders: dict = field(default_factory=dict)


@register_sink("postgres")
class PostgresSink(TableSinkBase):
    """Upsert sink into PostgreSQL.  Picklable: the connection is opened where it is used."""

    MAX_IDENT = _MAX_IDENT
    SETTINGS = ("dsn", "schema_name", "serialize")
    DRIVER_ERROR = psycopg.Error
    UNAVAILABLE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
    #: SQLSTATE classes of an operational error that is about the server, not the data:
    #: connection exceptions, operator intervention (shutdown, cannot connect now),
    #: transaction rollback (deadlock, serialization failure: retrying helps).
    _OUT_OF_REACH_STATES = ("08", "57P", "40")

    def out_of_reach(self, exc: Exception) -> bool:
        """A client-side failure (no SQLSTATE: the connection could not be made or was lost)
        or a server-side one of :data:`_OUT_OF_REACH_STATES`; not, say, a key too large for
        its index (54000), which is the record's problem."""
        if isinstance(exc, psycopg.InterfaceError):
            return True
        state = getattr(exc, "sqlstate", None)
        return state is None or state.startswith(self._OUT_OF_REACH_STATES)

    @classmethod
    def from_config(cls, section: Any) -> "PostgresSink":
        """The sink of ``sinks.postgres``."""
        return cls(section.dsn.get_secret_value(), section.schema_name)

    def __init__(self, dsn: str, schema_name: str = "public", *, serialize: bool = True) -> None:
        if not schema_name:
            raise SinkError("schema_name must be non-empty")
        super().__init__(serialize)
        self.dsn = dsn
        self.schema_name = sink_identifier(schema_name, _MAX_IDENT)

    # ------------------------------------------------------------------ connection
    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self.dsn, autocommit=False)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.commit()
        return conn

    def _is_open(self, conn: psycopg.Connection) -> bool:
        return not conn.closed

    def _drop_broken(self) -> None:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self.close()

    @contextlib.contextmanager
    def _transaction_cursor(self, conn: psycopg.Connection) -> Iterator[psycopg.Cursor]:
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    # ------------------------------------------------------------------ names
    def _quote(self, name: str) -> str:
        return quote_pg(name)

    def qualified_name(self, db: str, table: str) -> str:
        return f"{quote_pg(self.schema_name)}.{quote_pg(self.table_name(db, table))}"

    def _bookkeeping(self, name: str) -> str:
        return f"{quote_pg(self.schema_name)}.{quote_pg(name)}"

    PARTITION_TURNS = True

    def _take_turn(self, cur: psycopg.Cursor, name: str) -> bool:
        """The table's whole turn (``FOR UPDATE`` of its row in ``__cdc_tables``), or with
        ``turn_partition`` set, that partition's turn: the row ``FOR SHARE`` and a
        transaction advisory lock of (table, partition).

        Writers of two partitions share the row and go side by side: they never write the
        same sink row (the task checked that its records carry the table's one key schema and
        are where Kafka's partitioner puts their keys:
        :func:`~spark_jobs.partition_merge.owns_keys`).  A second writer of one partition (a
        zombie task of an earlier attempt) waits for the first on the advisory lock.  The
        whole turn waits for every sharer, and they for it: what every other writer takes
        (records whose key another partition may hold, tables that had another key schema,
        routed targets, a topic whose partition count changed, the driver's deletes, drops
        and renames).  Measured: the steady batches of a 1M-event benchmark left the two
        cores 30% idle under the whole turn alone (docs/merge-performance.md)."""
        if self.turn_partition is None:
            return self._whole_turn(cur, name)
        cur.execute(f"SELECT 1 FROM {self._bookkeeping(TABLES)} WHERE table_name = %s FOR SHARE", [name])
        registered = cur.fetchone() is not None
        cur.execute("SELECT pg_advisory_xact_lock(%s)",
                    [_lock_id(f"cdc-sink-turn:{self.schema_name}.{name}:{self.turn_partition}")])
        return registered

    def _rename_sql(self, db: str, table: str, to_db: str, to_table: str) -> str:
        return f"ALTER TABLE {self.qualified_name(db, table)} RENAME TO {quote_pg(self.table_name(to_db, to_table))}"

    def _registered(self, cur: psycopg.Cursor) -> list[tuple[str, str, str]]:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [self._bookkeeping(TABLES)])
        if not cur.fetchone()[0]:
            return []
        cur.execute(f"SELECT table_name, source_db, source_table FROM {self._bookkeeping(TABLES)} ORDER BY table_name")
        return [(n, d, t) for n, d, t in cur.fetchall()]

    def _has_table(self, cur: psycopg.Cursor, db: str, table: str) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    [self._bookkeeping(TABLES), self.qualified_name(db, table)])
        return bool(cur.fetchone()[0])

    # ------------------------------------------------------------------ DDL
    def _prepare(self, db: str, table: str, layout: TableLayout, rekey: bool = False) -> _Plan:
        sig = layout.signature()
        name = self.table_name(db, table)
        col_names = {c.name: sink_identifier(c.name, _MAX_IDENT) for c in layout.columns}
        if len(set(col_names.values())) != len(col_names):
            raise SinkError(f"{db}.{table}: column names collide once cut to {_MAX_IDENT} bytes")
        schema = quote_pg(self.schema_name)
        qualified = f"{schema}.{quote_pg(name)}"
        key_names = [col_names[c.name] for c in layout.key]
        with self._transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_id("cdc-sink-ddl:" + self.schema_name)])
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self._bookkeeping(TABLES)} ("
                " table_name text PRIMARY KEY, source_db text NOT NULL, source_table text NOT NULL,"
                " key_columns text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")
            self._ensure_tombstones(cur)
            registered = self._check_registration(cur, name, qualified, db, table, key_names, rekey)
            defs = []
            for c in layout.columns:
                nn = " NOT NULL" if c in layout.key else ""
                defs.append(f"{quote_pg(col_names[c.name])} {postgres_type(c)}{nn}")
            defs.append(f"{quote_pg(POSITION_COLUMN)} char(30) COLLATE \"C\" NOT NULL")
            defs.append(f"PRIMARY KEY ({', '.join(map(quote_pg, key_names))})")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {qualified} ({', '.join(defs)})")
            cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped", [qualified])
            existing = dict(cur.fetchall())
            alters = []
            for c in layout.columns:
                cname, ctype = col_names[c.name], postgres_type(c)
                have = existing.get(cname)
                if have is None:
                    alters.append(f"ALTER TABLE {qualified} ADD COLUMN IF NOT EXISTS {quote_pg(cname)} {ctype}")
                elif have != ctype:
                    alters.append(f"ALTER TABLE {qualified} ALTER COLUMN {quote_pg(cname)} TYPE {ctype} "
                                  f"USING {quote_pg(cname)}::{ctype}")
            self._alter_and_register(cur, alters, registered, name, db, table, key_names)
        return self._plan(sig, name, qualified, layout, col_names)

    def _ensure_tombstones(self, cur: psycopg.Cursor) -> None:
        """The schema's tombstone table (under the DDL lock): appended to, indexed by
        ``(table_name, position)`` only.  Every statement that reads it is bounded by
        position (the guard and the pruning at or above the batch's lowest position, the
        purge below a horizon), so no index on the key is needed, and a key's newer delete
        adds a row instead of raising the key's one row: its older tombstone stays until
        the purge and stops nothing the newer one would not.  Measured on PostgreSQL 15,
        20,000 tombstones appended: 1.5-2.5 us of the backend's CPU a row, against 7-11
        with the primary key on ``(table_name, key_hash)`` this table had before (an
        ``INSERT ... ON CONFLICT`` into a B-tree of random hashes), which is dropped when
        found.  ``REPLICA IDENTITY FULL``: a sink database published for logical
        replication can still delete from a table without a primary key."""
        tomb = self._bookkeeping(TOMBSTONES)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {tomb} ("
                    " table_name text NOT NULL, key_hash bytea NOT NULL, key_json text NOT NULL,"
                    " position char(30) COLLATE \"C\" NOT NULL)")
        cur.execute(f"CREATE INDEX IF NOT EXISTS {quote_pg(TOMBSTONES + '_by_position')} "
                    f"ON {tomb} (table_name, position)")
        cur.execute("SELECT c.conname, t.relreplident FROM pg_class t LEFT JOIN pg_constraint c "
                    "ON c.conrelid = t.oid AND c.contype = 'p' WHERE t.oid = to_regclass(%s)", [tomb])
        for pkey, identity in cur.fetchall():
            if pkey is not None:
                cur.execute(f"ALTER TABLE {tomb} DROP CONSTRAINT {quote_pg(pkey)}")
            if pkey is not None or identity != "f":
                cur.execute(f"ALTER TABLE {tomb} REPLICA IDENTITY FULL")

    def _plan(self, sig: tuple, name: str, qualified: str, layout: TableLayout, col_names: dict[str, str]) -> _Plan:
        tomb = self._bookkeeping(TOMBSTONES)
        cols = list(layout.columns)
        q = [quote_pg(col_names[c.name]) for c in cols]
        pos = quote_pg(POSITION_COLUMN)
        kh, kj = quote_pg(KEY_HASH), quote_pg(KEY_JSON)
        key_set = {c.name for c in layout.key}
        qk = [quote_pg(col_names[c.name]) for c in layout.key]
        types = [postgres_type(c) for c in cols]
        stage_u = quote_pg(_STAGE_UPSERTS)
        stage_d = quote_pg(_STAGE_DELETES)
        stage_upserts_ddl = (f"CREATE TEMP TABLE {stage_u} ("
                             + ", ".join(f"{n} {t}" for n, t in zip(q, types))
                             + f", {pos} char(30) COLLATE \"C\" NOT NULL, {kh} bytea) ON COMMIT DROP")
        stage_deletes_ddl = (f"CREATE TEMP TABLE {stage_d} ("
                             + ", ".join(f"{quote_pg(col_names[c.name])} {postgres_type(c)}" for c in layout.key)
                             + f", {pos} char(30) COLLATE \"C\" NOT NULL, {kh} bytea NOT NULL, {kj} text NOT NULL)"
                             " ON COMMIT DROP")
        sets = [f"{n} = EXCLUDED.{n}" for c, n in zip(cols, q) if c.name not in key_set]
        sets.append(f"{pos} = EXCLUDED.{pos}")
        insert_head = (f"INSERT INTO {qualified} AS t ({', '.join(q)}, {pos}) "
                       f"SELECT {', '.join('s.' + n for n in q)}, s.{pos} FROM pg_temp.{stage_u} s")
        conflict = (f" ON CONFLICT ({', '.join(qk)}) DO UPDATE SET {', '.join(sets)} "
                    f"WHERE t.{pos} < EXCLUDED.{pos}")
        key_text = _key_json_sql(layout, [f"s.{k}" for k in qk])
        # The staged row's tombstone: by the key's JSON text where PostgreSQL can write it
        # (integer keys), else by the key hash staged with the row.
        tomb_match = f"d.key_json = {key_text}" if key_text else f"d.key_hash = s.{kh}"
        # (``d.position >= %(lowest)s`` follows from ``s.pos >= lowest``: it lets the
        # (table_name, position) index read only the tombstones at the batch's positions)
        guard = (f" WHERE NOT EXISTS (SELECT 1 FROM {tomb} d WHERE d.table_name = %(table)s"
                 f" AND {tomb_match} AND d.position >= s.{pos} AND d.position >= %(lowest)s)")
        upsert_sql = insert_head + conflict
        upsert_tomb_sql = insert_head + guard + conflict
        staged = [stage_column(c.kind, c.scale, "s." + n, t) for c, n, t in zip(cols, q, types)]

        def encoded_stage(stage: str) -> tuple[str, str]:
            """(DDL, INSERT ... SELECT head) of a stage table of COPY text from Avro bytes"""
            return (f"CREATE TEMP TABLE {stage} (" + ", ".join(f"{n} {st}" for n, (st, _) in zip(q, staged))
                    + f", {pos} char(30) COLLATE \"C\" NOT NULL, {kh} bytea) ON COMMIT DROP",
                    f"INSERT INTO {qualified} AS t ({', '.join(q)}, {pos}) "
                    f"SELECT {', '.join(expr for _, expr in staged)}, s.{pos} FROM pg_temp.{stage} s")

        encoded_stage_ddl, encoded_head = encoded_stage(stage_u)
        inserts_stage_ddl, inserts_head = encoded_stage(quote_pg(_STAGE_INSERTS))
        # (the tombstones the guard reads: at or above the batch's lowest position, through the
        # position index; older superseded ones go with the purge, as in a batch without the
        # guard.  Unbounded, the statement hashed every tombstone of the table, a cost growing
        # with the deletes of the last minute)
        def prune(stage: str) -> str:
            """the tombstones the rows staged in ``stage`` supersede, deleted"""
            return (f"DELETE FROM {tomb} d USING pg_temp.{stage} s WHERE d.table_name = %(table)s "
                    f"AND {tomb_match} AND d.position < s.{pos} AND d.position >= %(lowest)s")

        key_match = " AND ".join(f"t.{k} = s.{k}" for k in qk)
        delete_sql = (f"DELETE FROM {qualified} t USING pg_temp.{stage_d} s WHERE {key_match} "
                      f"AND t.{pos} < s.{pos}")
        # (a delete's tombstone is appended unless the key has a row or a tombstone at or above
        # its position: a replayed delete adds nothing; ``d.position >= %(lowest)s`` follows
        # from ``s.pos >= lowest`` and bounds the tombstones read, as in the guard)
        tombstone_sql = (f"INSERT INTO {tomb} (table_name, key_hash, key_json, position) "
                         f"SELECT %(table)s, s.{kh}, s.{kj}, s.{pos} FROM pg_temp.{stage_d} s "
                         f"WHERE NOT EXISTS (SELECT 1 FROM {qualified} t WHERE {key_match} AND t.{pos} >= s.{pos}) "
                         f"AND NOT EXISTS (SELECT 1 FROM {tomb} d WHERE d.table_name = %(table)s "
                         f"AND d.key_hash = s.{kh} AND d.position >= s.{pos} AND d.position >= %(lowest)s)")
        convs = [postgres_converter(c) for c in cols]
        fields = [c.field for c in cols]
        return _Plan(
            signature=sig, name=name, qualified=qualified, layout=layout, col_names=q,
            converters=convs, fields=fields, getter=row_getter(fields),
            active=[(i, cv) for i, cv in enumerate(convs) if not is_pass_through(cv)],
            key_idx=[cols.index(next(x for x in cols if x.name == k.name)) for k in layout.key],
            stage_upserts_ddl=stage_upserts_ddl, stage_deletes_ddl=stage_deletes_ddl,
            upsert_sql=upsert_sql, upsert_tomb_sql=upsert_tomb_sql, prune_sql=prune(stage_u),
            delete_sql=delete_sql, tombstone_sql=tombstone_sql,
            encoded_stage_ddl=encoded_stage_ddl, encoded_upsert_sql=encoded_head + conflict,
            encoded_upsert_tomb_sql=encoded_head + guard + conflict, json_guard=bool(key_text),
            inserts_stage_ddl=inserts_stage_ddl, insert_sql=inserts_head, insert_tomb_sql=inserts_head + guard,
            inserts_upsert_sql=inserts_head + conflict, inserts_upsert_tomb_sql=inserts_head + guard + conflict,
            inserts_prune_sql=prune(quote_pg(_STAGE_INSERTS)),
        )

    # ------------------------------------------------------------------ apply
    def apply_encoded(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[EncodedChange], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """The upserts' rows COPYed as :func:`~spark_jobs.sinks.copy_text.compile_copy_encoder`
        writes them from their Avro bytes (the deletes as :meth:`apply` does, by their key
        columns); None for a schema with a column kind it does not write (see the base).

        The ``fresh`` changes (see the base) go to a stage table of their own and into the
        table by a plain ``INSERT`` (with the tombstone guard when it is needed, their key
        hashes staged again under the turn as the upserts' are), in a savepoint: an insert
        of a new key costs PostgreSQL about half of what ``INSERT ... ON CONFLICT`` does
        (no speculative insertion: measured 1.0-1.1 against 1.9-2.0 us of the backend's CPU a
        row).  If one of them meets a row of its key (a replay, a key whose records were in
        two partitions), the savepoint is rolled back and they are upserted as the others
        are: the same result either way, as no row of theirs is there when the INSERT
        succeeds and the table's turn is held."""
        if not changes:
            return ApplyResult()
        layout = self._layout(value_schema, key_columns)
        plan = self._ensure(db, table, layout, rekey)
        fpb = changes[0].data[2:10]
        if len(set(map(_FINGERPRINT, map(_DATA, changes)))) > 1:
            return None  # (one writer schema per call)
        codec = plan.encoders.get(fpb, False)
        if codec is False:
            codec = plan.encoders[fpb] = _encoders(writer_schema, layout)
        if codec is None:
            return None
        line, key_reader = codec
        inserts = list(changes[:fresh])
        if "d" in map(_OP, inserts):
            fresh, inserts = 0, []  # (not as promised: every change the usual way)
        upserts, deletes = [], []
        for ch in changes[fresh:]:
            if ch.op == "d":
                deletes.append((Change(None, "d", None, ch.position), layout.key_values(None, key_reader(ch.data,
                                                                                                         ch.row_at))))
            else:
                upserts.append(ch)
        lowest = min(ch.position for ch in changes)
        result = ApplyResult()
        with self._transaction() as cur:
            self._staged_write(cur, plan, lowest, len(upserts),
                               lambda hashed: self._copy_encoded(cur, plan, upserts, line, key_reader, hashed),
                               deletes, result, encoded=True,
                               inserts=(len(inserts), lambda hashed: self._copy_encoded(
                                   cur, plan, inserts, line, key_reader, hashed, _STAGE_INSERTS)))
        return result

    def _write_reduced(self, cur: psycopg.Cursor, plan: _Plan, lowest: str, upserts: list, deletes: list,
                       result: ApplyResult) -> None:
        self._staged_write(cur, plan, lowest, len(upserts), lambda hashed: self._copy_rows(cur, plan, upserts, hashed),
                           deletes, result)

    def _staged_write(self, cur: psycopg.Cursor, plan: _Plan, lowest: str, n_upserts: int,
                      stage_upserts: Callable[[bool], None], deletes: list, result: ApplyResult, *,
                      encoded: bool = False, inserts: tuple[int, Callable[[bool], None] | None] = (0, None)
                      ) -> None:
        """A batch written in the open transaction: its ``n_upserts`` upserts
        (``stage_upserts(hashed)`` COPYs them into the stage table, with the tombstone
        guard's key hashes when ``hashed``) and its deletes (``(change, key values)`` pairs)
        staged first, then the table's turn taken, then the statements.

        The stage tables are this session's own, and writing their COPY lines is the Python
        side's work, which the table's other writers need not wait for: under the turn only
        PostgreSQL's statements run.  A key matched by its hash (not ``plan.json_guard``) has
        its key hashes written when a tombstone is seen at the batch's positions before the
        turn; if one came while waiting for it, the upserts are staged again with them.
        (Without ``serialize`` there is no turn, and the first answer is the one used.)  An
        integer key (``plan.json_guard``) is staged without hashes and the answer under the
        turn decides the guard.  ``inserts``: ``(n, stage)``, ``n`` fresh changes
        (:meth:`apply_encoded`) that ``stage(hashed)`` COPYs into a stage table of their own
        (staged again with their hashes as the upserts are), written by
        :meth:`_insert_staged`."""
        hashed = not plan.json_guard and self._has_tombstones(cur, plan, lowest)
        n_inserts, stage_inserts = inserts
        if n_upserts:
            cur.execute(plan.encoded_stage_ddl if encoded else plan.stage_upserts_ddl)
            stage_upserts(hashed)
        if n_inserts:
            cur.execute(plan.inserts_stage_ddl)
            stage_inserts(hashed)
        if deletes:
            self._stage_deletes(cur, plan, deletes)
        if self.serialize or plan.json_guard:
            has_tombstones = self._begin_write(cur, plan, lowest)
        else:
            has_tombstones = hashed
        restage = has_tombstones and not hashed and not plan.json_guard
        if n_inserts:
            if restage:
                cur.execute(f"TRUNCATE pg_temp.{quote_pg(_STAGE_INSERTS)}")
                stage_inserts(True)
            self._insert_staged(cur, plan, lowest, n_inserts, has_tombstones, result)
        if n_upserts:
            if restage:
                cur.execute(f"TRUNCATE pg_temp.{quote_pg(_STAGE_UPSERTS)}")
                stage_upserts(True)
            self._upsert_staged(cur, plan, lowest, n_upserts, has_tombstones, result, encoded=encoded)
        if deletes:
            self._apply_staged_deletes(cur, plan, lowest, len(deletes), result)

    @staticmethod
    def _insert_staged(cur: psycopg.Cursor, plan: _Plan, lowest: str, n: int, has_tombstones: bool,
                       result: ApplyResult) -> None:
        """The staged fresh changes (``n``, :meth:`apply_encoded`) inserted, in a savepoint;
        upserted instead when one meets a row of its key.  With ``has_tombstones``, the guard
        and the pruning as for the upserts."""
        params = {"table": plan.name, "lowest": lowest}
        try:
            with cur.connection.transaction():
                cur.execute(plan.insert_tomb_sql if has_tombstones else plan.insert_sql, params)
            result.inserted += cur.rowcount
        except psycopg.errors.UniqueViolation:
            result.fresh_refused += 1
            cur.execute(plan.inserts_upsert_tomb_sql if has_tombstones else plan.inserts_upsert_sql, params)
        result.upserted += cur.rowcount
        result.skipped += n - cur.rowcount
        if has_tombstones:
            cur.execute(plan.inserts_prune_sql, params)

    @staticmethod
    def _copy_encoded(cur: psycopg.Cursor, plan: _Plan, upserts: Sequence[EncodedChange], line: Any,
                      key_reader: Any, hashed: bool, stage: str = _STAGE_UPSERTS) -> None:
        """The upserts' COPY lines into the stage table (``stage``), written from their Avro
        bytes (``line``; ``key_reader`` reads the key columns of the key hashes, with
        ``hashed``)."""
        layout = plan.layout
        lines = None if hashed else copy_lines_of(line)
        with cur.copy(f"COPY pg_temp.{quote_pg(stage)} ({', '.join(plan.col_names)}, "
                      f"{quote_pg(POSITION_COLUMN)}, {quote_pg(KEY_HASH)}) FROM STDIN") as copy:
            for i in range(0, len(upserts), _COPY_LINES):
                if lines is not None:  # (the native lines, no key hash: the common case, one call per part)
                    copy.write(lines(upserts, i, i + _COPY_LINES))
                    continue
                part = upserts[i:i + _COPY_LINES]
                if hashed:
                    copy.write(b"".join([b"%s\t%s\t\\\\x%s\n" % (
                        line(ch.data, ch.row_at), ch.position.encode(),
                        key_hash(layout.key_values(None, key_reader(ch.data, ch.row_at))).hex().encode())
                        for ch in part]))
                else:  # (no key hash: the common case, one formatting per line)
                    copy.write(b"".join([b"%s\t%s\t\\N\n" % (line(ch.data, ch.row_at), ch.position.encode())
                                         for ch in part]))

    def _upsert_staged(self, cur: psycopg.Cursor, plan: _Plan, lowest: str, n: int, has_tombstones: bool,
                       result: ApplyResult, *, encoded: bool = False) -> None:
        """The staged upserts (``n``, at positions from ``lowest``) applied: the position
        guard, with ``has_tombstones`` the tombstone guard and the tombstones they supersede
        pruned."""
        params = {"table": plan.name, "lowest": lowest}
        if encoded:
            cur.execute(plan.encoded_upsert_tomb_sql if has_tombstones else plan.encoded_upsert_sql, params)
        else:
            cur.execute(plan.upsert_tomb_sql if has_tombstones else plan.upsert_sql, params)
        result.upserted += cur.rowcount
        result.skipped += n - cur.rowcount
        if has_tombstones:
            cur.execute(plan.prune_sql, params)

    def _copy_rows(self, cur: psycopg.Cursor, plan: _Plan, upserts: list, hashed: bool) -> None:
        """The upserts (``(change, key values)`` pairs, their rows decoded) COPYed into the
        stage table, with their key hashes when ``hashed``."""
        with cur.copy(f"COPY pg_temp.{quote_pg(_STAGE_UPSERTS)} ({', '.join(plan.col_names)}, "
                      f"{quote_pg(POSITION_COLUMN)}{', ' + quote_pg(KEY_HASH) if hashed else ''}) FROM STDIN") as copy:
            row_values = self._row_values
            for ch, kv in upserts:
                values = row_values(plan, ch)
                values.append(ch.position)
                if hashed:
                    values.append(key_hash(kv))
                copy.write_row(values)

    @staticmethod
    def _stage_deletes(cur: psycopg.Cursor, plan: _Plan, deletes: list) -> None:
        """The deletes (``(change, key values)`` pairs) into their stage table."""
        cur.execute(plan.stage_deletes_ddl)
        cols = ", ".join(plan.col_names[i] for i in plan.key_idx)
        convs = [plan.converters[i] for i in plan.key_idx]
        with cur.copy(f"COPY pg_temp.{quote_pg(_STAGE_DELETES)} ({cols}, {quote_pg(POSITION_COLUMN)}, "
                      f"{quote_pg(KEY_HASH)}, {quote_pg(KEY_JSON)}) FROM STDIN") as copy:
            for ch, kv in deletes:
                text, digest = key_json_and_hash(kv)
                values = [conv(v) for conv, v in zip(convs, kv)]
                values += [ch.position, digest, text]
                copy.write_row(values)

    @staticmethod
    def _apply_staged_deletes(cur: psycopg.Cursor, plan: _Plan, lowest: str, n: int, result: ApplyResult) -> None:
        """The ``n`` staged deletes (at positions from ``lowest``) applied (under the table's
        turn), with the tombstones of the keys the table holds neither a row nor a tombstone
        of at a newer position."""
        cur.execute(plan.delete_sql)
        cur.execute(plan.tombstone_sql, {"table": plan.name, "lowest": lowest})
        result.deleted += cur.rowcount
        result.skipped += n - cur.rowcount

    @staticmethod
    def _row_values(plan: _Plan, ch: Any) -> list:
        try:
            values = list(plan.getter(ch.row))
            for i, conv in plan.active:
                v = values[i]
                if v is not None:
                    values[i] = conv(v)
            return values
        except Exception as exc:
            raise row_error(plan.qualified, plan.layout, plan.converters, ch, exc) from exc


#: Column kinds whose values are Python ints, which :func:`~spark_jobs.sinks.keys.key_json`
#: writes as PostgreSQL writes the column's value as text (decimal digits, a minus sign)
_INTEGER_KINDS = frozenset({"smallint", "int", "long"})


def _key_json_sql(layout: TableLayout, columns: Sequence[str]) -> str | None:
    """The SQL expression of :func:`~spark_jobs.sinks.keys.key_json`'s text of a key whose
    columns are ``columns`` (expressions, key order), for a key of integer columns only
    (``[1,-2]``); None for any other key (its tombstones are matched by their hash)."""
    if not layout.key or any(c.kind not in _INTEGER_KINDS for c in layout.key):
        return None
    return "'[' || " + " || ',' || ".join(f"{c}::text" for c in columns) + " || ']'"


def _encoders(writer_schema: Any, layout: TableLayout) -> tuple[Any, Any] | None:
    """(COPY text encoder, key columns' decoder) of the row images of envelope writer
    schema ``writer_schema`` for ``layout``, both reading an image's ``["null", row]`` union at an
    offset; None when :mod:`~spark_jobs.sinks.copy_text` does not write one of its kinds."""
    try:
        fields = {f["name"]: f["type"] for f in writer_schema["fields"]}
        row_union = fields["before"]
        key_fields = {name for names in layout.key_lookup for name in names}
        return (compile_copy_encoder(row_union, layout.columns),
                compile_decoder(row_union, {name: True for name in key_fields}))
    except (NotCompiled, KeyError, TypeError):
        return None
