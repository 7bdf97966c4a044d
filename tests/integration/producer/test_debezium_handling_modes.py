"""Debezium's handling modes, against Debezium itself.

The conformance test (test_debezium_conformance.py) runs both sides with Debezium's defaults;
here both run with the other modes (``decimal.handling.mode``, ``time.precision.mode``,
``bigint.unsigned.handling.mode``, ``binary.handling.mode``; ours: ``producer.*``, the same
values) over the all-types table, in the stream and in an incremental snapshot, and every
column's Connect schema and every value must be Debezium's (the differences every run has,
listed in docs/debezium-conformance.md, aside).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.all_types import create_all_types, insert_all_types
from tests.integration.producer.test_debezium_conformance import DBZ_SIGNALS, DebeziumCapture, _admin, _ours
from tests.peers.conformance import compare
from tests.peers.debezium_capture import debezium_mariadb
from tests.producer_helpers import ProducerThread, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

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
    cfg, server, db = config, debezium_server, unique("db")
    cfg.source.host, cfg.source.port = server["host"], server["port"]
    cfg.source.user, cfg.source.password = server["cdc_user"], server["cdc_password"]
    cfg.source.signal_table = server["signal_table"]
    cfg.source.include_databases = [db]
    cfg.producer.format = "debezium-json"
    for name, value in settings.items():
        setattr(cfg.producer, name.replace(".", "_"), value)
    with _admin(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    with _admin(server, db) as conn:
        create_all_types(conn, mariadb=False, rows=False)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {DBZ_SIGNALS} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                        "data VARCHAR(2048))")
    start_at_current(cfg)
    dbz = DebeziumCapture(server, db, tmp_path, **settings)
    try:
        with _admin(server, db) as conn:
            insert_all_types(conn, mariadb=False)
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                for sql in DML:
                    cur.execute(sql)
        with ProducerThread(cfg):
            sid = snapshot(cfg, [f"{db}.types"])
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), 120, what="our snapshot completed")
        with _admin(server, db) as conn, conn.cursor() as cur:
            data = {"data-collections": [f"{db}.types"], "type": "incremental"}
            cur.execute(f"INSERT INTO {DBZ_SIGNALS} VALUES ('modes-1', 'execute-snapshot', %s)", (json.dumps(data),))
        ours = _ours(cfg, db, ["types"])
        seen = {"n": -1, "since": time.monotonic()}

        def settled() -> bool:
            n = sum(1 for e in dbz.events() if e.table == f"{db}.types")
            if n != seen["n"]:
                seen.update(n=n, since=time.monotonic())
            return n >= len(ours) or time.monotonic() - seen["since"] > 15
        wait_for(settled, 180, interval=1.0, what="Debezium's events")
        theirs = dbz.events()
    finally:
        dbz.close()
        with _admin(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    found = [d for d in compare(ours, theirs, tables=[f"{db}.types"]) if not str(d.id).startswith(ALWAYS)]
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's ({settings}); differences:\n{report}")
    assert len(ours) >= 6 and found == [], f"differences from Debezium under {settings}:\n{report}"
