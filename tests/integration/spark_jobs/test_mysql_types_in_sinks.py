"""MySQL's own types (:data:`tests.all_types.MYSQL_TYPES_DDL`: binary JSON at its edges, every
geometry, VECTOR, every fractional precision of TIME/DATETIME/TIMESTAMP, YEAR, BIT, ENUM/SET, an
invisible column, generated columns) from MySQL 9.7 through the merge job into every sink:
PostgreSQL, MySQL, Delta Lake and Iceberg, each equal to the source (``cdc verify``).

VECTOR is the sink kind ``float_vector`` (docs/types.md): PostgreSQL ``real[]``, MySQL ``JSON``,
the lakes ``list<float32>``; until it was, the merge job stopped on such a column.
"""

from __future__ import annotations

import json
import struct

import pytest

from tests.all_types import MYSQL_TYPES_CHANGES, MYSQL_TYPES_DDL, mysql_types_rows
from tests.producer_helpers import run_until_caught_up, start_at_current

pytestmark = pytest.mark.servers("mysql")

#: The float32 values of the rows' vectors after the changes (the float32 max, a subnormal's
#: neighbour, -0, 0.1 as float32), by key: (vec, vec1).
_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    return _F32.unpack(_F32.pack(x))[0]


EXPECTED_VECTORS = {
    1: ([1.0, 2.0, 3.0], [_f32(0.1)]),
    20: ([0.0, -0.0, 0.0], [_f32(-3.4028234e38)]),
    4: (None, None),
    5: (None, None),
}


def test_mysqls_types_reach_every_sink_equal_to_the_source(source_stack, lake_config, test_db):
    from cdc.verify import verify
    from spark_jobs.merge_job import MergeJob
    from tests.sink_helpers import mysql_sink_rows, pg_sink_rows

    cfg = lake_config
    cfg.source.include_databases = [test_db]  # (the MySQL sink's database is on this server too)
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(MYSQL_TYPES_DDL)
    start_at_current(cfg)
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for sql in [*mysql_types_rows(), *MYSQL_TYPES_CHANGES]:
            cur.execute(sql)
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    # a second batch into the tables the first made: their columns as the formats read them back (a
    # list column is a large list in pyiceberg's schema) are the same columns, nothing retyped or lost
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE mtypes SET fl = 2.5 WHERE id = 1")  # (row 20 untouched: its vectors must stay)
        cur.execute("UPDATE mtypes SET yr = 2000 WHERE id = 4")
    run_until_caught_up(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0

    pg = pg_sink_rows(cfg, test_db, "mtypes", ["id"])
    assert sorted(k for (k,) in pg) == [1, 4, 5, 20]
    for key, (vec, vec1) in EXPECTED_VECTORS.items():
        got = [None if v is None else [_f32(x) for x in v] for v in (pg[(key,)]["vec"], pg[(key,)]["vec1"])]
        assert got == [vec, vec1], key  # real[]: the float32 values (read back as their shortest text)
    assert [str(x) for x in pg[(20,)]["vec"]] == ["0.0", "-0.0", "0.0"]  # (-0 kept)
    my = mysql_sink_rows(source_stack, cfg, test_db, "mtypes", ["id"])
    for key, (vec, vec1) in EXPECTED_VECTORS.items():
        got = [None if v is None else json.loads(v) for v in (my[(key,)]["vec"], my[(key,)]["vec1"])]
        assert got == [vec, vec1], key  # JSON arrays of the float32 values, exactly

    report = verify(cfg, [f"{test_db}.mtypes"])
    assert report.equal, report.to_dict()
    assert {r.sink for t in report.tables for r in t.results} >= {"postgres", "mysql", "delta", "iceberg"}
