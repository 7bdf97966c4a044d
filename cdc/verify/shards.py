"""Merged targets (``routes``, docs/sharding.md): the shards of a route compared with the
one table they land in.

Each shard is compared as a table of its own (:mod:`cdc.verify.run`): read from its source
server in key chunks, against the target's rows that carry its origin values
(``__source``, ``__db``, ``__table``), with its own key inside them, so every shard gets
its own row counts, chunk checksums and differing keys (reported as
``east/shop_01.orders id=7``).  What no shard accounts for, the target's rows whose origin
values name no shard verified, is counted apart (:func:`stray_rows`).

A route whose origin columns are off cannot tell its shards' rows apart in the target: it is
reported as skipped.  With ``--changelog`` each shard is also compared with the route's
merged clean changelog (:class:`cdc.verify.changelog.MergedChangelogTarget`: the records
whose ``cdc.shard`` header names the shard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from cdc.verify.spec import TableSpec
from spark_jobs.sharding.routes import Route
from spark_jobs.sharding.shapes import ShardId


def shard_spec(spec: TableSpec, route: Route, source: str) -> TableSpec:
    """``spec`` (a source table of ``source``) as a shard of ``route``: its sink table is the
    route's target, its rows there those with its origin values, its name
    ``source/db.table``."""
    shard = ShardId(source, spec.db, spec.table)
    return replace(spec, source=source, target=route.target, origin=route.origin_values(shard))


def stray_rows(counts: Mapping[tuple, int], shards: Iterable[ShardId]) -> dict[str, int]:
    """Rows of the target (``counts``: rows per origin values, as the target holds them)
    that belong to none of ``shards``: ``{"west/shop_09.orders": 3}``, in name order."""
    known = {tuple(s) for s in shards}
    out: dict[str, int] = {}
    for origin, n in counts.items():
        values = tuple("NULL" if v is None else str(v) for v in origin)
        if tuple(origin) in known or not n:
            continue
        name = str(ShardId(*values)) if len(values) == 3 else "/".join(values)
        out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))
