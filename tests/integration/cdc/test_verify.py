"""cdc verify on the real stack: source tables against PostgreSQL and MySQL sink tables built by
the real sink classes, and against a clean changelog written from the real producer's events.

The sink tables are filled the way the pipeline fills them: rows read by the snapshot reader
(``producer.snapshot.table_reader.read_chunk``), converted by ``RowConverter``, sent through the
producer's envelope schema with fastavro, applied with ``PostgresSink``/``MySQLSink.apply``.
Then the sinks are broken on purpose (rows deleted or added, values changed in the last
digit or by one microsecond) and verify must name each key and column.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import psycopg
import pymysql
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from cdc.verify import VerifyReport, print_report, verify
from common.config import CDCConfig, dump_config
from common.kafka.topic_reader import read_topic
from common.sql.sessions import read_session, row_session
from contract.codecs.serde import AvroWriter
from contract.envelope import envelope_schema
from contract.schema_store import SchemaStore
from contract.topics import clean_topic
from producer.events.avro_types import avro_fullname, row_record_schema
from producer.events.values import RowConverter
from producer.snapshot.table_reader import read_chunk, read_table_def
from spark_jobs.clean_changelog import CleanPartitionWriter, ensure_clean_topic
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink, quote_pg
from tests.all_types import MANY_TYPES_COLS, make_many_types_table, many_types_row
from tests.producer_helpers import ROOT, decoder, run_until_caught_up, start_at_current


def P(n: int) -> str:
    return f"{n:030d}"


# ----------------------------------------------------------------------------- sinks built from the source
@dataclass
class Sinks:
    cfg: CDCConfig
    pg: PostgresSink
    my: MySQLSink

    def pg_exec(self, sql: str, params=None) -> None:
        with psycopg.connect(self.cfg.sinks.postgres.dsn.get_secret_value(), autocommit=True) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(sql, params)

    def my_exec(self, sql: str, params=None) -> None:
        m = self.cfg.sinks.mysql
        with pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password.get_secret_value(),
                             charset="utf8mb4", autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(sql, params)


@pytest.fixture
def sinks(config: CDCConfig, unique, test_db) -> Iterator[Sinks]:
    config.source.include_databases = [test_db]
    config.sinks.postgres.schema_name = unique("vpg")
    config.sinks.mysql.database = unique("vmy")
    p, m = config.sinks.postgres, config.sinks.mysql
    s = Sinks(config, PostgresSink(p.dsn.get_secret_value(), p.schema_name),
              MySQLSink(m.host, m.port, m.user, m.password.get_secret_value(), m.database))
    try:
        yield s
    finally:
        s.pg.close()
        s.my.close()
        s.pg_exec(f"DROP SCHEMA IF EXISTS {quote_pg(p.schema_name)} CASCADE")
        s.my_exec(f"DROP DATABASE IF EXISTS `{m.database}`")


def load_sinks(cfg: CDCConfig, sinks: Sinks, db: str, table: str, batch: int = 5000) -> int:
    """Both sink tables of ``db.table`` filled from the source, as a snapshot would; rows copied."""
    conn, session = read_session(cfg.source), row_session(cfg.source)
    try:
        tdef = read_table_def(conn, db, table)
        ns = avro_fullname(f"cdc.{db}.{table}")
        schema = envelope_schema(row_record_schema(tdef, f"{ns}.Value"), f"{ns}.Envelope")
        parsed = parse_schema(schema)
        conv = RowConverter(tdef)
        keys = list(tdef.primary_key)
        after, n = None, 0
        while True:
            rows = read_chunk(session, tdef, keys, after=after, upto=None, condition=None, limit=batch)
            records = []
            for r in rows:
                n += 1
                value = {"before": None, "after": conv.convert(r), "source": {
                    "version": "0", "connector": "mysql", "name": "t", "ts_ms": 0, "snapshot": "incremental",
                    "db": db, "sequence": None, "table": table, "server_id": 1, "gtid": None,
                    "file": "mysql-bin.000001", "pos": 4, "row": 0, "thread": None, "query": None},
                    "op": "r", "ts_ms": 0, "transaction": None, "position": P(n), "snapshot_window": None}
                buf = io.BytesIO()
                schemaless_writer(buf, parsed, value)
                buf.seek(0)
                a = schemaless_reader(buf, parsed, parsed)["after"]
                records.append(({k: a[k] for k in keys}, "r", a, P(n)))
            if records:
                sinks.pg.apply(db, table, schema, keys, records)
                sinks.my.apply(db, table, schema, keys, records)
            if len(rows) < batch:
                return n
            after = [rows[-1][k] for k in keys]
    finally:
        session.close()
        conn.close()


def results(report: VerifyReport, table: str) -> dict:
    (t,) = [t for t in report.tables if t.table == table]
    return {r.sink: r for r in t.results}


def run_cli(cfg: CDCConfig, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "verify.yaml"
    path.write_text(dump_config(cfg))
    env = {**os.environ, "COLUMNS": "220"}  # rich's width when not on a terminal
    return subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "verify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)


def test_equal_tables_of_many_types_pass(stack, config, test_db, sinks, tmp_path):
    make_many_types_table(stack, test_db)
    assert load_sinks(config, sinks, test_db, "types") == 41
    report = verify(config, chunk_size=7)  # every captured table: the test database's one
    assert [t.table for t in report.tables] == [f"{test_db}.types"]
    t = report.tables[0]
    assert (t.mode, t.key, t.source_rows, t.chunks) == ("range", ["id"], 41, 6)
    for sink in ("postgres", "mysql"):
        r = results(report, t.table)[sink]
        assert r.equal, (sink, r)
        assert (r.source_rows, r.sink_rows, r.chunks, r.chunks_differing) == (41, 41, 6, 0)
    assert report.equal
    out = run_cli(config, tmp_path, f"{test_db}.types", "--chunk-size", "10")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "equal" in out.stdout and "types" in out.stdout
    out = run_cli(config, tmp_path, "--json", f"{test_db}.types")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["equal"] is True and data["tables"][0]["results"][0]["sink_rows"] == 41


def test_every_kind_of_damage_is_found_with_its_key_and_column(stack, config, test_db, sinks, tmp_path):
    make_many_types_table(stack, test_db)
    load_sinks(config, sinks, test_db, "types")
    pg, my = sinks.pg.qualified_name(test_db, "types"), sinks.my.qualified_name(test_db, "types")
    pos = P(0)
    # PostgreSQL: a row deleted, rows added before the first key, inside a chunk and after the last,
    # a string changed, a timestamp moved by one microsecond
    sinks.pg_exec(f"DELETE FROM {pg} WHERE id = 30")
    sinks.pg_exec(f"INSERT INTO {pg} (id, vc, __cdc_position) VALUES (-7, 'before', %s), (155, 'inside', %s), "
                  f"(9999, 'after', %s)", [pos, pos, pos])
    sinks.pg_exec(f"UPDATE {pg} SET vc = vc || '!' WHERE id = 70")
    sinks.pg_exec(f"UPDATE {pg} SET ts6 = ts6 + interval '1 microsecond' WHERE id = 90")
    # MySQL: a decimal changed in its last digit, a timestamp and a datetime(6) by one microsecond,
    # a JSON value, a BIT and a blob changed, a row deleted
    sinks.my_exec(f"UPDATE {my} SET d10 = d10 + 0.01 WHERE id = 50")
    sinks.my_exec(f"UPDATE {my} SET ts6 = ts6 + INTERVAL 1 MICROSECOND, dtm = dtm - INTERVAL 1 MICROSECOND "
                  "WHERE id = 110")
    sinks.my_exec(f"UPDATE {my} SET js = '{{\"i\": 12, \"a\": [1, 2.5, \"e\"]}}', b12 = b12 ^ 1 WHERE id = 120")
    sinks.my_exec(f"UPDATE {my} SET bl = CONCAT(bl, 0x00) WHERE id = 130")
    sinks.my_exec(f"UPDATE {my} SET d65 = d65 - 0.000000000000000000000000000001 WHERE id = 140")
    sinks.my_exec(f"DELETE FROM {my} WHERE id = 5")

    report = verify(config, [f"{test_db}.types"], chunk_size=7, samples=10)
    assert not report.equal
    res = results(report, f"{test_db}.types")
    p, m = res["postgres"], res["mysql"]
    assert (p.missing, p.extra, p.differing) == (1, 3, 2)
    assert p.sink_rows == 41 - 1 + 3 and p.source_rows == 41
    by = {(s.kind, s.key["id"]): s for s in p.samples}
    assert set(by) == {("missing", 30), ("extra", -7), ("extra", 155), ("extra", 9999), ("differs", 70),
                       ("differs", 90)}
    assert by[("differs", 70)].columns == ["vc"] and by[("differs", 70)].sink["vc"].endswith("!")
    ts = many_types_row(9)[MANY_TYPES_COLS.index("ts6")]
    assert by[("differs", 90)].columns == ["ts6"]
    assert by[("differs", 90)].source["ts6"] == ts.isoformat(sep=" ", timespec="microseconds")
    assert by[("differs", 90)].sink["ts6"] == (ts + timedelta(microseconds=1)).isoformat(sep=" ",
                                                                                         timespec="microseconds")
    assert by[("extra", 155)].sink["vc"] == "inside"
    # chunks of 7 keys: [5..60] holds -7 and 30, [70..130] 70 and 90, [140..200] 155, [350..] 9999
    assert p.chunks_differing == 4

    assert (m.missing, m.extra, m.differing) == (1, 0, 5)
    by = {(s.kind, s.key["id"]): s for s in m.samples}
    d10 = many_types_row(5)[MANY_TYPES_COLS.index("d10")]
    assert by[("differs", 50)].columns == ["d10"]
    assert (by[("differs", 50)].source["d10"], by[("differs", 50)].sink["d10"]) == (str(d10), str(d10 + Decimal("0.01")))
    assert by[("differs", 110)].columns == ["dtm", "ts6"]
    assert by[("differs", 120)].columns == ["b12", "js"]
    assert by[("differs", 130)].columns == ["bl"]
    assert by[("differs", 140)].columns == ["d65"]
    assert by[("differs", 140)].source["d65"] == "-12345678901234567890123456789012344.123456789012345678901234567814"
    assert by[("differs", 140)].sink["d65"] == "-12345678901234567890123456789012344.123456789012345678901234567815"
    assert by[("missing", 5)].source["vc"] is None

    out = run_cli(config, tmp_path, f"{test_db}.types", "--chunk-size", "7")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DIFFERS" in out.stdout and "missing in sink: id=30" in out.stdout and "extra in sink:   id=9999" in out.stdout
    assert f"values differ:   id=50: d10: source '{d10}' sink '{d10 + Decimal('0.01')}'" in out.stdout
    out = run_cli(config, tmp_path, f"{test_db}.types", "--json", "--samples", "1")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    mysql = [r for r in data["tables"][0]["results"] if r["sink"] == "mysql"][0]
    assert mysql["differing"] == 5 and len([s for s in mysql["samples"] if s["kind"] == "differs"]) == 1


# ----------------------------------------------------------------------------- string and composite keys
def test_string_and_composite_keys_compare_by_exact_key(stack, config, test_db, sinks):
    """Keys under utf8mb4_general_ci (case- and accent-insensitive, PAD SPACE) in the source,
    byte-wise in the sinks: chunks are fetched by key lists, extra rows found by key lookups."""
    names = ["alpha", "Beta", "ça va", "Øre", "Zürich", "zebra", "ÉCLAIR", "straße", "日本", "\U0001F600", "mid dle",
             "a'b\"c\\", "x" * 200]
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE s (name VARCHAR(200) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT, "
                    "d DECIMAL(8,3)) DEFAULT CHARSET=utf8mb4")
        cur.executemany("INSERT INTO s VALUES (%s, %s, %s)", [(w, i, Decimal(i) / 7) for i, w in enumerate(names)])
        cur.execute("CREATE TABLE c (region VARCHAR(20) COLLATE utf8mb4_general_ci, id INT, "
                    "e ENUM('zz','aa','mm') NOT NULL, v VARCHAR(20), PRIMARY KEY (region, id, e)) "
                    "DEFAULT CHARSET=utf8mb4")
        # 'apple' = 'Apple' and 'banana' = 'BANANA ' under the collation: other ids for those
        cur.executemany("INSERT INTO c VALUES (%s, %s, %s, %s)", [
            (r, i, e, f"{r}-{i}-{e}") for r, ids in (("apple", (1, 2)), ("Apple", (10,)), ("Äpfel", (1, 2, 10)),
                                                     ("banana", (1,)), ("BANANA ", (2, 10)))
            for i in ids for e in ("zz", "aa", "mm")])
    for t in ("s", "c"):
        load_sinks(config, sinks, test_db, t)
    report = verify(config, [f"{test_db}.s", f"{test_db}.c"], chunk_size=4)
    for t in report.tables:
        assert t.mode == "keys" and t.equal, t
    assert results(report, f"{test_db}.c")["postgres"].source_rows == 27

    s_pg, s_my = sinks.pg.qualified_name(test_db, "s"), sinks.my.qualified_name(test_db, "s")
    c_pg = sinks.pg.qualified_name(test_db, "c")
    pos = P(0)
    sinks.pg_exec(f"DELETE FROM {s_pg} WHERE name = 'Beta'")
    sinks.pg_exec(f"INSERT INTO {s_pg} (name, n, __cdc_position) VALUES ('beta', 1, %s), ('ZÜRICH', 4, %s), "
                  "('zzz new', 0, %s)", [pos, pos, pos])
    sinks.pg_exec(f"UPDATE {s_pg} SET d = d + 0.001 WHERE name = 'Øre'")
    sinks.my_exec(f"INSERT INTO {s_my} (name, n, __cdc_position) VALUES ('alpha ', 0, %s), ('eclair', 6, %s)",
                  [pos, pos])
    sinks.my_exec(f"UPDATE {s_my} SET n = 99 WHERE name = 'ÉCLAIR'")
    sinks.pg_exec(f"UPDATE {c_pg} SET v = 'changed' WHERE region = 'Äpfel' AND id = 10 AND e = 'aa'")
    sinks.pg_exec(f"DELETE FROM {c_pg} WHERE region = 'BANANA ' AND id = 2 AND e = 'mm'")
    sinks.pg_exec(f"INSERT INTO {c_pg} (region, id, e, __cdc_position) VALUES ('Apple', 1, 'zz', %s)", [pos])

    report = verify(config, [f"{test_db}.s", f"{test_db}.c"], chunk_size=4)
    res = results(report, f"{test_db}.s")
    p, m = res["postgres"], res["mysql"]
    assert (p.missing, p.extra, p.differing, p.sink_rows) == (1, 3, 1, 15)
    assert {(s.kind, s.key["name"]) for s in p.samples} == {
        ("missing", "Beta"), ("extra", "beta"), ("extra", "ZÜRICH"), ("extra", "zzz new"), ("differs", "Øre")}
    assert [s.columns for s in p.samples if s.kind == "differs"] == [["d"]]
    assert [s.sink for s in p.samples if s.key["name"] == "ZÜRICH"] == [{"n": 4, "d": None}]
    assert (m.missing, m.extra, m.differing) == (0, 2, 1)
    assert {(s.kind, s.key["name"]) for s in m.samples} == {("extra", "alpha "), ("extra", "eclair"),
                                                           ("differs", "ÉCLAIR")}
    c = results(report, f"{test_db}.c")
    assert c["mysql"].equal
    assert (c["postgres"].missing, c["postgres"].extra, c["postgres"].differing) == (1, 1, 1)
    assert {(s.kind, tuple(s.key.values())) for s in c["postgres"].samples} == {
        ("missing", ("BANANA ", 2, "mm")), ("extra", ("Apple", 1, "zz")), ("differs", ("Äpfel", 10, "aa"))}


# ----------------------------------------------------------------------------- many chunks, bounded memory
def test_a_table_of_many_chunks_verifies_with_memory_bounded_by_the_chunk(stack, config, test_db, sinks):
    n = 25_000
    rnd = random.Random(3)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40), n DECIMAL(12,3), ts DATETIME(6), "
                    "f DOUBLE)")
        cur.executemany("INSERT INTO big VALUES (%s, %s, %s, %s, %s)", [
            (i * 3, f"row {i} {'é' * (i % 5)}", Decimal(rnd.randrange(10 ** 9)) / 1000,
             datetime(2020, 1, 1) + timedelta(microseconds=rnd.randrange(10 ** 14)), rnd.random())
            for i in range(n)])
    assert load_sinks(config, sinks, test_db, "big") == n
    report = verify(config, [f"{test_db}.big"], chunk_size=10_000)
    t = report.tables[0]
    assert report.equal and (t.source_rows, t.chunks) == (n, 3)
    assert all((r.sink_rows, r.chunks) == (n, 3) for r in t.results)
    print(f"\nverify {n:,} rows against 2 sinks: {report.seconds:.1f}s ({n / report.seconds:,.0f} source rows/s)")

    def peak(chunk_size: int) -> tuple[int, VerifyReport]:
        tracemalloc.start()
        try:
            rep = verify(config, [f"{test_db}.big"], chunk_size=chunk_size)
            return tracemalloc.get_traced_memory()[1], rep
        finally:
            tracemalloc.stop()
    small, rep_small = peak(1_000)
    whole, rep_whole = peak(n)
    assert rep_small.equal and rep_whole.equal and rep_small.tables[0].chunks == 25
    print(f"\nverify peak memory (traced): chunk 1,000: {small / 1e6:.1f} MB; one chunk of {n:,}: {whole / 1e6:.1f} MB")
    assert small * 4 < whole, (small, whole)  # memory follows the chunk, not the table

    # one changed row among 25,000 is found, in its chunk
    sinks.my_exec(f"UPDATE {sinks.my.qualified_name(test_db, 'big')} SET f = f * (1 + 1e-12) WHERE id = 53331")
    r = results(verify(config, [f"{test_db}.big"], chunk_size=10_000), f"{test_db}.big")
    assert r["postgres"].equal and (r["mysql"].differing, r["mysql"].chunks_differing) == (1, 1)
    assert r["mysql"].samples[0].key == {"id": 3 * 17_777} and r["mysql"].samples[0].columns == ["f"]


# ----------------------------------------------------------------------------- missing things
def test_missing_sink_table_unknown_names_and_keyless_tables(stack, config, test_db, sinks, tmp_path):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE present (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO present VALUES (1, 1), (2, 2)")
        cur.execute("CREATE TABLE nokey (v INT)")
    report = verify(config, [f"{test_db}.present", f"{test_db}.nokey", f"{test_db}.nope"])
    by = {t.table: t for t in report.tables}
    assert by[f"{test_db}.nokey"].skipped and by[f"{test_db}.nokey"].equal
    assert by[f"{test_db}.nope"].error and not by[f"{test_db}.nope"].equal
    present = {r.sink: r for r in by[f"{test_db}.present"].results}
    assert "does not exist" in present["postgres"].error and present["postgres"].missing == 2
    assert not report.equal
    config.sinks.postgres.enabled = config.sinks.mysql.enabled = False
    out = run_cli(config, tmp_path, f"{test_db}.present")
    assert out.returncode == 1 and "nothing to compare" in out.stderr and "Traceback" not in out.stderr


# ----------------------------------------------------------------------------- the clean changelog
def test_clean_changelog_replay(stack, config, test_db, sinks, tmp_path):
    """Events from the real producer (binlog path), written to the clean topic by the real
    CleanPartitionWriter, replayed and compared; then records added that break it."""
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT, k VARCHAR(10) COLLATE utf8mb4_general_ci, d DECIMAL(10,2), "
                    "dtm DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6), js JSON, b BIT(10), f FLOAT, bl BLOB, "
                    "v VARCHAR(40), PRIMARY KEY (id, k)) DEFAULT CHARSET=utf8mb4")
    start_at_current(config)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", [
            (i, "Käse" if i % 2 else "abc", Decimal(i * 1001) / 100, datetime(2024, 1, 1, 0, 0, 0, i),
             datetime(2030, 6, 1, 12, 0, 0, 999999 - i), timedelta(hours=-i, microseconds=-i),
             json.dumps({"b": i, "a": ["é", 1.5]}), i * 67 % 1024, 1.1 * i, bytes([i, 0, 255]), f"v{i} ünï")
            for i in range(1, 21)])
        cur.execute("UPDATE t SET v = 'updated', d = d + 1 WHERE id = 3")
        cur.execute("DELETE FROM t WHERE id = 4")
        cur.execute("UPDATE t SET k = 'moved' WHERE id = 6")  # a key change: delete + create
    run_until_caught_up(config)
    prefix, bootstrap = config.kafka.topic_prefix, config.kafka.bootstrap_servers
    topic, clean = f"{prefix}.{test_db}.t", clean_topic(prefix, test_db, "t")
    ensure_clean_topic(bootstrap, clean, 1)
    dec = decoder(config)
    writer = CleanPartitionWriter(bootstrap, clean, 0)
    records = []
    for msg in read_topic(bootstrap, topic):
        value = dec.decode(msg.value())
        records.append((msg.key(), msg.value(), value))
        writer.write(msg.key(), msg.value(), value["position"])
    writer.flush()
    assert len(records) == 20 + 1 + 1 + 2

    config.sinks.postgres.enabled = config.sinks.mysql.enabled = False
    report = verify(config, [f"{test_db}.t"], changelog=True, chunk_size=6)
    (r,) = report.tables[0].results
    assert report.tables[0].mode == "keys"
    assert r.sink == "changelog" and r.target == clean and r.equal, r
    assert (r.source_rows, r.sink_rows, r.chunks) == (19, 19, 4)
    out = run_cli(config, tmp_path, "--changelog", f"{test_db}.t")
    assert out.returncode == 0, out.stdout + out.stderr

    # break it: newer records the source never had, encoded with the producer's own schema
    store = SchemaStore(bootstrap, prefix)
    last = max(v["position"] for _, _, v in records)
    first, latest = {}, {}
    for key_bytes, _, value in records:
        row = value["after"] or value["before"]
        first.setdefault(row["id"], (key_bytes, value))
        latest[row["id"]] = (key_bytes, value)
    vwriter = AvroWriter(store.get(records[0][1][2:10].hex()))  # the producer's writer schema
    writer = CleanPartitionWriter(bootstrap, clean, 0)

    def add(n: int, key_bytes: bytes, value: dict) -> None:
        value = {**value, "position": f"{int(last) + n:030d}"}
        writer.write(key_bytes, vwriter.encode(value), value["position"])

    key3, v3 = latest[3]
    add(1, key3, {**v3, "op": "u", "before": v3["after"], "after": {**v3["after"], "d": Decimal("31.04")}})
    key4, v4 = first[4]
    add(2, key4, v4)  # id 4's insert again: the source deleted it
    key5, v5 = first[5]
    add(3, key5, {**v5, "op": "d", "before": v5["after"], "after": None})
    writer.flush()
    report = verify(config, [f"{test_db}.t"], changelog=True, chunk_size=6)
    (r,) = report.tables[0].results
    assert (r.missing, r.extra, r.differing, r.sink_rows) == (1, 1, 1, 19)
    got = {(s.kind, s.key["id"], s.key["k"]): s for s in r.samples}
    assert set(got) == {("missing", 5, "Käse"), ("extra", 4, "abc"), ("differs", 3, "Käse")}
    assert got[("differs", 3, "Käse")].columns == ["d"]
    assert (got[("differs", 3, "Käse")].source["d"], got[("differs", 3, "Käse")].sink["d"]) == ("31.03", "31.04")

    # a table whose clean topic does not exist
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY)")
    (r,) = verify(config, [f"{test_db}.other"], changelog=True).tables[0].results
    assert "does not exist" in (r.error or "")
    print_report(report)  # renders without error
