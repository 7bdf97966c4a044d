"""``cdc bench merge``'s lake part (f): the merge job over the same backlog into the clean
changelog only, into Delta Lake only and into Iceberg only, in the same run, ``rounds`` times
with the order turned each round (each run with a checkpoint and a place of its own), the
rates and their ratios to the changelog's (per round, and of the medians), the data files per
table after the run and after ``optimize``; and (g) latency at a steady insert rate with the
Delta sink on: each row's INSERT statement time (``updated_at``, ``NOW(3)``) to the time of
the Delta commit that first held it (the change data feed's ``_commit_timestamp``).

A benchmark, not a test: it prints figures and ratios, asserts only that each lake table
ends with the source's row count.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console

from cdc.bench.harness import TABLE
from cdc.errors import BenchError
from spark_jobs.sinks.configured import build_sinks, lake_conf
from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.delta_spark import DeltaSparkEngine
from spark_jobs.sinks.lake_sink import LakeSink

#: The lake runs of the default engine: (name, what it writes).
LAKE_RUNS = ("changelog", "delta", "iceberg")


def lake_run_names(engines: tuple[str, ...] = ("driver",)) -> tuple[str, ...]:
    """The runs of (f): the changelog only, then each format on each engine (``delta``,
    ``iceberg`` for the ``driver`` engine, ``delta-spark``, ``iceberg-spark`` for ``spark``)."""
    return ("changelog", *(f"{fmt}{'' if e == 'driver' else '-' + e}" for e in engines for fmt in ("delta", "iceberg")))


def lake_config(cfg, work: Path, name: str, *, change_data_feed: bool = False):
    """``cfg`` writing only ``name``'s sink (``changelog``, or a run of :func:`lake_run_names`),
    its lake in ``work/name`` (an Iceberg catalog named after the run)."""
    name, _, engine = name.partition("-")
    cfg = cfg.model_copy(deep=True)
    cfg.sinks.delta.engine = cfg.sinks.iceberg.engine = engine or "driver"
    cfg.sinks.postgres.enabled = cfg.sinks.mysql.enabled = False
    cfg.sinks.changelog.enabled = name == "changelog"
    run = f"{name}-{engine}" if engine else name
    cfg.sinks.delta.path = str(work / run / "delta")
    cfg.sinks.delta.change_data_feed = change_data_feed
    cfg.sinks.iceberg.warehouse = str(work / run / "iceberg")
    cfg.sinks.iceberg.catalog_name = f"{cfg.kafka.topic_prefix}_{run.replace('-', '_')}"
    cfg.sinks.delta.enabled = name == "delta"  # (each with the engine cfg gives it)
    cfg.sinks.iceberg.enabled = name == "iceberg"
    return cfg


def lake_sink(cfg) -> LakeSink | None:
    return next((s for _, s in build_sinks(cfg.sinks) if isinstance(s, LakeSink)), None)


def lake_rows(sink: LakeSink, db: str) -> int:
    batches = sink.read_batches(db, TABLE)
    return sum(b.num_rows for b in batches) if batches is not None else 0


def lake_runs(cfg, work: Path, db: str, live_rows: int, throughput: Callable[..., dict], console: Console,
              cpu_roots: dict | None = None, rounds: int = 2, engines: tuple[str, ...] = ("driver",)) -> dict[str, Any]:
    """(f): the backlog merged into each run of :func:`lake_run_names` by ``throughput`` (the merge
    benchmark's run: ``throughput(cfg, work, name, master, db, ...)``), ``rounds`` times, the
    order turned each round (changelog, Delta, Iceberg; then Iceberg, Delta, changelog; ...):
    the machine's speed drifts over minutes, and a ratio of runs next to each other drifts less."""
    from spark_jobs.spark_session import build_session
    names = lake_run_names(engines)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else tuple(reversed(names))):
            run_cfg = lake_config(cfg, work / f"round{r}", name)
            with console.status(f"(f) round {r + 1}/{rounds}: the merge job into {name} only (local[2])..."):
                res = throughput(run_cfg, work / f"round{r}", f"lake-{name}", "local[2]", db, cpu_roots=cpu_roots,
                                 count_sink=False)
            res.pop("cfg")
            sink = lake_sink(run_cfg)
            if sink is not None:
                rows = lake_rows(sink, db)
                if rows != live_rows:
                    raise BenchError(f"(f) the {name} table has {rows} rows, the source {live_rows}")
                res["files_after_run"] = sink.file_count(db, TABLE)
                with console.status(f"(f) optimize the {name} table..."):
                    conf = lake_conf(run_cfg.sinks)
                    if conf:  # (the spark engine's: Spark's OPTIMIZE, in the job's session)
                        build_session("local[2]", conf=conf)
                    t0 = time.perf_counter()
                    sink.compact(db, TABLE)
                    res["optimize_s"] = time.perf_counter() - t0
                res["files_after_optimize"] = sink.file_count(db, TABLE)
                sink.close()
            runs[name].append(res)
    out: dict[str, Any] = {"names": list(names)}
    for name, results in runs.items():
        best = dict(results[0])
        best["steady_events_per_s"] = statistics.median(x["steady_events_per_s"] for x in results)
        best["rounds_steady_events_per_s"] = [round(x["steady_events_per_s"]) for x in results]
        out[name] = best
    base = out["changelog"]["steady_events_per_s"]
    out["ratios"] = {f"{n}/changelog": out[n]["steady_events_per_s"] / base if base else 0.0 for n in names[1:]}
    out["round_ratios"] = {f"{n}/changelog": [round(x["steady_events_per_s"] / c["steady_events_per_s"], 3)
                                              if c["steady_events_per_s"] else 0.0
                                              for x, c in zip(runs[n], runs["changelog"])] for n in names[1:]}
    return out


