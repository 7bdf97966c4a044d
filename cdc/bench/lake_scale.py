"""A lake commit's cost against the table's size: one batch of changes merged into a table of
``small`` rows and the same batch into a table of ``large`` rows, for Delta Lake and Iceberg,
through the sinks' own commit, rounds alternated: the ``spark`` engine's (Spark's executors,
merge-on-read) and, with ``--engines spark,driver``, the ``driver`` engine's (delta-rs,
pyiceberg, copy-on-write) on the same tables.

``python -m cdc.bench.lake_scale --large 10000000 --small 100000 --changes 10000 --engines spark,driver``

Two kinds of batch (each ``changes`` changes, every key once):

* ``recent``: half updates of the newest keys, half inserts of new keys above them: a source
  whose changes fall on recent rows (orders, events, auto-increment keys), the common case
  of a CDC stream;
* ``random``: updates of keys drawn over the whole table.

The tables are made by Spark in one write each (keys rising, files of the sink's target
size), the changes staged as the merge tasks stage them.  A benchmark, not a test: it prints
the medians and the ratio large/small per format and kind, and checks that each table ends
with the rows it should hold.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from common.config import SinksConfig
from spark_jobs.sinks.configured import lake_conf
from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.lake_types import OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

DB, APP = "bench", "bench-scale"
KINDS = ("recent", "random")


def _position(n: int) -> str:
    return f"{n:030d}"


def _schema() -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("n", pa.int64()),
                      pa.field("at", pa.timestamp("us")), pa.field(POSITION_COLUMN, pa.string())])


def fill(spark: Any, sink: LakeSink, table: str, rows: int) -> None:
    """A table of ``rows`` rows (keys 0..rows-1, positions below every change's) in one write."""
    schema = _schema()
    sink.create_table(DB, table, schema, ["id"], "cdc-merge:bench")
    df = spark.range(rows).selectExpr(
        "id", "concat('value-', id) AS v", "id * 7 AS n",
        "CAST(timestamp_seconds(1767225600 + id % 86400) AS TIMESTAMP_NTZ) AS at",
        f"lpad(CAST(id AS STRING), 30, '0') AS {POSITION_COLUMN}")
    if sink.FORMAT == "Delta":
        df.write.format("delta").mode("append").save(sink.engine.spark_uri(DB, table))
    else:
        df.writeTo(sink.engine.spark_name(DB, table)).append()


def batch(kind: str, rows: int, changes: int, top: int, position: int, rng: random.Random) -> pa.Table:
    """One batch of ``changes`` changes (see the module docstring); ``top``: the next new key."""
    if kind == "recent":
        half = changes // 2
        ids = list(range(max(0, top - half), top)) + list(range(top, top + changes - half))
        ops = ["u"] * (len(ids) - (changes - half)) + ["c"] * (changes - half)
    else:
        ids = rng.sample(range(top), changes)
        ops = ["u"] * changes
    from datetime import datetime
    at = datetime(2026, 6, 1)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"new-{i}" for i in ids]),
                     "n": pa.array(ids, pa.int64()), "at": pa.array([at] * len(ids), pa.timestamp("us")),
                     POSITION_COLUMN: pa.array([_position(position + i) for i in range(len(ids))]),
                     OP_COLUMN: pa.array(ops)})


def _sinks(fmt: str, work: Path, pg_uri: str | None) -> dict[str, LakeSink]:
    """The format's sink of each engine, on the same tables."""
    if fmt == "delta":
        return {engine: DeltaSink(str(work / "delta"), engine=engine) for engine in ("spark", "driver")}
    uri = pg_uri or f"sqlite:///{work}/catalog.db"
    return {engine: IcebergSink(uri, str(work / "iceberg"), engine=engine, catalog_name="bench_scale")
            for engine in ("spark", "driver")}


