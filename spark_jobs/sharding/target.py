"""A routed target's sink layout, as the merge job ships it to the executors (pure, no I/O).

The sinks lay a table out from an Avro value schema (:mod:`spark_jobs.sinks.layout`).  A
route's target gets one of its own, :func:`target_schema`: a row record with the route's
origin columns (text) first, then the union of the shards' columns (optimistic sharding
DDL: a column any shard has is in the target; each column with the type the shards' types
join to; every non-key column nullable, since a shard without it writes NULL).  The shards'
shapes are checked first (:meth:`~spark_jobs.sharding.routes.Route.check`): tables that
cannot be merged are :class:`~spark_jobs.errors.IncompatibleShards`, naming both.

:func:`target_row` fills a shard's row into the target's columns (the origin and extracted
values, NULL for a column the shard does not have).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contract.logical_types import AVRO_PRIMITIVES
from spark_jobs.sharding.coordinator import ShardDDLCoordinator
from spark_jobs.sharding.routes import Route
from spark_jobs.sharding.shapes import ShardId, TableShape, shape_of_sink_columns
from spark_jobs.sinks.layout import record_namespace, row_columns, row_record

__all__ = ["target_schema", "target_row", "target_fields", "target_key_schema", "target_envelope_schema",
           "target_key", "check_history", "coordinate"]


def _inline(t: Any, s: Any, ns: str | None, defined: set[str]) -> Any:
    """Avro type ``t`` with every named type it references defined inline (once per name in
    the target schema: the shards' schemas define their named types in ``before`` only)."""
    if isinstance(t, list):
        return [_inline(x, s, ns, defined) for x in t]
    if isinstance(t, str):
        if t in AVRO_PRIMITIVES:
            return t
        resolved = s.resolve(t, ns)
        full = _full(resolved, ns)
        if full in defined:
            return full
        defined.add(full)
        return _named(resolved, full)
    if isinstance(t, dict) and t.get("type") in ("record", "enum", "fixed", "error") and "name" in t:
        full = _full(t, ns)
        if full in defined:
            return full
        defined.add(full)
        return _named(t, full)
    return copy.deepcopy(t)


def _named(t: dict, full: str) -> dict:
    """A named type's definition under its full name (the target record has another namespace)."""
    out = {k: copy.deepcopy(v) for k, v in t.items() if k != "namespace"}
    out["name"] = full
    return out


def _full(t: Any, ns: str | None) -> str:
    if not isinstance(t, dict) or "name" not in t:
        return str(t)
    name = t["name"]
    space = t.get("namespace", ns)
    return name if "." in name or not space else f"{space}.{name}"


def _nullable(t: Any) -> Any:
    if isinstance(t, list):
        return t if "null" in t else ["null", *t]
    return ["null", t]


def target_schema(route: Route, shards: Mapping[ShardId, tuple[Any, Sequence[str]]],
                  shape: TableShape | None = None) -> tuple[dict, list[str]]:
    """The target's Avro row record and key columns from each shard's (newest) value schema
    and key column names; :class:`~spark_jobs.errors.IncompatibleShards` when the shards
    cannot be merged.  Deterministic: shards in order, a column where it first appears."""
    shapes: dict[ShardId, TableShape] = {}
    fields: dict[ShardId, list[dict]] = {}
    for shard in sorted(shards):
        schema, key = shards[shard]
        record, s = row_record(schema)
        shapes[shard] = shape_of_sink_columns(row_columns(schema), key)
        fields[shard] = [(f, s, record_namespace(record)) for f in record.get("fields", [])]
    target = route.check(shapes)
    if shape is not None:  # pessimistic: the coordinator's target, not the union
        target = route.shape(shape)
    want = target.types()
    chosen: dict[str, tuple[dict, Any, str | None]] = {}
    for shard in sorted(fields):
        have = shapes[shard].types()
        for f, s, ns in fields[shard]:
            name = f.get("mysql.column") or f["name"]
            if name not in chosen or (have.get(name) == want.get(name) != chosen[name][3]):
                chosen[name] = (f, s, ns, have.get(name))
    defined: set[str] = set()
    out: list[dict] = [{"name": n, "type": "string"} for n in route.columns]
    for c in target.columns[len(route.columns):]:
        if c.name not in chosen:
            continue  # a column every shard dropped since: the sinks keep it
        f, s, ns, have = chosen[c.name]
        field = {k: v for k, v in f.items() if k not in ("type", "default")}
        t = _inline(f["type"], s, ns, defined) if have == c.type else _joined_type(c.type, f, s, ns, defined)
        field["type"] = t if c.name in target.key else _nullable(t)
        if c.name not in target.key:
            field["default"] = None
        out.append(field)
    space = "cdc.route." + re.sub(r"[^A-Za-z0-9_]", "_", f"{route.target[0]}.{route.target[1]}")
    return {"type": "record", "name": "Value", "namespace": space, "fields": out}, list(target.key)


def _joined_type(want: str, f: dict, s: Any, ns: str | None, defined: set[str]) -> Any:
    """The Avro type of a join no shard has (``decimal(p,s)`` joining two decimals, ``string``
    joining an enum and a set); other joins are one of the shards' types."""
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", want)
    if m:
        return {"type": "bytes", "logicalType": "decimal", "precision": int(m.group(1)), "scale": int(m.group(2))}
    if want == "string":
        return "string"
    return _inline(f["type"], s, ns, defined)


def target_fields(schema: Mapping[str, Any]) -> list[str]:
    """The row fields of a target schema (:func:`target_schema`), in order."""
    return [f["name"] for f in schema["fields"]]


def target_row(route: Route, shard: ShardId, row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """A shard's row as a target row: the origin and extracted values, the row's values, NULL
    for a target column the shard does not have (yet)."""
    full = route.row(shard, row)
    return {f: full.get(f) for f in fields}


def target_key_schema(schema: Mapping[str, Any], key: Sequence[str]) -> dict:
    """The Avro key record of the target's merged clean changelog: the key columns of the
    target row record ``schema`` (origin columns first), in key order."""
    by_name = {f.get("mysql.column") or f["name"]: f for f in schema["fields"]}
    fields = [{k: copy.deepcopy(v) for k, v in by_name[n].items() if k != "default"} for n in key]
    return {"type": "record", "name": "Key", "namespace": schema["namespace"], "fields": fields}


def target_envelope_schema(envelope: Mapping[str, Any], schema: Mapping[str, Any]) -> dict:
    """A shard's envelope schema with its rows (``before``, ``after``) being target rows:
    the value schema of the target's merged clean changelog."""
    full = f"{schema['namespace']}.{schema['name']}"
    fields = []
    for f in envelope["fields"]:
        if f["name"] == "before":
            f = {**f, "type": ["null", copy.deepcopy(dict(schema))], "default": None}
        elif f["name"] == "after":
            f = {**f, "type": ["null", full], "default": None}
        fields.append(copy.deepcopy(f))
    return {**{k: v for k, v in envelope.items() if k not in ("fields", "namespace", "name")},
            "type": "record", "name": "Envelope", "namespace": schema["namespace"], "fields": fields}


def target_key(row: Mapping[str, Any], key: Sequence[str]) -> dict[str, Any]:
    """The merged clean changelog's key record of a target row."""
    return {k: row[k] for k in key}


def check_history(route: Route, history: Mapping[ShardId, Sequence[tuple[str, Any]]],
                  keys: Mapping[ShardId, Sequence[str]]) -> None:
    """:func:`coordinate` in optimistic mode: raises on a conflict, nothing else."""
    coordinate(route, history, keys, "optimistic")


def coordinate(route: Route, history: Mapping[ShardId, Sequence[tuple[str, Any]]],
               keys: Mapping[ShardId, Sequence[str]], mode: str) -> ShardDDLCoordinator | None:
    """Every schema version of every shard (``(fingerprint, value schema)``, oldest first;
    each shard's key ``keys[shard]``) announced to an optimistic
    :class:`~spark_jobs.sharding.coordinator.ShardDDLCoordinator`: a column whose types over
    all those versions do not join is :class:`~spark_jobs.errors.ShardDDLConflict` naming
    two shards and their schema versions, even when the newest schemas merge (a column
    dropped on one shard, added with another type on another: the target keeps the first).
    A version that lacks a key column (written before the key changed) is left out."""
    start: dict[ShardId, tuple[str, str, TableShape]] = {}
    later: list[tuple[ShardId, str, str, TableShape]] = []
    for shard in sorted(history):
        for i, (fp, schema) in enumerate(history[shard]):
            columns = row_columns(schema)
            if not set(keys[shard]) <= {c.name for c in columns}:
                continue
            shape = shape_of_sink_columns(columns, keys[shard])
            if shard not in start:
                start[shard] = (fp, f"{i:09d}", shape)
            else:
                later.append((shard, fp, f"{i:09d}", shape))
    if not start:
        return None
    coordinator = ShardDDLCoordinator(route.name, mode)
    coordinator.start(start)
    for shard, fp, at, shape in later:
        coordinator.announce(shard, fp, at, shape)
    return coordinator
