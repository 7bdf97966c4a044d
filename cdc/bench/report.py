"""``make bench`` / ``cdc bench report``: the stream, snapshot and merge benchmarks in one
session, written to ``docs/benchmarks.md`` with their reference runs, ratios and the
machine.  Figures come only from the runs made here."""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console

from cdc.bench import debezium, race_rounds, race_settings
from cdc.bench.doc_sections import section_of, with_leading_section, with_section
from cdc.bench.harness import DEFAULT_STATE_DIR, machine_caption
from cdc.bench.merge import bench_merge
from cdc.bench.snapshot import bench_snapshot
from cdc.bench.soak import LAKE_SECTION as LAKE_SOAK_HEADING
from cdc.bench.soak import SECTION as SOAK_HEADING
from cdc.bench.stream import bench_stream
from cdc.bench.table_cells import figure as _fig
from cdc.bench.table_cells import ratio as _ratio
from cdc.bench.table_cells import row as _row
from cdc.stack.kafka_broker import kafka_version


def _mariadb_version() -> str:
    for tool in ("mariadbd", "mysqld"):
        try:
            out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0:
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
    return "unknown"


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
        f"Python {platform.python_version()}; {_mariadb_version()}; Apache Kafka {kafka_version()} (embedded, one node).",
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
    c = merge.get("reference_compiled")
    if c:
        lines.append(_row("(a') the same with the project's compiled Avro decoder (the merge tasks' decoder)",
                          f"{c['seconds']:.2f}", f"{c['events_per_s']:,.0f}", f"{c['events_per_s'] / a:.2f}"))
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
    wall = {k: v for k, v in b.get("phases", {}).items() if not k.endswith("_cpu_s")}
    cpu = {k: v for k, v in b.get("phases", {}).items() if k.endswith("_cpu_s")}
    phases = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in wall.items())
    lines += ["", f"(b) Spark session start {b['session_start_s']:.1f} s and query start {b['query_start_s']:.1f} s, "
                  f"paid once per job start. Where the time went ({b['batches']} micro-batches; plan, tasks and "
                  f"finish are the driver's wall clock, read, decide, changelog and sinks the tasks' own, summed "
                  f"over tasks running side by side): {phases}. The driver's serial share (plan + finish over the "
                  f"steady time): {b['driver_serial_share']:.1%}."]
    events = b.get("events") or 0
    if cpu and events:
        lines += ["", "(b) CPU time of the tasks' own phases (the task thread's, whatever else the machine did), per "
                      "event: " + ", ".join(f"{k[:-6]} {v * 1e6 / events:.1f} µs" for k, v in cpu.items()) + "."]
    per_event = b.get("cpu_us_per_event") or {}
    if per_event:
        ref = merge["reference"].get("cpu_us_per_event") or {}
        lines += ["", "(b) CPU time per event by process over the whole run, query start included (user + system "
                      "time from /proc): " + ", ".join(f"{k} {v:,.1f} µs" for k, v in
                                                        sorted(per_event.items(), key=lambda kv: -kv[1]))
                  + f"; {sum(per_event.values()):,.1f} µs in all, where two cores give "
                    f"{2e6 / b['steady_events_per_s'] if b.get('steady_events_per_s') else 0:,.1f} µs of CPU per "
                    "event at the steady rate. (a) used "
                  + ", ".join(f"{k} {v:,.1f} µs" for k, v in ref.items())
                  + ". Where the merge job's time goes: [merge-performance.md](merge-performance.md)."]
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
    return lines + lake_lines(merge.get("lake"))


LAKE_HEADING = "## The lake sinks: Kafka to Delta Lake and Iceberg (`cdc bench merge` (f), (g))"


