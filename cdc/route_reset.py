"""``cdc route``: the held state of pessimistic routes, and the operator's way out of a DDL
that some shard will never run (TiDB DM's ``shard-ddl-lock`` / ``shard-ddl-lock unlock``).

``cdc route status [TARGET]`` shows each route as the merge job sees it now (every source's
table topics and ``_schemas`` topics, the decisions taken so far): its mode, the target's
columns, the shard schema versions whose rows wait, what each has that the target lacks,
the shards they wait for, the records each source's query holds (its last stored merge
state), and why a stopped route stopped.

``cdc route force TARGET`` / ``cdc route skip TARGET`` decide for the waiting versions (all of
the route's, or those of ``--shard source/db.table`` and ``--version``): ``force`` makes the
target take their columns and types now (the shards without them write NULL there), ``skip``
applies their rows without what the target lacks.  The decision goes to the topic
``<kafka.topic_prefix>._routes`` (:mod:`spark_jobs.planning.route_decisions`), which wakes the merge
queries: the records held so far are applied by the next batch, once (they leave the
partition's state in the batch that applies them; a replay decides from the same topic).
A decision that cannot apply is refused here with the reason, before anything is written.
The command's arguments and handler: :func:`add_parser`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cdc import cli_common
from cdc.errors import CommandError
from common.config import CDCConfig
from contract.schema_store import SchemaStore
from spark_jobs.input.driver_kafka import DriverKafka
from spark_jobs.errors import RouteError
from spark_jobs.planning.route_targets import RouteTargets
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId


@dataclass
class Waiting:
    """A shard schema version whose rows wait."""

    shard: ShardId
    version: str
    at: str
    missing: list[str]
    held: int = 0


@dataclass
class RouteState:
    """A route as ``cdc route status`` shows it."""

    name: str
    mode: str
    shards: list[ShardId]
    target: list[str] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    awaited: list[ShardId] = field(default_factory=list)
    decisions: list[tuple[ShardId, str, str]] = field(default_factory=list)
    stopped: str | None = None

    def to_dict(self) -> dict:
        return {"route": self.name, "ddl": self.mode, "shards": [str(s) for s in self.shards], "target": self.target,
                "waiting": [{"shard": str(w.shard), "version": w.version, "at": w.at, "missing": w.missing,
                             "held": w.held} for w in self.waiting],
                "awaited": [str(s) for s in self.awaited],
                "decisions": [{"shard": str(s), "version": v, "action": a} for s, v, a in self.decisions],
                "stopped": self.stopped}


def _targets(cfg: CDCConfig) -> RouteTargets:
    k = cfg.kafka
    client = k.client_settings()
    sources = cfg.captured_sources()
    stores = {c.topic_prefix: (c.name, SchemaStore(k.bootstrap_servers, c.topic_prefix, client or None))
              for c in sources}
    return RouteTargets(cfg, DriverKafka(k, client), sources[0].topic_prefix, Router.from_config(cfg), stores,
                        None, None, False)


def held_records(cfg: CDCConfig) -> dict[ShardId, int]:
    """The records each source's merge query holds per shard, from its last stored state
    (``<checkpoint>/merge-state``); none for a query that has not run."""
    out: dict[ShardId, int] = {}
    for c in cfg.captured_sources():
        directory = Path(cfg.spark.checkpoint_dir) / (c.name if cfg.sources else "") / "merge-state"
        ids = sorted((int(p.stem) for p in directory.glob("*.json") if p.stem.isdigit()), reverse=True)
        for i in ids[:1]:
            try:
                state = json.loads((directory / f"{i}.json").read_text())
            except (OSError, ValueError):
                continue
            for st in (state.get("partitions") or {}).values():
                for h in (st or {}).get("held") or []:
                    shard = ShardId(c.name, *h["table"])
                    out[shard] = out.get(shard, 0) + 1
    return out


def route_states(cfg: CDCConfig, target: str | None = None) -> list[RouteState]:
    """Every route (or the one to ``target``) as the merge job sees it now."""
    if target is not None and target not in {r.target for r in cfg.routes}:
        raise CommandError(f"no route leads to {target} (routes: {', '.join(sorted({r.target for r in cfg.routes}))})")
    held = held_records(cfg)
    states = []
    for route, (members, _, coordinator) in _targets(cfg).view().items():
        if target is not None and route.name != target:
            continue
        st = RouteState(route.name, route.ddl, sorted(members))
        if coordinator is not None:
            st.stopped = coordinator.stopped
            st.target = [f"{c.name} {c.type}" for c in coordinator.target.columns] if coordinator.target else []
            for shard, version in coordinator.waiting():
                st.waiting.append(Waiting(shard, version, coordinator.version_at(shard, version),
                                          coordinator.missing(shard, version)))
            # (a shard's held records wait behind its first waiting version)
            for shard in {w.shard for w in st.waiting}:
                next(w for w in st.waiting if w.shard == shard).held = held.get(shard, 0)
            st.awaited = coordinator.awaited()
            st.decisions = [(s, v, a) for (s, v), a in sorted(coordinator.decisions.items())]
        states.append(st)
    return states


def decide(cfg: CDCConfig, target: str, action: str, shard: str | None = None,
           version: str | None = None) -> list[tuple[ShardId, str]]:
    """Force or skip (``action``) the waiting versions of the route to ``target`` (those of
    ``shard``, ``source/db.table``, and ``version`` when given): each is tried on the route's
    coordinator as the merge job sees it first (:class:`CommandError` with the reason when one
    cannot apply, nothing written), then recorded.  The versions decided."""
    if action not in ("force", "skip"):
        raise CommandError(f"unknown route action {action!r}")
    view = _targets(cfg)
    routes = {r.name: (r, entry) for r, entry in view.view().items()}
    if target not in routes:
        raise CommandError(f"no route leads to {target}, or none of its shards has a schema yet")
    route, (_, _, coordinator) = routes[target]
    if coordinator is None:
        raise CommandError(f"the route to {target} is optimistic: its rows never wait")
    chosen = [(s, v) for s, v in coordinator.waiting()
              if (shard is None or str(s) == shard) and (version is None or v == version)]
    if not chosen:
        raise CommandError(f"route to {target}: no waiting schema version" + (f" of {shard}" if shard else "") +
                       (f" {version}" if version else "") + (f"; {coordinator.stopped}" if coordinator.stopped else ""))
    for s, v in chosen:
        try:
            getattr(coordinator, action)(s, v)
        except RouteError as exc:
            raise CommandError(str(exc)) from None
    for s, v in chosen:
        view.decisions.record(route.name, s, v, action)
    return chosen


def print_states(states: list[RouteState], console) -> None:
    """``cdc route status`` as text: per route its target, what waits and for whom."""
    from rich.markup import escape

    if not states:
        console.print("no route has shards with a schema yet")
    for st in states:
        console.print(f"[bold]route to {escape(st.name)}[/bold] (ddl: {st.mode}): "
                      f"{len(st.shards)} shard(s): {escape(', '.join(map(str, st.shards)))}")
        if st.mode != "pessimistic":
            console.print("  optimistic: the target takes every shard's columns at once; nothing waits")
            continue
        if st.stopped:
            console.print(f"  [red]stopped[/red]: {escape(st.stopped)}")
        console.print(f"  target: {escape(', '.join(st.target))}", highlight=False)
        for w in st.waiting:
            console.print(f"  [yellow]waiting[/yellow]: {escape(str(w.shard))} schema {w.version} (first at "
                          f"{w.at}) has {escape('; '.join(w.missing))}: {w.held:,} record(s) held", highlight=False)
        if st.waiting:
            console.print(f"  waiting for: {escape(', '.join(map(str, st.awaited)))} to run the same DDL; or "
                          f"cdc route force|skip {escape(st.name)} [--shard SOURCE/DB.TABLE] [--version V]",
                          highlight=False)
        elif not st.stopped:
            console.print("  nothing waits", highlight=False)
        for shard, version, action in st.decisions:
            console.print(f"  decided: {action} {escape(str(shard))} schema {version}", highlight=False)


def _cmd_route(args: argparse.Namespace) -> int:
    """``cdc route status|force|skip``: pessimistic routes' held DDL."""
    cfg = cli_common.load(args)
    if args.route_command == "status":
        states = route_states(cfg, args.target)
        if args.json:
            sys.stdout.write(json.dumps([s.to_dict() for s in states], indent=2) + "\n")
        else:
            print_states(states, cli_common.console)
        return 0
    for shard, version in decide(cfg, args.target, args.route_command, args.shard, args.version):
        cli_common.console.print(f"{args.route_command}: {shard} schema {version} (route to {args.target}); the merge job "
                      "applies it with its next batch", highlight=False)
    return 0


def add_parser(sub) -> None:
    """``cdc route``: its arguments and handler, under the ``cdc`` command's ``sub``."""
    route_p = sub.add_parser("route", help="pessimistic routes' held DDL: status, force or skip (docs/sharding.md)")
    route_sub = route_p.add_subparsers(dest="route_command", required=True, metavar="ACTION")
    rs = route_sub.add_parser("status", help="each route's target, waiting schema versions, held records")
    rs.add_argument("target", nargs="?", default=None, metavar="DB.TABLE", help="one route's target")
    rs.add_argument("--json", action="store_true", help="print as JSON")
    rs.set_defaults(func=_cmd_route)
    for action, help_ in (("force", "the target takes the waiting versions' columns now; held rows apply"),
                          ("skip", "the waiting versions' rows apply without the columns the target lacks")):
        rp = route_sub.add_parser(action, help=help_)
        rp.add_argument("target", metavar="DB.TABLE", help="the route's target")
        rp.add_argument("--shard", default=None, metavar="SOURCE/DB.TABLE", help="only this shard's versions")
        rp.add_argument("--version", default=None, help="only this schema version (as cdc route status shows it)")
        rp.set_defaults(func=_cmd_route)
