"""The peers' race's report (:mod:`cdc.bench.peers_race` runs it, :mod:`cdc.bench.peers_ratios`
holds its ratios): the console's table and the section of docs/benchmarks.md it writes.  What
the figures measure and how each side is run is told once, in docs/race-method.md; the section
links there."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cdc.bench import race_settings
from cdc.bench.doc_sections import with_leading_section
from cdc.bench.peers_ratios import CONNECT, GOALS, goal, headline_pairs
from cdc.bench.report import PEERS_HEADING, race_rounds_lines
from cdc.bench.table_cells import figure, ratio, row

#: Where the section sends its reader for what the figures measure (docs/race-method.md).
METHOD_LINK = ("What the rows measure, how each side is run, timed and counted: [docs/race-method.md, \"The race "
               "against the peers as deployed\"](race-method.md#the-race-against-the-peers-as-deployed).")


def print_peers(result: dict[str, Any], console: Console) -> None:
    table = Table(title="the race against the peers as deployed (rows/s after 10% warm-up, medians; peak RSS MB)")
    for col in ("workload", "ours", "peer", "peer's", "ours / peer", "peer RSS / ours"):
        table.add_column(col, justify="left" if col in ("workload", "peer") else "right")
    for key, ours, peer, label in headline_pairs(result):
        x = result[key]
        table.add_row(label, figure(x, ours, "rows_per_s_after_warmup"), peer_label(peer),
                      figure(x, peer, "rows_per_s_after_warmup"),
                      ratio(x, f"{ours}/{peer}_after_warmup"), ratio(x, f"rss {peer}/{ours}"))
    console.print(table)


def peer_label(run: str) -> str:
    if run == CONNECT:
        return "Debezium in Kafka Connect"
    if run.startswith("flink_p"):
        return f"Flink CDC, parallelism {run[7:]}"
    return run


def _verdict(value: float | None, target: float) -> str:
    if value is None:
        return "-"
    return f">= {target:g}: met" if value >= target else f">= {target:g}: not met"


def peers_headline_lines(result: dict[str, Any]) -> list[str]:
    rounds = max((len((result.get(k) or {}).get("rounds") or []) for k in ("streaming", "single_row", "snapshot")),
                 default=0)
    lines = [f"### Headline: rows/s after a 10% warm-up, medians over {max(1, rounds)} round(s) (min-max), both "
             "sides timed by their records in Kafka", "",
             row("workload", "ours rows/s", "peer", "peer rows/s", "ours / peer", "goal", "peer's peak RSS / ours",
                 "goal"), row(*["---"] * 8)]
    for key, ours, peer, label in headline_pairs(result):
        x = result[key]
        speed = (x.get("ratios") or {}).get(f"{ours}/{peer}_after_warmup")
        rss = (x.get("ratios") or {}).get(f"rss {peer}/{ours}")
        lines.append(row(label, figure(x, ours, "rows_per_s_after_warmup"), peer_label(peer),
                         figure(x, peer, "rows_per_s_after_warmup"), ratio(x, f"{ours}/{peer}_after_warmup"),
                         _verdict(speed, goal(key, peer)), ratio(x, f"rss {peer}/{ours}"),
                         _verdict(rss, GOALS["rss"])))
    return lines


def peers_runs_lines(result: dict[str, Any]) -> list[str]:
    """Every run's figures, medians (min-max) over the rounds."""
    lines: list[str] = []
    cols = ("run", "start-up s", "rows/s incl. start-up", "rows/s from the signal", "rows/s from first record",
            "rows/s after 10% warm-up", "bytes/record", "peak RSS MB")
    for key, title in (("streaming", "Multi-row streaming"), ("single_row", "Single-row transactions"),
                       ("snapshot", "Incremental snapshot of a quiet table")):
        x = result.get(key)
        if not x:
            continue
        what = (f"{x['rows']:,} row changes ({x['changes']['insert']:,} inserts, {x['changes']['update']:,} updates, "
                f"{x['changes']['delete']:,} deletes, each delete followed by a tombstone on both sides)"
                if "changes" in x else f"{x['rows']:,} rows, chunks of {result.get('chunk_size', 0):,}")
        lines += [f"### {title}: {what}", "", row(*cols), row(*["---"] * len(cols))]
        runs = [k for k in (x.get("rounds") or [{}])[0].get("runs", {})]
        for run in sorted(runs, key=lambda r: (not r.startswith("ours"), r)):
            label = ("ours" + (f", {run[6:]} chunk reader(s)" if run.startswith("ours_p") else "")
                     if run.startswith("ours") else peer_label(run))
            lines.append(row(label, figure(x, run, "startup_s", ".2f"), figure(x, run, "rows_per_s_total"),
                             figure(x, run, "rows_per_s_from_signal"), figure(x, run, "rows_per_s_from_first"),
                             figure(x, run, "rows_per_s_after_warmup"), figure(x, run, "bytes_per_record"),
                             figure(x, run, "rss_peak_mb")))
        lines.append("")
    return lines


