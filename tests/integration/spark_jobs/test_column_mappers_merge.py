"""The merge job's sinks and ``cdc verify`` under Debezium's column mappers (issue 57,
producer/column_mappers.py): masked, hashed and truncated columns land in the sinks as the events
carry them (a masked or hashed column as text), and ``cdc verify`` computes those values from the
source before comparing, saying which columns it compared so."""

from __future__ import annotations

import psycopg

from cdc.verify import verify
from producer.column_mappers import hash_value
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import ProducerThread, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

TABLE = ("CREATE TABLE people (id INT PRIMARY KEY, email VARCHAR(40), name VARCHAR(20), bio TEXT, "
         "colour ENUM('red','green'), bin VARBINARY(8), plain VARCHAR(10))")


def _pg_rows(cfg, db: str) -> tuple[dict[str, str], dict[int, tuple]]:
    """The PostgreSQL sink table's column types and rows."""
    sink = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
    name = sink.qualified_name(db, "people")
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped", (name,))
        types = dict(cur.fetchall())
        cur.execute(f"SELECT id, email, name, bio, colour, bin, plain FROM {name}")
        rows = {r[0]: r[1:] for r in cur.fetchall()}
    return types, rows


def test_sinks_and_verify_follow_the_column_mappers(stack, merge_config, test_db):
    cfg = merge_config
    run_sql(stack, test_db, TABLE,
          "INSERT INTO people VALUES (1, 'a@x.org', 'Ann', 'likes walks', 'red', 0x0102030405, 'p1'), "
          "(2, NULL, NULL, NULL, NULL, NULL, NULL)")
    cfg.source.include_databases = [test_db]
    cfg.source.column_mask_with_chars = {"5": [rf"{test_db}\.people\.(email|colour)"]}
    cfg.source.column_mask_hash = [{"algorithm": "SHA-256", "salt": "pepper", "columns": [f"{test_db}.people.name"]}]
    cfg.source.column_truncate_to_chars = {"4": [f"{test_db}.people.bio", f"{test_db}.people.bin"]}
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{test_db}.people"])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=90, what="snapshot completed")
        run_sql(stack, test_db, "INSERT INTO people VALUES (3, 'c@x.org', 'J\u00fcrgen', '\u00e9t\u00e9 long', "
                              "'green', 0xff, 'p3')",
              "UPDATE people SET email = 'a2@x.org', name = 'Anna', bio = 'no' WHERE id = 1")
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    types, rows = _pg_rows(cfg, test_db)
    assert types["email"] == "text" and types["name"] == "text" and types["bin"] == "bytea"
    salted = hash_value("Anna", "SHA-256", "pepper")[:20]
    assert rows[1] == ("*****", salted, "no", "*****", b"\x01\x02\x03\x04", "p1")
    assert rows[2] == ("*****", None, None, "*****", None, None)  # (a masked NULL is the mask, as Debezium's)
    assert rows[3] == ("*****", hash_value("J\u00fcrgen", "SHA-256", "pepper")[:20], "\u00e9t\u00e9 ", "*****",
                       b"\xff", "p3")
    report = verify(cfg, [f"{test_db}.people"], changelog=True, chunk_size=2)
    assert report.equal, report.to_dict()
    notes = [n for r in report.tables[0].results for n in r.notes]
    for column, how in (("email", "masked (source.column_mask_with_chars)"),
                        ("name", "hashed (SHA-256) (source.column_mask_hash)"),
                        ("bio", "truncated to 4 (source.column_truncate_to_chars)")):
        assert any(f"column {column} compared as {how}" in n for n in notes), (column, notes)
    assert len(report.tables[0].results) == len(report.targets) >= 2  # postgres, ..., changelog
