"""Event-for-event conformance with Debezium on MySQL 9.7, Debezium's home server.

The session's MySQL server (``mysql_stack``: ``cdc stack up --flavor mysql``) read at once by
Debezium 3.6.3's MySQL connector (with the Connector/J it bundles: no version trick, no MariaDB
driver) and by our producer (``producer.format: debezium-json``), as on MariaDB
(test_debezium_conformance.py, whose ``side_by_side`` runs both): the all-types table, the
tables of the MariaDB test (a key change, a keyless table, a composite key, an ADD and a DROP
COLUMN mid-stream), and MySQL's own types (:data:`tests.all_types.MYSQL_TYPES_DDL`: binary JSON
at its edges, every geometry, VECTOR, every fractional precision of TIME/DATETIME/TIMESTAMP,
YEAR, BIT, ENUM/SET, an invisible column, generated columns) with a table keyed by MySQL's
generated invisible primary key; then an incremental snapshot on each side.  Every difference
must be listed in docs/debezium-conformance.md's section "Differences on MySQL", and every one
listed there must still occur.
"""

from __future__ import annotations

import json

import pytest

from tests.all_types import (MYSQL_GIPK, MYSQL_GIPK_CHANGES, MYSQL_TYPES_CHANGES, MYSQL_TYPES_DDL, create_all_types,
                             insert_all_types, mysql_types_rows)
from tests.integration.producer.test_debezium_conformance import ALL_ASPECTS, DML, DOC, TABLES, _run_sql, side_by_side
from tests.peers.conformance import check_against_table, compare

pytestmark = pytest.mark.servers("mysql")

SECTION = "Differences on MySQL"


def test_our_events_match_debeziums_on_mysql(config, unique, mysql_stack, tmp_path):
    db = unique("db")
    tables = ["types", "mtypes", "gipk", "t", "nopk", "ck"]

    def create(conn) -> None:
        create_all_types(conn, mariadb=False, rows=False)
        _run_sql(MYSQL_TYPES_DDL, *MYSQL_GIPK, *TABLES)(conn)

    def changes(conn) -> None:
        insert_all_types(conn, mariadb=False)
        _run_sql(*mysql_types_rows(), *MYSQL_TYPES_CHANGES, *MYSQL_GIPK_CHANGES, *DML, utc=True)(conn)
    ours, theirs = side_by_side(config, mysql_stack.mysql, db, tmp_path, create=create, changes=changes,
                                snapshot_tables=["types", "mtypes", "gipk", "t", "ck"], tables=tables,
                                tag="conformance-mysql")
    (tmp_path / "ours.json").write_text(json.dumps([[e.table, e.key, e.value] for e in ours]))  # beside Debezium's
    found = compare(ours, theirs, tables=[f"{db}.{t}" for t in tables])
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    # (the run did what it says: every table's changes and snapshot reads on our side)
    ops = {t: sorted({e.op for e in ours if e.table == f"{db}.{t}"}) for t in tables}
    assert ops["mtypes"] == ["c", "d", "r", "tombstone", "u"] and ops["gipk"] == ["c", "d", "r", "tombstone", "u"], ops
    # Our binary JSON from the binlog is MySQL's own text: what the snapshot's SELECT read for the same
    # rows (ids 1, 4, 5 and 20 were last written by the stream's events before the snapshot read them).
    last = {}
    for e in ours:
        if e.table == f"{db}.mtypes" and e.value is not None and e.value["after"] is not None:
            last.setdefault(e.value["after"]["id"], {})[e.op] = e.value["after"]
    for key in (1, 4, 5, 20):
        streamed, read = last[key].get("u") or last[key]["c"], last[key]["r"]
        assert (streamed["js"], streamed["jbig"]) == (read["js"], read["jbig"]), key
    problems = check_against_table(found, DOC, scope=ALL_ASPECTS, section=SECTION)
    assert not problems, "\n".join(problems) + f"\n\nevery difference found:\n{report}"
