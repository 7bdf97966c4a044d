"""Helpers for snapshot tests: a random write load, signals, the DBLog oracle."""

from __future__ import annotations

import json
import random
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pymysql
from confluent_kafka import Producer

from cdc import signal_sender
from cdc.workload import KEY_KINDS, BackgroundWriter, WriteLoad, create_table  # noqa: F401 - re-exported for the tests
from common.config import CDCConfig
from common.kafka.clients import ensure_topics, producer_config
from common.kafka.topic_reader import read_topic
from common.sql.sessions import connect
from contract.position import event_of
from contract.signals import execute_snapshot_data, send_signal
from contract.topics import markers_topic, notifications_topic, signals_topic
from producer.offset_store import OffsetStore
from spark_jobs.task.dblog import ChunkRow, apply_in_order, dedupe_log, from_envelope, make_key
from tests.producer_helpers import dedupe_by_position, read_events, wait_for


def signal(cfg: CDCConfig, kind: str, data: dict | None = None) -> str:
    conn = connect(cfg.source)
    try:
        return send_signal(conn, cfg.source.signal_table, kind, data)
    finally:
        conn.close()


def snapshot(cfg: CDCConfig, tables: list[str], **kw) -> str:
    return signal(cfg, "execute-snapshot", execute_snapshot_data(tables, **kw))


def kafka_signal(cfg: CDCConfig, kind: str, data: dict | None = None) -> str:
    """Send a signal through the Kafka signal channel (as ``cdc snapshot --channel kafka``)."""
    return signal_sender.send(cfg, "kafka", kind, data).id


def kafka_snapshot(cfg: CDCConfig, tables: list[str], **kw) -> str:
    return kafka_signal(cfg, "execute-snapshot", execute_snapshot_data(tables, **kw))


def signal_channel_record(cfg: CDCConfig, key: bytes | None, value: bytes | None) -> int:
    """Write one raw record to the Kafka signal channel; its offset."""
    topic = signals_topic(cfg.kafka.topic_prefix)
    ensure_topics(cfg.kafka, [topic], partitions=1)
    offsets: list[int] = []
    producer = Producer(producer_config(cfg.kafka))
    producer.produce(topic, value, key, on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
    assert producer.flush(30) == 0 and offsets and offsets[0] >= 0, offsets
    return offsets[0]


def stored_signal_offset(cfg: CDCConfig) -> int | None:
    """The next signal channel offset in the producer's stored offset record (None: none yet)."""
    stored = OffsetStore(cfg.kafka, cfg.producer.name).load()
    return None if stored is None else stored.get("signal_offset")


def notifications(cfg: CDCConfig) -> list[dict]:
    return [json.loads(m.value()) for m in read_topic(cfg.kafka.bootstrap_servers,
                                                     notifications_topic(cfg.kafka.topic_prefix),
                                                     client_config=cfg.kafka.client)]


def markers(cfg: CDCConfig) -> list[dict]:
    return [json.loads(m.value()) for m in read_topic(cfg.kafka.bootstrap_servers,
                                                     markers_topic(cfg.kafka.topic_prefix),
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


@contextmanager
def write_loads(stack, db: str, tables: dict[str, str], key_space: int, *, pause_s: float = 0.0,
                min_ops: int = 20) -> Iterator[list[WriteLoad]]:
    """A :class:`WriteLoad` on each of ``tables`` (name -> key kind), running once each has
    made ``min_ops`` changes; stopped (and their errors raised) when the block ends."""
    loads = [WriteLoad(stack.admin, db, table, kind, key_space=key_space, seed=i, pause_s=pause_s)
             for i, (table, kind) in enumerate(tables.items())]
    for load in loads:
        load.start()
    try:
        wait_for(lambda: all(sum(ld.ops.values()) > min_ops for ld in loads), what="writes running")
        yield loads
    finally:
        for load in loads:
            load.stop()


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
    implementation in ``spark_jobs.task.dblog``) and apply the result in order."""
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


def assert_positions_rise(events) -> None:
    """In every partition positions rise strictly: no record written twice, and snapshot rows
    sit after every change up to their CLOSE and before every later change."""
    last: dict[int, str] = {}
    for part, _, value in events:
        assert value["position"] > last.get(part, ""), f"partition {part} goes back at {value['position']}"
        last[part] = value["position"]


def replayed_equal(stack, cfg: CDCConfig, db: str, table: str, keys: list[str]) -> tuple[list, OracleResult]:
    """The table topic's records, checked (:func:`assert_positions_rise`) and replayed by the
    DBLog oracle (:func:`dblog_replay`), which must equal the source table: the records and the
    replay."""
    topic = f"{cfg.kafka.topic_prefix}.{db}.{table}"
    events = read_events(cfg, topic)
    assert_positions_rise(events)
    result = dblog_replay(cfg, topic)
    with stack.admin() as conn:
        assert result.table == source_rows(conn, db, table, keys)
    return events, result


def key_of(row: dict, keys: list[str]) -> tuple:
    return make_key({k: row[k] for k in keys})


KEYLESS_TABLE = "(x INT, v VARCHAR(20), n INT)"  # (no key: duplicate rows are legitimate)


def create_keyless(conn, db: str, table: str, rows: int) -> None:
    """A table without a key of ``rows`` rows, 60 distinct ``x``, many rows alike."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`{table}` {KEYLESS_TABLE}")
        cur.executemany(f"INSERT INTO `{db}`.`{table}` VALUES (%s, %s, %s)",
                        [(i % 60, f"v{i % 7}", 0) for i in range(rows)])
    conn.commit()


class KeylessLoad(BackgroundWriter):
    """Inserts (duplicates among them), updates and deletes of one row each in a table of
    :func:`create_keyless`, a statement a transaction, until stopped."""

    def __init__(self, conn_factory, db: str, table: str, seed: int) -> None:
        super().__init__()
        self.conn_factory, self.table, self.rnd, self.ops = conn_factory, f"`{db}`.`{table}`", random.Random(seed), \
            Counter()

    def _run(self) -> None:
        with self.conn_factory() as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                op, x, n = self.rnd.choice(["insert", "update", "delete"]), self.rnd.randrange(60), self.rnd.randrange(9)
                if op == "insert":
                    cur.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s)", (x, f"w{n}", n))
                elif op == "update":
                    cur.execute(f"UPDATE {self.table} SET n = n + 1 WHERE x = %s LIMIT 1", (x,))
                else:
                    cur.execute(f"DELETE FROM {self.table} WHERE x = %s LIMIT 1", (x,))
                conn.commit()
                self.ops[op] += 1


