"""Table sinks on the real stack: PostgreSQL and MariaDB (MySQL 8.4 with the containers stack).

Every test runs against both sinks.  Records are built the way the pipeline builds them:
rows read from a real source table (or given as the stored values), converted by the
producer's ``RowConverter``, encoded and decoded by fastavro through the producer's
envelope schema.  Names are unique per test; each sink schema/database is dropped after.
"""

from __future__ import annotations

import io
import json
import pickle
import random
import threading
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterator

import psycopg
import pymysql
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from psycopg.rows import dict_row

from contract.codecs.avro_decoder import compile_change_header
from contract.codecs.serde import AvroWriter
from contract.envelope import envelope_schema
from producer.events.avro_types import avro_fullname, row_record_schema
from producer.events.values import RowConverter
from producer.snapshot.table_reader import read_table_def
from producer.table_schema import ColumnDef, TableDef
from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.batch import ApplyResult, EncodedChange
from spark_jobs.sinks.layout import row_columns
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink, quote_pg
from tests.all_types import create_all_types

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1)


def P(n: int) -> str:
    return f"{n:030d}"


# ----------------------------------------------------------------------------- schemas and records
def envelope_for(table: TableDef) -> dict:
    ns = avro_fullname(f"cdc.{table.db}.{table.name}")
    return envelope_schema(row_record_schema(table, f"{ns}.Value"), f"{ns}.Envelope")


class Source:
    """A table definition with its envelope schema; turns stored rows into decoded records."""

    def __init__(self, table: TableDef) -> None:
        self.table = table
        self.schema = envelope_for(table)
        self.parsed = parse_schema(self.schema)
        self.conv = RowConverter(table)
        self.keys = list(table.primary_key)

    def after(self, stored: dict) -> dict:
        """The ``after`` record as a consumer decodes it (producer conversion + Avro round trip)."""
        full = {c.name: stored.get(c.name) for c in self.table.columns}
        value = {"before": None, "after": self.conv.convert(full), "source": {
            "version": "0", "connector": "mysql", "name": "t", "ts_ms": 0, "snapshot": "false",
            "db": self.table.db, "sequence": None, "table": self.table.name, "server_id": 1, "gtid": None,
            "file": "mysql-bin.000001", "pos": 4, "row": 0, "thread": None, "query": None},
            "op": "c", "ts_ms": 0, "transaction": None, "position": P(0), "snapshot_window": None}
        buf = io.BytesIO()
        schemaless_writer(buf, self.parsed, value)
        buf.seek(0)
        return schemaless_reader(buf, self.parsed, self.parsed)["after"]

    def upsert(self, stored: dict, pos: int, op: str = "u") -> tuple:
        after = self.after(stored)
        return ({k: after[k] for k in self.keys}, op, after, P(pos))

    def delete(self, key: dict, pos: int) -> tuple:
        after = self.after({**{c.name: None for c in self.table.columns}, **key})
        return ({k: after[k] for k in self.keys}, "d", None, P(pos))


def col(name: str, data_type: str, column_type: str, *, nullable: bool = True, prec=None, scale=None, dtp=None,
        cs=None, maxlen=None) -> ColumnDef:
    return ColumnDef(name=name, data_type=data_type, column_type=column_type, nullable=nullable, ordinal=0,
                     numeric_precision=prec, numeric_scale=scale, datetime_precision=dtp, character_set=cs,
                     char_max_length=maxlen)


def table_def(db: str, name: str, cols: list[ColumnDef], pk: list[str]) -> TableDef:
    cols = [ColumnDef(**{**c.definition(), "ordinal": i + 1}) for i, c in enumerate(cols)]
    return TableDef(db, name, cols, pk)


SIMPLE = [col("id", "int", "int(11)", nullable=False, prec=10, scale=0),
          col("v", "varchar", "varchar(50)", cs="utf8mb4", maxlen=50),
          col("n", "decimal", "decimal(12,3)", prec=12, scale=3)]


def simple_source(db: str = "shop", name: str = "items") -> Source:
    return Source(table_def(db, name, SIMPLE, ["id"]))


def text_keyed_source(db: str = "shop", name: str = "items") -> Source:
    """SIMPLE with a VARCHAR ``id``: tombstones matched by their key hash, not their JSON text."""
    return Source(table_def(db, name, [col("id", "varchar", "varchar(20)", nullable=False, cs="utf8mb4", maxlen=20),
                                       *SIMPLE[1:]], ["id"]))


#: Per key kind of the tombstone tests: the source, and a key value of a number
KEYED = {"int": (simple_source, int), "text": (text_keyed_source, lambda i: f"k{i}")}


# ----------------------------------------------------------------------------- canonical values
def canon_avro(kind: str, v: Any) -> Any:
    """An Avro value in the comparison form (independent of the sink's own converters)."""
    if v is None:
        return None
    if kind == "decimal":
        return str(v)
    if kind == "bits":
        return int.from_bytes(v, "little")
    if kind == "json":
        return json.loads(v)
    if kind == "date":
        return date(1970, 1, 1) + timedelta(days=v)
    if kind == "timestamp_ms":
        return EPOCH + timedelta(milliseconds=v)
    if kind == "timestamp_us":
        return EPOCH + timedelta(microseconds=v)
    if kind == "zoned_timestamp":
        return datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(UTC)
    if kind in ("geometry", "point"):
        return bytes(v["wkb"])
    if kind == "bytes":
        return bytes(v)
    if kind == "boolean":
        return bool(v)
    return v


def canon_db(kind: str, v: Any) -> Any:
    """A value read back from either sink in the comparison form."""
    if v is None:
        return None
    if kind == "decimal":
        return str(v)
    if kind == "boolean":
        return bool(int.from_bytes(v, "big")) if isinstance(v, (bytes, bytearray)) else bool(v)
    if kind == "bits":
        return int(v, 2) if isinstance(v, str) else int.from_bytes(v, "big")
    if kind == "json":
        return json.loads(v) if isinstance(v, str) else v
    if kind == "time":
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if kind == "zoned_timestamp":
        return v.astimezone(UTC) if v.tzinfo is not None else v.replace(tzinfo=UTC)
    if kind in ("geometry", "point", "bytes"):
        return bytes(v)
    return v


# ----------------------------------------------------------------------------- backends
class Backend:
    name = ""
    sink: Any

    def rows(self, db: str, table: str) -> list[dict]:
        raise NotImplementedError

    def column_types(self, db: str, table: str) -> dict[str, str]:
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """End the sink's connection from the server side (as a server restart would)."""
        raise NotImplementedError

    def table(self, db: str, table: str, key: list[str]) -> dict[tuple, dict]:
        return {tuple(r[k] for k in key): r for r in self.rows(db, table)}


class PgBackend(Backend):
    name = "postgres"

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.sink = PostgresSink(dsn, schema)

    def rows(self, db: str, table: str) -> list[dict]:
        with psycopg.connect(self.dsn, row_factory=dict_row) as conn:
            return conn.execute(f"SELECT * FROM {self.sink.qualified_name(db, table)}").fetchall()

    def column_types(self, db: str, table: str) -> dict[str, str]:
        with psycopg.connect(self.dsn) as conn:
            return dict(conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                "to_regclass(%s) AND attnum > 0 AND NOT attisdropped", [self.sink.qualified_name(db, table)]))

    def primary_key(self, db: str, table: str) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            return [r[0] for r in conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)", [self.sink.qualified_name(db, table)])]

    def drop(self) -> None:
        self.sink.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {quote_pg(self.schema)} CASCADE")

    def kill(self) -> None:
        pid = self.sink.connection().info.backend_pid
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
            while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                time.sleep(0.01)


