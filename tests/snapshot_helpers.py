"""Helpers for snapshot tests: a random write load, signals, the DBLog oracle."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field

import pymysql

from cdc.config import CDCConfig
from cdc.kafka.topic_reader import read_topic
from producer.binlog_source import connect
from producer.signals import execute_snapshot_data, send_signal
from spark_jobs.dblog import ChunkRow, apply_in_order, dedupe_log, from_envelope, make_key
from tests.producer_helpers import dedupe_by_position, read_events

# Table shapes by key kind: DDL body, key columns, a key maker.
KEY_KINDS = {
    "single": ("id INT PRIMARY KEY, v VARCHAR(40), n INT", ["id"], lambda i: (i,)),
    "composite": ("a INT, b VARCHAR(20), v VARCHAR(40), n INT, PRIMARY KEY (a, b)", ["a", "b"],
                  lambda i: (i // 7, f"b-{i % 7}")),
    "string": ("k VARCHAR(40) PRIMARY KEY, v VARCHAR(40), n INT", ["k"],
               lambda i: (f"Kéy-{i:06d}" if i % 3 else f"kéy-{i:06d}-ü",)),
}


def create_table(conn, db: str, table: str, kind: str, rows: int) -> list[str]:
    body, keys, make = KEY_KINDS[kind]
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`{table}` ({body}) CHARACTER SET utf8mb4")
        values = [(*make(i), f"v{i}", i) for i in range(rows)]
        cols = ", ".join(f"`{c}`" for c in [*keys, "v", "n"])
        marks = ", ".join(["%s"] * (len(keys) + 2))
        for start in range(0, len(values), 1000):
            cur.executemany(f"INSERT INTO `{db}`.`{table}` ({cols}) VALUES ({marks})", values[start:start + 1000])
    conn.commit()
    return keys


@dataclass
class WriteLoad:
    """Random inserts, updates, deletes, primary-key changes and delete + re-insert of the
    same key (in one transaction) against a table, in a thread, until stopped."""

    conn_factory: object
    db: str
    table: str
    kind: str
    key_space: int
    seed: int = 1
    ops: dict = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "WriteLoad":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        rnd = random.Random(self.seed)
        _, keys, make = KEY_KINDS[self.kind]
        t = f"`{self.db}`.`{self.table}`"
        where = " AND ".join(f"`{k}` = %s" for k in keys)
        cols = ", ".join(f"`{c}`" for c in [*keys, "v", "n"])
        marks = ", ".join(["%s"] * (len(keys) + 2))
        try:
            conn = self.conn_factory()
            with conn.cursor() as cur:
                while not self._stop.is_set():
                    op = rnd.choice(["insert", "update", "update", "delete", "reinsert", "pk_change"])
                    key = make(rnd.randrange(self.key_space))
                    n = rnd.randrange(10**6)
                    try:
                        if op == "insert":
                            cur.execute(f"INSERT INTO {t} ({cols}) VALUES ({marks}) ON DUPLICATE KEY UPDATE n = n + 1",
                                        (*key, f"ins{n}", n))
                        elif op == "update":
                            cur.execute(f"UPDATE {t} SET v = %s, n = %s WHERE {where}", (f"upd{n}", n, *key))
                        elif op == "delete":
                            cur.execute(f"DELETE FROM {t} WHERE {where}", key)
                        elif op == "reinsert":
                            cur.execute(f"DELETE FROM {t} WHERE {where}", key)
                            cur.execute(f"INSERT INTO {t} ({cols}) VALUES ({marks})", (*key, f"re{n}", n))
                        else:
                            new = make(self.key_space + rnd.randrange(self.key_space))
                            sets = ", ".join(f"`{k}` = %s" for k in keys)
                            cur.execute(f"UPDATE {t} SET {sets} WHERE {where}", (*new, *key))
                        conn.commit()
                        self.ops[op] = self.ops.get(op, 0) + 1
                    except pymysql.err.IntegrityError:
                        conn.rollback()
            conn.close()
        except BaseException as exc:  # reported by stop()
            self.error = exc


def signal(cfg: CDCConfig, kind: str, data: dict | None = None) -> str:
    conn = connect(cfg.source)
    try:
        return send_signal(conn, cfg.source.signal_table, kind, data)
    finally:
        conn.close()


def snapshot(cfg: CDCConfig, tables: list[str], **kw) -> str:
    return signal(cfg, "execute-snapshot", execute_snapshot_data(tables, **kw))


def notifications(cfg: CDCConfig) -> list[dict]:
    return [json.loads(m.value()) for m in read_topic(cfg.kafka.bootstrap_servers,
                                                     f"{cfg.kafka.topic_prefix}._notifications",
                                                     client_config=cfg.kafka.client)]


def markers(cfg: CDCConfig) -> list[dict]:
    return [json.loads(m.value()) for m in read_topic(cfg.kafka.bootstrap_servers,
                                                     f"{cfg.kafka.topic_prefix}._markers",
                                                     client_config=cfg.kafka.client)]


def has_notification(cfg: CDCConfig, kind: str, **match) -> bool:
    try:
        found = notifications(cfg)
    except Exception:  # noqa: BLE001 - the topic does not exist yet
        return False
    for n in found:
        data = n.get("additionalData") or {}
        if n["type"] == kind and all(n.get(k) == v or data.get(k) == v for k, v in match.items()):
            return True
    return False


def source_rows(conn, db: str, table: str, keys: list[str]) -> dict:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}`")
        return {tuple(r[k] for k in keys): r for r in cur.fetchall()}


@dataclass
class OracleResult:
    table: dict  # key tuple -> row, the changelog deduplicated by the DBLog rule and applied in order
    chunk_rows: int
    chunk_rows_dropped: int
    changes: int
    copies: int
    windows: set


def dblog_replay(cfg: CDCConfig, topic: str) -> OracleResult:
    """Read a table topic, drop copies by position, apply the DBLog rule (the reference
    implementation in ``spark_jobs.dblog``) and apply the result in order."""
    events = read_events(cfg, topic)
    kept, copies = dedupe_by_position(events)
    changes, rows = [], []
    for _, key, value in kept:
        rec = from_envelope(key, value)
        (rows if isinstance(rec, ChunkRow) else changes).append(rec)
    log = dedupe_log(changes, rows)
    table = apply_in_order(log)
    kept_rows = sum(1 for r in log if r.op == "r")
    return OracleResult({k: dict(v) for k, v in table.items()}, len(rows), len(rows) - kept_rows, len(changes),
                        copies, {r.window for r in rows})


def key_of(row: dict, keys: list[str]) -> tuple:
    return make_key({k: row[k] for k in keys})
