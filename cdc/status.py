"""``cdc status``: the producer's stored position (Kafka, and the copy kept in the state
directory), its live figures, the merge job's last batch and totals, snapshot progress;
with ``sources``, each source's producer in a table of its own (``--source NAME``: one).
The command's arguments and handler: :func:`add_parser`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from cdc import cli_common
from cdc.progress import draw_status_bars
from common.config import CDCConfig
from producer.metrics import status_file
from producer.offset_store import LocalOffsetCopy, check_history


def show_status(cfg: CDCConfig, console: Console, source: str | None = None) -> None:
    """Every source's producer (or ``source``'s only), then the merge job.  With ``source``
    alone there is one producer, shown as before; with ``sources`` a table per source."""
    names = [source] if source is not None else [c.name for c in cfg.captured_sources()]
    views = [cfg.for_source(name) for name in names]
    snapshots = [(view, _producer(view, console)) for view in views]
    _merge_job(cfg, console, source)
    _lakes(cfg, console)
    for view, snap in snapshots:
        if snap and snap.get("snapshot_id"):
            if "tables" not in snap:  # the stored form
                snap = {"paused": snap.get("paused"), "tables": [
                    {"table": j["table"], "rows": j.get("rows", 0), "estimated": j.get("estimated", 0)}
                    for j in snap.get("jobs", [])]}
            of = f" of source {view.source_name}" if view.source_name else ""
            console.print(f"snapshot {snap.get('snapshot_id', '')}{of}" + (" (paused)" if snap.get("paused") else ""))
            draw_status_bars(console, snap)


def _producer(cfg: CDCConfig, console: Console) -> dict | None:
    """One producer's table (``cfg``: a single source's configuration); its snapshot, if any."""
    title = (f"producer '{cfg.producer.name}' of source {cfg.source_name} ({cfg.source.host}:{cfg.source.port}, "
             f"topics {cfg.kafka.topic_prefix}.*)" if cfg.source_name else None)
    table = Table("what", "value", title=title)
    stored, kept, lost = check_history(cfg.kafka, cfg.producer.name, cfg.state_dir)
    if stored:
        r = stored["resume"]
        age = time.time() - stored.get("ts_ms", 0) / 1000
        table.add_row("stored position", f"{r['file']}:{r['pos']} (last change {r.get('last')})")
        table.add_row("last commit", f"{age:.1f}s ago")
    else:
        table.add_row("stored position", "none (the producer has not committed yet)")
    if lost is not None:
        local = LocalOffsetCopy(cfg.state_dir, cfg.producer.name)
        table.add_row("[red]Kafka history[/red]", f"[red]lost[/red]: {lost}; the position kept in {local.path} is "
                      f"{kept['resume']['file']}:{kept['resume']['pos']} (cdc produce says how to recover)")
    path = status_file(cfg)
    if path.exists():
        st = json.loads(path.read_text())
        fresh = time.time() - st.get("updated_at", 0) < 30
        table.add_row("producer", f"pid {st['pid']}, " + ("running" if fresh else "no update for 30s+"))
        table.add_row("events", f"{st['events_total']:,} ({st['events_per_second']:.0f}/s)")
        table.add_row("seconds behind source", f"{st['seconds_behind_source']:.1f}")
    else:
        st = {}
        table.add_row("producer", f"no status file {path.name} in {cfg.state_dir} (not running here)")
    console.print(table)
    return st.get("snapshot") or (stored or {}).get("snapshot")


def _merge_job(cfg: CDCConfig, console: Console, source: str | None = None) -> None:
    """The merge job's table; with ``sources``, one per source's query (its own status file)."""
    names = [c.name for c in cfg.captured_sources() if source in (None, c.name)] if cfg.sources else [None]
    for name in names:
        merge_file = Path(cfg.state_dir) / (f"merge-status-{name}.json" if name else "merge-status.json")
        if merge_file.exists():
            _merge_table(json.loads(merge_file.read_text()), console, name)


def _lakes(cfg: CDCConfig, console: Console) -> None:
    """The lake tables' commits (``lake-status.json`` of the merge job's lake committers):
    per table the last commit, the source position it holds, what waits staged and its age."""
    path = Path(cfg.state_dir) / "lake-status.json"
    if not path.exists():
        return
    st = json.loads(path.read_text())
    fresh = time.time() - st.get("updated_at", 0) < 30
    lt = Table("lake table", "commits", "holds position", "last commit", "staged", "freshness")
    for name, sink in (st.get("sinks") or {}).items():
        head = (f"{name} (every {sink.get('interval_s', 0):g}s; " + ("running" if fresh else "not running") + ")")
        if sink.get("holding_stream_since"):
            head += " [yellow]holds the stream back[/yellow]"
        if sink.get("last_error"):
            head += f" [red]last error: {rich_escape(sink['last_error'])}[/red]"
        lt.add_row(head, "", "", "", "", "")
        for table, t in (sink.get("tables") or {}).items():
            at = t.get("last_commit_at")
            lt.add_row(f"  {table}", f"{t.get('commits', 0):,}", str(t.get("position") or "-"),
                       f"{time.time() - at:,.0f}s ago" if at else "-",
                       f"{t.get('staged_batches', 0)} batches, {t.get('staged_rows', 0):,} rows",
                       f"{t.get('freshness_s', 0):,.1f}s")
    console.print(lt)


def _merge_table(ms: dict, console: Console, source: str | None) -> None:
    lb = ms.get("last_batch", {})
    fresh = time.time() - ms.get("updated_at", 0) < 60
    mt = Table("merge job" + (f" of source {source}" if source else ""), "value")
    mt.add_row("job", f"pid {ms['pid']}, " + ("running" if fresh else "no batch for 60s+"))
    mt.add_row("last batch", f"#{ms['batch_id']}: {lb.get('input', 0):,} records, {lb.get('rows_per_second', 0):,.0f}/s, "
                             f"{lb.get('dropped', 0)} chunk rows dropped, {lb.get('dead', 0)} dead letters")
    if lb.get("held"):
        mt.add_row("held", f"{lb['held']:,} record(s) of pessimistic routes wait until every shard ran the same DDL "
                           "(the job's log names the shards)")
    latency = {k: lb.get(f"latency_{k}_ms") for k in ("p50", "p99")}
    mt.add_row("latency", ", ".join(f"{k} {v:,.0f} ms" if v is not None else f"{k} -" for k, v in latency.items()))
    t = ms.get("totals", {})
    mt.add_row("totals", ", ".join(f"{k} {v:,}" for k, v in t.items()))
    for w in ms.get("warnings") or []:
        mt.add_row("[yellow]WARNING[/yellow]", rich_escape(w.get("message", "")))
    console.print(mt)


def _cmd_status(args: argparse.Namespace) -> int:
    """Producer position, lag and rate, lost history, the merge job's figures, snapshot bars."""
    show_status(cli_common.load(args), cli_common.console, source=args.source)
    return 0


def add_parser(sub) -> None:
    """``cdc status``: its arguments and handler, under the ``cdc`` command's ``sub``."""
    status_p = sub.add_parser("status", help="producer position, lag and rate")
    cli_common.source_option(status_p, "only the producer of this source (default: every source's)")
    status_p.set_defaults(func=_cmd_status)
