"""``cdc bench merge --kafka-sources N``: the merge job's input read through the project's
``cdc-kafka`` source and through Spark's own ``kafka`` source (``spark-sql-kafka-0-10``, the
jar of this Spark from ``.jars/spark``), over the same backlog into the same kind of sink,
``N`` rounds in alternated order (``cdc-kafka`` first in odd rounds), each run's sink
checked against the source's rows.  Figures: each run's steady events/s and the CPU per
event of the processes measured, medians with min-max per source, and the ratio
``kafka`` / ``cdc-kafka`` per round.

With ``cdc-kafka`` each task reads its ranges itself (``MergeTasks.run``: no trip through
the JVM); with Spark's source the records come through the JVM and Arrow into the task
(``mapInArrow``).  Each run in a process of its own, with a JVM of its own: a JVM's class
path and options are fixed at its launch, and the sources want different ones (Spark's
``kafka`` source needs the connector jars on the driver's class path, ``cdc-kafka`` runs
with the client compiler only: ``spark_jobs.spark_session.session_conf``), so a JVM
started for one source would run the other with the wrong settings or not at all ("Failed
to find data source: kafka").
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from cdc.bench.race_rounds import median_range
from cdc.errors import BenchError

SOURCES = {"python": "cdc-kafka", "jvm": "kafka"}


def kafka_source_rounds(cfg, work: Path, db: str, live_rows: int, rounds: int, throughput_run: Callable[..., dict],
                        console: Console, cpu_roots: dict[str, int | None] | None = None) -> dict[str, Any]:
    """The rounds (``throughput_run``: the merge benchmark's run over the whole backlog)."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SOURCES}
    ratios: list[float] = []
    for i in range(rounds):
        order = ("python", "jvm") if i % 2 == 0 else ("jvm", "python")
        rates: dict[str, float] = {}
        for source in order:
            c = cfg.model_copy(deep=True)
            c.spark.kafka_source = source
            with console.status(f"Kafka sources, round {i + 1} of {rounds}: {SOURCES[source]}..."):
                r = run_in_own_process(throughput_run, c, work, f"source-{source}-{i}", "local[2]", db,
                                       cpu_roots=cpu_roots)
            if r["sink_rows"] != live_rows:
                raise BenchError(f"the {SOURCES[source]} source's run: the sink table has {r['sink_rows']} rows, "
                                 f"the source {live_rows}")
            runs[source].append(r)
            rates[source] = r["steady_events_per_s"]
        ratios.append(rates["jvm"] / rates["python"] if rates["python"] else 0.0)
    out: dict[str, Any] = {"rounds": rounds, "ratios_jvm_to_python": [round(x, 3) for x in ratios],
                           "ratio_jvm_to_python": median_range(ratios)}
    for source, rs in runs.items():
        out[SOURCES[source]] = {
            "steady_events_per_s": median_range(r["steady_events_per_s"] for r in rs),
            "events": rs[0]["events"] if rs else 0,
            "cpu_us_per_event": {k: median_range(r["cpu_us_per_event"].get(k) for r in rs)
                                 for k in (rs[0]["cpu_us_per_event"] if rs else {})}}
    return out


def run_in_own_process(throughput_run: Callable[..., dict], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``throughput_run(*args, **kwargs)`` in a new process (spawned: nothing of this
    process's JVM or Kafka clients is inherited), its result without its ``cfg``."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        r = pool.submit(throughput_run, *args, **kwargs).result()
    r.pop("cfg", None)
    return r