class MyBackend(Backend):
    name = "mysql"

    def __init__(self, host: str, port: int, user: str, password: str, database: str) -> None:
        self.args = dict(host=host, port=port, user=user, password=password)
        self.database = database
        self.sink = MySQLSink(host, port, user, password, database)

    def connect(self, **kw) -> pymysql.connections.Connection:
        conn = pymysql.connect(**self.args, charset="utf8mb4", autocommit=True, **kw)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    def rows(self, db: str, table: str) -> list[dict]:
        with self.connect(cursorclass=pymysql.cursors.DictCursor) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {self.sink.qualified_name(db, table)}")
            return list(cur.fetchall())

    def column_types(self, db: str, table: str) -> dict[str, str]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s", [self.database, self.sink.table_name(db, table)])
            return dict(cur.fetchall())

    def primary_key(self, db: str, table: str) -> list[str]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
                        [self.database, self.sink.table_name(db, table)])
            return [r[0] for r in cur.fetchall()]

    def drop(self) -> None:
        self.sink.close()
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")

    def kill(self) -> None:
        thread = self.sink.connection().thread_id()
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(f"KILL {int(thread)}")
            while cur.execute("SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s", [thread]):
                time.sleep(0.01)


def make_backend(kind: str, config, unique) -> Backend:
    if kind == "postgres":
        return PgBackend(config.sinks.postgres.dsn.get_secret_value(), unique("sink"))
    m = config.sinks.mysql
    return MyBackend(m.host, m.port, m.user, m.password.get_secret_value(), unique("sink"))


@pytest.fixture(params=["postgres", "mysql"])
def backend(request, config, unique) -> Iterator[Backend]:
    b = make_backend(request.param, config, unique)
    try:
        yield b
    finally:
        b.drop()


@pytest.fixture
def mysql_backend(config, unique) -> Iterator[Backend]:
    b = make_backend("mysql", config, unique)
    try:
        yield b
    finally:
        b.drop()


def values(backend: Backend, db: str, table: str, key: list[str], cols: list[str]) -> dict[tuple, tuple]:
    """key -> (selected columns...) of the sink table."""
    return {k: tuple(r[c] for c in cols) for k, r in backend.table(db, table, key).items()}


# ----------------------------------------------------------------------------- all types from a real source
def read_source(stack, db: str, table: str) -> tuple[TableDef, list[dict]]:
    """The table's definition and rows, read the way the snapshot reader reads them (UTC)."""
    with stack.admin(db) as conn:
        tdef = read_table_def(conn, db, table)
    with stack.admin(db, cursorclass=pymysql.cursors.DictCursor) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM `{table}` ORDER BY 1")
        return tdef, list(cur.fetchall())


def test_all_types_round_trip_faithfully(backend, stack, test_db):
    with stack.admin(test_db) as conn:
        create_all_types(conn, stack.mysql.get("flavor", "mariadb") == "mariadb")
    tdef, stored = read_source(stack, test_db, "types")
    # MariaDB reports JSON as longtext (a plain string, as Debezium does); read it as MySQL 8's
    # json type so the Json semantic type is exercised too (the text is already canonical).
    tdef = TableDef(tdef.db, tdef.name, [ColumnDef(**{**c.definition(), "data_type": "json", "column_type": "json"})
                                         if c.name == "js" else c for c in tdef.columns], tdef.primary_key)
    src = Source(tdef)
    kinds = {c.name: c.kind for c in row_columns(src.schema)}
    assert kinds["js"] == "json" and kinds["g"] == "point" and kinds["geo"] == "geometry"
    assert len(set(kinds.values())) >= 17

    records = [src.upsert(r, 100 + i, "r") for i, r in enumerate(stored)]
    result = backend.sink.apply(test_db, "types", src.schema, ["id"], records)
    assert (result.upserted, result.deleted, result.skipped, result.superseded) == (3, 0, 0, 0)

    got = backend.table(test_db, "types", ["id"])
    assert sorted(got) == [(1,), (2,), (3,)]
    for i, (rec, row) in enumerate(zip(records, stored)):
        sink_row = got[(row["id"],)]
        assert sink_row["__cdc_position"] == P(100 + i)
        after = rec[2]
        for name, kind in kinds.items():
            assert canon_db(kind, sink_row[name]) == canon_avro(kind, after[name]), (row["id"], name, kind)

    if backend.name == "mysql":
        # The sink table equals the source table, value for value as a client reads them
        # (geometry aside: the sink keeps the WKB without MySQL's 4-byte SRID prefix).
        for row in stored:
            sink_row = got[(row["id"],)]
            for name, v in row.items():
                if name in ("g", "geo"):
                    assert sink_row[name] == (None if v is None else v[4:]), name
                else:
                    assert sink_row[name] == v, (row["id"], name, sink_row[name], v)
    else:
        pg_row = got[(1,)]
        assert pg_row["d65"] == Decimal("-12345678901234567890123456789012345.123456789012345678901234567890")
        assert pg_row["tm"] == -timedelta(hours=838, minutes=59, seconds=59)
        assert pg_row["ts6"] == datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)
        assert pg_row["b12"] == "101000000001"
        assert pg_row["js"] == {"k": [1, 2.5, "s"], "u": "\u00e9\U0001F600"}
        assert pg_row["vc"] == "emoji \U0001F600 ok 'q' \\ \"dq\""

    # the same batch again changes nothing
    again = backend.sink.apply(test_db, "types", src.schema, ["id"], records)
    assert (again.upserted, again.skipped) == (0, 3)
    assert backend.table(test_db, "types", ["id"]) == got
    # every column type reads back as what the schema maps to: a new sink alters nothing
    fresh = pickle.loads(pickle.dumps(backend.sink))
    try:
        fresh.ensure_table(test_db, "types", src.schema, ["id"])
        assert fresh.last_alters == []
    finally:
        fresh.close()


def test_table_layout(backend):
    src = Source(table_def("shop", "layout", SIMPLE + [
        col("dt6", "datetime", "datetime(6)", dtp=6), col("ts", "timestamp", "timestamp(6)", dtp=6),
        col("tm", "time", "time(6)", dtp=6), col("b5", "bit", "bit(5)", prec=5),
        col("biu", "bigint", "bigint(20) unsigned", prec=20, scale=0)], ["id"]))
    name = backend.sink.ensure_table("shop", "layout", src.schema, ["id"])
    assert "shop__layout" in name
    types = backend.column_types("shop", "layout")
    assert backend.primary_key("shop", "layout") == ["id"]
    if backend.name == "postgres":
        assert types == {"id": "integer", "v": "text", "n": "numeric(12,3)", "dt6": "timestamp(6) without time zone",
                         "ts": "timestamp(6) with time zone", "tm": "interval", "b5": "bit(5)",
                         "biu": "numeric(20,0)", "__cdc_position": "character(30)"}
    else:
        norm = {k: v.replace("int(11)", "int").replace("bigint(20)", "bigint") for k, v in types.items()}
        assert norm == {"id": "int", "v": "longtext", "n": "decimal(12,3)", "dt6": "datetime(6)",
                        "ts": "timestamp(6)", "tm": "time(6)", "b5": "bit(5)", "biu": "decimal(20,0)",
                        "__cdc_position": "char(30)"}
    # idempotent, also from a fresh sink object
    assert backend.sink.ensure_table("shop", "layout", src.schema, ["id"]) == name
    other = pickle.loads(pickle.dumps(backend.sink))
    try:
        assert other.ensure_table("shop", "layout", src.schema, ["id"]) == name
        assert other.last_alters == []  # the existing table is read back as exactly what the schema maps to
    finally:
        other.close()


