"""``cdc bench lakes``: the lake sinks on their own commit cadence (docs/lake.md, "Commit
cadence"), against the same pipeline without them, in one run on the embedded stack:

1. **Backlog**: ``events`` row changes merged by the job (``local[2]``, available-now) into the
   clean changelog only, and into Delta **and** Iceberg at once (per engine), ``rounds`` times
   with the order turned each round: the rates and each lake run's ratio to the changelog's
   (medians), the commits each lake table took and its data files.
2. **Latency**: ``rate`` row inserts/s for ``seconds`` s, producer and merge job running, the
   PostgreSQL sink on, once without the lakes and once with both lakes on (per engine, turned
   each round): the PostgreSQL sink's p50/p99 (each row's INSERT time to its insert into the
   sink table) and its ratio to the run without lakes; the lakes' freshness: each row's INSERT
   time to the Delta commit that first held it (the change data feed's commit time), and each
   lake committer's time from a batch's staging to its commit.

A benchmark, not a test: it prints figures and ratios, and checks only that each lake table
ends with the source's rows.
"""

from __future__ import annotations

import json
import statistics
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console

from cdc.bench.harness import (
    DEFAULT_STATE_DIR,
    TABLE,
    admin,
    bench_config,
    drop_bench_database,
    make_backlog,
    start_stack,
)
from cdc.bench.lake import DeltaClock, lake_rows
from cdc.bench.merge import _latency_run, _pct, _throughput_run
from cdc.errors import BenchError
from producer.app import ProducerApp
from spark_jobs.sinks.configured import build_sinks, lake_conf
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.spark_session import build_session, stop_session

__all__ = ["bench_lake_cadence", "lakes_config", "cadence_lines"]


def lakes_config(cfg, work: Path, run: str, engine: str | None, interval_s: float, *, postgres: bool = False,
                 change_data_feed: bool = False):
    """``cfg`` with both lakes on ``engine`` (None: no lake; ``<engine>-nice<N>``: its
    committers at ``commit_nice: N``) at ``interval_s``, their tables in ``work/run``; the
    changelog on without ``postgres``."""
    cfg = cfg.model_copy(deep=True)
    cfg.sinks.postgres.enabled, cfg.sinks.mysql.enabled = postgres, False
    cfg.sinks.changelog.enabled = not postgres
    name, _, nice = (engine or "driver").partition("-nice")
    for section in (cfg.sinks.delta, cfg.sinks.iceberg):
        section.enabled = engine is not None
        section.engine = name
        section.commit_interval_s = interval_s
        if nice:
            section.commit_nice = int(nice)
    cfg.sinks.delta.path = str(work / run / "delta")
    cfg.sinks.delta.change_data_feed = change_data_feed
    cfg.sinks.iceberg.warehouse = str(work / run / "iceberg")
    cfg.sinks.iceberg.catalog_name = f"{cfg.kafka.topic_prefix}_{run.replace('-', '_')}"
    return cfg


def _backlog(cfg, work: Path, db: str, live_rows: int, engines: tuple[str, ...], rounds: int, interval_s: float,
             console: Console) -> dict[str, Any]:
    names = ["changelog", *(f"lakes-{e}" for e in engines)]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            engine = name.partition("-")[2] or None
            run_cfg = lakes_config(cfg, work / f"round{r}", name, engine, interval_s)
            with console.status(f"backlog round {r + 1}/{rounds}: the merge job into {name} (local[2])..."):
                res = _throughput_run(run_cfg, work / f"round{r}", f"lakes-{name}", "local[2]", db,
                                      conf=lake_conf(run_cfg.sinks), count_sink=False)
            res.pop("cfg")
            res["tables"] = {}
            for sink_name, sink in build_sinks(run_cfg.sinks):
                if isinstance(sink, LakeSink):
                    rows = lake_rows(sink, db)
                    if rows != live_rows:
                        raise BenchError(f"{name}: the {sink_name} table has {rows} rows, the source {live_rows}")
                    res["tables"][sink_name] = {"commits": len(sink.commit_marks(db, TABLE)),
                                                "files": sink.file_count(db, TABLE)}
                    sink.close()
            runs[name].append(res)
    out: dict[str, Any] = {"names": names, "runs": {}}
    for name, results in runs.items():
        out["runs"][name] = {"steady_events_per_s": statistics.median(x["steady_events_per_s"] for x in results),
                             "rounds": [round(x["steady_events_per_s"]) for x in results],
                             "batches": [x["batches"] for x in results], "tables": results[-1]["tables"]}
    base = out["runs"]["changelog"]["steady_events_per_s"]
    out["ratios"] = {n: out["runs"][n]["steady_events_per_s"] / base if base else 0.0 for n in names[1:]}
    return out


