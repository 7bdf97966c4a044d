"""The routes' settings (``routes``, docs/sharding.md), declared beside the routes
(:mod:`spark_jobs.sharding.routes`) and registered: each entry of ``routes`` is a
:class:`RouteConfig`, and the checks that need the whole configuration (a route's source
among the configured ones, one set of settings per target) run as it loads.  Light:
pydantic and common only."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from common.config import CDCConfig, Section, full_regex, qualified_name
from common.config_sections import register_config_check, register_route_settings


class OriginColumns(Section):
    """The shard-origin columns of a route's target table: the source's name, the database
    and the table a row comes from.  They lead the target's key, so shards whose primary
    keys overlap stay apart."""

    enabled: bool = True
    source: str = "__source"
    db: str = "__db"
    table: str = "__table"

    @model_validator(mode="after")
    def _distinct(self) -> "OriginColumns":
        names = [self.source, self.db, self.table]
        for n in names:
            if not n or n.lower().startswith("__cdc_"):
                raise ValueError(f"origin column name {n!r}: empty, or in the sinks' own '__cdc_' names")
        lowered = [n.lower() for n in names]
        if len(set(lowered)) != len(lowered):
            raise ValueError(f"origin column names must differ (case-insensitively): {', '.join(names)}")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """``(source, db, table)`` column names; empty when the columns are off."""
        return (self.source, self.db, self.table) if self.enabled else ()


class ExtractRule(Section):
    """A target column filled from a shard's name (TiDB DM's ``extract-source`` /
    ``extract-schema`` / ``extract-table``): ``regexp`` is matched in full against the
    source name, database or table, and the text its groups capture, joined, is the value."""

    regexp: str
    column: str

    @field_validator("regexp")
    @classmethod
    def _groups(cls, v: str) -> str:
        if re.compile(full_regex(v)).groups < 1:
            raise ValueError(f"regexp {v!r} captures nothing: put the part that is the value in a group, "
                             "e.g. 'app_(.*)'")
        return v

    @field_validator("column")
    @classmethod
    def _column(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) or v.lower().startswith("__cdc_"):
            raise ValueError(f"column {v!r}: a name of letters, digits and '_' (not starting with a digit), "
                             "outside the sinks' own '__cdc_' names")
        return v


@register_route_settings
class RouteConfig(Section):
    """Routes the tables of several shards into one target table (TiDB DM's table routing):
    every table whose source name, database and table name match ``source``, ``schema``
    and ``table`` (regular expressions, matched in full against the true names) lands in
    ``target`` (``db.table``).  The first route that matches a table applies; a table no
    route matches keeps a sink table of its own."""

    source: str = ".*"
    schema_: str = Field(alias="schema")
    table: str
    target: str
    origin: OriginColumns = Field(default_factory=OriginColumns)
    # Sharding DDL: pessimistic (the target changes once every shard ran the DDL; a shard's
    # rows under the new schema wait until then) or optimistic (the target takes the union
    # of the shards' columns at once).
    ddl: Literal["pessimistic", "optimistic"] = "pessimistic"
    # Column mapping: target columns filled from the shard's source name, database, table.
    extract_source: ExtractRule | None = None
    extract_schema: ExtractRule | None = None
    extract_table: ExtractRule | None = None

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True,
                              serialize_by_alias=True)

    @model_validator(mode="after")
    def _extracted_names(self) -> "RouteConfig":
        names = [*self.origin.names, *(r.column for r in self.extracts.values())]
        lowered = [n.lower() for n in names]
        if len(set(lowered)) != len(lowered):
            raise ValueError(f"the origin and extracted column names must differ (case-insensitively): "
                             f"{', '.join(names)}")
        return self

    @property
    def extracts(self) -> dict[str, ExtractRule]:
        """The column mapping rules by what they read (``source``, ``schema``, ``table``)."""
        return {what: rule for what, rule in (("source", self.extract_source), ("schema", self.extract_schema),
                                              ("table", self.extract_table)) if rule is not None}

    @field_validator("source", "schema_", "table")
    @classmethod
    def _regex(cls, v: str) -> str:
        return full_regex(v)

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        return qualified_name(v)

    @property
    def target_db(self) -> str:
        return self.target.split(".")[0]

    @property
    def target_table(self) -> str:
        return self.target.split(".")[1]

    def matches(self, source: str, db: str, table: str) -> bool:
        return (re.fullmatch(self.source, source) is not None and re.fullmatch(self.schema_, db) is not None
                and re.fullmatch(self.table, table) is not None)


@register_config_check
def check_routes(cfg: CDCConfig) -> None:
    """Every route reads a configured source, and the routes leading to one target agree on
    its origin columns, DDL mode and column mapping."""
    known = [c.name for c in cfg.captured_sources()]
    for i, route in enumerate(cfg.routes):
        if not any(re.fullmatch(route.source, n) for n in known):
            raise ValueError(f"routes[{i}] (to {route.target}): source {route.source!r} names no configured "
                             f"source (sources: {', '.join(known)})")
        for j, other in enumerate(cfg.routes[:i]):
            if other.target == route.target and (other.origin != route.origin or other.ddl != route.ddl
                                                 or other.extracts != route.extracts):
                raise ValueError(f"routes[{j}] and routes[{i}] both lead to {route.target} with different "
                                 f"'origin', 'ddl' or 'extract_*' settings: a target has one of each")
