"""The places a table is copied to, as verify reads them: the :class:`Target` interface and
the PostgreSQL and MySQL sink tables (the clean changelog is in :mod:`cdc.verify.changelog`).

How a chunk's rows are found in a sink table depends on the key's column types
(:attr:`cdc.verify.spec.TableSpec.mode`):

* ``range`` mode, when every key column compares the same way everywhere (integers,
  decimals, floats, BIT, binary strings, dates, times, datetimes, timestamps): the sink
  rows of chunk ``(lo, hi]`` are fetched with a range predicate on the key
  (``(k1, k2) > (lo1, lo2) AND (k1, k2) <= (hi1, hi2)``; the first chunk has no lower
  bound, the last none above), so the chunks tile the whole key space and a row the sink
  has beyond the source's is found in its chunk.
* ``keys`` mode, when a key column is a string (CHAR/VARCHAR/TEXT, ENUM, SET): MySQL's
  collations (``utf8mb4_general_ci`` ignores case and accents, PAD SPACE ignores
  trailing spaces, ENUM sorts by index) and the sinks' byte-wise order
  (``utf8mb4_nopad_bin``, PostgreSQL's ``text``) disagree, so a range would mean other
  rows on each side.  The sink rows of a chunk are fetched by the explicit list of the
  chunk's keys (``WHERE (k1, k2) IN ((..), ..)``, 1,000 keys a statement; the sinks
  compare keys byte for byte).  Rows only the sink has are not in any list: at the end
  ``COUNT(*)`` of the sink table minus the rows found gives their number, and when it is
  not zero the sink's keys are streamed in the sink's own order and looked up in the
  source in batches (the source compares with its collation, so each batch's answers are
  compared again exactly in Python); those not found are "extra in sink".
"""

from __future__ import annotations

from typing import Iterable, Iterator

import psycopg
import pymysql
import pymysql.cursors

from cdc.errors import TargetMissing, TargetUnusable
from cdc.verify.diff import Diffs
from cdc.verify.report import SinkResult
from cdc.verify.source import Chunk, SourceTable
from cdc.verify.spec import TableSpec
from cdc.verify.sql import LOOKUP_BATCH, key_after, key_in_list
from common.sql.quoting import quote_ident
from common.sql.tls import connect_mysql
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink, quote_pg

#: Rows per round trip of the streaming cursors.
STREAM_BATCH = 2000


class Target:
    """One place a table is copied to."""

    sink = ""

    def open(self, spec: TableSpec, result: SinkResult) -> None:
        """Prepare for a table (``result.target`` names the place); raises
        :class:`TargetUnusable` when it cannot be compared, :class:`TargetMissing` when the
        table or topic does not exist."""
        raise NotImplementedError

    def chunk_rows(self, chunk: Chunk) -> Iterator[tuple[tuple, tuple]]:
        raise NotImplementedError

    def finish(self, source: SourceTable, diffs: Diffs) -> None:
        """After the last chunk: count the rows the chunks did not cover."""

    def close(self) -> None:
        pass


class KeyedRowsTarget(Target):
    """A target read whole into memory (``rows``: normalised key -> normalised values) when
    a table's turn comes: the source chunks take their keys out of it, what is left at the end
    is "extra" (the clean changelog's replay, the lake tables)."""

    def __init__(self) -> None:
        self.rows: dict[tuple, tuple] = {}
        self._chunk: tuple[int, list] | None = None

    def chunk_rows(self, chunk: Chunk) -> Iterator[tuple[tuple, tuple]]:
        if self._chunk is None or self._chunk[0] != chunk.index:
            taken = []
            for key in chunk.rows:
                values = self.rows.pop(key, None)
                if values is not None:
                    taken.append((key, values))
            self._chunk = (chunk.index, taken)
        return iter(self._chunk[1])

    def finish(self, source: SourceTable, diffs: Diffs) -> None:
        for key, values in self.rows.items():
            diffs.extra(key, values)
        self.rows = {}


