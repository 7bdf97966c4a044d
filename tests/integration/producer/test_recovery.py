"""Never lose, never invent: kill -9 and restart, source restart, reconnect."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.producer_helpers import (
    ProducerProcess,
    ProducerThread,
    apply_changelog,
    dedupe_by_position,
    read_events,
    run_until_caught_up,
    start_at_current,
    wait_for,
)


def _workload(stack, db: str, n: int, seed: int, pause: float = 0.0, offset: int = 0) -> None:
    """Inserts, updates, deletes, PK changes, delete and re-insert, multi-row statements."""
    rnd = random.Random(seed)
    live: set[int] = set()
    with stack.admin(db) as conn, conn.cursor() as cur:
        for i in range(n):
            r = rnd.random()
            k = offset + rnd.randrange(200)
            if r < 0.15:
                rows = [(j, f"m{i}") for j in range(offset + 1000 + i * 10, offset + 1000 + i * 10 + 5)]
                cur.executemany("INSERT INTO t VALUES (%s, %s)", rows)  # a multi-row event
                live.update(j for j, _ in rows)
            elif k not in live:
                cur.execute("INSERT INTO t VALUES (%s, %s)", (k, f"v{i}"))
                live.add(k)
            elif r < 0.35:
                cur.execute("DELETE FROM t WHERE id = %s", (k,))
                live.discard(k)
            elif r < 0.45 and k + 700 not in live:
                cur.execute("UPDATE t SET id = %s WHERE id = %s", (k + 700, k))
                live.discard(k)
                live.add(k + 700)
            elif r < 0.5:
                cur.execute("BEGIN")
                cur.execute("DELETE FROM t WHERE id = %s", (k,))
                cur.execute("INSERT INTO t VALUES (%s, %s)", (k, f"again{i}"))
                cur.execute("COMMIT")
            else:
                cur.execute("UPDATE t SET v = %s WHERE id = %s", (f"u{i}", k))
            if pause:
                time.sleep(pause)


def _table(stack, db):
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        return {(("id", i),): {"id": i, "v": v} for i, v in cur.fetchall()}


def _comparable(events):
    """The changes, by position (partitions may differ between runs with other topic
    prefixes: the key schema's name, and so the key bytes, contain the prefix)."""
    return sorted((v["position"], sorted(k.items()), v["op"], v["before"], v["after"]) for _, k, v in events)


@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "no-transactions"])
def test_kill9_and_restart_loses_nothing_and_copies_are_recognisable(stack, config, test_db, tmp_path, transactions):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    config.kafka.transactions = transactions
    config.kafka.partitions = 3
    config.producer.batch_size = 50
    config.producer.batch_interval_s = 0.05
    start_at_current(config)
    reference = config.model_copy(deep=True)
    reference.kafka.topic_prefix = reference.producer.name = config.kafka.topic_prefix + "_ref"

    proc = ProducerProcess(config, tmp_path)
    proc.start()
    load = threading.Thread(target=_workload, args=(stack, test_db, 1500, 11, 0.002))
    load.start()
    rnd = random.Random(3)
    kills = 0
    while load.is_alive() or kills < 4:
        time.sleep(rnd.uniform(0.3, 1.2))
        proc.kill9()
        kills += 1
        proc.start()
    load.join()
    topic = f"{config.kafka.topic_prefix}.{test_db}.t"
    expected_table = _table(stack, test_db)
    run_until_caught_up(reference)
    ref_events = read_events(reference, f"{reference.kafka.topic_prefix}.{test_db}.t")
    assert dedupe_by_position(ref_events)[1] == 0  # a run without kills has no copies
    wait_for(lambda: len(dedupe_by_position(read_events(config, topic))[0]) >= len(ref_events), 120,
             what="the killed producer to catch up")
    assert proc.stop() == 0
    events = read_events(config, topic)
    kept, copies = dedupe_by_position(events)
    assert _comparable(kept) == _comparable(ref_events)
    # Within each partition the kept records rise strictly (that is what dedupe keeps).
    by_part: dict[int, list[str]] = {}
    for p, _, v in events:
        by_part.setdefault(p, []).append(v["position"])
    assert sum(len(set(x)) for x in by_part.values()) == len(kept)
    assert apply_changelog(kept) == expected_table
    print(f"kills={kills} records={len(events)} copies={copies} changes={len(kept)}")
    if not transactions:
        # Copies are limited to the unacknowledged batch of each kill.
        assert copies <= kills * (config.producer.batch_size * 4 + 10)


def test_source_restart_is_survived(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    start_at_current(config)
    with ProducerThread(config):
        _workload(stack, test_db, 200, 1)
        stack.restart_source(down_s=2.0)
        _workload(stack, test_db, 200, 2, offset=100000)
        topic = f"{config.kafka.topic_prefix}.{test_db}.t"
        expected = _table(stack, test_db)
        wait_for(lambda: apply_changelog(dedupe_by_position(read_events(config, topic))[0]) == expected, 90,
                 what="the producer to reconnect and catch up")
    kept, copies = dedupe_by_position(read_events(config, topic))
    positions = [v["position"] for _, _, v in kept]
    assert len(positions) == len(set(positions))


def test_broker_outage_loses_nothing(stack, config, test_db):
    """The broker stops answering for a while (SIGSTOP) during a write load, then comes back."""
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    config.producer.batch_size = 50
    start_at_current(config)
    topic = f"{config.kafka.topic_prefix}.{test_db}.t"
    with ProducerThread(config):
        _workload(stack, test_db, 150, 21)
        with stack.broker_frozen():
            _workload(stack, test_db, 150, 22, offset=100000)
            time.sleep(4)
        _workload(stack, test_db, 150, 23, offset=200000)
        expected = _table(stack, test_db)
        wait_for(lambda: apply_changelog(dedupe_by_position(read_events(config, topic))[0]) == expected, 180,
                 what="the producer to deliver everything after the outage")
    kept, _ = dedupe_by_position(read_events(config, topic))
    assert len({v["position"] for _, _, v in kept}) == len(kept)
