"""The merge job's sinks and ``cdc verify`` under Debezium's handling modes (issue 57): the sink
tables take the types the modes give (a DECIMAL written as text is a text column, a BIGINT
UNSIGNED written as a long a bigint, bytes written as base64 or hex text), and ``cdc verify``
compares each source value as the modes write it: equal, stream and snapshot, PostgreSQL,
MySQL and the clean changelog."""

from __future__ import annotations

import psycopg
import pytest

from cdc.verify import verify
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import ProducerThread, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

DDL = ("CREATE TABLE m (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(12,3), wide DECIMAL(40,20), vb VARBINARY(8), "
       "bn BINARY(4), tm TIME(6), dtm DATETIME(6))")
ROWS = ("INSERT INTO m VALUES (18446744073709551615, 1.5, 12345678901234567890.12345678901234567890, 0xfbff00, "
        "0x01, '12:34:56.789012', '2001-02-03 04:05:06.789012'), (1, -0.001, 0, '', 0x01020304, '-01:00:00', "
        "'1970-01-01 00:00:00'), (9223372036854775808, NULL, NULL, NULL, NULL, '838:59:59', NULL)")
CHANGES = ("UPDATE m SET d = 2.25, vb = 0x00, tm = '00:00:00.000999' WHERE id = 1",
           "INSERT INTO m VALUES (2, 99.999, 1.5, 0xff, 0xff, '23:59:59.999999', '2038-01-19 03:14:07.5')",
           "DELETE FROM m WHERE id = 9223372036854775808")
MODES = {"string-connect-long-base64": {"decimal_handling_mode": "string", "time_precision_mode": "connect",
                                        "bigint_unsigned_handling_mode": "long", "binary_handling_mode": "base64"},
         "double-hex": {"decimal_handling_mode": "double", "binary_handling_mode": "hex"}}
PG_TYPES = {"string-connect-long-base64": {"id": "bigint", "d": "text", "vb": "text", "tm": "interval",
                                           "dtm": "timestamp(3) without time zone"},
            "double-hex": {"id": "numeric(20,0)", "d": "double precision", "vb": "text", "tm": "interval",
                           "dtm": "timestamp(6) without time zone"}}


def _pg_types(cfg, db: str, table: str) -> dict[str, str]:
    sink = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                    (sink.qualified_name(db, table),))
        return dict(cur.fetchall())


@pytest.mark.parametrize("modes", sorted(MODES))
def test_sinks_and_verify_follow_the_handling_modes(stack, merge_config, test_db, modes):
    cfg = merge_config
    run_sql(stack, test_db, DDL, ROWS)
    cfg.source.include_databases = [test_db]
    for name, value in MODES[modes].items():
        setattr(cfg.producer, name, value)
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{test_db}.m"])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=90, what="snapshot completed")
        run_sql(stack, test_db, *CHANGES)
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    types = _pg_types(cfg, test_db, "m")
    assert {c: types[c] for c in PG_TYPES[modes]} == PG_TYPES[modes]
    report = verify(cfg, [f"{test_db}.m"], changelog=True, chunk_size=2)
    assert report.equal, report.to_dict()
    assert len(report.tables[0].results) == len(report.targets) >= 3  # postgres, mysql, changelog
