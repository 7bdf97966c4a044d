"""``cdc bench broker``: the embedded Kafka's cost by partition depth (docs/operations.md).

A one-node Apache Kafka of its own (the stack's, :mod:`cdc.stack.kafka_broker`, in a
temporary directory) and one partition filled step by step to ``steps`` records, in batches
of ``per_batch`` records (the producer's batches at a low rate hold a few records each).  At
each step:

* produce latency: one record produced and acknowledged, twenty times (p50, p95);
* fetch: the time to the first record read from the middle of the partition with the
  readers' fixed 10 ms fetch wait (``common.kafka.topic_reader.READ_AHEAD``; "starved" when
  nothing came in 5 s);
* a clean changelog writer's set-up (:class:`spark_jobs.clean_changelog.CleanPartitionWriter`,
  which learns how far an earlier attempt got), five alternated pairs: reading the
  partition's last records, and taking them from the state the writer before left (only
  the partition's end asked), the medians;
* the broker's resident memory.

The stand-in broker the project ran on until 2026-11-26 listed every batch of a partition on
each fetch, so that a reader with a 10 ms wait starved past about 30,000 batches; this
measures that Kafka, which finds an offset through its index, does not.  A benchmark, not a
test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from cdc.bench.harness import proc_status_kb
from cdc.cli_common import bench_console
from cdc.errors import BenchError
from cdc.stack.kafka_broker import EmbeddedKafka, node_pids
from spark_jobs.clean_changelog import CleanPartitionWriter, clean_producer

TOPIC = "broker-bench"


def _first_record_s(bootstrap: str, offset: int, wait_ms: int, limit_s: float) -> float | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{wait_ms}", "fetch.wait.max.ms": wait_ms,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, offset)])
        t = time.monotonic()
        while time.monotonic() - t < limit_s:
            if c.consume(100, 0.01):
                return time.monotonic() - t
        return None
    finally:
        c.close()


def _writer_setups_s(bootstrap: str, producer: Producer, pairs: int = 5) -> tuple[float, float]:
    """Medians of a clean partition writer's set-up: reading the partition's tail, and told it."""
    read, known = [], []
    end = CleanPartitionWriter(bootstrap, TOPIC, 0, producer=producer).end
    for _ in range(pairs):
        for times, tail in ((read, None), (known, (end, ""))):
            t = time.monotonic()
            writer = CleanPartitionWriter(bootstrap, TOPIC, 0, producer=producer, known=tail)
            times.append(time.monotonic() - t)
            if writer.tail_read != (tail is None):
                raise BenchError(f"the clean writer's tail read {writer.tail_read}, told {tail}")
    return statistics.median(read), statistics.median(known)


def bench_broker(steps: tuple[int, ...] = (100_000, 300_000, 1_000_000, 2_000_000, 5_000_000), per_batch: int = 10,
                 console: Console | None = None) -> list[dict[str, Any]]:
    console = console or Console()
    root = Path(tempfile.mkdtemp(prefix="cdc-broker-bench-"))
    broker = EmbeddedKafka(root)
    info = broker.start()
    bootstrap = info["bootstrap_servers"]
    rows: list[dict[str, Any]] = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept: a dropped client fails its futures)
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        fill = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": per_batch,
                         "queue.buffering.max.messages": 1_000_000})
        writer = clean_producer(bootstrap)  # (the clean writers' producer: set up once, as a worker keeps it)
        n = 0
        value = b"x" * 200
        for target in steps:
            with console.status(f"filling the partition to {target:,} records..."):
                while n < target:
                    for _ in range(per_batch):
                        fill.produce(TOPIC, value, partition=0)
                    n += per_batch
                    fill.poll(0)
                    if n % (per_batch * 50) == 0:
                        fill.flush()
                fill.flush()
            lat = []
            for _ in range(20):
                t = time.monotonic()
                fill.produce(TOPIC, value, partition=0)
                fill.flush()
                lat.append(time.monotonic() - t)
            n += 20
            lat.sort()
            middle = n // 2
            short = _first_record_s(bootstrap, middle, 10, 5.0)
            tail_read_s, tail_known_s = _writer_setups_s(bootstrap, writer)
            row = {"records": n, "batches": n // per_batch, "produce_p50_ms": round(lat[10] * 1000, 1),
                   "produce_p95_ms": round(lat[18] * 1000, 1),
                   "first_record_10ms_wait_s": None if short is None else round(short, 3),
                   "clean_tail_read_ms": round(tail_read_s * 1000, 1),
                   "clean_tail_known_ms": round(tail_known_s * 1000, 1),
                   "broker_rss_mb": round(proc_status_kb("VmRSS", node_pids(info)[0]) / 1024)}
            rows.append(row)
            console.print(row)
    finally:
        broker.stop(info)
        shutil.rmtree(root, ignore_errors=True)
    table = Table("records", "batches", "produce p50/p95 ms", "first record, 10 ms wait",
                  "clean writer set-up: tail read / known", "broker RSS MB",
                  title="the embedded Apache Kafka, one partition")
    for r in rows:
        short = "starved" if r["first_record_10ms_wait_s"] is None else f"{r['first_record_10ms_wait_s']:.3f} s"
        table.add_row(f"{r['records']:,}", f"{r['batches']:,}", f"{r['produce_p50_ms']} / {r['produce_p95_ms']}",
                      short,
                      f"{r['clean_tail_read_ms']} / {r['clean_tail_known_ms']} ms",
                      f"{r['broker_rss_mb']:,}")
    console.print(table)
    return rows


def _cmd_bench_broker(args: argparse.Namespace) -> int:
    rows = bench_broker(tuple(int(x) for x in args.steps.split(",") if x), per_batch=args.per_batch,
                        console=bench_console(args))
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def add_parser(bench_sub) -> None:
    """``cdc bench broker``: its arguments and handler, under ``cdc bench``'s ``bench_sub``."""
    bench_broker_p = bench_sub.add_parser(
        "broker", help="the embedded Kafka by partition depth: fetch and produce latency, memory")
    bench_broker_p.add_argument("--steps", default="100000,300000,1000000,2000000,5000000",
                                help="records in the partition at each measurement")
    bench_broker_p.add_argument("--per-batch", type=int, default=10, help="records per produced batch (default 10)")
    bench_broker_p.add_argument("--json", action="store_true", help="print one JSON list with every figure")
    bench_broker_p.set_defaults(func=_cmd_bench_broker)