class DBTarget(Target):
    """A sink table in PostgreSQL or MySQL (dialect-specific parts in the subclasses)."""

    dialect = ""

    def __init__(self) -> None:
        self.conn = None
        self.spec: TableSpec | None = None
        self.matched = 0

    # -- dialect parts
    def quote(self, name: str) -> str:
        raise NotImplementedError

    def connect(self):
        raise NotImplementedError

    def qualified(self, db: str, table: str) -> str:
        raise NotImplementedError

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        """Column name -> data type of the sink table (None: no such table)."""
        raise NotImplementedError

    def select_expr(self, name: str, data_type: str) -> str:
        return self.quote(name)

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        raise NotImplementedError

    def fetch(self, sql: str, params: list) -> list[tuple]:
        raise NotImplementedError

    # -- common
    def open(self, spec: TableSpec, result: SinkResult) -> None:
        self.spec = spec
        self.matched = 0
        if self.conn is None:
            self.conn = self.connect()
        self.table = self.qualified(*spec.sink_name)
        result.target = self.table
        cols = self.sink_columns(*spec.sink_name)
        if cols is None:
            raise TargetMissing(f"sink table {self.table} does not exist")
        lower = {k.lower(): k for k in cols}
        # A shard in a route's target: only the rows with its origin (and extracted) values are its own.
        no_origin = [c for c in spec.origin if c not in cols]
        if no_origin:
            raise TargetUnusable(f"sink table {self.table} lacks the route's origin or column mapping column(s) "
                                 f"{', '.join(no_origin)}")
        self.scope = [f"{self.quote(c)} = %s" for c in spec.origin]
        self.scope_params = list(spec.origin.values())
        names: dict[str, str] = {}
        for c in spec.columns:
            found = c.name if c.name in cols else lower.get(c.name.lower())
            if found is None:
                result.missing_columns.append(c.name)
            else:
                names[c.name] = found
        missing_keys = [k for k in spec.key if k not in names]
        if missing_keys:
            raise TargetUnusable(f"sink table {self.table} lacks key column(s) {', '.join(missing_keys)}")
        # Columns the sink lacks are compared as NULL (and listed in missing_columns).
        self.qkeys = [self.quote(names[k]) for k in spec.key]
        exprs = [self.select_expr(names[c.name], cols[names[c.name]]) if c.name in names else "NULL"
                 for c in [*spec.key_specs, *spec.value_specs]]
        self.select = ", ".join(exprs)

    def _rows(self, raw: Iterable[tuple]) -> Iterator[tuple[tuple, tuple]]:
        spec = self.spec
        ks, vs, n = spec.key_specs, spec.value_specs, len(spec.key)
        for r in raw:
            yield (tuple(c.sink(v) for c, v in zip(ks, r[:n])), tuple(c.sink(v) for c, v in zip(vs, r[n:])))

    def chunk_rows(self, chunk: Chunk) -> Iterator[tuple[tuple, tuple]]:
        spec = self.spec
        if spec.mode == "range":
            where, params = [], []
            if chunk.lo is not None:
                p, ps = key_after(self.dialect, self.qkeys, spec.key_params(chunk.lo, self.dialect), ">")
                where.append(p)
                params += ps
            if chunk.hi is not None:
                p, ps = key_after(self.dialect, self.qkeys, spec.key_params(chunk.hi, self.dialect), "<=")
                where.append(p)
                params += ps
            sql = f"SELECT {self.select} FROM {self.table}{self._where(where)}"
            yield from self._rows(self.stream(sql, [*self.scope_params, *params]))
            return
        keys = list(chunk.rows)
        for i in range(0, len(keys), LOOKUP_BATCH):
            yield from self._lookup(keys[i:i + LOOKUP_BATCH])

    def _where(self, preds: list[str]) -> str:
        """`` WHERE`` the shard's scope (a routed table's origin values; its parameters
        first) and ``preds``, or nothing."""
        every = [*self.scope, *preds]
        return f" WHERE {' AND '.join(every)}" if every else ""

    def _lookup(self, keys: list[tuple]) -> Iterator[tuple[tuple, tuple]]:
        pred, params = key_in_list(self.qkeys, [self.spec.key_params(k, self.dialect) for k in keys])
        yield from self._rows(self.fetch(f"SELECT {self.select} FROM {self.table}{self._where([pred])}",
                                         [*self.scope_params, *params]))

    def finish(self, source: SourceTable, diffs: Diffs) -> None:
        if self.spec.mode == "range":
            return  # the chunks tiled the key space: every sink row was in one
        total = self.fetch(f"SELECT COUNT(*) FROM {self.table}{self._where([])}", self.scope_params)[0][0]
        diffs.result.sink_rows = int(total)
        if total <= self.matched:
            return
        # Rows only the sink has: its keys in its own order, looked up in the source.
        ks = self.spec.key_specs
        room = diffs.extra_room()
        sample_keys: list[tuple] = []
        batch: list[tuple] = []

        def check(batch: list[tuple]) -> None:
            held = source.lookup(batch)
            for k in batch:
                if k not in held:
                    if len(sample_keys) < room:
                        sample_keys.append(k)  # counted below, with its values
                    else:
                        diffs.result.extra += 1

        for r in self.stream(f"SELECT {', '.join(self.qkeys)} FROM {self.table}{self._where([])}", self.scope_params):
            batch.append(tuple(c.sink(v) for c, v in zip(ks, r)))
            if len(batch) >= LOOKUP_BATCH:
                check(batch)
                batch = []
        if batch:
            check(batch)
        found = {k: v for k, v in self._lookup(sample_keys)} if sample_keys else {}
        for k in sample_keys:
            diffs.extra(k, found.get(k))

    def origin_counts(self, target: tuple[str, str], origin: list[str]) -> dict[tuple, int] | None:
        """Rows per origin values (the shards' rows) in a route's target table; None when
        the table or one of the origin columns does not exist."""
        if self.conn is None:
            self.conn = self.connect()
        cols = self.sink_columns(*target)
        if cols is None or any(c not in cols for c in origin):
            return None
        q = ", ".join(self.quote(c) for c in origin)
        rows = self.fetch(f"SELECT {q}, COUNT(*) FROM {self.qualified(*target)} GROUP BY {q}", [])
        return {tuple(r[:-1]): int(r[-1]) for r in rows}

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing only
                pass
            self.conn = None