# ----------------------------------------------------------------------------- ordering rules
def test_upserts_deletes_counts_and_replays(backend):
    src = simple_source()
    keys = ["id"]
    b1 = [src.upsert({"id": i, "v": f"v{i}", "n": Decimal(i)}, 10 + i, "c") for i in (1, 2, 3)]
    b2 = [src.upsert({"id": 1, "v": "one", "n": Decimal("1.5")}, 20), src.delete({"id": 2}, 21),
          src.upsert({"id": 4, "v": "four", "n": None}, 22, "c")]
    sink = backend.sink

    r = sink.apply("shop", "items", src.schema, keys, b1)
    assert (r.upserted, r.deleted, r.skipped, r.superseded) == (3, 0, 0, 0)
    r = sink.apply("shop", "items", src.schema, keys, b2)
    assert (r.upserted, r.deleted, r.skipped, r.superseded) == (2, 1, 0, 0)
    expected = {(1,): ("one", Decimal("1.500"), P(20)), (3,): ("v3", Decimal("3.000"), P(13)),
                (4,): ("four", None, P(22))}
    assert values(backend, "shop", "items", keys, ["v", "n", "__cdc_position"]) == expected

    # replay the newer batch, then the older one: nothing changes, everything is skipped
    r = sink.apply("shop", "items", src.schema, keys, b2)
    assert (r.upserted, r.deleted, r.skipped) == (0, 0, 3)
    r = sink.apply("shop", "items", src.schema, keys, b1)
    assert (r.upserted, r.deleted, r.skipped) == (0, 0, 3)
    assert values(backend, "shop", "items", keys, ["v", "n", "__cdc_position"]) == expected

    # both batches at once, shuffled, with copies: same table
    mixed = b1 + b2 + b1 + b2[:1]
    random.Random(7).shuffle(mixed)
    r = sink.apply("shop", "items", src.schema, keys, mixed)
    assert (r.upserted, r.deleted, r.skipped, r.superseded) == (0, 0, 4, 6)
    assert values(backend, "shop", "items", keys, ["v", "n", "__cdc_position"]) == expected


def test_an_older_batch_after_a_newer_one_changes_nothing(backend):
    src = simple_source()
    newer = [src.upsert({"id": i, "v": f"new{i}", "n": Decimal(i)}, 1000 + i, "c") for i in range(50)]
    older = [src.upsert({"id": i, "v": f"old{i}", "n": Decimal(-i)}, 500 + i) for i in range(60)]
    older += [src.delete({"id": i}, 600 + i) for i in range(60, 70)]
    backend.sink.apply("shop", "items", src.schema, ["id"], newer)
    before = values(backend, "shop", "items", ["id"], ["v", "n", "__cdc_position"])
    r = backend.sink.apply("shop", "items", src.schema, ["id"], older)
    # keys 50..59 are new to the sink (applied), 0..49 older than the sink (skipped), 60..69 deletes
    assert (r.upserted, r.deleted, r.skipped) == (10, 10, 50)
    after = values(backend, "shop", "items", ["id"], ["v", "n", "__cdc_position"])
    assert {k: v for k, v in after.items() if k[0] < 50} == before
    assert sorted(k[0] for k in after) == list(range(60))


def test_a_deleted_row_is_not_resurrected_by_an_older_insert(backend):
    src = simple_source()
    sink = backend.sink
    ins = src.upsert({"id": 7, "v": "a", "n": Decimal(1)}, 5, "c")
    dele = src.delete({"id": 7}, 10)

    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [ins])) == (1, 0, 0)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [dele])) == (0, 1, 0)
    assert backend.rows("shop", "items") == []
    assert sink.tombstones("shop", "items") == [("[7]", P(10))]
    # the older insert replayed (a later batch) must not bring the row back
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [ins])) == (0, 0, 1)
    assert backend.rows("shop", "items") == []
    # a delete of a key the sink never held is remembered too
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 8}, 30)])) == (0, 1, 0)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 8, "v": "late", "n": None}, 29, "c")])) == (0, 0, 1)
    # an older delete than the tombstone is skipped, a newer one raises it
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 9)])) == (0, 0, 1)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 11)])) == (0, 1, 0)
    assert sink.tombstones("shop", "items") == [("[7]", P(11)), ("[8]", P(30))]
    # a newer insert comes back (its tombstone is superseded: MySQL drops it, PostgreSQL prunes
    # only the tombstones at or above the batch's lowest position and leaves this older one to
    # the purge); older deletes then lose to the row
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 7, "v": "back", "n": None}, 15, "c")])) == (1, 0, 0)
    left = sink.tombstones("shop", "items")
    assert left == ([("[7]", P(11)), ("[8]", P(30))] if backend.name == "postgres" else [("[8]", P(30))])
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [dele, ins])) == (0, 0, 1)  # 1 superseded
    assert values(backend, "shop", "items", ["id"], ["v", "__cdc_position"]) == {(7,): ("back", P(15))}
    # tombstones below a position nothing can replay any more can be purged (PostgreSQL's
    # appended key 7's newer tombstone and kept the one at 10 below it: three rows)
    assert sink.purge_tombstones(P(31)) == len(left) + (backend.name == "postgres")
    assert sink.tombstones("shop", "items") == []


def test_a_batch_above_every_tombstone_skips_the_guard_and_stale_tombstones_stop_nothing_wrongly(backend):
    """With no tombstone at or above a batch's lowest position the batch is applied without
    the tombstone guard, so a re-inserted key keeps its older tombstone: it never stops a
    record the row's own position would let through, and purging goes by table."""
    src = simple_source()
    sink = backend.sink
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 10)])) == (0, 1, 0)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 7, "v": "back", "n": None}, 15, "c")])) == (1, 0, 0)
    assert sink.tombstones("shop", "items") == [("[7]", P(10))]  # below the row: stale, kept
    # older than the row: skipped (by the row's position), whatever the tombstone says
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 7, "v": "old", "n": None}, 12, "u")])) == (0, 0, 1)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 12)])) == (0, 0, 1)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 7, "v": "new", "n": None}, 16, "u")])) == (1, 0, 0)
    assert values(backend, "shop", "items", ["id"], ["v", "__cdc_position"]) == {(7,): ("new", P(16))}
    # a newer delete raises the tombstone; the older insert replayed then stays out
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 20)])) == (0, 1, 0)
    assert sink.tombstones("shop", "items") == [("[7]", P(20))]
    assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                            [src.upsert({"id": 7, "v": "old", "n": None}, 16, "u")])) == (0, 0, 1)
    assert backend.rows("shop", "items") == []
    # purging by table: only the tables ``wanted`` names, only below the position
    other = simple_source("shop", "other")
    assert tuple(sink.apply("shop", "other", other.schema, ["id"], [other.delete({"id": 1}, 5)])) == (0, 1, 0)
    assert sink.purge_tombstones(P(30), wanted=lambda db, table: table == "other") == 1
    assert sink.tombstones("shop", "other") == []
    # (below 20: only PostgreSQL's older tombstone of key 7, at 10, kept beside the one at 20)
    assert sink.purge_tombstones(P(20), wanted=lambda db, table: True) == (backend.name == "postgres")
    assert sink.tombstones("shop", "items") == [("[7]", P(20))]
    assert sink.purge_tombstones(P(21), wanted=lambda db, table: True) == 1
    assert sink.tombstones("shop", "items") == []


