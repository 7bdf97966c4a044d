"""The race's rounds: which side runs first in each round, each figure's median and range over
the rounds, and whether another busy process shared the machine.

One run per figure on a shared machine says little: the load moves the result more than
the margin.  The race therefore runs ``N`` rounds over the same binlog range or table, ours
first in odd rounds and Debezium first in even ones (so neither side always runs on a
warmer or cooler machine), and reports each figure as its median with the min-max beside
it.  Pure: the harness (:mod:`cdc.bench.harness`) samples the machine, these functions decide.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Sequence

OURS = "ours"
DEBEZIUM = "debezium"

#: A process outside the race using more than this share of one core at a round's start
#: makes the round "shared".
BUSY_CPU_SHARE = 0.20
DEFAULT_ROUNDS = 3


def round_orders(rounds: int) -> list[tuple[str, str]]:
    """The order of the two sides in each of ``rounds`` rounds: ours first in odd rounds
    (the 1st, 3rd, ...), Debezium first in even ones."""
    return [(OURS, DEBEZIUM) if i % 2 == 0 else (DEBEZIUM, OURS) for i in range(max(1, rounds))]


def median_range(values: Iterable[float | None]) -> tuple[float, float, float] | None:
    """``(median, min, max)`` of the values that are there (None and missing left out);
    None when there are none."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs)


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def combine_runs(runs: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """One side's runs over the rounds as one run: every numeric figure its median (the
    other fields the first round's), and ``{figure: (min, max)}`` beside it."""
    if not runs:
        return {}, {}
    combined = dict(runs[0])
    spread: dict[str, tuple[float, float]] = {}
    for key, first in runs[0].items():
        if not _numeric(first):
            continue
        stats = median_range(r.get(key) for r in runs)
        if stats is not None:
            median = stats[0]
            combined[key] = int(median) if isinstance(first, int) and median.is_integer() else median
            spread[key] = (stats[1], stats[2])
    return combined, spread


def combine_ratios(per_round: Sequence[dict[str, float | None]]) -> tuple[dict[str, float | None],
                                                                          dict[str, tuple[float, float]]]:
    """Ratios worked out in each round (ours over Debezium of the same round) as their
    medians and ``{ratio: (min, max)}``: the ratio of the medians would pair rounds that
    did not run together."""
    keys = list(dict.fromkeys(k for r in per_round for k in r))
    medians: dict[str, float | None] = {}
    spread: dict[str, tuple[float, float]] = {}
    for key in keys:
        stats = median_range(r.get(key) for r in per_round)
        medians[key] = stats[0] if stats else None
        if stats:
            spread[key] = (stats[1], stats[2])
    return medians, spread


def combine_rounds(result: dict[str, Any], per_round: list[dict[str, Any]]) -> None:
    """The rounds of a race into ``result``: each run's figures as their medians under the
    run's key, their min-max under ``spread``, the ratios as the medians of each round's
    own (``ratios``, ``ratio_spread``), the rounds themselves (start, load, order, runs)
    under ``rounds``."""
    keys = list(dict.fromkeys(k for r in per_round for k in r["runs"]))
    result["spread"] = {}
    for key in keys:
        result[key], result["spread"][key] = combine_runs([r["runs"][key] for r in per_round if key in r["runs"]])
    result["ratios"], result["ratio_spread"] = combine_ratios([r["ratios"] for r in per_round])
    result["rounds"] = per_round


def busy_processes(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float,
                   race_pids: set[int], *, share: float = BUSY_CPU_SHARE) -> list[tuple[str, float]]:
    """Processes outside the race that used more than ``share`` of a core between two
    readings of ``{pid: (command, CPU seconds)}`` ``seconds`` apart: ``(command, share)``,
    busiest first."""
    if seconds <= 0:
        return []
    out = []
    for pid, (cmd, cpu) in after.items():
        if pid in race_pids or pid not in before:
            continue
        used = (cpu - before[pid][1]) / seconds
        if used > share:
            out.append((cmd or f"pid {pid}", round(used, 2)))
    return sorted(out, key=lambda x: -x[1])


def shared_machine_warning(rounds: Sequence[dict[str, Any]], cores: int) -> str | None:
    """The report's warning when another busy process shared the machine: a round that found
    a busy process outside the race at its start, or more runnable threads than cores then
    (``runnable``: sampled while the race itself is idle between its runs; the 1-minute load
    average, recorded beside it, still carries the race's own previous round, so it decides
    only for a round recorded without ``runnable``).  ``rounds``: each with ``loadavg``,
    ``runnable`` and ``busy``, as the harness records them.  None when every round had the
    machine to itself."""
    notes = []
    for i, r in enumerate(rounds, 1):
        why = []
        runnable = r.get("runnable")
        if runnable is None:
            load = (r.get("loadavg") or [0.0])[0]
            if cores and load > cores:
                why.append(f"load average {load:g} above the {cores} cores")
        elif cores and runnable > cores:
            why.append(f"{runnable:g} threads ready to run while the race was idle, for {cores} cores")
        busy = r.get("busy") or []
        if busy:
            why.append("busy: " + ", ".join(f"`{cmd[:60]}` {share:.0%} of a core" for cmd, share in busy[:3]))
        if why:
            notes.append(f"round {i} ({'; '.join(why)})")
    if not notes:
        return None
    return ("**Warning: the machine was shared** during " + ", ".join(notes) +
            ". Read the spread between rounds before the medians; rerun on a quiet machine.")
