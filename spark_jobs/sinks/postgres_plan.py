"""The statements of a PostgreSQL sink table, built once per table version: the stage
tables, the upserts (guarded by the tombstones), the deletes and their tombstones, and the
COPY path's stage tables (:mod:`spark_jobs.sinks.postgres_copy`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from spark_jobs.errors import SinkError
from spark_jobs.sinks.table_sink import TablePlan
from spark_jobs.sinks.copy_text import stage_column
from spark_jobs.sinks.layout import TableLayout
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.types import postgres_type
from spark_jobs.sinks.values import is_pass_through, postgres_converter, row_getter

KEY_HASH = "__cdc_key_hash"
KEY_JSON = "__cdc_key_json"
STAGE_UPSERTS = "__cdc_stage_upserts"
STAGE_DELETES = "__cdc_stage_deletes"
STAGE_INSERTS = "__cdc_stage_inserts"
# (The stage tables are not ANALYZEd: without statistics the planner still sizes a temp
# table by its pages, and it then probes the sink table's primary key for the deletes and
# the tombstones instead of hashing the whole table, which the statistics' row count made
# it do.  Measured on PostgreSQL 15, a batch of 30,000 upserts and 5,000 deletes into a
# table of 200,000 rows: 0.25 s of the backend's CPU against 0.37 s with ANALYZE
# (docs/merge-performance.md).)


def quote_pg(name: str) -> str:
    """Quote a PostgreSQL identifier (embedded double quotes doubled)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise SinkError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


@dataclass
class PgTablePlan(TablePlan):
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
    #: staged key columns (integer keys: see key_json_sql), instead of its hash: the
    #: upserts are then staged without key hashes.
    json_guard: bool = False
    encoders: dict = field(default_factory=dict)


#: Column kinds whose values are Python ints, which :func:`~spark_jobs.sinks.keys.key_json`
#: writes as PostgreSQL writes the column's value as text (decimal digits, a minus sign)
INTEGER_KINDS = frozenset({"smallint", "int", "long"})


def key_json_sql(layout: TableLayout, columns: Sequence[str]) -> str | None:
    """The SQL expression of :func:`~spark_jobs.sinks.keys.key_json`'s text of a key whose
    columns are ``columns`` (expressions, key order), for a key of integer columns only
    (``[1,-2]``); None for any other key (its tombstones are matched by their hash)."""
    if not layout.key or any(c.kind not in INTEGER_KINDS for c in layout.key):
        return None
    return "'[' || " + " || ',' || ".join(f"{c}::text" for c in columns) + " || ']'"


def _delete_statements(qualified: str, tomb: str, qk: list[str], stage_d: str) -> tuple[str, str]:
    """A batch's deletes from the stage table ``stage_d`` (key columns ``qk``, quoted) and
    the tombstones they leave."""
    pos, kh, kj = quote_pg(POSITION_COLUMN), quote_pg(KEY_HASH), quote_pg(KEY_JSON)
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
    return delete_sql, tombstone_sql


def table_plan(sig: tuple, name: str, qualified: str, layout: TableLayout, col_names: dict[str, str], tomb: str
               ) -> PgTablePlan:
    """The statements of one sink table version (``qualified``; its tombstones in ``tomb``)."""
    cols = list(layout.columns)
    q = [quote_pg(col_names[c.name]) for c in cols]
    pos = quote_pg(POSITION_COLUMN)
    kh, kj = quote_pg(KEY_HASH), quote_pg(KEY_JSON)
    key_set = {c.name for c in layout.key}
    qk = [quote_pg(col_names[c.name]) for c in layout.key]
    types = [postgres_type(c) for c in cols]
    stage_u = quote_pg(STAGE_UPSERTS)
    stage_d = quote_pg(STAGE_DELETES)
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
    key_text = key_json_sql(layout, [f"s.{k}" for k in qk])
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
    inserts_stage_ddl, inserts_head = encoded_stage(quote_pg(STAGE_INSERTS))
    # (the tombstones the guard reads: at or above the batch's lowest position, through the
    # position index; older superseded ones go with the purge, as in a batch without the
    # guard.  Unbounded, the statement hashed every tombstone of the table, a cost growing
    # with the deletes of the last minute)
    def prune(stage: str) -> str:
        """the tombstones the rows staged in ``stage`` supersede, deleted"""
        return (f"DELETE FROM {tomb} d USING pg_temp.{stage} s WHERE d.table_name = %(table)s "
                f"AND {tomb_match} AND d.position < s.{pos} AND d.position >= %(lowest)s")

    delete_sql, tombstone_sql = _delete_statements(qualified, tomb, qk, stage_d)
    convs = [postgres_converter(c) for c in cols]
    fields = [c.field for c in cols]
    return PgTablePlan(
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
        inserts_prune_sql=prune(quote_pg(STAGE_INSERTS)),
    )