def test_concurrent_delete_and_older_insert_never_resurrect(backend):
    """A zombie task replaying old inserts while the live one deletes: the deletes win, always."""
    src = simple_source()
    backend.sink.ensure_table("shop", "items", src.schema, ["id"])
    n = 300
    inserts = [src.upsert({"id": i, "v": "zombie", "n": None}, 100 + i, "c") for i in range(n)]
    deletes = [src.delete({"id": i}, 1000 + i) for i in range(n)]
    sinks = [pickle.loads(pickle.dumps(backend.sink)) for _ in range(2)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(sink, batches):
        try:
            barrier.wait()
            for b in batches:
                sink.apply("shop", "items", src.schema, ["id"], b)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    chunk = 30
    zombie = [inserts[i:i + chunk] for i in range(0, n, chunk)] * 2  # it replays its batches twice
    threads = [threading.Thread(target=run, args=(sinks[0], zombie)),
               threading.Thread(target=run, args=(sinks[1], [deletes[i:i + chunk] for i in range(0, n, chunk)]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sinks:
        s.close()
    assert not errors, errors
    assert backend.rows("shop", "items") == []
    assert len(backend.sink.tombstones("shop", "items")) == n


def test_mysql_on_duplicate_key_guard_needs_the_position_last(mysql_backend):
    """The ODKU statement alone (no pre-read) keeps newer rows, because the position is assigned last."""
    backend = mysql_backend
    src = simple_source()
    sink = backend.sink
    sink.apply("shop", "items", src.schema, ["id"], [src.upsert({"id": 1, "v": "new", "n": Decimal(2)}, 50, "c")])
    plan = sink.prepared_plan("shop", "items")
    pos = "`__cdc_position`"
    guard = f"{pos} < VALUES({pos})"
    assert plan.insert_suffix.endswith(f"{pos} = IF({guard}, VALUES({pos}), {pos})")

    def raw_upsert(v: str, at: int, suffix: str) -> None:
        conn = sink.connection()
        with conn.cursor() as cur:
            cur.execute(plan.insert_prefix + f"(1, '{v}', NULL, '{P(at)}')" + suffix)
        conn.commit()

    raw_upsert("older", 40, plan.insert_suffix)
    assert values(backend, "shop", "items", ["id"], ["v", "n", "__cdc_position"]) == {(1,): ("new", Decimal(2), P(50))}
    raw_upsert("newer", 60, plan.insert_suffix)
    assert values(backend, "shop", "items", ["id"], ["v", "n", "__cdc_position"]) == {(1,): ("newer", None, P(60))}
    # With the position assigned first, the other columns compare with the *new* position and
    # keep their old values: the row would claim position 70 with the data of position 60.
    wrong = (f" ON DUPLICATE KEY UPDATE {pos} = IF({guard}, VALUES({pos}), {pos}), "
             f"`v` = IF({guard}, VALUES(`v`), `v`), `n` = IF({guard}, VALUES(`n`), `n`)")
    raw_upsert("lost", 70, wrong)
    assert values(backend, "shop", "items", ["id"], ["v", "__cdc_position"]) == {(1,): ("newer", P(70))}


# ----------------------------------------------------------------------------- schema changes
def test_an_added_column_appears_and_older_schemas_still_apply(backend):
    v1 = simple_source()
    v2 = Source(table_def("shop", "items", SIMPLE + [col("added", "varchar", "varchar(10)", nullable=False,
                                                         cs="utf8mb4", maxlen=10),
                                                     col("qty", "bigint", "bigint(20)", prec=19, scale=0)], ["id"]))
    sink = backend.sink
    sink.apply("shop", "items", v1.schema, ["id"], [v1.upsert({"id": 1, "v": "a", "n": None}, 1, "c")])
    assert "added" not in backend.column_types("shop", "items")
    sink.ensure_table("shop", "items", v2.schema, ["id"])
    assert len(sink.last_alters) == 2 and all("ADD COLUMN" in a for a in sink.last_alters)
    r = sink.apply("shop", "items", v2.schema, ["id"],
                   [v2.upsert({"id": 2, "v": "b", "n": None, "added": "new \U0001F600", "qty": 2**40}, 2, "c"),
                    v2.upsert({"id": 1, "v": "a2", "n": None, "added": "x", "qty": None}, 3)])
    assert r.upserted == 2
    assert {"added", "qty"} <= set(backend.column_types("shop", "items"))
    assert values(backend, "shop", "items", ["id"], ["v", "added", "qty"]) == {
        (1,): ("a2", "x", None), (2,): ("b", "new \U0001F600", 2**40)}
    # a record still encoded with the old schema updates the columns it has, leaves the rest
    sink.apply("shop", "items", v1.schema, ["id"], [v1.upsert({"id": 2, "v": "b2", "n": Decimal("0.5")}, 4),
                                                    v1.upsert({"id": 3, "v": "c", "n": None}, 5, "c")])
    assert values(backend, "shop", "items", ["id"], ["v", "added", "qty"]) == {
        (1,): ("a2", "x", None), (2,): ("b2", "new \U0001F600", 2**40), (3,): ("c", None, None)}


def test_a_widened_column_type_is_altered(backend):
    narrow = Source(table_def("shop", "w", [SIMPLE[0], col("q", "int", "int(11)", prec=10, scale=0)], ["id"]))
    wide = Source(table_def("shop", "w", [SIMPLE[0], col("q", "bigint", "bigint(20)", prec=19, scale=0)], ["id"]))
    backend.sink.apply("shop", "w", narrow.schema, ["id"], [narrow.upsert({"id": 1, "q": 5}, 1, "c")])
    backend.sink.apply("shop", "w", wide.schema, ["id"], [wide.upsert({"id": 2, "q": 2**50}, 2, "c")])
    assert len(backend.sink.last_alters) == 1 and "bigint" in backend.sink.last_alters[0].lower()
    assert values(backend, "shop", "w", ["id"], ["q"]) == {(1,): (5,), (2,): (2**50,)}


def test_a_changed_key_or_a_name_clash_is_refused(backend):
    src = simple_source("a__b", "c")
    backend.sink.ensure_table("a__b", "c", src.schema, ["id"])
    clash = simple_source("a", "b__c")  # maps to the same sink table name a__b__c
    with pytest.raises(SinkError, match="already mirrors"):
        backend.sink.ensure_table("a", "b__c", clash.schema, ["id"])
    with pytest.raises(SinkError, match="key"):
        backend.sink.ensure_table("a__b", "c", src.schema, ["id", "v"])


def test_long_names_are_shortened_not_truncated_silently(backend):
    db, table = "d" * 40, "t" * 40
    src = simple_source(db, table)
    backend.sink.apply(db, table, src.schema, ["id"], [src.upsert({"id": 1, "v": "x", "n": None}, 1, "c")])
    name = backend.sink.table_name(db, table)
    assert len(name.encode()) <= (63 if backend.name == "postgres" else 64) and name != f"{db}__{table}"
    assert [r["v"] for r in backend.rows(db, table)] == ["x"]


# ----------------------------------------------------------------------------- connection and maintenance
def test_a_lost_connection_is_sink_unavailable_and_the_next_call_reconnects(backend):
    src = simple_source()
    sink = backend.sink
    sink.apply("shop", "items", src.schema, ["id"], [src.upsert({"id": 1, "v": "a", "n": None}, 1, "c")])
    second = [src.upsert({"id": 2, "v": "b", "n": None}, 2, "c")]
    backend.kill()
    with pytest.raises(SinkUnavailable, match=type(sink).__name__):
        sink.apply("shop", "items", src.schema, ["id"], second)
    assert tuple(sink.apply("shop", "items", src.schema, ["id"], second)) == (1, 0, 0)
    backend.kill()
    with pytest.raises(SinkUnavailable):
        sink.applied_positions()
    assert sink.applied_positions() == {("shop", "items"): P(2)}


def test_applied_positions_and_delete_below(backend):
    sink = backend.sink
    assert sink.applied_positions() == {}
    assert sink.delete_below("shop", "items", P(5)) == 0  # no table yet
    src, other = simple_source(), simple_source("shop", "empty")
    sink.apply("shop", "items", src.schema, ["id"],
               [src.upsert({"id": i, "v": f"v{i}", "n": None}, 10 * i, "c") for i in range(1, 5)])
    sink.ensure_table("shop", "empty", other.schema, ["id"])
    assert sink.applied_positions() == {("shop", "items"): P(40)}  # a table without rows is left out
    assert sink.delete_below("shop", "items", P(25)) == 2
    assert sorted(r["id"] for r in backend.rows("shop", "items")) == [3, 4]
    assert sink.delete_below("shop", "empty", P(25)) == 0



def test_rename_and_drop_table_keep_a_table_created_again_under_the_old_name(backend):
    """RENAME and DROP TABLE with their position: a sink table holding rows written after
    the statement (the table was created again under that name before the statement was
    read, e.g. from Debezium's schema change topic) is left as it is; without such rows
    the table is renamed, or dropped."""
    sink = backend.sink
    src = simple_source("shop", "again")
    sink.apply("shop", "again", src.schema, ["id"], [src.upsert({"id": i, "v": "new", "n": i}, 100 + i, "c")
                                                     for i in range(3)])
    assert sink.rename_table("shop", "again", "shop", "again_old", position=P(50)) == "none"
    assert sorted(r["id"] for r in backend.rows("shop", "again")) == [0, 1, 2]
    assert sink.drop_table("shop", "again", below=P(50)) is True  # nothing below: the rows stay
    assert sorted(r["id"] for r in backend.rows("shop", "again")) == [0, 1, 2]
    assert sink.rename_table("shop", "again", "shop", "again_old", position=P(500)) == "renamed"
    assert sorted(r["id"] for r in backend.rows("shop", "again_old")) == [0, 1, 2]


# ----------------------------------------------------------------------------- keys
def test_composite_and_string_keys(backend):
    src = Source(table_def("shop", "ck", [
        col("name", "varchar", "varchar(300)", nullable=False, cs="utf8mb4", maxlen=300),
        col("region", "smallint", "smallint(6)", nullable=False, prec=5, scale=0),
        col("v", "int", "int(11)", prec=10, scale=0)], ["name", "region"]))
    names = ["a", "A", "a ", " a", "\u00e9", "e\u0301", "\U0001F600", "x" * 300, "q'uo\"te\\"]
    recs = [src.upsert({"name": n, "region": r, "v": i * 10 + r}, 1 + i * 10 + r, "c")
            for i, n in enumerate(names) for r in (1, 2)]
    r = backend.sink.apply("shop", "ck", src.schema, ["name", "region"], recs)
    assert r.upserted == len(names) * 2
    got = values(backend, "shop", "ck", ["name", "region"], ["v"])
    assert got == {(n, reg): (i * 10 + reg,) for i, n in enumerate(names) for reg in (1, 2)}
    assert backend.primary_key("shop", "ck") == ["name", "region"]
    # delete some by composite key, update others; a stale delete of another key is skipped
    dels = [src.delete({"name": n, "region": 1}, 500 + i) for i, n in enumerate(names)]
    ups = [src.upsert({"name": n, "region": 2, "v": -1}, 600 + i) for i, n in enumerate(names)]
    r = backend.sink.apply("shop", "ck", src.schema, ["name", "region"], dels + ups + [
        src.delete({"name": "A", "region": 2}, 1)])
    assert (r.upserted, r.deleted, r.skipped, r.superseded) == (len(names), len(names), 0, 1)
    assert values(backend, "shop", "ck", ["name", "region"], ["v"]) == {(n, 2): (-1,) for n in names}
    # the same again: nothing to do
    r = backend.sink.apply("shop", "ck", src.schema, ["name", "region"], dels + ups)
    assert (r.upserted, r.deleted, r.skipped) == (0, 0, 2 * len(names))


def test_binary_and_temporal_keys(backend):
    src = Source(table_def("shop", "bk", [
        col("k", "varbinary", "varbinary(16)", nullable=False, maxlen=16),
        col("d", "datetime", "datetime(6)", nullable=False, dtp=6),
        col("t", "time", "time(6)", nullable=False, dtp=6),
        col("v", "varchar", "varchar(5)", cs="utf8mb4", maxlen=5)], ["k", "d", "t"]))
    keys = [(b"", datetime(2020, 1, 1), timedelta(0)), (b"\x00", datetime(2020, 1, 1), timedelta(0)),
            (b"\x00\x00", datetime(2020, 1, 1, 0, 0, 0, 1), timedelta(microseconds=-1)),
            (b"\xff", datetime(1000, 1, 1), timedelta(hours=-838))]
    recs = [src.upsert({"k": k, "d": d, "t": t, "v": str(i)}, 10 + i, "c") for i, (k, d, t) in enumerate(keys)]
    assert backend.sink.apply("shop", "bk", src.schema, ["k", "d", "t"], recs).upserted == 4
    r = backend.sink.apply("shop", "bk", src.schema, ["k", "d", "t"],
                           recs + [src.delete({"k": k, "d": d, "t": t}, 50) for k, d, t in keys[1:3]])
    assert (r.upserted, r.deleted, r.skipped, r.superseded) == (0, 2, 2, 2)
    rows = backend.rows("shop", "bk")
    assert sorted((bytes(r["k"]), r["v"]) for r in rows) == [(b"", "0"), (b"\xff", "3")]


# ----------------------------------------------------------------------------- volume
def test_fifty_thousand_rows(backend, capsys):
    src = Source(table_def("bench", "t", [
        col("id", "bigint", "bigint(20)", nullable=False, prec=19, scale=0),
        col("name", "varchar", "varchar(100)", cs="utf8mb4", maxlen=100),
        col("amount", "decimal", "decimal(12,2)", prec=12, scale=2),
        col("qty", "int", "int(11)", prec=10, scale=0),
        col("created", "datetime", "datetime(6)", dtp=6),
        col("day", "date", "date"),
        col("note", "text", "text", cs="utf8mb4"),
        col("price", "double", "double", prec=22),
        col("flag", "tinyint", "tinyint(1)", prec=3, scale=0),
        col("payload", "blob", "blob")], ["id"]))
    n = 50_000
    base = src.after({"id": 0, "name": "n", "amount": Decimal("1.25"), "qty": 1, "created": datetime(2024, 5, 1),
                      "day": date(2024, 5, 1), "note": "x" * 40, "price": 1.5, "flag": 1, "payload": b"\x00\x01"})

    def batch(start: int, tag: str) -> list[tuple]:
        out = []
        for i in range(n):
            row = dict(base, id=i, name=f"{tag} {i}", qty=i, amount=Decimal(i).scaleb(-2),
                       created=base["created"] + i)
            out.append(({"id": i}, "c", row, P(start + i)))
        return out

    sink = backend.sink
    sink.ensure_table("bench", "t", src.schema, ["id"])
    timings = {}
    for label, recs in (("insert", batch(1_000_000, "ins")), ("update", batch(2_000_000, "upd")),
                        ("replay", batch(2_000_000, "upd")),
                        ("delete", [({"id": i}, "d", None, P(3_000_000 + i)) for i in range(n)])):
        t0 = time.perf_counter()
        result = sink.apply("bench", "t", src.schema, ["id"], recs)
        timings[label] = time.perf_counter() - t0
        assert result.total == n
        if label in ("insert", "update"):
            assert result.upserted == n
            rows = backend.table("bench", "t", ["id"])
            assert len(rows) == n
            assert rows[(12345,)]["name"] == ("ins 12345" if label == "insert" else "upd 12345")
            assert rows[(12345,)]["amount"] == Decimal("123.45")
        elif label == "replay":
            assert result.skipped == n
        else:
            assert result.deleted == n and backend.rows("bench", "t") == []
    with capsys.disabled():
        print("\n" + f"{backend.name} sink, {n} rows/batch: " + ", ".join(
            f"{label} {n / s:,.0f} rows/s" for label, s in timings.items()))
    assert isinstance(result, ApplyResult)


# ----------------------------------------------------------------------------- rows from their Avro bytes
_NOT_FROM_BYTES = {"point", "geometry", "zoned_timestamp", "bits"}  # (spark_jobs.sinks.copy_text: the dict path)


def _encoded(src: Source, record: tuple) -> EncodedChange:
    """A decoded record as the merge job holds it: the event's bytes and where its image starts."""
    key, op, row, position = record
    image = row if op != "d" else src.after({**{c.name: None for c in src.table.columns}, **key})
    value = {"before": image if op == "d" else None, "after": image if op != "d" else None, "source": {
        "version": "0", "connector": "mysql", "name": "t", "ts_ms": 0, "snapshot": "false",
        "db": src.table.db, "sequence": None, "table": src.table.name, "server_id": 1, "gtid": None,
        "file": "mysql-bin.000001", "pos": 4, "row": 0, "thread": None, "query": None},
        "op": op, "ts_ms": 0, "transaction": None, "position": position, "snapshot_window": None}
    data = AvroWriter(src.schema).encode(value)
    header, _ = compile_change_header(src.schema)
    return EncodedChange(op, position, data, header(data, 10)["row_at"])


def _winners(src: Source, records: list[tuple]) -> list[EncodedChange]:
    """The records reduced as the merge job reduces them before apply_encoded (per key the
    last), encoded."""
    last = {json.dumps(r[0], sort_keys=True, default=str): r for r in records}
    return [_encoded(src, r) for r in records if last[json.dumps(r[0], sort_keys=True, default=str)] is r]


def test_rows_written_from_their_avro_bytes_equal_the_dict_path(stack, test_db, config, unique):
    """PostgresSink.apply_encoded (COPY text from the Avro bytes, timestamps and decimals
    converted by the stage table) leaves the table apply leaves, value for value: every
    column kind it writes, NULLs, COPY's special characters, negative and small decimals,
    times before 1970; with and without the tombstone guard."""
    with stack.admin(test_db) as conn:
        create_all_types(conn, stack.mysql.get("flavor", "mariadb") == "mariadb")
    tdef, stored = read_source(stack, test_db, "types")
    kinds = {c.name: c.kind for c in row_columns(Source(tdef).schema)}
    tdef = TableDef(tdef.db, tdef.name, [c for c in tdef.columns if kinds[c.name] not in _NOT_FROM_BYTES],
                    tdef.primary_key)
    src = Source(tdef)
    assert len({c.kind for c in row_columns(src.schema)}) >= 13
    rows = [{c.name: r.get(c.name) for c in tdef.columns} for r in stored]
    blank = {c.name: None for c in tdef.columns}
    specials = "tab\there\nnew line\r\\back\\slash \\N \U0001F600"
    extra = [
        {**blank, "id": 10},
        {**rows[0], "id": 11, "vc": specials, "tx": specials, "d10": Decimal("-0.05"), "d65": Decimal("0.000001"),
         "dtm3": datetime(1969, 12, 31, 23, 59, 59, 999000), "dtm": datetime(1901, 2, 3, 4, 5, 6, 7),
         "dtm0": datetime(1, 1, 1, 0, 0, 0), "dt": date(9999, 12, 31)},
        {**rows[0], "id": 12, "d10": Decimal("-123.40"), "dtm3": datetime(9999, 12, 31, 23, 59, 59, 999000)},
    ]
    extra = [{k: v for k, v in r.items() if k in blank} for r in extra]
    assert {"vc", "tx", "d10", "d65", "dtm3", "dtm", "dtm0", "dt"} <= set(extra[1])
    records = [src.upsert(r, 100 + i, "c") for i, r in enumerate(rows + extra)]
    records.append(src.delete({"id": rows[1]["id"]}, 200))
    records.append(src.delete({"id": 999}, 201))  # (a key the sink never held: a tombstone)
    dict_sink = PgBackend(config.sinks.postgres.dsn.get_secret_value(), unique("dict"))
    bytes_sink = PgBackend(config.sinks.postgres.dsn.get_secret_value(), unique("bytes"))
    try:
        want = dict_sink.sink.apply(test_db, "types", src.schema, ["id"], records)
        got = bytes_sink.sink.apply_encoded(test_db, "types", src.schema, ["id"],
                                            _winners(src, records), src.schema)
        assert got is not None and (got.upserted, got.deleted, got.skipped) == (want.upserted, want.deleted,
                                                                                 want.skipped)
        assert bytes_sink.table(test_db, "types", ["id"]) == dict_sink.table(test_db, "types", ["id"])
        assert bytes_sink.sink.tombstones(test_db, "types") == dict_sink.sink.tombstones(test_db, "types")
        # a replay, then newer rows over the tombstones (the guard on): the same again
        later = [src.upsert({**r, "vc": "later"}, 300 + i, "u") for i, r in enumerate(rows)]
        later.append(src.upsert({**blank, "id": 999, "vc": "back"}, 400, "c"))
        for batch in (records, later):
            want = dict_sink.sink.apply(test_db, "types", src.schema, ["id"], batch)
            got = bytes_sink.sink.apply_encoded(test_db, "types", src.schema, ["id"],
                                                _winners(src, batch), src.schema)
            assert (got.upserted, got.deleted, got.skipped) == (want.upserted, want.deleted, want.skipped)
            assert bytes_sink.table(test_db, "types", ["id"]) == dict_sink.table(test_db, "types", ["id"])
        assert dict_sink.table(test_db, "types", ["id"])[(999,)]["vc"] == "back"
        # a schema with a kind it does not write: None, and the caller takes the dict path
        full = Source(read_source(stack, test_db, "types")[0])
        assert bytes_sink.sink.apply_encoded(test_db, "full", full.schema, ["id"],
                                             [_encoded(full, full.upsert(stored[0], 1, "c"))], full.schema) is None
        # records of two writer schemas in one call: None too (one writer schema per call)
        mixed = [_encoded(src, records[0]), _encoded(full, full.upsert(stored[0], 2, "c"))]
        assert bytes_sink.sink.apply_encoded(test_db, "types", src.schema, ["id"], mixed, src.schema) is None
    finally:
        dict_sink.drop()
        bytes_sink.drop()


def _keyed_pg_sink(config, schema: str, key: str, path: str):
    """``(source, key of a number, backend, write)`` for the tombstone tests: a source of
    key kind ``key`` (:data:`KEYED`), a PostgreSQL sink in ``schema``, and ``write(*records)``
    applying records ``path``'s way in: from their Avro bytes (``apply_encoded``, the merge
    job's common path, one record per key; ``"fresh"``: the leading inserts passed as its
    ``fresh`` changes, written by plain INSERTs) or decoded (``apply``)."""
    make, k = KEYED[key]
    src = make()
    backend = PgBackend(config.sinks.postgres.dsn.get_secret_value(), schema)
    db, table = src.table.db, src.table.name

    def write(*records):
        if path in ("bytes", "fresh"):
            fresh = 0
            while path == "fresh" and fresh < len(records) and records[fresh][1] == "c":
                fresh += 1
            return backend.sink.apply_encoded(db, table, src.schema, ["id"], [_encoded(src, r) for r in records],
                                              src.schema, fresh=fresh)
        return backend.sink.apply(db, table, src.schema, ["id"], list(records))
    return src, k, backend, write


@pytest.mark.parametrize("key", ["int", "text"])
def test_fresh_keys_go_in_by_plain_inserts_and_fall_back_to_upserts_on_a_row_of_theirs(config, unique, key):
    """``apply_encoded``'s ``fresh`` changes (keys whose first record in the merge job's batch
    was an insert) are written by a plain INSERT; when one meets a row of its key (a replay, a
    newer record of a key the table holds), the savepoint is rolled back and they are upserted.
    The table and the counts are what upserting them leaves, each time; the tombstone guard
    stops a fresh row as it stops an upsert; for integer keys (tombstones matched by key
    text) and text keys (matched by key hash) alike."""
    src, k, backend, _ = _keyed_pg_sink(config, unique("fresh"), key, "bytes")
    sink, db, table = backend.sink, src.table.db, src.table.name

    def write(records, fresh):
        return sink.apply_encoded(db, table, src.schema, ["id"], [_encoded(src, r) for r in records], src.schema,
                                  fresh=fresh)

    try:
        first = [src.upsert({"id": k(1), "v": "one", "n": None}, 10, "c"),
                 src.upsert({"id": k(2), "v": "two", "n": None}, 11, "c"),
                 src.upsert({"id": k(3), "v": "three", "n": None}, 12, "u")]
        res = write(first, 2)
        assert (res.inserted, res.fresh_refused, res.upserted, res.skipped) == (2, 0, 3, 0)
        res = write(first, 2)  # a replay: the INSERT meets the rows; upserted instead, every record skipped
        assert (res.inserted, res.fresh_refused, res.upserted, res.skipped) == (0, 1, 0, 3)
        res = write([src.upsert({"id": k(1), "v": "uno", "n": None}, 20, "c")], 1)  # newer than the row there
        assert (res.inserted, res.fresh_refused, res.upserted) == (0, 1, 1)
        write([src.delete({"id": k(5)}, 40)], 0)  # a tombstone of key 5 above the next batch's positions
        res = write([src.upsert({"id": k(5), "v": "old", "n": None}, 30, "c"),
                     src.upsert({"id": k(6), "v": "six", "n": None}, 31, "c")], 2)
        assert (res.inserted, res.upserted, res.skipped) == (1, 1, 1)
        rows = backend.table(db, table, ["id"])
        assert {key_[0]: r["v"] for key_, r in rows.items()} == {k(1): "uno", k(2): "two", k(3): "three",
                                                                 k(6): "six"}
        assert [json.loads(t[0]) for t in sink.tombstones(db, table)] == [[k(5)]]  # (still there: key 5 stopped)
    finally:
        backend.drop()


@pytest.mark.parametrize("key", ["int", "text"])
@pytest.mark.parametrize("path", ["bytes", "fresh", "rows"])
def test_a_batch_is_staged_before_the_tables_turn_and_hashed_if_a_tombstone_came(config, unique, path, key):
    """PostgresSink writes a batch's stage tables (the COPY lines: the Python side's work)
    before it takes its table's turn, so the table's other writers do not wait for that; a
    tombstone another writer left in between still stops an older row (a text key's upserts
    are staged again with their key hashes under the turn; an integer key's tombstones are
    matched by the JSON text PostgreSQL writes of the staged key).  Both ways in: rows
    written from their Avro bytes (``apply_encoded``, the merge job's common path; with the
    new keys as its ``fresh`` changes, staged apart and written by a plain INSERT) and
    decoded rows (``apply``: column kinds without COPY text, routed tables, Debezium's input)."""
    from spark_jobs.sinks.keys import key_json_and_hash
    from spark_jobs.sinks.naming import TABLES, TOMBSTONES
    from tests.producer_helpers import wait_for

    dsn = config.sinks.postgres.dsn.get_secret_value()
    src, k, backend, write = _keyed_pg_sink(config, unique("turn"), key, path)
    sink = backend.sink
    db, table = src.table.db, src.table.name

    try:
        assert write(src.upsert({"id": k(1), "v": "one", "n": None}, 10, "c")).upserted == 1
        pid, name = sink.connection().info.backend_pid, sink.table_name(db, table)
        waited_before = sink.turn_wait_s
        out: dict = {}

        def apply() -> None:
            try:
                out["result"] = write(src.upsert({"id": k(2), "v": "two", "n": None}, 20, "c"),
                                      src.upsert({"id": k(3), "v": "three", "n": None}, 21, "c"),
                                      src.delete({"id": k(1)}, 22))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                out["error"] = exc

        with psycopg.connect(dsn) as other:
            other.execute(f"SELECT 1 FROM {quote_pg(backend.schema)}.{quote_pg(TABLES)} WHERE table_name = %s "
                          "FOR UPDATE", [name])  # the table's turn, held by another writer
            th = threading.Thread(target=apply, daemon=True)
            th.start()

            def waiting_for_the_turn() -> bool:
                with psycopg.connect(dsn) as look:
                    row = look.execute("SELECT wait_event_type, query FROM pg_stat_activity WHERE pid = %s",
                                       [pid]).fetchone()
                return bool(row) and row[0] == "Lock" and "FOR UPDATE" in row[1]
            wait_for(lambda: waiting_for_the_turn() or not th.is_alive(), timeout=60, what="the sink waiting its turn",
                     state=lambda: out)
            assert th.is_alive(), out
            seen_waiting = time.monotonic()
            # Its stage tables are made (and written) already: relations its transaction
            # created, locked by it and not yet in the catalog other sessions see.
            staged = other.execute("SELECT count(*) FROM pg_locks l WHERE l.pid = %s AND l.locktype = 'relation' "
                                   "AND l.granted AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = l.relation)",
                                   [pid]).fetchone()[0]
            assert staged >= 2, staged  # (the upserts' and the deletes' stage tables)
            # Meanwhile another writer deleted key 3 at a newer position: its tombstone.
            text, digest = key_json_and_hash([k(3)])
            other.execute(f"INSERT INTO {quote_pg(backend.schema)}.{quote_pg(TOMBSTONES)} "
                          "(table_name, key_hash, key_json, position) VALUES (%s, %s, %s, %s)",
                          [name, digest, text, P(30)])
            released = time.monotonic()  # (the turn goes with the other writer's commit, next)
        th.join(60)
        assert not th.is_alive() and "error" not in out, out
        assert sink.turn_wait_s - waited_before >= released - seen_waiting  # (what the merge job reports)
        assert (out["result"].upserted, out["result"].deleted) == (1, 1)
        assert out["result"].inserted == (1 if path == "fresh" else 0)  # (key 2; key 3 stopped by the guard)
        rows = backend.table(db, table, ["id"])
        assert list(rows) == [(k(2),)] and rows[(k(2),)]["v"] == "two"  # 3: deleted after; 1: deleted
    finally:
        backend.drop()


@pytest.mark.parametrize("key", ["int", "text"])
@pytest.mark.parametrize("path", ["bytes", "rows"])
def test_tombstones_stop_older_rows_and_go_with_newer_ones_by_key_kind(config, unique, path, key):
    """The tombstone guard and its pruning for a key matched by its JSON text (integer
    keys) and by its hash (others), both ways in: an older insert in a batch that also
    holds a newer key stays out, a newer insert comes back and takes the tombstone with it."""
    src, k, backend, write = _keyed_pg_sink(config, unique("guard"), key, path)
    sink = backend.sink
    db, table = src.table.db, src.table.name

    try:
        old = [src.upsert({"id": k(i), "v": "old", "n": None}, 10 + i, "c") for i in range(5)]
        assert write(*old).upserted == 5
        assert write(*[src.delete({"id": k(i)}, 20 + i) for i in range(3)]).deleted == 3
        assert sorted(t[0] for t in sink.tombstones(db, table)) == sorted(f'["{k(i)}"]' if key == "text" else f"[{i}]"
                                                                          for i in range(3))
        # the old inserts of 0-2 again (one record per key, as the merge job passes them), with
        # a newer key and newer rows of 3 and 4: 0-2 stay deleted
        r = write(*old[:3], src.upsert({"id": k(9), "v": "new", "n": None}, 30, "c"),
                  *[src.upsert({"id": k(i), "v": "newer", "n": None}, 31 + i, "u") for i in (3, 4)])
        assert (r.upserted, r.skipped) == (3, 3)
        assert {key_[0]: row["v"] for key_, row in backend.table(db, table, ["id"]).items()} == \
            {k(3): "newer", k(4): "newer", k(9): "new"}
        # a newer insert of 1 comes back and its tombstone goes; 0 (older, in the same batch:
        # the guard is on) stays out, and 0 and 2 keep theirs
        r = write(old[0], src.upsert({"id": k(1), "v": "back", "n": None}, 40, "c"))
        assert (r.upserted, r.skipped) == (1, 1)
        assert sorted(t[1] for t in sink.tombstones(db, table)) == [P(20), P(22)]
        assert write(*old[:3]).skipped == 3
        assert {key_[0] for key_ in backend.table(db, table, ["id"])} == {k(1), k(3), k(4), k(9)}
        # The pruning reads the tombstones the guard reads (at or above the batch's lowest
        # position): 2's, older than a guarded batch that brings 2 back, stays for the purge,
        # and stops nothing the row's own position would not.
        assert write(src.delete({"id": k(4)}, 50)).deleted == 1
        r = write(src.upsert({"id": k(4), "v": "old", "n": None}, 45, "c"),
                  src.upsert({"id": k(2), "v": "back", "n": None}, 60, "c"))
        assert (r.upserted, r.skipped) == (1, 1)
        assert sorted(t[1] for t in sink.tombstones(db, table)) == [P(20), P(22), P(50)]
        assert write(old[2]).skipped == 1
        assert backend.table(db, table, ["id"])[(k(2),)]["v"] == "back"
    finally:
        backend.drop()


def test_the_key_json_postgresql_writes_of_an_integer_key_is_the_tombstones(config):
    """PostgreSQL's text of integer key columns, as the guard builds it, is
    :func:`~spark_jobs.sinks.keys.key_json`'s text of the same values (the tombstones')."""
    from spark_jobs.sinks.keys import key_json
    from spark_jobs.sinks.layout import SinkColumn, TableLayout
    from spark_jobs.sinks.postgres_plan import key_json_sql as _key_json_sql

    edges = [0, 1, -1, 7, -42, 2**15 - 1, -2**15, 2**31 - 1, -2**31, 2**63 - 1, -2**63]
    rnd = random.Random(13)
    keys = [(a, b) for a in edges for b in (0, -1, 2**31 - 1)] + [
        (rnd.randint(-2**63, 2**63 - 1), rnd.randint(-2**31, 2**31 - 1)) for _ in range(200)]
    layout = TableLayout((SinkColumn("a", "a", "long", False), SinkColumn("b", "b", "int", False)),
                         (SinkColumn("a", "a", "long", False), SinkColumn("b", "b", "int", False)))
    expr = _key_json_sql(layout, ["v.a", "v.b"])
    single = _key_json_sql(TableLayout(layout.columns[:1], layout.key[:1]), ["v.a"])
    with psycopg.connect(config.sinks.postgres.dsn.get_secret_value()) as conn:
        got = conn.execute(f"SELECT {expr}, {single} FROM unnest(%s::bigint[], %s::int[]) AS v(a, b)",
                           [[a for a, _ in keys], [b for _, b in keys]]).fetchall()
    assert got == [(key_json([a, b]), key_json([a])) for a, b in keys]
    # other kinds: matched by hash
    text = TableLayout((SinkColumn("a", "a", "string", False),), (SinkColumn("a", "a", "string", False),))
    assert _key_json_sql(text, ["v.a"]) is None


def test_postgresql_tombstones_are_appended_and_an_older_keyed_tombstone_table_loses_its_key(config, unique):
    """PostgreSQL's tombstones are appended (no index on the key: every statement reading
    them is bounded by position): a replayed delete adds none, a newer delete of a key adds
    one beside the older, which the purge takes.  A tombstone table of the earlier layout
    (primary key ``(table_name, key_hash)``) loses its key when a sink prepares a table, and
    its tombstones still stop older inserts."""
    from spark_jobs.sinks.keys import key_hash
    from spark_jobs.sinks.naming import TOMBSTONES

    dsn = config.sinks.postgres.dsn.get_secret_value()
    src, backend = simple_source(), PgBackend(dsn, unique("tombs"))
    sink = backend.sink
    tomb = f'"{backend.schema}"."{TOMBSTONES}"'

    def stored() -> list[tuple[str, str]]:
        with psycopg.connect(dsn) as conn:
            return conn.execute(f"SELECT key_json, position FROM {tomb} ORDER BY position").fetchall()

    def layout() -> tuple[list, str]:
        with psycopg.connect(dsn) as conn:
            keys = conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) "
                                "AND contype = 'p'", [tomb]).fetchall()
            return keys, conn.execute("SELECT relreplident FROM pg_class WHERE oid = to_regclass(%s)",
                                      [tomb]).fetchone()[0]

    try:
        # the earlier layout, with a tombstone of key 3 at 50 in it
        with psycopg.connect(dsn) as conn:
            conn.execute(f'CREATE SCHEMA "{backend.schema}"')
            conn.execute(f"CREATE TABLE {tomb} (table_name text NOT NULL, key_hash bytea NOT NULL, "
                         'key_json text NOT NULL, position char(30) COLLATE "C" NOT NULL, '
                         "PRIMARY KEY (table_name, key_hash))")
            conn.execute(f"INSERT INTO {tomb} VALUES (%s, %s, '[3]', %s)",
                         [sink.table_name("shop", "items"), key_hash([3]), P(50)])
        assert layout()[0] != []
        sink.ensure_table("shop", "items", src.schema, ["id"])
        assert layout() == ([], "f")
        assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                                [src.upsert({"id": 3, "v": "old", "n": None}, 40, "c")])) == (0, 0, 1)

        dele = src.delete({"id": 7}, 60)
        assert tuple(sink.apply("shop", "items", src.schema, ["id"], [dele])) == (0, 1, 0)
        assert tuple(sink.apply("shop", "items", src.schema, ["id"], [dele])) == (0, 0, 1)  # replayed
        assert stored() == [("[3]", P(50)), ("[7]", P(60))]
        assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                                [src.upsert({"id": 7, "v": "back", "n": None}, 70, "c")])) == (1, 0, 0)
        assert tuple(sink.apply("shop", "items", src.schema, ["id"], [src.delete({"id": 7}, 80)])) == (0, 1, 0)
        assert stored() == [("[3]", P(50)), ("[7]", P(60)), ("[7]", P(80))]
        assert sink.tombstones("shop", "items") == [("[3]", P(50)), ("[7]", P(80))]
        # both still stop what they must: an older insert of either key
        assert tuple(sink.apply("shop", "items", src.schema, ["id"],
                                [src.upsert({"id": 7, "v": "old", "n": None}, 75, "u")])) == (0, 0, 1)
        assert backend.rows("shop", "items") == []
        assert sink.purge_tombstones(P(61)) == 2
        assert stored() == [("[7]", P(80))]
    finally:
        backend.drop()


