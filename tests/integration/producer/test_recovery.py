"""Never lose, never invent: kill -9 and restart, source restart, reconnect, binlogs
purged while the producer was down."""

from __future__ import annotations

import json
import logging
import random
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer

from common.kafka.clients import producer_config
from contract.markers import DELETE_MISSING
from contract.topics import table_topic
from producer.app import ProducerApp
from producer.errors import BinlogPurgedError
from producer.kafka_writer import settle_last_transaction, transactional_id
from producer.offset_store import OffsetStore
from spark_jobs.task.dblog import ChunkRow, dedupe_log, from_envelope, make_key
from tests.producer_helpers import (
    ProducerProcess,
    ProducerThread,
    apply_changelog,
    change_and_purge,
    dedupe_by_position,
    read_events,
    run_until_caught_up,
    shop_table,
    start_at_current,
    wait_for,
)
from tests.snapshot_helpers import markers


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


def _rebuilt(cfg, db: str, table: str) -> tuple[dict, list[dict]]:
    """The table topic replayed by key (copies dropped, the DBLog rule applied, in position
    order), then the table's DELETE_MISSING markers applied: a key whose last record lies
    below a marker's ``below`` was not read again by that snapshot, so it is gone."""
    kept, _ = dedupe_by_position(read_events(cfg, table_topic(cfg.kafka.topic_prefix, db, table)))
    changes, rows = [], []
    for _, key, value in kept:
        rec = from_envelope(key, value)
        (rows if isinstance(rec, ChunkRow) else changes).append(rec)
    state: dict = {}
    for rec in dedupe_log(changes, rows):
        if rec.op == "d":
            state.pop(rec.key, None)
        else:
            state[rec.key] = (rec.position, dict(rec.row))
    found = [m for m in markers(cfg) if m["kind"] == DELETE_MISSING and (m["db"], m["table"]) == (db, table)]
    for marker in found:
        state = {k: v for k, v in state.items() if v[0] >= marker["below"]}
    return {k: row for k, (_, row) in state.items()}, found


@pytest.mark.parametrize("own_mysql", ["mariadb", "mysql"], indirect=True)
def test_purged_binlogs_stop_the_producer_or_with_when_needed_snapshot_again(own_mysql, config, caplog):
    """Rows inserted, updated and deleted while the producer is down, then the binlogs that
    hold them purged: ``when_needed: stop`` stops naming the stored file, the oldest binlog
    and the setting; ``when_needed: snapshot`` streams from the current position and
    snapshots the table again (delete-missing), and the topic rebuilds the source table."""
    source = own_mysql  # purging the session server's binlogs would pull them from under other tests
    shop_table(source, config)
    start_at_current(config)
    with source.admin(database="shop") as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"streamed{i}") for i in range(40, 80)])
        cur.execute("UPDATE t SET v = 'streamed' WHERE id < 10")
    run_until_caught_up(config)
    streamed, _ = _rebuilt(config, "shop", "t")
    assert len(streamed) == 50  # inserted 40..79 and updated 0..9: what the stream saw

    # While the producer is down: inserts, updates, deletes (of streamed rows too), then purge.
    oldest_before, newest = change_and_purge(source, (5, 45, 85), (6, 46, 47, 86))

    config.producer.startup.when_needed = "stop"
    with pytest.raises(BinlogPurgedError) as err:
        ProducerApp(config).run(idle_exit_s=1)
    text = str(err.value)
    assert f"the binlog file {oldest_before} holding the stored position of producer '{config.producer.name}'" \
        in text
    assert f"its oldest binlog is {newest}" in text
    assert "producer.startup.when_needed: snapshot" in text and "CDC__PRODUCER__STARTUP__WHEN_NEEDED" in text
    assert (err.value.file, err.value.oldest) == (oldest_before, newest)

    config.producer.startup.when_needed = "snapshot"
    with caplog.at_level(logging.ERROR, logger="producer.startup"), ProducerThread(config):
        wait_for(lambda: _rebuilt(config, "shop", "t")[1], 90, what="the table snapshotted again (DELETE_MISSING)")
        with source.admin(database="shop") as conn, conn.cursor() as cur:  # streaming goes on from the current position
            cur.execute("INSERT INTO t VALUES (1000, 'after the restart')")
        wait_for(lambda: make_key({"id": 1000}) in _rebuilt(config, "shop", "t")[0],
                 60, what="a change after the restart")
    [logged] = [r.getMessage() for r in caplog.records if "were purged before the producer read them" in r.getMessage()]
    assert "when_needed=snapshot" in logged and oldest_before in logged

    with source.admin(database="shop") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t")
        expected = {make_key({"id": i}): {"id": i, "v": v} for i, v in cur.fetchall()}
    table, found = _rebuilt(config, "shop", "t")
    assert table == expected
    assert len(found) == 1 and found[0]["snapshot_id"].startswith("recovery-")
    assert make_key({"id": 46}) not in table and make_key({"id": 6}) not in table  # deleted while down
    assert table[make_key({"id": 45})]["v"] == "changed while down"


def test_a_start_settles_the_last_transaction_before_it_reads_the_position(stack, config, unique):
    """A commit returns before its markers reach the partitions; a writer killed with a Kafka
    node can leave them unwritten, and its position unreadable to the next start for seconds
    (a chaos run's producer then stopped on a false "Kafka lost the history"). Before it calls
    the history lost, the start asks Kafka to finish the last transaction under the writer's
    transactional id (:func:`settle_last_transaction`). Here a writer leaves one open, its
    offset record written: settling fences that writer and ends its transaction (aborted, as
    the next writer would), and the record, never committed, is not read as the position."""
    name = unique("settle")
    store = OffsetStore(config.kafka, name)
    store.ensure()
    gone = Producer(producer_config(config.kafka, transactional_id=transactional_id(name)))
    gone.init_transactions(30)
    gone.begin_transaction()
    gone.produce(store.topic, key=name.encode(), value=json.dumps({"resume": {"file": "b.000001", "pos": 4}}))
    gone.flush(30)
    assert settle_last_transaction(config.kafka, name)
    with pytest.raises(KafkaException) as fenced:
        gone.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower(), fenced.value
    assert store.load() is None
