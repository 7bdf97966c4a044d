"""The lake journal's pure planning (spark_jobs/sinks/lake_journal.py) and the rule a lake
commit of several staged batches relies on: per key the change with the highest position wins
across the batches, so committing the batches together equals committing them one by one,
deletes and re-inserts included."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.sinks.lake_journal import StagedBatch, commit_runs, covered, split_committed
from spark_jobs.sinks.lake_stage import reduce_changes
from spark_jobs.sinks.lake_types import OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN


def batch(app: str, n: int, rows: int = 1, key=("id",)) -> StagedBatch:
    return StagedBatch(app, n, "db", "t", ({"rows": rows, "key": list(key), "max_position": f"{n:030d}"},), float(n))


def test_committed_batches_and_copies_of_a_batch_are_told_apart():
    staged = [batch("a", 3), batch("a", 4), batch("b", 1), batch("a", 5)]
    replay = batch("a", 5)  # the same batch staged again (a replay): the last handed over is kept
    todo, done = split_committed([*staged, replay], {"a": 4})
    assert [(b.app, b.batch) for b in todo] == [("b", 1), ("a", 5)] and todo[1] is replay
    assert [(b.app, b.batch) for b in done] == [("a", 3), ("a", 4), ("a", 5)] and done[2] is staged[3]


def test_a_commit_covers_from_the_mark_on():
    assert covered({"a": 4}, [batch("a", 6), batch("b", 2), batch("a", 7)]) == {"a": (5, 7), "b": (2, 2)}


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 5)), max_size=30), st.integers(1, 3))
def test_runs_keep_the_order_and_cut_only_where_incompatible(items, width):
    batches = [batch(app, n, key=("id",) if n % width else ("id", "x")) for app, n in items]
    runs = commit_runs(batches, lambda run, b: run[0].parts[0]["key"] == b.parts[0]["key"])
    assert [b for run in runs for b in run] == batches
    assert all(len({tuple(b.parts[0]["key"]) for b in run}) == 1 for run in runs)
    assert all(r1[-1].parts[0]["key"] != r2[0].parts[0]["key"] for r1, r2 in zip(runs, runs[1:]))


def _changes(rows: list[tuple[int, str, int]]) -> pa.Table:
    return pa.table({"id": pa.array([k for k, _, _ in rows], pa.int64()),
                     "v": pa.array([f"v{p}" if op != "d" else None for _, op, p in rows], pa.string()),
                     POSITION_COLUMN: pa.array([f"{p:030d}" for _, _, p in rows], pa.string()),
                     OP_COLUMN: pa.array([op for _, op, _ in rows], pa.string())})


def _apply(table: dict[int, tuple[str, str]], changes: pa.Table) -> None:
    """A MERGE by position into ``table`` (key -> (value, position)): a row is replaced or
    deleted only by a change with a higher position; a delete of an absent key inserts nothing."""
    for r in changes.to_pylist():
        k, pos = r["id"], r[POSITION_COLUMN]
        held = table.get(k)
        if held is not None and pos <= held[1]:
            continue
        if r[OP_COLUMN] == "d":
            table.pop(k, None)
        else:
            table[k] = (r["v"], pos)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 6), st.sampled_from("cud")), max_size=8), min_size=1, max_size=6),
       st.integers(1, 6))
def test_committing_staged_batches_together_equals_committing_them_one_by_one(batches, group):
    """Batches in position order (a partition's records come in rising positions): each batch
    reduced as a part is, then merged one by one, against groups of ``group`` batches merged
    in one commit of their parts reduced together."""
    pos, parts = 0, []
    for b in batches:
        rows = []
        for key, op in b:
            pos += 1
            rows.append((key, op, pos))
        parts.append(reduce_changes(_changes(rows), ["id"]) if rows else None)
    one_by_one: dict = {}
    for p in parts:
        if p is not None:
            _apply(one_by_one, p)
    together: dict = {}
    for i in range(0, len(parts), group):
        chunk = [p for p in parts[i:i + group] if p is not None]
        if chunk:
            _apply(together, reduce_changes(pa.concat_tables(chunk), ["id"]))
    assert together == one_by_one


#: Part schemas a table's batches carry: the columns as staged, one added (unifies: the
#: column is null where a part lacks it), and ``v`` retyped to a number (does not unify).
_SCHEMAS = [pa.schema([("id", pa.int64()), ("v", pa.string())]),
            pa.schema([("id", pa.int64()), ("v", pa.string()), ("w", pa.int32())]),
            pa.schema([("id", pa.int64()), ("v", pa.int64())])]


def _encoded(schema: pa.Schema) -> str:
    import base64
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _unify_every_part(run, b) -> bool:
    """The rule as written before: every part of the run and the batch unified, each time."""
    from spark_jobs.sinks.lake_stage import part_schema
    if run[0].parts[0]["key"] != b.parts[0]["key"]:
        return False
    try:
        pa.unify_schemas([part_schema(p) for x in [*run, b] for p in x.parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=3), st.booleans()), max_size=25))
def test_same_shape_cuts_runs_as_unifying_every_part_would(items):
    """same_shape unifies only a schema its run does not hold yet: the runs are those of
    unifying every part's schema at each batch (the quadratic rule it replaces)."""
    from spark_jobs.sinks.lake_journal import same_shape
    batches = [StagedBatch("a", n, "db", "t", tuple({"key": ["id", "x"] if other_key else ["id"],
                                                     "schema": _encoded(_SCHEMAS[s]), "rows": 1} for s in schemas))
               for n, (schemas, other_key) in enumerate(items)]
    assert commit_runs(batches, same_shape) == commit_runs(batches, _unify_every_part)