def test_partitions_turns_go_side_by_side_and_wait_for_their_own_and_for_the_whole_turn(config, unique):
    """PostgreSQL's turn per Kafka partition (``turn_partition``, what a merge task whose
    records are all where Kafka's partitioner puts their keys takes): while partition 0's
    turn is held, partition 1's writer goes on; a second writer of partition 0 (a zombie
    task) and the table's whole turn wait for it; and a writer of a partition waits for the
    whole turn."""
    from spark_jobs.sinks.naming import TABLES
    from tests.producer_helpers import wait_for

    dsn = config.sinks.postgres.dsn.get_secret_value()
    src, backend = simple_source(), PgBackend(dsn, unique("pturn"))
    sink, db, table = backend.sink, "shop", "items"

    def writer(partition: int | None, ident: int, pos: int) -> tuple[threading.Thread, dict]:
        own = pickle.loads(pickle.dumps(sink))  # (a sink of its own: another task)
        own.turn_partition = partition
        out: dict = {}

        def run() -> None:
            try:
                out["result"] = own.apply(db, table, src.schema, ["id"],
                                          [src.upsert({"id": ident, "v": f"p{partition}", "n": None}, pos, "c")])
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                out["error"] = exc
            finally:
                own.close()
        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th, out

    def blocked_by(pid: int) -> int:
        with psycopg.connect(dsn) as look:
            return look.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                [pid]).fetchone()[0]

    try:
        assert sink.apply(db, table, src.schema, ["id"], [src.upsert({"id": 1, "v": "a", "n": None}, 10, "c")]).upserted
        name = sink.table_name(db, table)
        holder = pickle.loads(pickle.dumps(sink))
        holder.turn_partition = 0
        with psycopg.connect(dsn) as other:  # partition 0's turn, held
            with other.cursor() as cur:
                assert holder.tables.take_turn(cur, name, holder.turn_partition)
            th1, out1 = writer(1, 2, 20)
            th1.join(60)
            assert not th1.is_alive() and out1.get("result") and out1["result"].upserted == 1, out1
            th0, out0 = writer(0, 3, 30)
            whole, out_whole = writer(None, 4, 40)
            wait_for(lambda: blocked_by(other.info.backend_pid) == 2, timeout=60,
                     what="partition 0's second writer and the whole turn waiting", state=lambda: (out0, out_whole))
            assert th0.is_alive() and whole.is_alive()
        for th, out in ((th0, out0), (whole, out_whole)):
            th.join(60)
            assert not th.is_alive() and out.get("result") and out["result"].upserted == 1, out
        with psycopg.connect(dsn) as other:  # the whole turn, held
            other.execute(f"SELECT 1 FROM {quote_pg(backend.schema)}.{quote_pg(TABLES)} WHERE table_name = %s "
                          "FOR UPDATE", [name])
            th2, out2 = writer(2, 5, 50)
            wait_for(lambda: blocked_by(other.info.backend_pid) == 1, timeout=60,
                     what="partition 2's writer waiting for the whole turn", state=lambda: out2)
            assert th2.is_alive()
        th2.join(60)
        assert not th2.is_alive() and out2.get("result") and out2["result"].upserted == 1, out2
        assert {k: r["v"] for k, r in backend.table(db, table, ["id"]).items()} == {
            (1,): "a", (2,): "p1", (3,): "p0", (4,): "pNone", (5,): "p2"}
    finally:
        backend.drop()
