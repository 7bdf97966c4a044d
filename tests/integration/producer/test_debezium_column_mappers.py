"""Debezium's column mappers, against Debezium itself.

Both sides capture one table with ``column.mask.with.N.chars``, ``column.mask.hash.<alg>.with.salt.<salt>``
(v1 and v2), ``column.truncate.to.N.chars``, ``column.propagate.source.type`` and
``datatype.propagate.source.type`` (ours: ``source.column_mask_with_chars``, ``column_mask_hash``,
``column_truncate_to_chars``, ``column_propagate_source_type``, ``datatype_propagate_source_type``,
producer/column_mappers.py), in the stream and in an incremental snapshot: every column's Connect
schema (its parameters: ``masked``, ``truncateLength``, ``__debezium.source.column.*``) and every
value must be Debezium's (the differences every run has aside).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.all_types import create_all_types, insert_all_types
from tests.integration.producer.test_debezium_conformance import DBZ_SIGNALS, DebeziumCapture, _admin, _ours
from tests.integration.producer.test_debezium_handling_modes import ALWAYS
from tests.peers.conformance import compare
from tests.peers.debezium_capture import debezium_mariadb
from tests.producer_helpers import ProducerThread, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot

TABLE = ("CREATE TABLE people (id INT PRIMARY KEY, email VARCHAR(40), name VARCHAR(20), nick TEXT, bio TEXT, "
         "code CHAR(3), colour ENUM('red','green','blue'), tags SET('a','b','c'), n INT, amount DECIMAL(10,2), "
         "seen DATETIME(3), bin VARBINARY(10), plain VARCHAR(30))")

ROWS = [
    (1, "ann@example.com", "Ann Example", "annie", "likes long walks", "abc", "red", "a,c", 7, "12.50",
     "2020-01-02 03:04:05.678", b"\x01\x02\x03\x04\x05", "kept"),
    (2, None, None, None, None, None, None, None, None, None, None, None, None),
    (3, "b\u00e9\u00e9@example.org", "J\u00fcrgen \U0001F600 M\u00fcller", "j\u00fc \U0001F600",
     "\U0001F600\U0001F600abc", "xy",
     "blue", "", -1, "-0.01", "1999-12-31 23:59:59.999", b"\xff" * 10, "\u00e9t\u00e9"),
]

DML = ["UPDATE people SET email = 'new@example.com', bio = 'short', name = 'Zed' WHERE id = 1",
       "UPDATE people SET email = NULL, nick = 'x' WHERE id = 3",
       "DELETE FROM people WHERE id = 2"]


def settings(db: str) -> tuple[dict[str, str], dict]:
    """Debezium's connector properties and our ``source`` settings that say the same."""
    t = f"{db}.people"
    theirs = {
        "column.mask.with.5.chars": f"{t}.email,{t}.colour,{t}.tags,{t}.n",
        "column.mask.hash.SHA-256.with.salt.CzQMA0cB5K": f"{t}.name",
        "column.mask.hash.v2.MD5.with.salt.pepper": f"{t}.nick",
        "column.truncate.to.4.chars": f"{t}.bio,{t}.bin",
        "column.truncate.to.5.chars": f"{t}.code",
        "column.propagate.source.type": f"{t}.amount,{t}.id",
        "datatype.propagate.source.type": rf"{db}\.people\.DATETIME",
    }
    ours = {
        "column_mask_with_chars": {5: [f"{t}.email", f"{t}.colour", f"{t}.tags", f"{t}.n"]},
        "column_mask_hash": [{"algorithm": "SHA-256", "salt": "CzQMA0cB5K", "columns": [f"{t}.name"]},
                             {"algorithm": "MD5", "salt": "pepper", "columns": f"{t}.nick", "strategy": "v2"}],
        "column_truncate_to_chars": {4: f"{t}.bio,{t}.bin", 5: [f"{t}.code"]},
        "column_propagate_source_type": [f"{t}.amount", f"{t}.id"],
        "datatype_propagate_source_type": [rf"{db}\.people\.DATETIME"],
    }
    return theirs, ours


@pytest.fixture(scope="module")
def debezium_server(tmp_path_factory):
    with debezium_mariadb(tmp_path_factory.mktemp("dbz-mappers"), server_id=79) as info:
        yield info


def _configure(cfg, server, db: str, ours_settings: dict) -> None:
    cfg.source.host, cfg.source.port = server["host"], server["port"]
    cfg.source.user, cfg.source.password = server["cdc_user"], server["cdc_password"]
    cfg.source.signal_table = server["signal_table"]
    cfg.source.include_databases = [db]
    cfg.producer.format = "debezium-json"
    for name, value in ours_settings.items():
        setattr(cfg.source, name, {str(k): v for k, v in value.items()} if isinstance(value, dict) else value)