def lake_lines(lake: dict | None) -> list[str]:
    """(f) and (g) of ``cdc bench merge``: the lake sinks against the changelog in the same run,
    a section of its own (after the merge's), which ``with_lake_section`` can write alone."""
    if not lake:
        return []
    lines = ["", LAKE_HEADING, "",
             "The same backlog merged by the job into one target at a time (each with a checkpoint of its own), "
             "local[2]; steady rate from the first batch; a lake table committed once per batch, by the driver "
             "(delta, iceberg: the driver engine) or by Spark's executors (-spark: merge-on-read; docs/lake.md).", "",
             "| run | steady events/s | vs changelog only | batches | lake commits, s | files after the run | "
             "after optimize |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in lake.get("names") or ("changelog", "delta", "iceberg"):
        r = lake[name]
        ratio = lake["ratios"].get(f"{name}/changelog", 1.0)
        lines.append(f"| {name} only | {r['steady_events_per_s']:,.0f} | {ratio:.2f} | {r['batches']} | "
                     f"{r['phases'].get('lake_commit_s', 0):.1f} | {r.get('files_after_run', '-')} | "
                     f"{r.get('files_after_optimize', '-')} |")
    so = lake.get("scale_out")
    if so:
        one, two = so["workers_1"], so["workers_2"]
        lines += ["", f"(e') Scale-out with Delta and Iceberg on ({so['lake_engine']} engine) beside PostgreSQL: the "
                      f"same backlog on a standalone master, one worker of 1 core {one['steady_events_per_s']:,.0f} "
                      f"events/s ({one['batches']} batches), two {two['steady_events_per_s']:,.0f} "
                      f"({two['batches']} batches): **{so['ratio_2_to_1']:.2f}x** (one machine of 2 cores: the "
                      "driver, the broker and the databases share them with the workers)."]
    lt = lake.get("delta_latency")
    if lt:
        lines += ["", f"(g) Latency with the {' and '.join(x.capitalize() for x in lt.get('lakes') or ['delta'])} "
                      f"sink{'s' if len(lt.get('lakes') or []) > 1 else ''} ({lt.get('run', 'delta')}), "
                      f"{lt['writes_per_s']:,.0f} row inserts/s for "
                      f"{lt['seconds']:.0f} s, trigger interval {lt['trigger_interval_s']:g} s"
                      + (f", lake commits every {lt['commit_interval_s']:g} s" if lt.get("commit_interval_s") else "")
                      + ", "
                      f"{lt['rows_measured']:,} rows: p50 {lt['p50_ms']:,.0f} ms, p99 {lt['p99_ms']:,.0f} ms, max "
                      f"{lt['max_ms']:,.0f} ms, from each row's INSERT time to the Delta commit that first held it "
                      "(its change data feed's `_commit_timestamp`)."]
    return lines


# --- the race (cdc bench race): ours vs Debezium ---------------------------------------------------

RACE_HEADING = "## The race: ours vs Debezium"
#: The section of ``cdc bench peers`` (:mod:`cdc.bench.peers_race`), leading docs/benchmarks.md.
PEERS_HEADING = "## The race against the peers as deployed: Debezium in Kafka Connect, Flink CDC"
#: The section of ``cdc bench sinks`` (:mod:`cdc.bench.sink_race`), after the peers'.
SINKS_HEADING = "## The merge job against Debezium's JDBC sink, on the same Debezium topics"
#: Debezium's headline run: Avro to acknowledged Kafka, tuned like ours.
HEADLINE_RUN = ("kafka", "avro")


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _dbz_format(r: dict) -> str:
    return "JSON converter, schemas on" if r["format"] == "json" else "Avro converter (Confluent, in-JVM registry)"


def _dbz_handler(r: dict) -> str:
    what = "count-only handler" if r["mode"] == "count" else "Kafka Java producer, idempotent, acks=all"
    return what + (", at its defaults (extra row)" if r.get("tuning") == "defaults" else "")


def headline_snapshot_key(snapshot: dict) -> str | None:
    """Debezium's headline snapshot run: Kafka and Avro, tuned, at the chunk size where its
    median rate after warm-up was best."""
    keys = [k for k in debezium.run_keys(snapshot) if snapshot[k].get("mode") == HEADLINE_RUN[0]
            and snapshot[k].get("format") == HEADLINE_RUN[1] and snapshot[k].get("tuning", "tuned") == "tuned"]
    return max(keys, key=lambda k: snapshot[k].get("rows_per_s_after_warmup") or 0.0, default=None)


def race_headline_lines(stream: dict | None, snapshot: dict | None, oltp: dict | None = None) -> list[str]:
    """The race's headline: medians after warm-up (min-max over the rounds), Avro to
    acknowledged Kafka on both sides, Debezium tuned like ours; streaming led by ours
    without transactions, with transactions the second row, single-row transactions
    (``oltp``, a ``cdc bench stream --single-row`` result) the third.  JSON-converter and
    count-only runs stay in the tables below, out of the headline."""
    rounds = (stream or snapshot or {}).get("rounds") or []
    lines = [f"### Headline: medians after warm-up over {max(1, len(rounds))} round(s) (min-max), Avro to "
             "acknowledged Kafka, Debezium tuned like ours", "",
             _row("race", "ours rows/s", "Debezium rows/s", "ours / Debezium", "Debezium's peak RSS / ours"),
             _row(*["---"] * 5)]
    dkey = debezium.run_key(*HEADLINE_RUN)
    if stream and dkey in stream:
        for o, label in (("producer_no_tx", "streaming, ours without transactions"),
                         ("producer_tx", "streaming, ours with Kafka transactions")):
            if o in stream:
                lines.append(_row(label, _fig(stream, o, "rows_per_s_after_warmup"),
                                  _fig(stream, dkey, "rows_per_s_after_warmup"),
                                  _ratio(stream, f"{o}/{dkey}_after_warmup"), _ratio(stream, f"rss {dkey}/{o}")))
    if oltp and dkey in oltp and "producer_no_tx" in oltp:
        lines.append(_row("streaming, single-row transactions (OLTP), ours without transactions",
                          _fig(oltp, "producer_no_tx", "rows_per_s_after_warmup"),
                          _fig(oltp, dkey, "rows_per_s_after_warmup"),
                          _ratio(oltp, f"producer_no_tx/{dkey}_after_warmup"), _ratio(oltp, f"rss {dkey}/producer_no_tx")))
    skey = headline_snapshot_key(snapshot) if snapshot else None
    if snapshot and skey and "snapshot_quiet" in snapshot:
        lines.append(_row(f"incremental snapshot, Debezium at its better chunk size "
                          f"({snapshot[skey]['chunk_size']:,})", _fig(snapshot, "snapshot_quiet",
                                                                        "rows_per_s_after_warmup"),
                          _fig(snapshot, skey, "rows_per_s_after_warmup"),
                          _ratio(snapshot, f"snapshot_quiet/{skey}_after_warmup"),
                          _ratio(snapshot, f"rss {skey}/snapshot_quiet")))
    return lines


def race_rounds_lines(stream: dict | None, snapshot: dict | None, oltp: dict | None = None) -> list[str]:
    """Each round's start (UTC), load average and which side ran first, and the warning
    when another busy process shared the machine."""
    lines = [_row("benchmark", "round", "started (UTC)", "load average (1, 5, 15 min)", "threads ready to run",
                  "first", "busy processes"),
             _row(*["---"] * 7)]
    warnings = []
    for name, x in (("streaming", stream), ("single-row streaming", oltp), ("snapshot", snapshot)):
        if not x or not x.get("rounds"):
            continue
        for i, r in enumerate(x["rounds"], 1):
            busy = ", ".join(f"`{cmd[:40]}` {share:.0%}" for cmd, share in (r.get("busy") or [])[:3]) or "none"
            lines.append(_row(name, i, r.get("started", "-"), ", ".join(str(v) for v in r.get("loadavg", [])) or "-",
                              _f(r.get("runnable"), "g"), (r.get("order") or ["-"])[0], busy))
        warning = race_rounds.shared_machine_warning(x["rounds"], x.get("machine", {}).get("nproc") or 0)
        if warning:
            warnings.append(f"{name.capitalize()}: {warning}")
    if len(lines) == 2:  # no rounds recorded (a result from before the rounds)
        return []
    return ["Rounds:", "", *lines, *(["", *warnings] if warnings else []), ""]


def race_stream_lines(stream: dict) -> list[str]:
    """The streaming race of a ``cdc bench stream --debezium`` result: every run's rates
    (including the start-up, from the first record, after a 10% warm-up), start-up, record
    size and peak RSS, medians (min-max) over the rounds; then ours over Debezium's, per pair."""
    n = stream["rows"]
    runs = f" {stream['debezium_runs']}" if stream.get("debezium_runs") else ""
    shape, flag = (("single-row autocommit transactions", " --single-row --transactions off")
                   if stream.get("single_row") else ("", ""))
    lines = [f"### Streaming{', ' + shape if shape else ''}: {n:,} binlog row events to Kafka (`cdc bench stream "
             f"--rows {stream['requested_rows']}{flag} --debezium{runs} --no-reference`)", "",
             _row("run", "record format", "start-up s", "rows/s incl. start-up", "rows/s from first record",
                  "rows/s after 10% warm-up", "bytes/record", "peak RSS MB"),
             _row(*["---"] * 8)]
    ours = [(k, lbl) for k, lbl in (("producer_no_tx", "ours, no transactions"),
                                    ("producer_tx", "ours, Kafka transactions (default)")) if k in stream]
    for key, label in ours:
        lines.append(_row(label, "Avro", _fig(stream, key, "startup_s", ".2f"), _fig(stream, key, "rows_per_s"),
                          _fig(stream, key, "rows_per_s_after_startup"), _fig(stream, key, "rows_per_s_after_warmup"),
                          _fig(stream, key, "bytes_per_record"), _fig(stream, key, "total_rss_peak_mb")))
    dbz = debezium.run_keys(stream)
    for key in dbz:
        r = stream[key]
        lines.append(_row(f"Debezium, {_dbz_handler(r)}", _dbz_format(r), _fig(stream, key, "first_record_s", ".2f"),
                          _fig(stream, key, "rows_per_s_total"), _fig(stream, key, "rows_per_s_from_first"),
                          _fig(stream, key, "rows_per_s_after_warmup"), _fig(stream, key, "bytes_per_record"),
                          _fig(stream, key, "rss_peak_mb")))
    if ours and dbz:
        lines += ["", _row("ours / Debezium", *[f"vs {_dbz_handler(stream[k]).split(',')[0]}, "
                                                 f"{'JSON' if stream[k]['format'] == 'json' else 'Avro'}"
                                                 + (", defaults" if stream[k].get("tuning") == "defaults" else "")
                                                 for k in dbz]),
                  _row(*["---"] * (1 + len(dbz)))]
        for o, _label in ours:
            short = "tx" if o == "producer_tx" else "no tx"
            lines.append(_row(f"rows/s from first record, ours {short}", *[_ratio(stream, f"{o}/{k}") for k in dbz]))
            lines.append(_row(f"rows/s after warm-up, ours {short}",
                              *[_ratio(stream, f"{o}/{k}_after_warmup") for k in dbz]))
            lines.append(_row(f"rows/s incl. start-up, ours {short}", *[_ratio(stream, f"{o}/{k}_total") for k in dbz]))
            lines.append(_row(f"peak RSS, Debezium / ours {short}", *[_ratio(stream, f"rss {k}/{o}") for k in dbz]))
    lines += native_limit_lines(stream)
    return lines


def native_limit_lines(stream: dict) -> list[str]:
    """The physical limit in the same run: ``mariadb-binlog`` decoding the same range (the
    median of its runs) against ours."""
    c = stream.get("native")
    if not c or "producer_no_tx" not in stream:
        return []
    r = stream.get("ratios", {})
    first, warm = r.get("producer_no_tx_after_startup/native"), r.get("producer_no_tx_after_warmup/native")
    return ["", f"The physical limit, in the same run: `{c['tool']} -v --base64-output=decode-rows` decoded the "
                f"same binlog range to /dev/null at {c['rows_per_s']:,.0f} rows/s (the median of {c.get('runs', 1)} "
                f"runs, no Kafka, no encoding). Ours without transactions / it: "
                f"{'-' if first is None else f'{first:.2f}'} from the first record, "
                f"{'-' if warm is None else f'{warm:.2f}'} after the warm-up (goal >= 0.25)."]


def race_snapshot_lines(snapshot: dict) -> list[str]:
    """The snapshot race of a ``cdc bench snapshot --debezium`` result, medians (min-max)."""
    rows = snapshot["rows"]
    runs = f" {snapshot['debezium_runs']}" if snapshot.get("debezium_runs") else ""
    chunks = snapshot.get("debezium_chunk_sizes")
    chunks = f" --debezium-chunk-sizes {','.join(str(c) for c in chunks)}" if chunks else ""
    lines = [f"### Incremental snapshot of a {rows:,}-row table, quiet (`cdc bench snapshot --rows {rows} "
             f"--writes-per-s 0 --debezium{runs}{chunks} --no-reference`)", "",
             _row("run", "record format", "chunk rows", "start-up s", "rows/s from the signal",
                  "rows/s after 10% warm-up", "bytes/record", "peak RSS MB", "ours / it", "ours / it after warm-up",
                  "its RSS / ours"),
             _row(*["---"] * 11)]
    b = snapshot.get("snapshot_quiet")
    if b:
        rss = "rss_peak_mb" if b.get("rss_peak_mb") else "rss_max_mb"
        lines.append(_row("ours, Kafka transactions (default)", "Avro", f"{snapshot['chunk_size']:,}", "",
                          _fig(snapshot, "snapshot_quiet", "rows_per_s"),
                          _fig(snapshot, "snapshot_quiet", "rows_per_s_after_warmup"),
                          _fig(snapshot, "snapshot_quiet", "bytes_per_record"), _fig(snapshot, "snapshot_quiet", rss),
                          "", "", ""))
    for key in debezium.run_keys(snapshot):
        r = snapshot[key]
        lines.append(_row(f"Debezium, {_dbz_handler(r)}", _dbz_format(r), f"{r['chunk_size']:,}",
                          _fig(snapshot, key, "startup_s", ".2f"), _fig(snapshot, key, "rows_per_s"),
                          _fig(snapshot, key, "rows_per_s_after_warmup"), _fig(snapshot, key, "bytes_per_record"),
                          _fig(snapshot, key, "rss_peak_mb"), _ratio(snapshot, f"snapshot_quiet/{key}"),
                          _ratio(snapshot, f"snapshot_quiet/{key}_after_warmup"),
                          _ratio(snapshot, f"rss {key}/snapshot_quiet")))
    return lines


#: Where the race's section sends its reader for what the figures measure (docs/race-method.md).
RACE_METHOD_LINK = ("What the rows measure, how each side is run, timed and counted: [docs/race-method.md, \"The race "
                    "against Debezium embedded\"](race-method.md#the-race-against-debezium-embedded).")


def render_race(stream: dict | None, snapshot: dict | None, *, when: str | None = None,
                oltp: dict | None = None) -> str:
    """The race section of ``docs/benchmarks.md`` from one ``cdc bench race`` run: the
    headline, the rounds with their load (and the shared-machine warning), both sides'
    settings, the method, then every run's figures (``oltp``: the single-row streaming race)."""
    when = when or f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M}"
    m = (stream or snapshot or {}).get("machine", {"nproc": "?", "cpu": "?", "loadavg": ["?"]})
    version = (stream or snapshot or {}).get("server_version", "")
    heap = (stream or snapshot or {}).get("heap", race_settings.DEFAULT_HEAP)
    with_defaults = any((x or {}).get("debezium_defaults") for x in (stream, snapshot))
    rounds = len((stream or snapshot or {}).get("rounds") or []) or 1
    lines = [RACE_HEADING, "",
             f"Written by `cdc bench race` on {when} UTC (`make bench-race-embedded`; `make bench` keeps this section as it "
             f"is). {rounds} round(s) of each benchmark; ours and Debezium's rows of a table come from the same "
             "rounds, on the same binlog range or the same table, the same server and the same broker. Machine: "
             f"{m['nproc']} cores ({m['cpu']}). Server: MariaDB reporting version `{version}` (Debezium's MySQL "
             "connector speaks only to MySQL; our producer still detects MariaDB).",
             "", *race_headline_lines(stream, snapshot, oltp), "",
             *race_rounds_lines(stream, snapshot, oltp),
             "Settings of both sides:", "", *race_settings.settings_table_lines(heap, with_defaults=with_defaults), "",
             RACE_METHOD_LINK, ""]
    if stream:
        lines += race_stream_lines(stream) + [""]
    if oltp:
        lines += race_stream_lines(oltp) + [""]
    if snapshot:
        lines += race_snapshot_lines(snapshot) + [""]
    lines += ["Where our time goes (a py-spy profile of the producer): [performance.md](performance.md).", ""]
    return "\n".join(lines)


