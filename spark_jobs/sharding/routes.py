"""Table routing (``routes``, docs/sharding.md): which target table a source table's rows
land in, the target's key and rows with the shard-origin columns, and the check that no two
sources of rows meet in one sink table unplanned (pure, no I/O).

The merge job applies the DBLog rule per source table first (windows belong to their
source), then routes what it kept: a routed table's rows go to the route's target with
the origin columns (``__source``, ``__db``, ``__table`` unless renamed or off) and the
columns its column mapping extracts from the shard's names (``extract_*``) in front of its
columns and of its key; an unrouted table keeps today's sink table of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from common.config import CDCConfig
from spark_jobs.errors import ColumnMappingMismatch, IncompatibleShards, RouteCollision, RouteError
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.shapes import ColumnSpec, ShardId, TableShape, check_compatible

__all__ = ["Route", "Router", "ORIGIN_TYPE"]

#: The type of the origin columns (text, part of the key).
ORIGIN_TYPE = "string"


@dataclass(frozen=True)
class Route:
    """One route as the merge job applies it: ``index`` in ``routes``, the target, the
    origin column names (empty: off), the DDL mode and the column mapping (``extract``:
    ``(what, regexp, column)`` with ``what`` one of ``source``, ``schema``, ``table``)."""

    index: int
    target: tuple[str, str]
    origin: tuple[str, ...]
    ddl: str
    extract: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def of(cls, index: int, rule: RouteConfig) -> "Route":
        return cls(index, (rule.target_db, rule.target_table), rule.origin.names, rule.ddl,
                   tuple((what, r.regexp, r.column) for what, r in rule.extracts.items()))

    @property
    def name(self) -> str:
        """``db.table`` of the target: the route's identity (state files, messages)."""
        return f"{self.target[0]}.{self.target[1]}"

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the route adds to its target, leading its key: the origin columns,
        then the extracted ones (column mapping)."""
        return (*self.origin, *(column for _, _, column in self.extract))

    def origin_values(self, shard: ShardId) -> dict[str, str]:
        return dict(zip(self.origin, shard))

    def extracted_values(self, shard: ShardId) -> dict[str, str]:
        """The column mapping's values for ``shard``: each rule's regular expression matched
        in full against the shard's source name, database or table, the text its groups
        captured joined (as TiDB DM does); :class:`ColumnMappingMismatch` when one does not
        match."""
        out = {}
        for what, regexp, column in self.extract:
            name = {"source": shard.source, "schema": shard.db, "table": shard.table}[what]
            m = _compiled(regexp).fullmatch(name)
            if m is None:
                raise ColumnMappingMismatch(
                    f"route to {self.name}: routes[{self.index}].extract_{what} regexp {regexp!r} does not match "
                    f"the {'source name' if what == 'source' else what} {name!r} of {shard}, so its column "
                    f"{column!r} has no value: widen the regexp, or narrow the route's patterns so that "
                    f"{shard} is not routed")
            out[column] = "".join(g or "" for g in m.groups())
        return out

    def values(self, shard: ShardId) -> dict[str, str]:
        """The values of :attr:`columns` for ``shard``: what tells its rows in the target
        (origin values, then the extracted ones; worked out once per route and shard)."""
        return dict(_values_of(self, shard))

    def key(self, source_key: Sequence[str]) -> list[str]:
        """The target's key columns: the route's columns, then the source table's key."""
        return [*self.columns, *source_key]

    def row(self, shard: ShardId, row: Mapping[str, Any]) -> dict[str, Any]:
        """The target row of a source row of ``shard``: the route's values, then the row's."""
        clash = [n for n in self.columns if n in row]
        if clash:
            raise IncompatibleShards(f"route to {self.name}: {shard} has a column {clash[0]!r}, which "
                                     f"{self._named_by(clash[0])}")
        return {**dict(_values_of(self, shard)), **row}

    def _named_by(self, column: str) -> str:
        """Which setting of the route names ``column`` (one of :attr:`columns`, any case)."""
        what = next((w for w, _, c in self.extract if c.lower() == column.lower()), None)
        if what is not None:
            return f"the route's column mapping fills (rename it: routes[{self.index}].extract_{what}.column)"
        return f"the route's origin columns use (rename them: routes[{self.index}].origin)"

    def shape(self, merged: TableShape) -> TableShape:
        """The target table's shape from the shards' merged shape: the route's columns
        first, leading the key."""
        added = {n.lower() for n in self.columns}
        clash = [c.name for c in merged.columns if c.name.lower() in added]
        if clash:
            raise IncompatibleShards(f"route to {self.name}: the merged tables have a column {clash[0]!r}, which "
                                     f"{self._named_by(clash[0])}")
        lead = tuple(ColumnSpec(n, ORIGIN_TYPE, False) for n in self.columns)
        return TableShape(lead + merged.columns, tuple(self.key(merged.key)))

    def check(self, shards: Mapping[ShardId, TableShape]) -> TableShape:
        """The target's shape for the shards' current shapes, or :class:`IncompatibleShards`
        naming two tables that cannot be merged, or :class:`ColumnMappingMismatch` naming a
        shard whose name the column mapping does not match (the route is refused at start)."""
        for shard in sorted(shards):
            self.extracted_values(shard)
        return self.shape(check_compatible(self.name, shards))


