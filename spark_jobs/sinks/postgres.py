"""PostgreSQL table sink: upserts ordered by position, deletes with tombstones (psycopg 3).

Layout
======
All sink tables of one :class:`PostgresSink` live in one schema (``schema_name``, default
``public``, created if missing).  Source table ``db.table`` becomes
``"<schema>"."<db>__<table>"`` (:func:`~spark_jobs.sinks.sink_schema.sink_table_name`;
names over 63 bytes are cut and suffixed with 8 hex digits of their SHA-1, because
PostgreSQL would silently truncate them).  A table has the source columns (named as in the
source, types in :mod:`~spark_jobs.sinks.sink_schema`), the primary key = the source key,
and ``__cdc_position char(30) COLLATE "C" NOT NULL``: the position of the change that
wrote the row.  Non-key columns are nullable, so that rows written by a schema that lacks
a column (older, or after the source dropped it) can be stored.

Two bookkeeping tables per schema:

* ``__cdc_tables (table_name PK, source_db, source_table, key_columns)``: which source each
  sink table mirrors (two sources mapping to one name are refused) and its key.  Every
  ``apply`` locks its table's row (``SELECT ... FOR UPDATE``), so writers of one table take
  turns (``serialize=True``, see below).
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
tombstone (the row's own position then protects the key).  Invariant: a key has a
tombstone only when the sink holds no row of it, or holds a newer one.  Tombstones of keys
never written again stay; :meth:`PostgresSink.purge_tombstones` removes those older than a
position below which no replay can reach (e.g. the lowest position of the committed
Kafka offsets).  The key is identified by a 16-byte hash of its canonical JSON
(:func:`~spark_jobs.sinks.sink_schema.key_json`), so one tombstone table serves keys of
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
parallel when no such overlap can happen.

DDL (``ensure_table``) runs in its own transaction under an advisory lock per schema:
``CREATE SCHEMA/TABLE IF NOT EXISTS``, ``ADD COLUMN IF NOT EXISTS`` for columns a newer
schema adds, ``ALTER COLUMN ... TYPE`` when a column's type changed.  Columns are never
dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import psycopg

from spark_jobs.errors import SinkError
from spark_jobs.sinks.base import TableSinkBase
from spark_jobs.sinks.sink_schema import (
    POSITION_COLUMN,
    ApplyResult,
    TableLayout,
    key_hash,
    postgres_converter,
    postgres_type,
    reduce_for_layout,
    row_error,
    row_getter,
    sink_identifier,
    is_pass_through,
    key_json_and_hash,
)

__all__ = ["PostgresSink", "quote_pg", "TOMBSTONES", "TABLES"]

TOMBSTONES = "__cdc_tombstones"
TABLES = "__cdc_tables"
KEY_HASH = "__cdc_key_hash"
KEY_JSON = "__cdc_key_json"
_STAGE_UPSERTS = "__cdc_stage_upserts"
_STAGE_DELETES = "__cdc_stage_deletes"
#: Stage tables above this many rows are ANALYZEd before joining (temp tables get no autovacuum).
_ANALYZE_AT = 2000
_MAX_IDENT = 63


def quote_pg(name: str) -> str:
    """Quote a PostgreSQL identifier (embedded double quotes doubled)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise SinkError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def _lock_id(text: str) -> int:
    """A signed 64-bit advisory lock id for ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


@dataclass
class _Plan:
    """Everything ``apply`` needs for one table version, built once."""

    signature: tuple
    name: str
    qualified: str
    layout: TableLayout
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


class PostgresSink(TableSinkBase):
    """Upsert sink into PostgreSQL.  Picklable: the connection is opened where it is used."""

    MAX_IDENT = _MAX_IDENT

    def __init__(self, dsn: str, schema_name: str = "public", *, serialize: bool = True) -> None:
        if not schema_name:
            raise SinkError("schema_name must be non-empty")
        self.dsn = dsn
        self.schema_name = sink_identifier(schema_name, _MAX_IDENT)
        self.serialize = serialize
        self._conn: psycopg.Connection | None = None
        self._plans: dict[tuple[str, str], _Plan] = {}
        self._layouts: dict[tuple[str, tuple], TableLayout] = {}
        #: ALTER statements the last ensure_table ran (empty when the table already matched).
        self.last_alters: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def __getstate__(self) -> dict:
        return {"dsn": self.dsn, "schema_name": self.schema_name, "serialize": self.serialize}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["dsn"], state["schema_name"], serialize=state["serialize"])

    def __enter__(self) -> "PostgresSink":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.dsn, autocommit=False)
            conn.execute("SET TIME ZONE 'UTC'")
            conn.commit()
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _drop_broken(self) -> None:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self.close()

    # ------------------------------------------------------------------ names
    def qualified_name(self, db: str, table: str) -> str:
        return f"{quote_pg(self.schema_name)}.{quote_pg(self.table_name(db, table))}"

    # ------------------------------------------------------------------ DDL
    def _ensure(self, db: str, table: str, layout: TableLayout) -> _Plan:
        sig = layout.signature()
        plan = self._plans.get((db, table))
        if plan is not None and plan.signature == sig:
            return plan
        name = self.table_name(db, table)
        col_names = {c.name: sink_identifier(c.name, _MAX_IDENT) for c in layout.columns}
        if len(set(col_names.values())) != len(col_names):
            raise SinkError(f"{db}.{table}: column names collide once cut to {_MAX_IDENT} bytes")
        schema = quote_pg(self.schema_name)
        qualified = f"{schema}.{quote_pg(name)}"
        key_names = [col_names[c.name] for c in layout.key]
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_id("cdc-sink-ddl:" + self.schema_name)])
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {schema}.{quote_pg(TABLES)} ("
                    " table_name text PRIMARY KEY, source_db text NOT NULL, source_table text NOT NULL,"
                    " key_columns text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {schema}.{quote_pg(TOMBSTONES)} ("
                    " table_name text NOT NULL, key_hash bytea NOT NULL, key_json text NOT NULL,"
                    " position char(30) COLLATE \"C\" NOT NULL, PRIMARY KEY (table_name, key_hash))")
                cur.execute(f"SELECT source_db, source_table, key_columns FROM {schema}.{quote_pg(TABLES)} "
                            "WHERE table_name = %s", [name])
                reg = cur.fetchone()
                keys_json = json.dumps(key_names)
                if reg is not None:
                    if (reg[0], reg[1]) != (db, table):
                        raise SinkError(f"sink table {qualified} already mirrors {reg[0]}.{reg[1]}, not {db}.{table}")
                    if reg[2] != keys_json:
                        raise SinkError(f"sink table {qualified} has key {reg[2]}, the schema now says {keys_json}: "
                                        "a changed primary key needs the sink table rebuilt")
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
                for stmt in alters:
                    cur.execute(stmt)
                self.last_alters = alters
                if reg is None:  # (every ensure holds the advisory lock: nobody registers it meanwhile)
                    cur.execute(f"INSERT INTO {schema}.{quote_pg(TABLES)} (table_name, source_db, source_table, "
                                "key_columns) VALUES (%s, %s, %s, %s)", [name, db, table, keys_json])
        except psycopg.Error:
            self._drop_broken()
            raise
        plan = self._plan(sig, name, qualified, layout, col_names)
        self._plans[(db, table)] = plan
        return plan

    def _plan(self, sig: tuple, name: str, qualified: str, layout: TableLayout, col_names: dict[str, str]) -> _Plan:
        schema = quote_pg(self.schema_name)
        tomb = f"{schema}.{quote_pg(TOMBSTONES)}"
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
        upsert_sql = insert_head + conflict
        upsert_tomb_sql = (insert_head + f" WHERE NOT EXISTS (SELECT 1 FROM {tomb} d WHERE d.table_name = %(table)s"
                           f" AND d.key_hash = s.{kh} AND d.position >= s.{pos})" + conflict)
        prune_sql = (f"DELETE FROM {tomb} d USING pg_temp.{stage_u} s WHERE d.table_name = %(table)s "
                     f"AND d.key_hash = s.{kh} AND d.position < s.{pos}")
        key_match = " AND ".join(f"t.{k} = s.{k}" for k in qk)
        delete_sql = (f"DELETE FROM {qualified} t USING pg_temp.{stage_d} s WHERE {key_match} "
                      f"AND t.{pos} < s.{pos}")
        tombstone_sql = (f"INSERT INTO {tomb} AS d (table_name, key_hash, key_json, position) "
                         f"SELECT %(table)s, s.{kh}, s.{kj}, s.{pos} FROM pg_temp.{stage_d} s "
                         f"WHERE NOT EXISTS (SELECT 1 FROM {qualified} t WHERE {key_match} AND t.{pos} >= s.{pos}) "
                         "ON CONFLICT (table_name, key_hash) DO UPDATE SET key_json = EXCLUDED.key_json, "
                         "position = EXCLUDED.position WHERE d.position < EXCLUDED.position")
        convs = [postgres_converter(c) for c in cols]
        fields = [c.field for c in cols]
        return _Plan(
            signature=sig, name=name, qualified=qualified, layout=layout, col_names=q,
            converters=convs, fields=fields, getter=row_getter(fields),
            active=[(i, cv) for i, cv in enumerate(convs) if not is_pass_through(cv)],
            key_idx=[cols.index(next(x for x in cols if x.name == k.name)) for k in layout.key],
            stage_upserts_ddl=stage_upserts_ddl, stage_deletes_ddl=stage_deletes_ddl,
            upsert_sql=upsert_sql, upsert_tomb_sql=upsert_tomb_sql, prune_sql=prune_sql,
            delete_sql=delete_sql, tombstone_sql=tombstone_sql,
        )

    # ------------------------------------------------------------------ apply
    def apply(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
              records: Iterable[Any]) -> ApplyResult:
        """Apply one batch of changes of ``db.table``; see the module docstring."""
        layout = self._layout(value_schema, key_columns)
        plan = self._ensure(db, table, layout)
        reduced = reduce_for_layout(records, layout)
        result = ApplyResult(superseded=reduced.superseded)
        if not reduced.upserts and not reduced.deletes:
            return result
        schema = quote_pg(self.schema_name)
        params = {"table": plan.name}
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                if self.serialize:
                    cur.execute(f"SELECT 1 FROM {schema}.{quote_pg(TABLES)} WHERE table_name = %s FOR UPDATE",
                                [plan.name])
                    if cur.fetchone() is None:
                        raise SinkError(f"sink table {plan.qualified} is not registered in {TABLES}")
                cur.execute(f"SELECT EXISTS (SELECT 1 FROM {schema}.{quote_pg(TOMBSTONES)} WHERE table_name = %s)",
                            [plan.name])
                has_tombstones = bool(cur.fetchone()[0])
                if reduced.upserts:
                    n = len(reduced.upserts)
                    cur.execute(plan.stage_upserts_ddl)
                    cols = ", ".join(plan.col_names)
                    with cur.copy(f"COPY pg_temp.{quote_pg(_STAGE_UPSERTS)} ({cols}, {quote_pg(POSITION_COLUMN)}"
                                  f"{', ' + quote_pg(KEY_HASH) if has_tombstones else ''}) FROM STDIN") as copy:
                        row_values = self._row_values
                        for ch, kv in reduced.upserts:
                            values = row_values(plan, ch)
                            values.append(ch.position)
                            if has_tombstones:
                                values.append(key_hash(kv))
                            copy.write_row(values)
                    if n >= _ANALYZE_AT and has_tombstones:
                        cur.execute(f"ANALYZE pg_temp.{quote_pg(_STAGE_UPSERTS)}")
                    cur.execute(plan.upsert_tomb_sql if has_tombstones else plan.upsert_sql, params)
                    result.upserted = cur.rowcount
                    result.skipped += n - cur.rowcount
                    if has_tombstones:
                        cur.execute(plan.prune_sql, params)
                if reduced.deletes:
                    n = len(reduced.deletes)
                    cur.execute(plan.stage_deletes_ddl)
                    cols = ", ".join(plan.col_names[i] for i in plan.key_idx)
                    convs = [plan.converters[i] for i in plan.key_idx]
                    with cur.copy(f"COPY pg_temp.{quote_pg(_STAGE_DELETES)} ({cols}, {quote_pg(POSITION_COLUMN)}, "
                                  f"{quote_pg(KEY_HASH)}, {quote_pg(KEY_JSON)}) FROM STDIN") as copy:
                        for ch, kv in reduced.deletes:
                            text, digest = key_json_and_hash(kv)
                            values = [conv(v) for conv, v in zip(convs, kv)]
                            values += [ch.position, digest, text]
                            copy.write_row(values)
                    if n >= _ANALYZE_AT:
                        cur.execute(f"ANALYZE pg_temp.{quote_pg(_STAGE_DELETES)}")
                    cur.execute(plan.delete_sql)
                    cur.execute(plan.tombstone_sql, params)
                    result.deleted = cur.rowcount
                    result.skipped += n - cur.rowcount
        except psycopg.Error:
            self._drop_broken()
            raise
        return result

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

    # ------------------------------------------------------------------ maintenance
    def purge_tombstones(self, before_position: str, db: str | None = None, table: str | None = None) -> int:
        """Drop tombstones older than ``before_position`` (of one table, or all); returns how many.

        Safe once no record below ``before_position`` can be applied again (every input
        partition committed past it).
        """
        schema = quote_pg(self.schema_name)
        sql = f"DELETE FROM {schema}.{quote_pg(TOMBSTONES)} WHERE position < %s"
        args: list[Any] = [before_position]
        if db is not None and table is not None:
            sql += " AND table_name = %s"
            args.append(self.table_name(db, table))
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.rowcount
        except psycopg.Error:
            self._drop_broken()
            raise

    def delete_below(self, db: str, table: str, position: str) -> int:
        """Delete the rows of ``db.table`` whose position is below ``position`` (rows a
        snapshot with ``delete-missing`` did not refresh: deleted at the source while their
        changes were lost); returns how many.  Nothing when the table does not exist."""
        schema = quote_pg(self.schema_name)
        name = self.table_name(db, table)
        conn = self.connection()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                            [f"{schema}.{quote_pg(TABLES)}", self.qualified_name(db, table)])
                if not cur.fetchone()[0]:
                    return 0
                # Writers of the table take turns (the lock ``apply`` takes).
                cur.execute(f"SELECT 1 FROM {schema}.{quote_pg(TABLES)} WHERE table_name = %s FOR UPDATE", [name])
                cur.execute(f"DELETE FROM {self.qualified_name(db, table)} WHERE {quote_pg(POSITION_COLUMN)} < %s",
                            [position])
                return cur.rowcount
        except psycopg.Error:
            self._drop_broken()
            raise

    def applied_positions(self) -> dict[tuple[str, str], str]:
        """``{(db, table): the highest position applied}`` of every sink table that has rows."""
        schema = quote_pg(self.schema_name)
        conn = self.connection()
        out: dict[tuple[str, str], str] = {}
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", [f"{schema}.{quote_pg(TABLES)}"])
                if not cur.fetchone()[0]:
                    return out
                cur.execute(f"SELECT source_db, source_table FROM {schema}.{quote_pg(TABLES)} ORDER BY table_name")
                for db, table in cur.fetchall():
                    cur.execute(f"SELECT max({quote_pg(POSITION_COLUMN)}) FROM {self.qualified_name(db, table)}")
                    top = cur.fetchone()[0]
                    if top:
                        out[(db, table)] = str(top)
            return out
        except psycopg.Error:
            self._drop_broken()
            raise

    def tombstones(self, db: str, table: str) -> list[tuple[str, str]]:
        """``(key_json, position)`` of the table's tombstones, in position order (for tests and tools)."""
        schema = quote_pg(self.schema_name)
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"SELECT key_json, position FROM {schema}.{quote_pg(TOMBSTONES)} WHERE table_name = %s "
                        "ORDER BY position", [self.table_name(db, table)])
            return [(k, p) for k, p in cur.fetchall()]