def _both(cfg, server, db: str, state, table: str, create, write, theirs_settings: dict) -> tuple[list, list]:
    """Our events and Debezium's of ``db.table``: ``create(conn)`` before both start, ``write(conn)``
    while they stream, then an incremental snapshot of the table on each side."""
    with _admin(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
    with _admin(server, db) as conn:
        create(conn)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {DBZ_SIGNALS} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                        "data VARCHAR(2048))")
    start_at_current(cfg)
    dbz = DebeziumCapture(server, db, state, **theirs_settings)
    try:
        with _admin(server, db) as conn:
            write(conn)
        with ProducerThread(cfg):
            sid = snapshot(cfg, [f"{db}.{table}"])
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), 120, what="our snapshot completed")
        with _admin(server, db) as conn, conn.cursor() as cur:
            data = {"data-collections": [f"{db}.{table}"], "type": "incremental"}
            cur.execute(f"INSERT INTO {DBZ_SIGNALS} VALUES ('mappers-1', 'execute-snapshot', %s)", (json.dumps(data),))
        ours = _ours(cfg, db, [table])
        seen = {"n": -1, "since": time.monotonic()}

        def settled() -> bool:
            n = sum(1 for e in dbz.events() if e.table == f"{db}.{table}")
            if n != seen["n"]:
                seen.update(n=n, since=time.monotonic())
            return n >= len(ours) or time.monotonic() - seen["since"] > 15
        wait_for(settled, 180, interval=1.0, what="Debezium's events")
        return ours, dbz.events()
    finally:
        dbz.close()
        with _admin(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _differences(ours: list, theirs: list, table: str) -> tuple[list, str]:
    found = [d for d in compare(ours, theirs, tables=[table]) if not str(d.id).startswith(ALWAYS)]
    report = "\n".join(f"  {d}" for d in found)
    print(f"{len(ours)} events ours, {len(theirs)} Debezium's; differences:\n{report}")
    return found, report


def test_masked_hashed_truncated_columns_match_debeziums(config, unique, debezium_server, tmp_path):
    cfg, server, db = config, debezium_server, unique("db")
    theirs_settings, ours_settings = settings(db)
    _configure(cfg, server, db, ours_settings)

    def create(conn):
        with conn.cursor() as cur:
            cur.execute(TABLE)

    def write(conn):
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO people VALUES (" + ", ".join(["%s"] * 13) + ")", ROWS)
            for sql in DML:
                cur.execute(sql)
    ours, theirs = _both(cfg, server, db, tmp_path, "people", create, write, theirs_settings)
    found, report = _differences(ours, theirs, f"{db}.people")
    created = {e.value["after"]["id"]: e.value["after"] for e in ours if e.op == "c"}
    assert created[1]["email"] == "*****" and created[2]["email"] == "*****" and created[1]["bio"] == "like"
    assert len(ours) >= 8 and found == [], f"differences from Debezium with its column mappers:\n{report}"


#: One mapper over every column of the all-types table (but its key), each run on its own.
ALL_TYPES = {
    "propagate": ("column.propagate.source.type", "column_propagate_source_type", None),
    "datatype": ("datatype.propagate.source.type", "datatype_propagate_source_type", None),
    "mask": ("column.mask.with.3.chars", "column_mask_with_chars", "3"),
    "truncate": ("column.truncate.to.2.chars", "column_truncate_to_chars", "2"),
    "hash": ("column.mask.hash.SHA-1.with.salt.s", "column_mask_hash", None),
}


@pytest.mark.parametrize("mapper", sorted(ALL_TYPES))
def test_one_mapper_over_every_type_matches_debeziums(config, unique, debezium_server, tmp_path, mapper):
    cfg, server, db = config, debezium_server, unique("db")
    theirs_key, ours_key, n = ALL_TYPES[mapper]
    every = rf"{db}\.types\.(?!id$).*" if mapper != "datatype" else rf"{db}\.types\..*"
    ours_value: object = [every]
    if n is not None:
        ours_value = {n: [every]}
    elif mapper == "hash":
        ours_value = [{"algorithm": "SHA-1", "salt": "s", "columns": [every]}]
    _configure(cfg, server, db, {ours_key: ours_value})

    def write(conn):
        insert_all_types(conn, mariadb=False)
        with conn.cursor() as cur:
            cur.execute("UPDATE types SET vc = 'changed', tx = NULL, e = 'c' WHERE id = 1")
            cur.execute("DELETE FROM types WHERE id = 2")
    ours, theirs = _both(cfg, server, db, tmp_path, "types", lambda conn: create_all_types(conn, mariadb=False,
                                                                                              rows=False),
                         write, {theirs_key: every, "bigint.unsigned.handling.mode": "precise"})
    found, report = _differences(ours, theirs, f"{db}.types")
    # A TINYINT(1)'s display width is not in the binlog's table map: our stream gives TINYINT's
    # (4), Debezium the declared 1 (docs/configuration.md, "Column controls").
    known = {"schema:types.bo"} if mapper in ("propagate", "datatype", "truncate") else set()
    assert {d.id for d in found} <= known, f"differences from Debezium with {theirs_key}:\n{report}"
    assert len(ours) >= 6
