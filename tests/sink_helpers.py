"""Reading sink tables and clean changelogs back, comparable with ``source_rows``."""

from __future__ import annotations

import psycopg
import pymysql

from common.kafka.topic_reader import read_topic
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import decoder, resolving_decoder

POSITION = "__cdc_position"


def difference(got: dict, expected: dict, shown: int = 3) -> str:
    """What tells ``got`` from ``expected`` (``{key: row}``): the keys missing, the keys extra
    and the rows that differ, a few of each (for a timeout's message)."""
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    differ = [(k, got[k], expected[k]) for k in expected if k in got and got[k] != expected[k]]
    return (f"{len(missing)} missing {missing[:shown]}, {len(extra)} extra {extra[:shown]}, "
            f"{len(differ)} differing (key, got, expected) {differ[:shown]}")


def pg_sink_rows(cfg, db: str, table: str, keys: list[str]) -> dict:
    sink = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
    with psycopg.connect(cfg.sinks.postgres.dsn.get_secret_value()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {sink.qualified_name(db, table)}")
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return {tuple(r[k] for k in keys): {k: v for k, v in r.items() if k != POSITION} for r in rows}


def mysql_sink_rows(stack, cfg, db: str, table: str, keys: list[str]) -> dict:
    m = cfg.sinks.mysql
    sink = MySQLSink(m.host, m.port, m.user, m.password.get_secret_value(), m.database)
    with stack.admin() as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM {sink.qualified_name(db, table)}")
        rows = cur.fetchall()
    return {tuple(r[k] for k in keys): {k: v for k, v in r.items() if k != POSITION} for r in rows}


def apply_clean(cfg, topic: str) -> dict:
    """Replay a clean changelog topic in order (per partition; keys stay in their
    partition): ``{key tuple: after row}``; also checks it holds no copy."""
    dec = decoder(cfg)
    table: dict = {}
    highest: dict[int, str] = {}
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
        key, value = dec.decode(m.key()), dec.decode(m.value())
        assert value["position"] > highest.get(m.partition(), ""), f"copy or disorder in {topic} at {m.offset()}"
        highest[m.partition()] = value["position"]
        k = tuple(key.values())
        if value["op"] == "d":
            table.pop(k, None)
        else:
            table[k] = value["after"]
    return table


def apply_merged_clean(cfg, topic: str, key_names: list[str], origin: bool = True) -> dict:
    """Replay a merged clean changelog (a route's target; per partition and shard, positions
    must rise): ``{key tuple: after row}``, each read with the target's newest schema (as the
    merge job reads a table topic: a row written before the target had a column has it NULL).
    ``origin``: the key leads with the origin columns (checked against the shard header)."""
    from spark_jobs.clean_changelog import SHARD_HEADER

    dec = resolving_decoder(cfg)
    table: dict = {}
    highest: dict = {}
    for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client):
        key, value = dec.decode(m.key()), dec.decode(m.value())
        shard = dict(m.headers())[SHARD_HEADER]
        assert value["position"] > highest.get((m.partition(), shard), ""), f"copy or disorder at {m.offset()}"
        highest[(m.partition(), shard)] = value["position"]
        assert list(key) == key_names
        k = tuple(key.values())
        assert not origin or shard.decode() == f"{k[0]}/{k[1]}.{k[2]}"
        if value["op"] == "d":
            table.pop(k, None)
        elif value["op"] != "t":
            table[k] = value["after"]
    return table
