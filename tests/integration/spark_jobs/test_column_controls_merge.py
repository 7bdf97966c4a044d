"""The merge job's sinks and ``cdc verify`` under the column controls (issue 57): a column the
events leave out (``source.column_exclude_list``) is absent from the sink tables and not
compared, and ``source.message_key_columns`` gives the sink tables their key (a table
without a primary key, and one whose primary key it overrides)."""

from __future__ import annotations

import psycopg

from cdc.verify import verify
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import ProducerThread, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

TABLES = {
    "users": "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(40), secret VARCHAR(20), photo BLOB)",
    "nopk": "CREATE TABLE nopk (code VARCHAR(10) NOT NULL, qty INT, note VARCHAR(10))",
    "rekey": "CREATE TABLE rekey (id INT PRIMARY KEY, ref VARCHAR(10) NOT NULL, v INT)",
}


def _pg_shape(cfg, db: str, table: str) -> tuple[list[str], list[str]]:
    """The PostgreSQL sink table's columns (its own bookkeeping ones aside) and primary key."""
    sink = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute("SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 "
                    "AND NOT a.attisdropped ORDER BY a.attnum", (sink.qualified_name(db, table),))
        cols = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
                    "ORDER BY array_position(i.indkey, a.attnum)", (sink.qualified_name(db, table),))
        key = [r[0] for r in cur.fetchall()]
    return [c for c in cols if not c.startswith("__")], key


def _mysql_shape(stack, cfg, db: str, table: str) -> tuple[list[str], list[str]]:
    m = cfg.sinks.mysql
    sink = MySQLSink(m.host, m.port, m.user, m.password.get_secret_value(), m.database)
    name = sink.qualified_name(db, table).split(".", 1)[1].strip("`")
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME, COLUMN_KEY FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (m.database, name))
        rows = cur.fetchall()
    return [c for c, _ in rows if not c.startswith("__")], [c for c, k in rows if k == "PRI"]


def test_sinks_and_verify_follow_the_column_controls(stack, merge_config, test_db):
    cfg = merge_config
    run_sql(stack, test_db, *TABLES.values(),
          "INSERT INTO users VALUES (1, 'a@x', 'pw1', 0x01), (2, 'b@x', 'pw2', NULL)",
          "INSERT INTO nopk VALUES ('k1', 1, 'n1'), ('k2', 2, 'n2')",
          "INSERT INTO rekey VALUES (1, 'r1', 1), (2, 'r2', 2)")
    cfg.source.include_databases = [test_db]
    cfg.source.column_exclude_list = [rf"{test_db}\.users\.(secret|photo)", rf"{test_db}\.nopk\.note"]
    cfg.source.message_key_columns = rf"{test_db}\.nopk:code;{test_db}\.rekey:ref"
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{test_db}.{t}" for t in TABLES])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=90, what="snapshot completed")
        run_sql(stack, test_db, "INSERT INTO users VALUES (3, 'c@x', 'pw3', 0x03)",
              "UPDATE users SET secret = 'new', email = 'a2@x' WHERE id = 1", "DELETE FROM users WHERE id = 2",
              "UPDATE nopk SET qty = 20, note = 'x' WHERE code = 'k2'", "UPDATE nopk SET code = 'k3' WHERE code = 'k1'",
              "INSERT INTO rekey VALUES (3, 'r3', 3)", "UPDATE rekey SET ref = 'r9' WHERE id = 2")
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    shapes = {"users": (["id", "email"], ["id"]), "nopk": (["code", "qty"], ["code"]),
              "rekey": (["id", "ref", "v"], ["ref"])}
    for table, shape in shapes.items():
        assert _pg_shape(cfg, test_db, table) == shape, f"postgres {table}"
        assert _mysql_shape(stack, cfg, test_db, table) == shape, f"mysql {table}"
    report = verify(cfg, [f"{test_db}.{t}" for t in TABLES], changelog=True, chunk_size=2)
    assert report.equal, report.to_dict()
    by_table = {t.table: t for t in report.tables}
    assert by_table[f"{test_db}.nopk"].key == ["code"] and by_table[f"{test_db}.rekey"].key == ["ref"]
    notes = [n for r in by_table[f"{test_db}.users"].results for n in r.notes]
    assert notes and all("secret, photo not compared" in n and "source.column_exclude_list" in n for n in notes)
    assert any("from source.message_key_columns" in n for r in by_table[f"{test_db}.rekey"].results for n in r.notes)
    assert len(by_table[f"{test_db}.users"].results) == len(report.targets) >= 3  # postgres, mysql, changelog