@lru_cache(maxsize=256)
def _compiled(regexp: str) -> re.Pattern:
    return re.compile(regexp)


@lru_cache(maxsize=4096)
def _values_of(route: Route, shard: ShardId) -> tuple[tuple[str, str], ...]:
    return (*route.origin_values(shard).items(), *route.extracted_values(shard).items())


class Router:
    """The routes of a configuration, in order: the first that matches a table applies."""

    def __init__(self, rules: Sequence[RouteConfig]) -> None:
        self.rules = list(rules)
        self.routes = [Route.of(i, r) for i, r in enumerate(self.rules)]
        self._memo: dict[ShardId, Route | None] = {}

    @classmethod
    def from_config(cls, cfg: CDCConfig) -> "Router":
        return cls(cfg.routes)

    def route_of(self, source: str, db: str, table: str) -> Route | None:
        """The route of a source table (true names), or None: the table is not routed."""
        shard = ShardId(source, db, table)
        if shard not in self._memo:
            self._memo[shard] = next((route for route, rule in zip(self.routes, self.rules)
                                      if rule.matches(source, db, table)), None)
        return self._memo[shard]

    def target_of(self, shard: ShardId) -> tuple[str, str]:
        """The ``(db, table)`` a shard's rows land in: its route's target, or its own name."""
        route = self.route_of(*shard)
        return route.target if route is not None else (shard.db, shard.table)

    def plan(self, shards: Iterable[ShardId]) -> dict[tuple[str, str], list[ShardId]]:
        """The tables grouped by the sink table their rows land in (shards sorted), or
        :class:`RouteCollision` when one sink table would take rows it was not meant to: a
        route's target that an unrouted table of that name lands in too, or same-named
        unrouted tables of two sources."""
        groups: dict[tuple[str, str], list[ShardId]] = {}
        for shard in sorted(set(shards)):
            groups.setdefault(self.target_of(shard), []).append(shard)
        for target, members in groups.items():
            routed = [s for s in members if self.route_of(*s) is not None]
            unrouted = [s for s in members if self.route_of(*s) is None]
            if routed and unrouted:
                raise RouteCollision(f"{unrouted[0]} is not routed, so it lands in {target[0]}.{target[1]}, the "
                                     f"target of the route that merges {routed[0]}: route it, or exclude it")
            if len(unrouted) > 1:
                raise RouteCollision(f"{unrouted[0]} and {unrouted[1]} are not routed and both land in "
                                     f"{target[0]}.{target[1]}: route them into one table, or exclude one")
        return groups

    def route_named(self, name: str) -> Route:
        """The first route to ``db.table`` ``name``."""
        for route in self.routes:
            if route.name == name:
                return route
        raise RouteError(f"no route leads to {name}")
