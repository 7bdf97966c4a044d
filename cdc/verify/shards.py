"""Merged targets (``routes``, docs/sharding.md): the shards of a route compared with the
one table they land in.

Each shard is compared as a table of its own (:mod:`cdc.verify.run`): read from its source
server in key chunks, against the target's rows that carry its values in the route's
columns (the origin columns ``__source``, ``__db``, ``__table`` and the columns the column
mapping extracts from its names, ``extract_*``), with its own key inside them, so every
shard gets its own row counts, chunk checksums and differing keys (reported as
``east/shop_01.orders id=7``), and a row whose extracted value is wrong is a row the shard
misses.  What no shard accounts for, the target's rows whose values name no shard
verified, is counted apart (:func:`stray_rows`).

A route whose columns cannot tell its shards' rows apart in the target (origin columns off,
and no column mapping, or one that gives two shards the same values) is reported as
skipped (:func:`indistinct`).  With ``--changelog`` each shard is also compared with the
route's merged clean changelog (:class:`cdc.verify.changelog.MergedChangelogTarget`: the
records whose ``cdc.shard`` header names the shard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from cdc.verify.spec import TableSpec
from spark_jobs.sharding.routes import Route
from spark_jobs.sharding.shapes import ShardId


def shard_spec(spec: TableSpec, route: Route, source: str) -> TableSpec:
    """``spec`` (a source table of ``source``) as a shard of ``route``: its sink table is the
    route's target, its rows there those with its values in the route's columns, its name
    ``source/db.table``."""
    shard = ShardId(source, spec.db, spec.table)
    return replace(spec, source=source, target=route.target, origin=route.values(shard))


def mapped(route: Route, shard: ShardId) -> dict[str, str]:
    """The column mapping's values of ``shard`` (shown with the shard in the report)."""
    return route.extracted_values(shard) if route.extract else {}


def indistinct(route: Route, shards: Iterable[ShardId]) -> str | None:
    """Why the target cannot tell the rows of ``shards`` apart (no origin columns, and no
    column mapping or one giving two shards the same values), or None when it can."""
    if not route.columns:
        return (f"the route's origin columns are off (routes[{route.index}].origin.enabled) and it has no column "
                f"mapping (extract_*)")
    if route.origin:
        return None
    seen: dict[tuple, ShardId] = {}
    for shard in sorted(shards):
        values = tuple(route.values(shard).values())
        if values in seen:
            shown = ", ".join(f"{c}={v!r}" for c, v in route.values(shard).items())
            return (f"the route's origin columns are off (routes[{route.index}].origin.enabled) and its column "
                    f"mapping gives {seen[values]} and {shard} the same values ({shown})")
        seen[values] = shard
    return None


def stray_rows(counts: Mapping[tuple, int], route: Route, shards: Iterable[ShardId]) -> dict[str, int]:
    """Rows of the target (``counts``: rows per values of the route's columns, as the target
    holds them) that belong to none of ``shards``: ``{"west/shop_09.orders": 3}``, in name
    order; a row with a shard's origin but other extracted values is named with them
    (``east/shop_01.orders (region='x')``)."""
    known = {tuple(route.values(s).values()) for s in shards}
    n_origin = len(route.origin)
    out: dict[str, int] = {}
    for values, n in counts.items():
        if tuple(values) in known or not n:
            continue
        shown = tuple("NULL" if v is None else str(v) for v in values)
        rest = [f"{c}={v!r}" for c, v in zip(route.columns[n_origin:], shown[n_origin:])]
        if n_origin:
            name = str(ShardId(*shown[:3])) + (f" ({', '.join(rest)})" if rest else "")
        else:
            name = ", ".join(rest)
        out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))
