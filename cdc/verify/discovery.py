"""Which source tables verify compares: every captured table (the capture filter, minus the
MySQL sink's database when the sink shares the source's server, and minus the outbox table of
``producer.outbox``, whose rows are routed events, not a table the sinks hold), or the tables
named (exact ``db.table`` names or regular expressions matched against the whole name)."""

from __future__ import annotations

import re
from typing import Sequence

from producer.capture_filter import CaptureFilter
from producer.snapshot.table_reader import list_tables


def source_tables(conn, cfg, tables: Sequence[str] | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The tables to verify (captured ones, or those named) and names that matched nothing."""
    every = list_tables(conn)
    if not tables:
        flt = CaptureFilter(cfg.source)  # (the sinks' databases on this server excluded: CDCConfig.for_source)
        outbox = cfg.producer.outbox.table if cfg.producer.outbox is not None else None
        return [(d, t) for d, t in every if flt.captures(d, t) and f"{d}.{t}" != outbox], []
    out: list[tuple[str, str]] = []
    unknown: list[str] = []
    names = {f"{d}.{t}": (d, t) for d, t in every}
    for name in tables:
        if name in names:
            hits = [names[name]]
        else:
            try:
                pat = re.compile(name)
            except re.error:
                pat = None
            hits = [dt for n, dt in names.items() if pat is not None and pat.fullmatch(n)]
        if not hits:
            unknown.append(name)
        for h in hits:
            if h not in out:
                out.append(h)
    return out, unknown