class DeltaClock:
    """The Delta table of the latency run (change data feed on): which rows it holds, and each
    row's latency, its INSERT time (``updated_at``, UTC) to the commit that first held it."""

    def __init__(self, cfg, db: str, since_version: int = 0) -> None:
        sink = lake_sink(cfg)
        if not isinstance(sink, DeltaSink):
            raise BenchError("the Delta latency run needs the Delta sink on")
        self.uri = sink.format.table_uri(db, TABLE)
        self.since_version = since_version  # the first version with the change data feed on

    def _table(self):
        from deltalake import DeltaTable
        try:
            return DeltaTable(self.uri)
        except Exception:  # noqa: BLE001 - not made yet
            return None

    def has(self, row_id: int) -> bool:
        from deltalake import QueryBuilder
        t = self._table()  # (DataFusion's reader: the table has deletion vectors)
        return t is not None and len(QueryBuilder().register("t", t).execute(
            f"SELECT id FROM t WHERE id = {int(row_id)}").read_all()) > 0

    def latencies(self, first_id: int, last_id: int | None = None) -> list[float]:
        t = self._table()
        if t is None:
            return []
        if t.version() < self.since_version:
            return []
        raw = pa.table(t.load_cdf(starting_version=self.since_version).read_all())
        feed = pa.table({"id": raw.column("id"), "updated_at": raw.column("updated_at"),
                         "_change_type": raw.column("_change_type").cast(pa.string()),
                         "_commit_timestamp": raw.column("_commit_timestamp")})
        last = last_id if last_id is not None else 2 ** 31 - 1
        keep = pc.and_(pc.and_(pc.greater_equal(feed.column("id"), first_id), pc.less(feed.column("id"), last)),
                       pc.is_in(feed.column("_change_type"), pa.array(["insert", "update_postimage"])))
        feed = feed.filter(keep)
        first_commit: dict[int, tuple[int, datetime]] = {}
        for i, stamp, ts in zip(feed.column("id").to_pylist(), feed.column("updated_at").to_pylist(),
                                feed.column("_commit_timestamp").to_pylist()):
            ms = ts.replace(tzinfo=timezone.utc).timestamp() * 1000 if isinstance(ts, datetime) else float(ts)
            if i not in first_commit or ms < first_commit[i][0]:
                first_commit[i] = (ms, stamp)
        return [ms - stamp.replace(tzinfo=timezone.utc).timestamp() * 1000
                for ms, stamp in first_commit.values() if stamp is not None]


#: The lakes' commit interval in (g)'s latency run.
LATENCY_INTERVAL_S = 10.0


def delta_latency(cfg, work: Path, info, db: str, rate: int, seconds: float, first_id: int, producer_state: str,
                  latency_run: Callable[..., tuple[dict, dict]], console: Console,
                  name: str = "delta", interval_s: float = LATENCY_INTERVAL_S) -> dict[str, Any]:
    """(g): :func:`latency_run` (the merge benchmark's (c)) with the Delta sink on, its change
    data feed the clock: the job and the table of (f)'s Delta run ``name`` (``delta``,
    ``delta-spark``), going on from where it stopped (the change data feed turned on first).
    On the spark engine the Iceberg sink is on too (both lakes merged in each batch, a table of
    its own holding what the run writes): the latency with both lakes on."""
    work = work / "round0"  # (f)'s first round
    run_cfg = lake_config(cfg, work, name, change_data_feed=True)
    run_cfg.state_dir = str(work / f"lake-{name}" / "state")
    run_cfg.spark.checkpoint_dir = str(work / f"lake-{name}" / "checkpoints")
    # (a run of seconds: the lakes at ``interval_s``, by default `cdc bench lakes`' 10 s, not the
    # sinks' 60, or the clock would wait a minute for its first and its last row)
    run_cfg.sinks.delta.commit_interval_s = run_cfg.sinks.iceberg.commit_interval_s = interval_s
    both = run_cfg.sinks.delta.engine == "spark"
    if both:
        run_cfg.sinks.iceberg.enabled = True
        run_cfg.sinks.iceberg.warehouse = str(work / f"lake-{name}" / "iceberg-latency")
        run_cfg.sinks.iceberg.catalog_name = f"{cfg.kafka.topic_prefix}_latency"
    from spark_jobs.spark_session import build_session
    sink = lake_sink(run_cfg)
    handle = sink.load_table(db, TABLE)
    if handle is None:
        raise BenchError("(g) needs the Delta table of (f)")
    if isinstance(sink.engine, DeltaSparkEngine):
        build_session("local[2]", conf=lake_conf(run_cfg.sinks))
        sink.engine.run_sql("turning the change data feed on", db, TABLE,
                            f"ALTER TABLE {sink.engine.spark_name(db, TABLE)} SET "
                            "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    else:
        handle.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    handle = sink.load_table(db, TABLE)
    latency, _ = latency_run(run_cfg, info, db, rate, seconds, first_id, producer_state, console,
                             clock=DeltaClock(run_cfg, db, handle.version() + 1), idle_changes=0)
    latency["run"] = name
    latency["commit_interval_s"] = interval_s
    latency["lakes"] = ["delta", "iceberg"] if both else ["delta"]
    return latency


__all__ = ["LAKE_RUNS", "LATENCY_INTERVAL_S", "lake_run_names", "lake_config", "lake_runs", "delta_latency",
           "DeltaClock"]
