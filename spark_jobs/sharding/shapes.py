"""Table shapes of shards and of their merged target: columns with their types and the key,
how two column types join, whether a row of one shape fits a table of another, and the
checks a route's shards must pass (pure, no I/O).

A :class:`TableShape` is what the merge job knows of a table from its Avro value schema
(:func:`shape_of_sink_columns` builds one from :func:`spark_jobs.sinks.layout.row_columns`):
per column a name and a *type*, the sink column kind spelled as text (``int``, ``string``,
``decimal(10,2)``, ``bits(3)``, the kinds of :mod:`spark_jobs.sinks.types`), and the key
column names.  Nullability is not part of a type: a merged target's non-key columns are
always nullable (a shard that lacks a column writes NULL into it).

Types join (:func:`join_types`) along the widenings the sinks can follow without changing a
value: ``smallint < int < long``, ``float < double``, ``time_ms < time``, ``timestamp_ms <
timestamp_us``, ``string``/``enum``/``set`` (all text) to ``string``, ``bits(n)`` to the
longest, ``decimal(p,s)`` to the decimal that holds both (at most 65 digits, MySQL's
limit).  Any other pair of different types does not join: that is a conflict.  The join is
associative, commutative and idempotent, so a union of shapes does not depend on the order
it is taken in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from spark_jobs.errors import IncompatibleShards
from spark_jobs.sinks.layout import SinkColumn

__all__ = ["ShardId", "ColumnSpec", "TableShape", "join_types", "fits", "projects", "union_of", "type_conflict",
           "check_compatible", "shape_of_sink_columns", "column_type"]

#: MySQL's largest DECIMAL precision (a join past it is a conflict).
MAX_DECIMAL_DIGITS = 65


class ShardId(NamedTuple):
    """One shard table: the source server's name, the database and the table (true names)."""

    source: str
    db: str
    table: str

    def __str__(self) -> str:
        return f"{self.source}/{self.db}.{self.table}"


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class TableShape:
    """A table's columns (in order) and its key column names (in key order)."""

    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"a column is named twice in {names}")
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ValueError(f"key column(s) {missing} are not columns of the table ({', '.join(names)})")

    @classmethod
    def of(cls, columns: Mapping[str, str] | Iterable[tuple[str, str]], key: Sequence[str]) -> "TableShape":
        """A shape from ``{name: type}`` (or pairs), key columns not nullable."""
        items = columns.items() if isinstance(columns, Mapping) else columns
        return cls(tuple(ColumnSpec(n, t, n not in key) for n, t in items), tuple(key))

    def types(self) -> dict[str, str]:
        return {c.name: c.type for c in self.columns}

    def signature(self) -> tuple:
        """What two shards must share to be at the same schema: types by name and the key
        (column order and nullability aside)."""
        return (tuple(sorted(self.types().items())), self.key)

    def to_json(self) -> dict[str, Any]:
        return {"columns": [[c.name, c.type, c.nullable] for c in self.columns], "key": list(self.key)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TableShape":
        return cls(tuple(ColumnSpec(str(n), str(t), bool(nl)) for n, t, nl in d["columns"]),
                   tuple(str(k) for k in d["key"]))


# ================================================================================ types
_RANKED = [("smallint", "int", "long"), ("float", "double"), ("time_ms", "time"), ("timestamp_ms", "timestamp_us")]
_RANK = {t: (family, i) for family, ranks in enumerate(_RANKED) for i, t in enumerate(ranks)}
_TEXT = {"string", "enum", "set"}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_BITS = re.compile(r"bits\((\d+)\)")


def join_types(a: str, b: str) -> str | None:
    """The narrowest type both ``a`` and ``b`` fit in without changing a value, or None
    (a conflict)."""
    if a == b:
        return a
    ra, rb = _RANK.get(a), _RANK.get(b)
    if ra is not None and rb is not None:
        return (a if ra[1] >= rb[1] else b) if ra[0] == rb[0] else None
    if a in _TEXT and b in _TEXT:
        return "string"
    da, db = _DECIMAL.fullmatch(a), _DECIMAL.fullmatch(b)
    if da and db:
        (pa, sa), (pb, sb) = (int(x) for x in da.groups()), (int(x) for x in db.groups())
        scale = max(sa, sb)
        digits = max(pa - sa, pb - sb) + scale
        return f"decimal({digits},{scale})" if digits <= MAX_DECIMAL_DIGITS else None
    ba, bb = _BITS.fullmatch(a), _BITS.fullmatch(b)
    if ba and bb:
        return f"bits({max(int(ba.group(1)), int(bb.group(1)))})"
    return None


def column_type(col: SinkColumn) -> str:
    """A sink column's type as this module spells it."""
    if col.kind == "decimal":
        return f"decimal({col.precision},{col.scale})"
    if col.kind == "bits":
        return f"bits({col.length})"
    return col.kind


def shape_of_sink_columns(columns: Sequence[SinkColumn], key: Sequence[str]) -> TableShape:
    """The shape of a table whose Avro value schema has ``columns``
    (:func:`spark_jobs.sinks.layout.row_columns`) and whose key is ``key``."""
    return TableShape(tuple(ColumnSpec(c.name, column_type(c), c.nullable and c.name not in key) for c in columns),
                      tuple(key))


def fits(row: TableShape, table: TableShape) -> bool:
    """Whether a row of shape ``row`` can be written into a table of shape ``table`` and read
    back unchanged: the same key, every column of the row in the table with a type the row's
    type widens to (columns the row lacks are written NULL)."""
    if row.key != table.key:
        return False
    have = table.types()
    for c in row.columns:
        t = have.get(c.name)
        if t is None or join_types(c.type, t) != t:
            return False
    return True


def projects(row: TableShape, table: TableShape) -> bool:
    """Whether a row of shape ``row`` can be written into ``table`` without the columns the
    table lacks (a skipped DDL's): the same key, and every column both have of a type the
    row's widens to."""
    if row.key != table.key:
        return False
    have = table.types()
    return all(join_types(c.type, have[c.name]) == have[c.name] for c in row.columns if c.name in have)


# ================================================================================ unions
def type_conflict(shapes: Sequence[tuple[str, TableShape]]) -> str | None:
    """The first column whose types over the labelled ``shapes`` do not join, described
    with the two tables and their types; None when every column joins."""
    seen: dict[str, list[tuple[str, str]]] = {}
    joined: dict[str, str] = {}
    for label, shape in shapes:
        for c in shape.columns:
            before = seen.setdefault(c.name, [])
            acc = joined.get(c.name, c.type)
            j = join_types(acc, c.type)
            if j is None:
                # (the joins are such that some earlier type alone does not join either)
                other = next(((lb, t) for lb, t in before if join_types(t, c.type) is None), ("the others", acc))
                return f"column {c.name!r} is {other[1]} in {other[0]} but {c.type} in {label}"
            joined[c.name] = j
            before.append((label, c.type))
    return None


def union_of(shapes: Iterable[TableShape], key: Sequence[str], base: TableShape | None = None) -> TableShape:
    """Every column of ``base`` and ``shapes``, each with the join of its types, in order of
    first appearance (``base`` first); ``key`` columns not nullable, the others nullable.
    Raises ValueError when a column's types do not join (check :func:`type_conflict` first
    for a message naming the tables)."""
    order: list[str] = []
    types: dict[str, str] = {}
    for shape in ([base] if base is not None else []) + list(shapes):
        for c in shape.columns:
            if c.name not in types:
                order.append(c.name)
                types[c.name] = c.type
            else:
                j = join_types(types[c.name], c.type)
                if j is None:
                    raise ValueError(f"column {c.name!r}: {types[c.name]} and {c.type} do not join")
                types[c.name] = j
    return TableShape(tuple(ColumnSpec(n, types[n], n not in key) for n in order), tuple(key))


def check_compatible(target: str, shards: Mapping[ShardId, TableShape]) -> TableShape:
    """The merged shape of the tables a route (to ``target``) merges, or
    :class:`IncompatibleShards` naming both tables when they cannot be merged: a table
    without a key, keys of other columns, a column (key or not) whose types do not join."""
    if not shards:
        raise IncompatibleShards(f"route to {target}: no table to merge")
    ordered = sorted(shards.items())
    first, first_shape = ordered[0]
    for shard, shape in ordered:
        if not shape.key:
            raise IncompatibleShards(f"route to {target}: {shard} has no primary key (give it one, or "
                                     f"source.key_columns)")
        if shape.key != first_shape.key:
            raise IncompatibleShards(f"route to {target}: {first} is keyed by ({', '.join(first_shape.key)}) but "
                                     f"{shard} by ({', '.join(shape.key)}): merged tables need the same key")
    conflict = type_conflict([(str(s), shape) for s, shape in ordered])
    if conflict:
        raise IncompatibleShards(f"route to {target}: {conflict}: the tables cannot be merged")
    return union_of([shape for _, shape in ordered], first_shape.key)