class PostgresTarget(DBTarget):
    sink = "postgres"
    dialect = "postgres"

    def __init__(self, sink: PostgresSink) -> None:
        super().__init__()
        self.dsn = sink.dsn
        self.names = sink
        self._n = 0

    def quote(self, name: str) -> str:
        return quote_pg(name)

    def connect(self):
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET extra_float_digits = 3")  # exact float text on every version
        return conn

    def qualified(self, db: str, table: str) -> str:
        return self.names.qualified_name(db, table)

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        rows = self.fetch("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                          "AND table_name = %s", [self.names.schema_name, self.names.table_name(db, table)])
        return {r[0]: r[1] for r in rows} or None

    def select_expr(self, name: str, data_type: str) -> str:
        q = self.quote(name)
        if data_type in ("jsonb", "json", "bit", "bit varying"):
            return f"{q}::text"  # jsonb 'null' stays text, bit(n) a '0101' string
        return q

    def fetch(self, sql: str, params: list) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        self._n += 1
        with self.conn.transaction(), self.conn.cursor(name=f"cdc_verify_{self._n}") as cur:
            cur.itersize = STREAM_BATCH
            cur.execute(sql, params)
            while True:
                rows = cur.fetchmany(STREAM_BATCH)
                if not rows:
                    return
                yield from rows


class MySQLTarget(DBTarget):
    sink = "mysql"
    dialect = "mysql"

    def __init__(self, sink: MySQLSink) -> None:
        super().__init__()
        db = sink.db  # (its connection's settings: the same server, login and TLS)
        self.args = dict(host=db.host, port=db.port, user=db.user, password=db.password)
        self.tls = db.tls
        self.database = db.database
        self.names = sink

    def quote(self, name: str) -> str:
        return quote_ident(name)

    def connect(self):
        conn = connect_mysql(self.tls, **self.args, charset="utf8mb4", autocommit=True, connect_timeout=10,
                             binary_prefix=True)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    def qualified(self, db: str, table: str) -> str:
        return self.names.qualified_name(db, table)

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        rows = self.fetch("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                          "AND TABLE_NAME = %s", [self.database, self.names.table_name(db, table)])
        return {r[0]: r[1].lower() for r in rows} or None

    def select_expr(self, name: str, data_type: str) -> str:
        q = self.quote(name)
        return f"CAST({q} AS DOUBLE)" if data_type == "float" else q

    def fetch(self, sql: str, params: list) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        cur = self.conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(sql, params or None)
            while True:
                rows = cur.fetchmany(STREAM_BATCH)
                if not rows:
                    return
                yield from rows
        finally:
            cur.close()
