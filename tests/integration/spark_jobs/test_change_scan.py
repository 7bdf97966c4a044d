"""merge_partition with the native change scan (``scan_changes``, spark_jobs.task.decide.scan_plain)
leaves what it leaves without it, on the producer's own records: a table's stream changes
under a write load while a snapshot of it runs (windows open: the loop decides those
records, the scan the plain runs between them), in two batches, then the second batch
again (copies).  The PostgreSQL sink table, every batch's statistics and state, and the
dead letters must be the same either way, poison records included."""

from __future__ import annotations

import psycopg

from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from spark_jobs.task.decide import native_scan
from contract.topics import markers_topic, table_topic
from spark_jobs.task import partition_merge
from spark_jobs.input.driver_kafka import read_markers
from spark_jobs.planning.marker_planner import batch_inputs
from spark_jobs.task import decide
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.partition_merge import merge_partition
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import ProducerThread, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import create_table, has_notification, snapshot, write_loads


def _records(cfg, topic: str) -> dict[int, list]:
    out: dict[int, list] = {}
    for m in read_topic(cfg.kafka.bootstrap_servers, topic):
        out.setdefault(m.partition(), []).append((m.offset(), m.key(), m.value()))
    return out


def _table(cfg, schema: str, db: str, table: str) -> list[tuple]:
    dsn = cfg.sinks.postgres.dsn.get_secret_value()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {PostgresSink(dsn, schema).qualified_name(db, table)}")
        return sorted(cur.fetchall())


def test_the_native_scan_leaves_what_the_loop_leaves(stack, merge_config, test_db, monkeypatch, unique):
    cfg = merge_config
    table = "t_scan"
    with stack.admin() as conn:
        create_table(conn, test_db, table, "single", 600)
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 100
    start_at_current(cfg)
    with ProducerThread(cfg):
        with write_loads(stack, test_db, {table: "single"}, 700, min_ops=40):
            sid = snapshot(cfg, [f"{test_db}.{table}"])
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
    run_until_caught_up(cfg)
    prefix = cfg.kafka.topic_prefix
    topic = table_topic(prefix, test_db, table)
    records = _records(cfg, topic)
    # two poison records at the end of one partition, shorter than their framing: dead letters
    # either way (the second is where a scan would start)
    first = records[min(records)]
    key = first[0][1]
    first += [(first[-1][0] + 1, key, b"\xc3\x01abc"), (first[-1][0] + 2, key, b"\xc3\x01")]
    mt, bootstrap = markers_topic(prefix), cfg.kafka.bootstrap_servers
    markers = read_markers(bootstrap, mt, 0, end_offsets(bootstrap, [(mt, 0)])[(mt, 0)][1])
    inputs, _ = batch_inputs(prefix, {}, {}, [(topic, p) for p in records], markers)
    assert sum(map(len, records.values())) > 1000 and any(m["kind"] == "OPEN" for m in markers)

    taken: list[int] = []

    def counted(*args):
        out = native_scan(*args)
        taken.append(out[2])
        return out

    def run(scan: bool) -> tuple[list, list, list]:
        monkeypatch.setattr(decide, "native_scan", counted if scan else None)
        dead: list = []
        monkeypatch.setattr(partition_merge, "dead_letters", lambda s, t, p, d: dead.extend(d))
        sinks = cfg.sinks.model_copy(deep=True)
        sinks.postgres.schema_name = unique("scan" if scan else "loop")
        sinks.mysql.enabled = False
        s = MergeSettings(bootstrap=cfg.kafka.bootstrap_servers, prefix=prefix, changelog=False, sinks=sinks,
                          dlq_topic="unused")
        out = []
        for p, recs in sorted(records.items()):
            state, marks = inputs[f"{topic}|{p}"]
            half = len(recs) // 2
            for batch, new_markers in ((recs[:half], marks), (recs[half:], []), (recs[half:], [])):
                state, stats = merge_partition(topic, p, list(batch), s, state, new_markers)
                # (the clock's figures apart: the latencies' counts per source commit second)
                out.append((state, {k: v for k, v in stats.items()
                                    if not k.endswith("_s") and k not in ("seconds", "latencies_ms")},
                            [n for _, n in stats.get("latencies_ms", [])]))
        return out, dead, _table(cfg, sinks.postgres.schema_name, test_db, table)

    with_scan = run(True)
    assert sum(taken) > 500, taken  # (the scan took the plain runs)
    assert sum(taken) < sum(map(len, records.values())), taken  # (and the loop the rest: the snapshot's)
    without = run(False)
    assert with_scan[0] == without[0]
    assert with_scan[1] == without[1] and len(with_scan[1]) == 4  # (the poison records, in two batches)
    assert with_scan[2] == without[2] and len(with_scan[2]) > 500