def repeated_run_lines(result: dict[str, Any]) -> list[str]:
    """The peers' jobs that failed and were run again."""
    notes = []
    for key in ("streaming", "single_row", "snapshot"):
        for i, r in enumerate((result.get(key) or {}).get("rounds") or [], 1):
            for run, figs in (r.get("runs") or {}).items():
                for msg in figs.get("failed_runs") or []:
                    notes.append(f"- {key.replace('_', '-')}, round {i}, {peer_label(run)}: the job failed ({msg}); "
                                 "run again, the second run's figures kept.")
    return ["**Runs repeated**: peers' jobs that failed:", "", *notes, ""] if notes else []


def render_peers(result: dict[str, Any], *, when: str | None = None) -> str:
    """The peers' section of docs/benchmarks.md from one ``cdc bench peers`` result."""
    when = when or f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M}"
    v = result.get("versions") or {}
    m = result.get("machine") or {"nproc": "?", "cpu": "?"}
    ran = []
    if CONNECT in result.get("peers", []):
        ran.append(f"Debezium {v.get('debezium_connector_mysql', '?')}'s MySQL connector in a Kafka Connect "
                   f"{v.get('kafka_connect', '?')} standalone worker (MariaDB's JDBC driver {v.get('mariadb_jdbc', '?')})")
    if "flink" in result.get("peers", []):
        ran.append(f"Flink CDC {v.get('flink_cdc', '?')}'s MySQL source (bundling Debezium "
                   f"{v.get('flink_cdc_debezium', '?')}) on Flink {v.get('flink_cdc_flink', '?')} in a local "
                   f"MiniCluster, with Flink's Kafka sink {v.get('flink_cdc_kafka_sink', '?')}, at parallelism "
                   + " and ".join(str(p) for p in result.get("parallelisms") or ()))
    heap = result.get("heap", race_settings.DEFAULT_HEAP)
    settings = race_settings.peers_settings_rows(heap, result.get("chunk_size", 8192),
                                                 result.get("compression", "none"))
    lines = [PEERS_HEADING, "",
             f"Written by `cdc bench peers` on {when} UTC (`make bench-race`). Peers that ran: {'; '.join(ran)}. "
             f"Every side on the same binlog range or the same table, the same MariaDB server (reporting version "
             f"`{result.get('server_version', '?')}`: Debezium's MySQL connector speaks only to MySQL, Flink CDC's "
             f"Connector/J 8.0 asks for `tx_isolation` before 5.7.20) and the same Kafka broker. Machine: "
             f"{m['nproc']} cores ({m['cpu']}).", "", *peers_headline_lines(result), "", *repeated_run_lines(result),
             *race_rounds_lines(result.get("streaming"), result.get("snapshot"), result.get("single_row")),
             "Settings of every side:", "", row("setting", "ours", "Debezium in Kafka Connect", "Flink CDC"),
             row(*["---"] * 4), *[row(*r) for r in settings], "", METHOD_LINK, "",
             *peers_runs_lines(result)]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_peers_section(out: Path, result: dict[str, Any]) -> str:
    """The peers' section of ``out`` (docs/benchmarks.md) from ``result``, leading the file's
    sections (replaced where it is when there already); the rest kept."""
    section = render_peers(result)
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(with_leading_section(text, PEERS_HEADING, section))
    return section