def with_race_section(text: str, race: str) -> str:
    """``text`` (docs/benchmarks.md) with its race section replaced by ``race`` (up to the
    next section), or ``race`` appended."""
    return with_section(text, RACE_HEADING, race)


def with_lake_section(text: str, merge: dict) -> str:
    """``text`` (docs/benchmarks.md) with its lake section from a ``cdc bench merge --json``
    result (``merge["lake"]``), the rest kept."""
    return with_section(text, LAKE_HEADING, "\n".join(lake_lines(merge.get("lake"))[1:]))


def race_section_of(path: Path) -> str | None:
    """The race section kept in ``path``, if any."""
    return section_of(path.read_text(), RACE_HEADING) if path.exists() else None


def bench_race(out: Path = Path("docs/benchmarks.md"), state_dir: Path = DEFAULT_STATE_DIR, *,
               stream_rows: int = 1_000_000, snapshot_rows: int = 500_000,
               stream_runs: str = "kafka:avro", snapshot_runs: str = "kafka:avro",
               chunk_sizes: tuple[int, ...] = (8192, 1024), rounds: int = race_rounds.DEFAULT_ROUNDS,
               debezium_defaults: bool = False, heap: str = race_settings.DEFAULT_HEAP,
               json_out: Path | None = None, stream_json: Path | None = None, snapshot_json: Path | None = None,
               oltp_rows: int = race_settings.OLTP_ROWS, oltp_json: Path | None = None, console: Console | None = None) -> str:
    """The race: ``cdc bench stream`` and ``cdc bench snapshot`` with their Debezium rows (no
    references, the snapshot's table quiet), ``rounds`` alternated rounds each, Debezium
    tuned like ours (``heap``: its JVM's ``-Xmx``; ``debezium_defaults``: an extra run at
    its defaults), written as the race section of ``out``; ``stream_json`` /
    ``snapshot_json``: the ``--json`` output of a run made before, used instead of running
    that benchmark again.  ``oltp_rows`` (0: none): the streaming race again on that many
    changes made as single-row autocommit transactions (ours without Kafka transactions),
    or ``oltp_json``'s."""
    console = console or Console()
    results: dict[str, Any] = {}

    def keep(name: str, result: dict) -> dict:
        results[name] = result
        if json_out:
            json_out.write_text(json.dumps(results, indent=2, default=str))
        return result

    if stream_json:
        stream = json.loads(Path(stream_json).read_text())
    else:
        stream = keep("stream", bench_stream(state_dir, rows=stream_rows, debezium=stream_runs, reference=False,
                                             native=True, rounds=rounds, debezium_defaults=debezium_defaults,
                                             heap=heap, console=console))
    oltp = None
    if oltp_json:
        oltp = json.loads(Path(oltp_json).read_text())
    elif oltp_rows > 0:
        oltp = keep("oltp", bench_stream(state_dir, rows=oltp_rows, debezium=stream_runs, reference=False, native=False,
                                         rounds=rounds, transactions=(False,), single_row=True, heap=heap,
                                         console=console))
    if snapshot_json:
        snapshot = json.loads(Path(snapshot_json).read_text())
    else:
        snapshot = keep("snapshot", bench_snapshot(state_dir, rows=snapshot_rows, writes_per_s=0,
                                                   debezium=snapshot_runs, debezium_chunk_sizes=chunk_sizes,
                                                   reference=False, rounds=rounds, debezium_defaults=debezium_defaults,
                                                   heap=heap, console=console))
    race = render_race(stream, snapshot, oltp=oltp)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(with_race_section(out.read_text() if out.exists() else "", race))
    console.print(f"written to {out}")
    return race


def bench_report(out: Path = Path("docs/benchmarks.md"), state_dir: Path = DEFAULT_STATE_DIR, *,
                 stream_rows: int = 500_000, snapshot_rows: int = 1_000_000, merge_events: int = 1_000_000,
                 console: Console | None = None) -> str:
    console = console or Console()
    stream = bench_stream(state_dir, rows=stream_rows, console=console)
    snapshot = bench_snapshot(state_dir, rows=snapshot_rows, console=console)
    merge = bench_merge(state_dir, events=merge_events, console=console)
    text = render(stream, snapshot, merge, stream_rows=stream_rows, snapshot_rows=snapshot_rows,
                  merge_events=merge_events)
    kept = out.read_text() if out.exists() else ""
    for heading in (RACE_HEADING, SOAK_HEADING, LAKE_SOAK_HEADING):  # by `cdc bench race` / `soak`: kept as they are
        section = section_of(kept, heading)
        if section:
            text = with_section(text, heading, section)
    for heading in (SINKS_HEADING, PEERS_HEADING):  # by `cdc bench sinks|peers` (make bench-race): kept, leading
        section = section_of(kept, heading)
        if section:
            text = with_leading_section(text, heading, section)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"written to {out}")
    return text