@dataclass
class KeylessReplay:
    events: list  # the topic's records, (partition, key, value), by position
    rows: list[dict]  # the snapshot's op r values, by position
    changes_before: int  # change events below the rows (in them already)
    changes_after: int
    table: Counter  # the rows, then every change after them: the table as a multiset of (x, v, n)


def keyless_replay(cfg: CDCConfig, db: str, table: str) -> KeylessReplay:
    """A keyless table's topic replayed as a multiset: the snapshot's rows (all at one pause
    point), then every change after them (an update or delete takes out one row equal to its
    ``before``, which the replay must hold).  Changes below the rows are in them already.  A
    snapshot taken more than once (a crash mid-read): the last attempt's rows, those from the
    table's last first row (``source.snapshot`` ``first`` or ``first_in_data_collection``) on."""
    events = sorted(read_events(cfg, f"{cfg.kafka.topic_prefix}.{db}.{table}"), key=lambda e: e[2]["position"])
    first = max(i for i, (_, _, v) in enumerate(events)
                if v["op"] == "r" and v["source"]["snapshot"] in ("first", "first_in_data_collection"))
    rows = [v for _, _, v in events[first:] if v["op"] == "r"]
    assert len({event_of(v["position"]) for v in rows}) == 1, "the rows are not at one pause point"
    replay: Counter = Counter()
    for _, _, v in events[first:]:
        if v["op"] in ("u", "d"):
            before = (v["before"]["x"], v["before"]["v"], v["before"]["n"])
            assert replay[before] > 0, f"a change of a row the replay does not hold: {v}"
            replay[before] -= 1
        if v["op"] in ("r", "c", "u"):
            replay[(v["after"]["x"], v["after"]["v"], v["after"]["n"])] += 1
    return KeylessReplay(events, rows, first, sum(1 for _, _, v in events[first:] if v["op"] != "r"), +replay)


def keyless_rows(conn, db: str, table: str) -> Counter:
    """A table of :func:`create_keyless` as a multiset of ``(x, v, n)``."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT x, v, n FROM `{db}`.`{table}`")
        return Counter(tuple(r) for r in cur.fetchall())