def run(work: Path, large: int, small: int, changes: int, rounds: int, formats: list[str], pg_uri: str | None,
        master: str, engines: tuple[str, ...] = ("spark",)) -> dict[str, Any]:
    from spark_jobs.spark_session import build_session
    spark = build_session(master, app_name="cdc-bench-lake-scale",
                          conf=lake_conf(SinksConfig.model_validate(
                              {"delta": {"enabled": True, "path": str(work), "engine": "spark"}})))
    rng = random.Random(7)
    out: dict[str, Any] = {"large": large, "small": small, "changes": changes, "rounds": rounds}
    for fmt in formats:
        sinks = _sinks(fmt, work, pg_uri)
        filler = sinks["spark"]
        sizes = {"small": small, "large": large}
        t0 = time.perf_counter()
        for name, rows in sizes.items():
            fill(spark, filler, f"t_{name}", rows)
        out[f"{fmt}_fill_s"] = time.perf_counter() - t0
        tops = dict(sizes)
        position = 10 ** 12
        batch_id = 0
        for engine in engines:  # (the spark engine first: the driver's copy-on-write leaves no deletion vector)
            sink, label = sinks[engine], fmt if engine == "spark" else f"{fmt}_{engine}"
            times: dict[str, list[float]] = {f"{k}_{n}": [] for k in KINDS for n in sizes}
            for r in range(rounds + 1):  # round 0 warms up, not counted
                for kind in KINDS:
                    order = list(sizes) if r % 2 == 0 else list(reversed(sizes))
                    for name in order:
                        changes_t = batch(kind, sizes[name], changes, tops[name], position, rng)
                        position += changes
                        part = sink.staging.write(APP, DB, f"t_{name}", batch_id, 0, changes_t, ["id"])
                        part["input"] = changes_t.num_rows
                        t0 = time.perf_counter()
                        res = sink.commit(DB, f"t_{name}", [part], batch_id=batch_id, app=APP,
                                          owner="cdc-merge:bench")
                        took = time.perf_counter() - t0
                        if res.upserted != changes:
                            raise RuntimeError(f"{label} {name} {kind}: {res} (expected {changes} upserted)")
                        if kind == "recent":
                            tops[name] += changes - changes // 2
                        if r:
                            times[f"{kind}_{name}"].append(took)
                        batch_id += 1
            for kind in KINDS:
                s, lg = statistics.median(times[f"{kind}_small"]), statistics.median(times[f"{kind}_large"])
                out[f"{label}_{kind}_small_s"] = round(s, 3)
                out[f"{label}_{kind}_large_s"] = round(lg, 3)
                out[f"{label}_{kind}_ratio"] = round(lg / s, 2)
                out[f"{label}_{kind}_all_s"] = {k: [round(x, 3) for x in v] for k, v in times.items()
                                                if k.startswith(kind)}
            if engine == "spark" and fmt == "delta":  # (delta-rs 1.6 writes no table with deletion vectors)
                filler.compact(DB, "t_small"), filler.compact(DB, "t_large")
        for name in sizes:
            held = spark.sql(f"SELECT count(*) FROM {filler.engine.spark_name(DB, f't_{name}')}").first()[0]
            if held != tops[name]:
                raise RuntimeError(f"{fmt} t_{name}: {held} rows, expected {tops[name]}")
        for sink in sinks.values():
            sink.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--large", type=int, default=10_000_000)
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--changes", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--formats", default="delta,iceberg")
    p.add_argument("--catalog-uri", default=None, help="the Iceberg catalog (default: SQLite in the work directory)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--engines", default="spark", help="spark, or spark,driver: the driver engine's commits too")
    p.add_argument("--work", default=None, help="where the tables go (default: a temporary directory, removed)")
    a = p.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="cdc-lake-scale-"))
    try:
        result = run(work, a.large, a.small, a.changes, a.rounds, a.formats.split(","), a.catalog_uri, a.master,
                     tuple(a.engines.split(",")))
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
