"""In-process speed of the two binlog readers over one binlog range (not a test: run it by name,
``python -m pytest tests/integration/producer/bench_binlog_readers.py -s``).

20,000 single-row autocommit inserts (a GTID, a TABLE_MAP, a rows event and an XID each) and
200 inserts of 100 rows are read to their end by :class:`BinlogReader` (the own client) and
:class:`LibraryBinlogReader` (python-mysql-replication), alternately, three rounds each, with
the producer's image encoders (the Avro fast path) and without (rows as values); it prints the
rows a second of each and the ratio of the best rounds.  With ``BENCH_OLD_TREE`` set to a copy
of an earlier tree (``git archive <commit> | tar -x``, its C extensions built or copied), that
tree's ``BinlogReader`` reads the same ranges too, in a process of its own on that tree,
alternating with the others (the reader before the own client: the packet lane on the library)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

from common.sql.sessions import connect
from producer.binlog.library_reader import LibraryBinlogReader
from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges
from producer.binlog.server import current_position
from producer.events.builder import EventBuilder

SINGLE, MULTI, ROUNDS = 20_000, 200, 3


def _rate(reader_class, config, start, end, images) -> float:
    reader = reader_class(config.source, ResumePoint(*start), is_mariadb=True, blocking=False, images=images)
    rows = 0
    t = time.perf_counter()
    try:
        for item in reader:
            if type(item) is RowChanges:
                rows += len(item.rows) - item.first
            here = reader.current_resume()
            if (here.file, here.pos) >= end:
                break
    finally:
        reader.close()
    return rows / (time.perf_counter() - t)


_OLD = """
import pickle, sys, time
from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges
from producer.events.builder import EventBuilder
cfg, start, end, encode = pickle.loads(sys.stdin.buffer.read())
images = EventBuilder(cfg.kafka.topic_prefix, "prod", 1).stream_encoding({cfg.source.signal_table}) if encode else None
reader = BinlogReader(cfg.source, ResumePoint(*start), is_mariadb=True, blocking=False, images=images)
rows, t = 0, time.perf_counter()
for item in reader:
    if type(item) is RowChanges:
        rows += len(item.rows) - item.first
    here = reader.current_resume()
    if (here.file, here.pos) >= end:
        break
reader.close()
print(rows / (time.perf_counter() - t))
"""


def _old_rate(tree: str, config, start, end, encode: bool) -> float:
    """The rate of ``tree``'s reader over the range, in a process on that tree."""
    out = subprocess.run([sys.executable, "-c", _OLD], input=pickle.dumps((config, start, end, encode)),
                         capture_output=True, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree})
    return float(out.stdout.decode().split()[-1])


def test_bench_binlog_readers(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(12,2), qty INT,"
                    " at DATETIME(3), note TEXT) DEFAULT CHARSET=utf8mb4")
    with connect(config.source) as src:
        start = current_position(src)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        for i in range(SINGLE):
            cur.execute("INSERT INTO items VALUES (%s, %s, 1.5, %s, NOW(3), NULL)", (i, f"item-{i}", i))
    with connect(config.source) as src:
        single_end = current_position(src)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        for j in range(MULTI):
            base = SINGLE + j * 100
            cur.execute("INSERT INTO items VALUES " + ",".join(
                f"({base + k}, 'm', 2.25, {k}, NOW(3), 'n')" for k in range(100)))
    with connect(config.source) as src:
        multi_end = current_position(src)
    images = EventBuilder(config.kafka.topic_prefix, "prod", 1).stream_encoding({config.source.signal_table})
    old = os.environ.get("BENCH_OLD_TREE")
    assert not old or Path(old, "producer/binlog/reader.py").is_file(), old
    for label, begin, end in (("single-row", start, single_end), ("multi-row", single_end, multi_end)):
        for encoding, imgs in (("encoded", images), ("values", None)):
            rates: dict[str, list[float]] = {"own": [], "library": [], "old": []}
            for _ in range(ROUNDS):
                rates["own"].append(_rate(BinlogReader, config, begin, end, imgs))
                rates["library"].append(_rate(LibraryBinlogReader, config, begin, end, imgs))
                if old:
                    rates["old"].append(_old_rate(old, config, begin, end, imgs is not None))
            own, lib = max(rates["own"]), max(rates["library"])
            print(f"{label:10} {encoding:7} own {own:9,.0f} rows/s  library {lib:9,.0f} rows/s  "
                  f"ratio {own / lib:.2f}  (rounds: own {[round(r) for r in rates['own']]}, "
                  f"library {[round(r) for r in rates['library']]})")
            if old:
                print(f"{'':18} old tree {max(rates['old']):9,.0f} rows/s  own/old {own / max(rates['old']):.2f}  "
                      f"(rounds: {[round(r) for r in rates['old']]})")