def _latency(cfg, info, work: Path, db: str, merged, engines: tuple[str, ...], rounds: int, rate: int,
             seconds: float, interval_s: float, producer_state: str, console: Console) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for engine in engines:
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for r in range(rounds):
            for which in (("off", "on") if r % 2 == 0 else ("on", "off")):
                with admin(info.mysql, db) as conn, conn.cursor() as cur:
                    cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM `{TABLE}`")
                    first_id = cur.fetchone()[0] + 1
                run_cfg = lakes_config(merged, work, f"latency-{engine}-{r}", engine if which == "on" else None,
                                       interval_s, postgres=True, change_data_feed=True)
                if which == "on":
                    build_session("local[2]", conf=lake_conf(run_cfg.sinks))
                console.print(f"latency {engine} round {r + 1}/{rounds}: lakes {which}")
                lat, _ = _latency_run(run_cfg, info, db, rate, seconds, first_id, producer_state, console,
                                      idle_changes=0)
                if which == "on":
                    lake = DeltaClock(run_cfg, db).latencies(first_id + 1)
                    lat["delta_p50_ms"], lat["delta_p99_ms"] = _pct(lake, 0.5), _pct(lake, 0.99)
                    status = json.loads((Path(run_cfg.state_dir) / "lake-status.json").read_text())
                    lat["commit_delay_p99_s"] = {n: s.get("commit_delay_p99_s") for n, s in status["sinks"].items()}
                runs[which].append(lat)
        off_p99 = statistics.median(x["p99_ms"] for x in runs["off"])
        on_p99 = statistics.median(x["p99_ms"] for x in runs["on"])
        out[engine] = {"off": runs["off"], "on": runs["on"], "pg_p99_off_ms": off_p99, "pg_p99_on_ms": on_p99,
                       "pg_p50_off_ms": statistics.median(x["p50_ms"] for x in runs["off"]),
                       "pg_p50_on_ms": statistics.median(x["p50_ms"] for x in runs["on"]),
                       "pg_p99_ratio": on_p99 / off_p99 if off_p99 else 0.0,
                       "delta_freshness_p99_ms": statistics.median(x["delta_p99_ms"] or 0 for x in runs["on"])}
    return out


def bench_lake_cadence(state_dir: Path = DEFAULT_STATE_DIR, events: int = 500_000, *, rate: int = 5000,
                       seconds: float = 60.0, rounds: int = 2, engines: tuple[str, ...] = ("driver", "spark"),
                       interval_s: float = 10.0, partitions: int = 4, console: Console | None = None) -> dict[str, Any]:
    """The benchmark (see the module's docstring); its figures."""
    console = console or Console()
    info = start_stack(state_dir, console)
    run = uuid.uuid4().hex[:8]
    db = f"benchlakes_{run}"
    cfg = bench_config(info, f"benchlakes_{run}", db)
    cfg.kafka.partitions = partitions
    cfg.sinks.postgres.schema_name = f"benchlakes_{run}"
    work = Path(info.state_dir) / "bench-lakes" / run
    result: dict[str, Any] = {"events": events, "interval_s": interval_s, "engines": list(engines), "rounds": rounds}
    try:
        _, live_rows, _ = make_backlog(info, cfg, db, events, console)
        cfg.state_dir = str(work / "producer")
        with console.status("the producer streams them into Kafka..."):
            ProducerApp(cfg).run(idle_exit_s=3.0)
        result["backlog"] = _backlog(cfg, work, db, live_rows, engines, rounds, interval_s, console)
        if rate and seconds:
            pg_cfg = lakes_config(cfg, work, "latency-base", None, interval_s, postgres=True)
            with console.status("the merge job into PostgreSQL over the backlog (the latency runs go on from it)..."):
                merged = _throughput_run(pg_cfg, work, "latency-base", "local[2]", db).pop("cfg")
            result["latency"] = _latency(cfg, info, work, db, merged, engines, rounds, rate, seconds, interval_s,
                                         str(work / "producer"), console)
    finally:
        try:
            stop_session()
        except Exception as exc:  # noqa: BLE001 - cleanup is best effort
            console.print(f"[yellow]cleanup:[/yellow] stopping the Spark session: {exc}")
        drop_bench_database(info, db, Path(state_dir), False, console)
    for line in cadence_lines(result):
        console.print(line, highlight=False)
    return result


def cadence_lines(result: dict[str, Any]) -> list[str]:
    """The figures as Markdown (docs/benchmarks.md's "Lakes on their own commit cadence")."""
    out = [f"{result['events']:,} changes backlog, both lakes at `commit_interval_s: {result['interval_s']:g}`, "
           f"{result['rounds']} alternated rounds (medians), `local[2]`:", "",
           "| run | events/s | to changelog only | rounds | lake commits (Delta, Iceberg) |",
           "| --- | --- | --- | --- | --- |"]
    b = result.get("backlog") or {}
    for name in b.get("names", []):
        r = b["runs"][name]
        ratio = f"{b['ratios'][name]:.2f}" if name in b.get("ratios", {}) else "1"
        commits = ", ".join(str(t["commits"]) for t in r["tables"].values()) or "-"
        out.append(f"| {name} | {r['steady_events_per_s']:,.0f} | {ratio} | {', '.join(map(str, r['rounds']))} | "
                   f"{commits} |")
    lat = result.get("latency") or {}
    if lat:
        out += ["", "| engine | PostgreSQL p50 / p99, lakes off | lakes on | p99 on/off | Delta freshness p99 |",
                "| --- | --- | --- | --- | --- |"]
        for engine, x in lat.items():
            out.append(f"| {engine} | {x['pg_p50_off_ms']:,.0f} / {x['pg_p99_off_ms']:,.0f} ms | "
                       f"{x['pg_p50_on_ms']:,.0f} / {x['pg_p99_on_ms']:,.0f} ms | {x['pg_p99_ratio']:.2f} | "
                       f"{x['delta_freshness_p99_ms'] / 1000:,.1f} s |")
    return out
