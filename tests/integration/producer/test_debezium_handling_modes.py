"""Debezium's handling modes, against Debezium itself.

The conformance test (test_debezium_conformance.py) runs both sides with Debezium's defaults;
here both run with the other modes (``decimal.handling.mode``, ``time.precision.mode``,
``bigint.unsigned.handling.mode``, ``binary.handling.mode``; ours: ``producer.*``, the same
values) over the all-types table, in the stream and in an incremental snapshot, and every
column's Connect schema and every value must be Debezium's (the differences every run has,
listed in docs/debezium-conformance.md, aside).
"""

from __future__ import annotations

import pytest

from tests.all_types import create_all_types, insert_all_types
from tests.integration.producer.test_debezium_conformance import _run_sql, side_by_side
from tests.peers.conformance import compare
from tests.peers.debezium_capture import debezium_mariadb

#: Differences every comparison has, whatever the modes (docs/debezium-conformance.md).
ALWAYS = ("envelope:position", "envelope:snapshot_window", "source-value:gtid", "value:types.yr",
          "snapshot-source-value:")

MODES = {
    "string-connect-long-base64": {"decimal.handling.mode": "string", "time.precision.mode": "connect",
                                   "bigint.unsigned.handling.mode": "long", "binary.handling.mode": "base64"},
    "double-hex": {"decimal.handling.mode": "double", "bigint.unsigned.handling.mode": "precise",
                   "binary.handling.mode": "hex"},
}

# Changes after both sides stream: the all-types rows, one of them changed, one deleted.
DML = ["UPDATE types SET d10 = 1.5, bn = 0x0a0b, tm = '12:34:56.789', dtm = '2001-02-03 04:05:06.789012' WHERE id = 1",
       "DELETE FROM types WHERE id = 2"]


@pytest.fixture(scope="module")
def debezium_server(tmp_path_factory):
    with debezium_mariadb(tmp_path_factory.mktemp("dbz-modes"), server_id=78) as info:
        yield info


@pytest.mark.parametrize("modes", sorted(MODES))
def test_our_events_match_debeziums_under_its_handling_modes(config, unique, debezium_server, tmp_path, modes):
    settings = MODES[modes]
    for name, value in settings.items():
        setattr(config.producer, name.replace(".", "_"), value)

    def changes(conn) -> None:
        insert_all_types(conn, mariadb=False)
        _run_sql(*DML, utc=True)(conn)
    db = unique("db")
    ours, theirs = side_by_side(config, debezium_server, db, tmp_path,
                                create=lambda conn: create_all_types(conn, mariadb=False, rows=False),
                                changes=changes, snapshot_tables=["types"], tables=["types"], tag="modes-1",
                                **settings)
    found = [d for d in compare(ours, theirs, tables=[f"{db}.types"]) if not str(d.id).startswith(ALWAYS)]
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's ({settings}); differences:\n{report}")
    assert len(ours) >= 6 and found == [], f"differences from Debezium under {settings}:\n{report}"
