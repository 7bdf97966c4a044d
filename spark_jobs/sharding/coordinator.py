"""Sharding DDL coordination of one route: when the merged target's schema changes, and
whether a shard's row may be applied to it now (pure, no I/O; the state is JSON).

Events, as the merge job sees them:

* :meth:`ShardDDLCoordinator.start` -- the shards' shapes when the route starts (checked:
  a route that cannot merge them is refused with :class:`IncompatibleShards`);
* :meth:`ShardDDLCoordinator.announce` -- shard S has schema version V (its writer schema's
  id) with shape X, first seen at position ``at`` (a DDL ran, or a shard appeared);
  announcing a known version again does nothing (replays);
* :meth:`ShardDDLCoordinator.decide` -- may a row of shard S written under version V be
  applied to the target now (:attr:`Decision.APPLY`), must it wait (:attr:`Decision.WAIT`,
  pessimistic mode), or is the route stopped (:attr:`Decision.STOPPED`)?

The target's shape only grows: columns are never dropped from it (the sinks keep the
columns a source drops), and a column's type only widens (:func:`~spark_jobs.sharding.shapes.join_types`).
A row is applied only when it *fits* the target (:func:`~spark_jobs.sharding.shapes.fits`):
every column it has is in the target with a type its own widens to, and the key is the
target's.  So no mode ever writes a row into a target that would misread it.

Pessimistic mode (TiDB DM's default): the target takes a column only once every shard has
had it in some schema version (every shard ran the DDL that added it, whether or not a
later one dropped it again), and widens a column's type only to a type every shard has had
for it.  Until then a shard that ran the DDL has its rows under the new schema wait; the
others go on.  When every shard runs the same DDL, in time every version of every shard
fits the target and every waiting row is released.

Optimistic mode: the target is at once the union of every version any shard announced.

The operator (``cdc route``, docs/sharding.md "Route reset") can end a wait a shard that will
never run the DDL would make endless: :meth:`force` a waiting version (the target takes its
columns and types now) or :meth:`skip` it (its rows apply without what the target lacks).

Both modes: a column whose types on two shards do not join (a different type for the same
column) stops the route, with a message naming the shards and both types
(:class:`ShardDDLConflict`; :attr:`stopped` keeps it, so a restarted job stops again). In
optimistic mode so does a shard whose key is not the other shards' (the union has one
key); in pessimistic mode the target takes a new key once every shard has it, and rows
under the old key are not applied (the snapshot after a key change brings them).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.errors import RouteError, ShardDDLConflict
from spark_jobs.sharding.shapes import (
    ShardId,
    TableShape,
    check_compatible,
    fits,
    join_types,
    projects,
    type_conflict,
    union_of,
)

__all__ = ["Decision", "Outcome", "ShardDDLCoordinator", "STATE_VERSION"]

STATE_VERSION = 1
MODES = ("pessimistic", "optimistic")


class Decision(str, enum.Enum):
    APPLY = "apply"
    WAIT = "wait"
    STOPPED = "stopped"


@dataclass
class Outcome:
    """What an event changed: the target's new shape (None: unchanged) and the shard
    versions whose rows waited and may be applied now (after the target's change)."""

    target: TableShape | None = None
    released: list[tuple[ShardId, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Version:
    id: str
    at: str
    shape: TableShape


class ShardDDLCoordinator:
    """The DDL coordination of the route to ``route`` (``db.table``) in ``mode``."""

    def __init__(self, route: str, mode: str) -> None:
        if mode not in MODES:
            raise RouteError(f"route to {route}: ddl mode {mode!r} is not one of {', '.join(MODES)}")
        self.route = route
        self.mode = mode
        self._versions: dict[ShardId, dict[str, _Version]] = {}
        self.target: TableShape | None = None
        #: How many times the target's shape changed (0: the shape it started with).
        self.target_version = 0
        #: Why the route stopped (a conflicting DDL), or None.
        self.stopped: str | None = None
        #: The operator's decisions (``cdc route force|skip``): shard versions whose columns
        #: and types the target takes now, and those whose rows apply without what it lacks.
        self._forced: set[tuple[ShardId, str]] = set()
        self._skipped: set[tuple[ShardId, str]] = set()

    # ------------------------------------------------------------------ queries
    @property
    def shards(self) -> list[ShardId]:
        return sorted(self._versions)

    def version_at(self, shard: ShardId, version: str) -> str:
        """The position at which ``shard`` first showed its schema ``version`` ("" if unknown)."""
        seen = self._versions.get(shard, {}).get(version)
        return seen.at if seen is not None else ""

    def latest(self, shard: ShardId) -> TableShape:
        """The newest shape of ``shard`` (by position)."""
        return self._latest(shard).shape

    def _latest(self, shard: ShardId) -> _Version:
        return max(self._versions[shard].values(), key=lambda v: (v.at, v.id))

    def _all(self) -> list[tuple[str, TableShape]]:
        """Every version of every shard, labelled, in a fixed order (shard, position, id)."""
        return [(f"{shard} (schema {v.id})", v.shape) for shard in self.shards
                for v in sorted(self._versions[shard].values(), key=lambda v: (v.at, v.id))]

    def decide(self, shard: ShardId, version: str) -> Decision:
        """Whether a row of ``shard`` written under ``version`` may be applied now."""
        if self.stopped is not None:
            return Decision.STOPPED
        shape = self._shape(shard, version)
        if self.target is not None and (fits(shape, self.target) or
                                        ((shard, version) in self._skipped and projects(shape, self.target))):
            return Decision.APPLY
        return Decision.WAIT

    def _shape(self, shard: ShardId, version: str) -> TableShape:
        try:
            return self._versions[shard][version].shape
        except KeyError:
            raise RouteError(f"route to {self.route}: schema {version!r} of {shard} was never announced") from None

    @property
    def decisions(self) -> dict[tuple[ShardId, str], str]:
        """The operator's decisions taken: ``{(shard, version): "force" | "skip"}``."""
        return {**{sv: "skip" for sv in self._skipped}, **{sv: "force" for sv in self._forced}}

    def missing(self, shard: ShardId, version: str) -> list[str]:
        """What a shard version has that the target lacks: ``coupon string`` (a column),
        ``qty long (target: int)`` (a wider type), ``key (a, b)`` (another key)."""
        shape, have = self._shape(shard, version), self.target.types() if self.target is not None else {}
        out = [f"key ({', '.join(shape.key)})"] if self.target is not None and shape.key != self.target.key else []
        for c in shape.columns:
            if c.name not in have:
                out.append(f"{c.name} {c.type}")
            elif join_types(c.type, have[c.name]) != have[c.name]:
                out.append(f"{c.name} {c.type} (target: {have[c.name]})")
        return out

    def waiting(self) -> list[tuple[ShardId, str]]:
        """The shard versions whose rows wait (pessimistic mode; empty when stopped)."""
        if self.stopped is not None:
            return []
        return [(s, v) for s in self.shards for v in sorted(self._versions[s]) if self.decide(s, v) is Decision.WAIT]

    def awaited(self) -> list[ShardId]:
        """The shards the waiting rows wait for: those that never had a column (with its
        type) that a waiting version has and the target lacks, or whose newest key is not
        the waiting version's."""
        out: set[ShardId] = set()
        target = self.target.types() if self.target is not None else {}
        for shard, version in self.waiting():
            need = self._versions[shard][version].shape
            missing = [(c.name, c.type) for c in need.columns
                       if c.name not in target or join_types(c.type, target[c.name]) != target[c.name]]
            for other in self.shards:
                had = {(c.name, c.type) for v in self._versions[other].values() for c in v.shape.columns}
                if self.latest(other).key != need.key or any(m not in had for m in missing):
                    out.add(other)
        return sorted(out)

    # ------------------------------------------------------------------ events
    def start(self, shards: Mapping[ShardId, tuple[str, str, TableShape]]) -> Outcome:
        """The route's shards when it starts: ``{shard: (version, at, shape)}``.  Their
        shapes must merge (:func:`~spark_jobs.sharding.shapes.check_compatible`, else
        :class:`IncompatibleShards` naming both tables); the target is their union.  For a
        route without state only: a restarted job reads its state (:meth:`from_state`)."""
        check_compatible(self.route, {s: shape for s, (_, _, shape) in shards.items()})
        fresh = set()
        for shard, (version, at, shape) in shards.items():
            if version not in self._versions.setdefault(shard, {}):
                self._versions[shard][version] = _Version(version, at, shape)
                fresh.add((shard, version))
        return self._update(start=True, fresh=fresh)

    def announce(self, shard: ShardId, version: str, at: str, shape: TableShape) -> Outcome:
        """Shard ``shard`` has schema ``version`` (``shape``), first at position ``at``.
        Raises :class:`ShardDDLConflict` (and stays stopped) when the target cannot follow."""
        if self.stopped is not None:
            raise ShardDDLConflict(self.stopped)
        known = self._versions.setdefault(shard, {})
        if version in known:
            return Outcome()
        known[version] = _Version(version, at, shape)
        return self._update(start=self.target is None, fresh={(shard, version)})

    def force(self, shard: ShardId, version: str) -> Outcome:
        """The operator's ``force`` (DM's ``shard-ddl-lock unlock``): the target takes the
        columns and types of a waiting version now, as if every shard had run its DDL (the
        other shards write NULL there); its rows, and the records held behind them, apply.
        :class:`RouteError` when the version does not wait, or waits for a key change (a
        key is not forced: every shard's key changes, or the shard is routed apart)."""
        self._decidable(shard, version, "force")
        self._forced.add((shard, version))
        return self._update(start=False, fresh=set())

    def skip(self, shard: ShardId, version: str) -> Outcome:
        """The operator's ``skip``: the target does not take what a waiting version adds; its
        rows apply without the columns the target lacks.  :class:`RouteError` when the version
        does not wait, waits for a key change, or has a column of a wider type than the
        target's (skipping would not fit its values: force it)."""
        self._decidable(shard, version, "skip")
        if not projects(self._shape(shard, version), self.target):
            wider = [m for m in self.missing(shard, version) if "(target:" in m]
            raise RouteError(f"route to {self.route}: {shard} (schema {version}) cannot be skipped: its "
                             f"{', '.join(wider)} would not fit the target's column: force it instead")
        self._skipped.add((shard, version))
        return Outcome(released=[(shard, version)])

    def _decidable(self, shard: ShardId, version: str, what: str) -> None:
        if self.stopped is not None:
            raise RouteError(f"{self.stopped} (a stopped route is not reopened by {what})")
        if self.decide(shard, version) is not Decision.WAIT:
            raise RouteError(f"route to {self.route}: the rows of {shard} under schema {version} do not wait: "
                             f"nothing to {what}")
        if self._shape(shard, version).key != self.target.key:
            raise RouteError(f"route to {self.route}: {shard} (schema {version}) waits for its key "
                             f"({', '.join(self._shape(shard, version).key)}) to be every shard's: a key change is "
                             f"not {what}d (run it on every shard, or route {shard} to a target of its own)")

    def _stop(self, why: str) -> None:
        self.stopped = (f"route to {self.route} stopped: {why}. Both schemas stay in the shards' schema history, so "
                        "the route stays stopped after a restart: route one of the two shards to another target "
                        "(routes), or give the column another name on one of them and route that shard apart "
                        "(docs/sharding.md, Conflicts)")
        raise ShardDDLConflict(self.stopped)

    def _update(self, start: bool, fresh: set[tuple[ShardId, str]]) -> Outcome:
        """The target after new versions (``fresh``: no row of theirs was decided yet)."""
        every = self._all()
        # (the shards first: the message names two of them rather than the target)
        conflict = type_conflict(every + ([("the target", self.target)] if self.target is not None else []))
        if conflict:
            self._stop(conflict)
        latest = {s: self.latest(s) for s in self.shards}
        keys = {shape.key for shape in latest.values()}
        agreed_key = next(iter(keys)) if len(keys) == 1 else None
        if self.mode == "optimistic" and agreed_key is None:
            a, b = (next(s for s in self.shards if latest[s].key == k) for k in sorted(keys)[:2])
            self._stop(f"{a} is keyed by ({', '.join(latest[a].key)}) but {b} by ({', '.join(latest[b].key)}): "
                       f"optimistic mode merges one key (pessimistic mode waits for every shard's key change)")
        before = self.target
        fitting = {(s, v) for s, v in self._each() if before is not None and fits(self._versions[s][v].shape, before)}
        if before is not None and agreed_key is None:
            agreed_key = before.key  # pessimistic: the key stays until every shard has the new one
        if agreed_key is None:
            raise RouteError(f"route to {self.route}: its shards have different keys at start")
        if before is None or start or self.mode == "optimistic":
            new = union_of([shape for _, shape in every], agreed_key, before)
        else:
            new = self._every_shard_ran(before, agreed_key)
        if self._forced:  # (a forced version's columns and types, as if every shard had them)
            new = union_of([self._versions[s][v].shape for s, v in sorted(self._forced)], agreed_key, new)
        if new == before:
            return Outcome()
        self.target = new
        if before is not None:
            self.target_version += 1
        released = [(s, v) for s, v in self._each()
                    if (s, v) not in fitting and (s, v) not in fresh and fits(self._versions[s][v].shape, new)]
        return Outcome(new, released)

    def _every_shard_ran(self, target: TableShape, key: tuple[str, ...]) -> TableShape:
        """Pessimistic mode: the target plus each column every shard has had in some version
        (it ran the DDL that added it), with the types every shard has had it with; a column
        every shard had but never with one same type comes with the join of its types. The
        key: every shard's newest, once they agree."""
        history: dict[ShardId, dict[str, set[str]]] = {}
        for shard in self.shards:
            had = history[shard] = {}
            for v in self._versions[shard].values():
                for c in v.shape.columns:
                    had.setdefault(c.name, set()).add(c.type)
        have = target.types()
        extra: list[tuple[str, str]] = []
        for name in dict.fromkeys(c.name for _, shape in self._all() for c in shape.columns):
            if not all(name in had for had in history.values()):
                continue
            common = set.intersection(*(had[name] for had in history.values()))
            if common:
                extra += [(name, t) for t in sorted(common)]
            elif name not in have:
                extra += [(name, t) for had in history.values() for t in sorted(had[name])]
        return union_of([TableShape.of([(n, t)], ()) for n, t in extra], key, target)

    def _each(self):
        for s in self.shards:
            for v in self._versions[s]:
                yield s, v

    # ------------------------------------------------------------------ state
    def to_state(self) -> dict[str, Any]:
        """The coordinator as JSON-ready data (:meth:`from_state` reads it back)."""
        return {
            "version": STATE_VERSION, "route": self.route, "mode": self.mode,
            "target": self.target.to_json() if self.target is not None else None,
            "target_version": self.target_version, "stopped": self.stopped,
            "decisions": [[list(sv[0]), sv[1], what] for sv, what in sorted(self.decisions.items())],
            "shards": [{"shard": list(s), "versions": [{"id": v.id, "at": v.at, "shape": v.shape.to_json()}
                                                      for v in sorted(self._versions[s].values(),
                                                                      key=lambda v: (v.at, v.id))]}
                       for s in self.shards],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "ShardDDLCoordinator":
        if state.get("version") != STATE_VERSION:
            raise RouteError(f"route state of version {state.get('version')!r}, this job reads {STATE_VERSION}")
        c = cls(str(state["route"]), str(state["mode"]))
        c.target = TableShape.from_json(state["target"]) if state.get("target") is not None else None
        c.target_version = int(state["target_version"])
        c.stopped = state.get("stopped")
        for entry in state["shards"]:
            shard = ShardId(*entry["shard"])
            c._versions[shard] = {v["id"]: _Version(str(v["id"]), str(v["at"]), TableShape.from_json(v["shape"]))
                                  for v in entry["versions"]}
        for shard, version, what in state.get("decisions") or []:
            (c._forced if what == "force" else c._skipped).add((ShardId(*shard), str(version)))
        return c
