"""The verify report printed as rich tables: one row per table and target, why a table was
skipped or failed, then the notes and sample rows."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cdc.verify.report import TableReport, VerifyReport


def _show(v: Any, limit: int = 60) -> str:
    if isinstance(v, (bytes, bytearray)):
        text = "0x" + bytes(v).hex()
    else:
        text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _key_text(key: dict) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in key.items())


def _label(tr: TableReport) -> str:
    """A table as the report shows it: ``db.table``, a shard ``east/shop_01.orders -> shop.orders``."""
    if tr.target is None or tr.table.startswith(tr.target + ":"):
        return tr.table
    return f"{tr.table} -> {tr.target}"


def print_report(report: VerifyReport, console=None) -> None:
    """The report as rich tables: one row per table and target, then the sample rows."""
    console = console or Console()
    table = Table("table", "target", "rows source / sink", "checksum source / sink", "chunks differing / all",
                  "missing / extra / differing", "result", title="cdc verify")
    reasons: list[str] = []  # why a table was skipped or failed: under the table, in full
    for tr in report.tables:
        if tr.skipped is not None or tr.error is not None:
            skipped = tr.skipped is not None
            table.add_row(escape(_label(tr)), "", "", "", "", "", "[yellow]skipped[/yellow]" if skipped else "[red]error[/red]")
            reasons.append(f"[bold]{escape(_label(tr))}[/bold]: {'skipped' if skipped else 'error'}: "
                           f"{escape(tr.skipped if skipped else tr.error or '')}")
            continue
        for r in tr.results:
            if r.error is not None:
                result = "[red]error[/red]"
                reasons.append(f"[bold]{escape(tr.table)}[/bold] vs {r.sink}: error: {escape(r.error)}")
            elif r.equal:
                result = "[green]equal[/green]"
            else:
                result = "[red]DIFFERS[/red]"
            sums = f"{tr.checksum[:8]} / {r.checksum[:8]}" if tr.checksum and r.checksum else ""
            table.add_row(escape(_label(tr)), f"{r.sink} {escape(r.target)}", f"{r.source_rows:,} / {r.sink_rows:,}", sums,
                          f"{r.chunks_differing:,} / {r.chunks:,} ({tr.mode})",
                          f"{r.missing:,} / {r.extra:,} / {r.differing:,}", result)
    console.print(table)
    for tr in report.tables:  # a shard's values in the columns its route's column mapping fills
        if tr.mapped and tr.skipped is None and tr.error is None:
            console.print(f"column mapping: {escape(_label(tr))}: "
                          f"{escape(', '.join(f'{c}={v!r}' for c, v in tr.mapped.items()))} "
                          f"(the shard's rows in the target are those with these values)", highlight=False)
    for line in reasons:
        console.print(line, highlight=False)
    for tr in report.tables:
        # A shard's keys are shown with their origin: "east/shop_01.orders id=7".
        origin = f"{tr.table} " if tr.target is not None and not tr.table.startswith(tr.target + ":") else ""
        for r in tr.results:
            lines = [f"  {escape(n)}" for n in r.notes]
            for s in r.samples:
                key = escape(origin + _key_text(s.key))
                if s.kind == "missing":
                    lines.append(f"  missing in sink: {key}")
                elif s.kind == "extra":
                    lines.append(f"  extra in sink:   {key}")
                else:
                    cols = "; ".join(f"{c}: source {_show((s.source or {}).get(c))} sink {_show((s.sink or {}).get(c))}"
                                     for c in s.columns)
                    lines.append(f"  values differ:   {key}: {escape(cols)}")
            if lines:
                console.print(f"[bold]{escape(_label(tr))}[/bold] vs {r.sink} {escape(r.target)}:")
                for line in lines:
                    console.print(line, highlight=False)
    n_bad = sum(1 for t in report.tables if not t.equal)
    console.print(("[green]equal[/green]: every table equals its sinks" if report.equal
                   else f"[red]{n_bad} table(s) differ[/red]") + f" ({len(report.tables)} table(s), "
                  f"{report.seconds:.1f}s)")
