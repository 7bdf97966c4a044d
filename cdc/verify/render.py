"""The verify report printed as rich tables: one row per table and target, why a table was
skipped or failed, then the notes and sample rows."""

from __future__ import annotations

from typing import Any

from rich import box
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


#: The widest report table's width: narrower consoles (a pipe, a log, CI: 80 columns) get the
#: compact table, which folds long names onto more lines instead of cutting them short.
WIDE = 130


def _result(tr: TableReport, r, reasons: list[str]) -> str:
    if r.error is not None:
        reasons.append(f"[bold]{escape(tr.table)}[/bold] vs {r.sink}: error: {escape(r.error)}")
        return "[red]error[/red]"
    return "[green]equal[/green]" if r.equal else "[red]DIFFERS[/red]"


def _wide_table(report: VerifyReport, reasons: list[str]) -> Table:
    """One row per table and target, a column per figure."""
    table = Table("table", "target", "rows source / sink", "checksum source / sink", "chunks differing / all",
                  "missing / extra / differing", "result", title="cdc verify")
    for column in table.columns[:2]:
        column.overflow = "fold"  # (names whole, on more lines, never cut short)
    for tr in report.tables:
        if _skipped_or_failed(tr, reasons):
            table.add_row(escape(_label(tr)), "", "", "", "", "", _status(tr))
            continue
        for r in tr.results:
            result = _result(tr, r, reasons)
            sums = f"{tr.checksum[:8]} / {r.checksum[:8]}" if tr.checksum and r.checksum else ""
            table.add_row(escape(_label(tr)), f"{r.sink} {escape(r.target)}", f"{r.source_rows:,} / {r.sink_rows:,}", sums,
                          f"{r.chunks_differing:,} / {r.chunks:,} ({tr.mode})",
                          f"{r.missing:,} / {r.extra:,} / {r.differing:,}", result)
    return table


def _compact_table(report: VerifyReport, reasons: list[str]) -> Table:
    """The same figures in three columns for 80: the table with its target under it; the
    result with the rows and the checksums under it; the chunks with the rows missing, extra
    and differing under them.  A name longer than its column folds onto the next line."""
    table = Table(title="cdc verify", box=box.HORIZONTALS, pad_edge=False, show_lines=True)
    table.add_column("table\n-> target", overflow="fold")
    table.add_column("result\nrows source / sink\nchecksums", no_wrap=True)
    table.add_column("chunks differing\nmissing/extra/diff", no_wrap=True)
    for tr in report.tables:
        if _skipped_or_failed(tr, reasons):
            table.add_row(escape(_label(tr)), _status(tr), "")
            continue
        for r in tr.results:
            result = _result(tr, r, reasons)
            sums = f"\n{tr.checksum[:8]} / {r.checksum[:8]}" if tr.checksum and r.checksum else ""
            table.add_row(f"{escape(_label(tr))}\n-> {r.sink} {escape(r.target)}",
                          f"{result}\n{r.source_rows:,} / {r.sink_rows:,}{sums}",
                          f"{r.chunks_differing:,} / {r.chunks:,} ({tr.mode})\n"
                          f"{r.missing:,} / {r.extra:,} / {r.differing:,}")
    return table


def _skipped_or_failed(tr: TableReport, reasons: list[str]) -> bool:
    """Whether the table was skipped or failed as a whole (its reason noted for under the table)."""
    if tr.skipped is None and tr.error is None:
        return False
    skipped = tr.skipped is not None
    reasons.append(f"[bold]{escape(_label(tr))}[/bold]: {'skipped' if skipped else 'error'}: "
                   f"{escape(tr.skipped if skipped else tr.error or '')}")
    return True


def _status(tr: TableReport) -> str:
    return "[yellow]skipped[/yellow]" if tr.skipped is not None else "[red]error[/red]"


def print_report(report: VerifyReport, console=None) -> None:
    """The report as rich tables: one row per table and target, then the sample rows; on a
    console narrower than :data:`WIDE` (output that is not a terminal: 80 columns) the
    compact table."""
    console = console or Console()
    reasons: list[str] = []  # why a table was skipped or failed: under the table, in full
    table = _wide_table(report, reasons) if console.width >= WIDE else _compact_table(report, reasons)
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
