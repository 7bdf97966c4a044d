"""``make bench`` / ``cdc bench report``: the stream, snapshot and merge benchmarks in one
session, written to ``docs/benchmarks.md`` with their reference runs, ratios and the
machine.  Figures come only from the runs made here."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console

from cdc.bench.common import DEFAULT_STATE_DIR, machine_caption
from cdc.bench.merge import bench_merge
from cdc.bench.snapshot import bench_snapshot
from cdc.bench.stream import bench_stream


def _mariadb_version() -> str:
    for tool in ("mariadbd", "mysqld"):
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0:
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
    return "unknown"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def render(stream: dict, snapshot: dict, merge: dict, *, stream_rows: int, snapshot_rows: int,
           merge_events: int) -> str:
    m = stream["machine"]
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Every figure below comes",
        "from the same session; each benchmark runs its own reference in the same script, so",
        "read the ratios, not the absolute rates (these machines are shared and noisy).",
        "",
        f"Machine: {machine_caption(m)}; "
        f"Python {platform.python_version()}; {_mariadb_version()}; embedded Tansu broker.",
        "",
        "Reproduce: `make bench` (or `.venv/bin/cdc bench stream|snapshot|merge` one by one; each",
        "starts its own embedded stack in `.cdc/bench` and stops it).",
        "",
        f"## Stream: binlog to Kafka (`cdc bench stream --rows {stream_rows}`)",
        "",
        _row("what", "seconds", "rows/s", "vs (a)"),
        _row("---", "---", "---", "---"),
    ]
    a = stream["reference"]["rows_per_s"]
    lines.append(_row("(a) python-mysql-replication decoding, no output", f"{stream['reference']['seconds']:.2f}",
                      f"{a:,.0f}", "1.00"))
    for key, label in (("producer_tx", "(b) producer, Kafka transactions"), ("producer_no_tx", "(b) producer, no transactions")):
        if key in stream:
            b = stream[key]
            lines.append(_row(label, f"{b['seconds']:.2f}", f"{b['rows_per_s']:,.0f}", f"{b['rows_per_s'] / a:.2f}"))
    c = stream["native"]
    lines.append(_row(f"(c) {c['tool']} decoding (native)", f"{c['seconds']:.2f}", f"{c['rows_per_s']:,.0f}",
                      f"{c['rows_per_s'] / a:.2f}"))
    if "producer_tx" in stream:
        b = stream["producer_tx"]
        lines += ["", f"Producer memory (producer + binlog reader, MB): {b['rss_base_mb']:.0f} at start, "
                      f"{b['rss_half_mb']} at 50%, {b['rss_end_mb']} at the end."]
    lines += ["", f"## Snapshot (`cdc bench snapshot --rows {snapshot_rows}`)", "",
              _row("what", "seconds", "rows/s", "vs (a)", "producer RSS MB start/25%/50%/100%"),
              _row("---", "---", "---", "---", "---")]
    a = snapshot["keyset"]["rows_per_s"]
    lines.append(_row("(a) pymysql keyset scan, fetch only", f"{snapshot['keyset']['seconds']:.2f}", f"{a:,.0f}",
                      "1.00", ""))
    for key, label in (("snapshot_quiet", "(b) producer snapshot, signal to last chunk acknowledged, table quiet"),
                       ("snapshot_writes", "(b) the same under writes")):
        if key in snapshot:
            b = snapshot[key]
            extra = f" ({b['writes_per_s']:,.0f} writes/s)" if b["writes"] else ""
            lines.append(_row(label + extra, f"{b['seconds']:.2f}", f"{b['rows_per_s']:,.0f}",
                              f"{b['rows_per_s'] / a:.2f}",
                              f"{b['rss_start_mb']:.0f}/{b['rss_25_mb']:.0f}/{b['rss_50_mb']:.0f}/{b['rss_100_mb']:.0f}"))
    d = snapshot["dump"]
    lines.append(_row(f"(c) {d['tool']} --quick", f"{d['seconds']:.2f}", f"{d['rows_per_s']:,.0f}",
                      f"{d['rows_per_s'] / a:.2f}", ""))
    lines += _merge_lines(merge, merge_events, stream.get("producer_tx", {}).get("rows_per_s"))
    return "\n".join(lines) + "\n"


def _merge_lines(merge: dict, merge_events: int, producer_rate: float | None) -> list[str]:
    lines = ["", f"## Merge: Kafka to PostgreSQL (`cdc bench merge --events {merge_events}`)", "",
             _row("what", "seconds", "events/s", "vs (a)"), _row("---", "---", "---", "---")]
    a = merge["reference"]["events_per_s"]
    p = merge["producer"]
    lines.append(_row("the producer over the same backlog (binlog to Kafka)", f"{p['seconds']:.2f}",
                      f"{p['events_per_s']:,.0f}", f"{p['events_per_s'] / a:.2f}"))
    lines.append(_row("(a) confluent-kafka consume + fastavro decode, one process", f"{merge['reference']['seconds']:.2f}",
                      f"{a:,.0f}", "1.00"))
    b = merge["merge"]
    lines.append(_row(f"(b) merge job local[2], DBLog rule, PostgreSQL upserts ({merge.get('partitions')} partitions), "
                      "query start included", f"{b['seconds']:.2f}", f"{b['events_per_s']:,.0f}",
                      f"{b['events_per_s'] / a:.2f}"))
    lines.append(_row("(b) the same from its first micro-batch (steady)", f"{b['steady_seconds']:.2f}",
                      f"{b['steady_events_per_s']:,.0f}", f"{b['steady_events_per_s'] / a:.2f}"))
    so = merge.get("scale_out")
    if so:
        for workers in (1, 2):
            r = so[f"workers_{workers}"]
            lines.append(_row(f"(e) standalone master, {workers} worker(s) of 1 core (steady)",
                              f"{r['steady_seconds']:.2f}", f"{r['steady_events_per_s']:,.0f}",
                              f"{r['steady_events_per_s'] / a:.2f}"))
    phases = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in b.get("phases", {}).items())
    lines += ["", f"(b) Spark session start {b['session_start_s']:.1f} s and query start {b['query_start_s']:.1f} s, "
                  f"paid once per job start. Where the time went ({b['batches']} micro-batches; plan, tasks and "
                  f"finish are the driver's wall clock, read, decide, changelog and sinks the tasks' own, summed "
                  f"over tasks running side by side): {phases}. The driver's serial share (plan + finish over the "
                  f"steady time): {b['driver_serial_share']:.1%}."]
    if producer_rate:
        lines += ["", f"Against the producer's own rate in this run's stream benchmark ({producer_rate:,.0f} rows/s, "
                      f"Kafka transactions): the merge job at {b['steady_events_per_s'] / producer_rate:.2f} of it "
                      f"(steady), {b['events_per_s'] / producer_rate:.2f} with the query start."]
    if "latency" in merge:
        lt, idle = merge["latency"], merge["idle_change"]
        lines += ["", f"(c) Latency, {lt['writes_per_s']:,.0f} row inserts/s written to the source for "
                      f"{lt['seconds']:.0f} s, producer and merge job running, trigger interval "
                      f"{lt['trigger_interval_s']:g} s (the shipped default), {lt['rows_measured']:,} rows: "
                      f"p50 {lt['p50_ms']:,.0f} ms, p99 {lt['p99_ms']:,.0f} ms, max {lt['max_ms']:,.0f} ms. "
                      "Measured per row from its INSERT statement's time (`updated_at = NOW(3)`, UTC, "
                      "milliseconds) to the row's insert into the PostgreSQL sink table (a column defaulting to "
                      "`clock_timestamp()`): the binlog's whole-second event times are not used.",
                  "", f"(d) A single change on the idle pipeline reaches the sink in {idle['median_ms']:,.0f} ms "
                      f"(median of {idle['changes']}, worst {idle['worst_ms']:,.0f} ms), measured the same way."]
    if so:
        lines += ["", f"(e) Scale-out: two workers / one worker = {so['ratio_2_to_1']:.2f}. Both workers, the driver, "
                      "the broker, MariaDB and PostgreSQL share this machine's 2 cores, so the ratio shows the job "
                      "spreading its tasks over executors, not a second machine's capacity; each task reads its "
                      "own Kafka ranges, and the driver's serial work per batch is the share above."]
    return lines


def bench_report(out: Path = Path("docs/benchmarks.md"), state_dir: Path = DEFAULT_STATE_DIR, *,
                 stream_rows: int = 500_000, snapshot_rows: int = 1_000_000, merge_events: int = 1_000_000,
                 console: Console | None = None) -> str:
    console = console or Console()
    stream = bench_stream(state_dir, rows=stream_rows, console=console)
    snapshot = bench_snapshot(state_dir, rows=snapshot_rows, console=console)
    merge = bench_merge(state_dir, events=merge_events, console=console)
    text = render(stream, snapshot, merge, stream_rows=stream_rows, snapshot_rows=snapshot_rows,
                  merge_events=merge_events)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"written to {out}")
    return text
