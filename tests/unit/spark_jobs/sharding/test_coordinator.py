"""The sharding DDL coordinator: decisions per shard row, when the target changes, conflicts,
and its JSON state; with property tests over every interleaving of shards' DDL and rows."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.errors import IncompatibleShards, RouteError, ShardDDLConflict
from spark_jobs.sharding.coordinator import Decision, ShardDDLCoordinator
from spark_jobs.sharding.shapes import ShardId, TableShape

SHARDS = [ShardId("east", "shop_01", "orders"), ShardId("east", "shop_02", "orders"),
          ShardId("west", "shop_03", "orders"), ShardId("west", "shop_04", "orders")]
BASE = TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "string"}, ["id"])
PLUS = TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "string", "coupon": "string"}, ["id"])


def started(mode: str, shards=SHARDS, shape=BASE) -> ShardDDLCoordinator:
    c = ShardDDLCoordinator("shop.orders", mode)
    out = c.start({s: ("v0", "0", shape) for s in shards})
    assert out.target == shape and out.released == [] and c.target_version == 0
    return c


def round_trip(c: ShardDDLCoordinator) -> ShardDDLCoordinator:
    again = ShardDDLCoordinator.from_state(json.loads(json.dumps(c.to_state())))
    assert again.to_state() == c.to_state()
    return again


# ---------------------------------------------------------------------------- examples
def test_pessimistic_add_column_shard_by_shard():
    c = started("pessimistic")
    for i, shard in enumerate(SHARDS[:-1]):
        out = c.announce(shard, "v1", "1", PLUS)
        assert out.target is None and c.target == BASE  # the target waits for every shard
        assert c.decide(shard, "v1") is Decision.WAIT  # that shard's new rows wait ...
        assert c.decide(shard, "v0") is Decision.APPLY  # (its rows written before still go)
        assert all(c.decide(s, "v0") is Decision.APPLY for s in SHARDS[i + 1:])  # ... the others go on
        assert c.awaited() == SHARDS[i + 1:]
        c = round_trip(c)
    out = c.announce(SHARDS[-1], "v1", "1", PLUS)
    assert out.target == PLUS and c.target == PLUS and c.target_version == 1
    assert out.released == [(s, "v1") for s in SHARDS[:-1]]  # not the last: none of its rows waited
    assert all(c.decide(s, v) is Decision.APPLY for s in SHARDS for v in ("v0", "v1"))
    assert c.waiting() == [] and c.awaited() == []


def test_optimistic_takes_the_union_at_once():
    c = started("optimistic")
    out = c.announce(SHARDS[1], "v1", "1", PLUS)
    assert out.target == PLUS and out.released == [] and c.target_version == 1
    other = TableShape.of({"id": "int", "total": "decimal(12,2)", "note": "string", "region": "smallint"}, ["id"])
    out = c.announce(SHARDS[2], "w1", "7", other)
    assert out.target.types() == {"id": "int", "total": "decimal(12,2)", "note": "string", "coupon": "string",
                                  "region": "smallint"}
    assert [col.name for col in out.target.columns] == ["id", "total", "note", "coupon", "region"]
    assert all(col.nullable == (col.name != "id") for col in out.target.columns)
    assert all(c.decide(s, "v0") is Decision.APPLY for s in SHARDS)
    assert c.decide(SHARDS[1], "v1") is Decision.APPLY and c.decide(SHARDS[2], "w1") is Decision.APPLY


@pytest.mark.parametrize("mode", ["pessimistic", "optimistic"])
def test_a_conflicting_type_stops_the_route_with_both_shards_and_types(mode):
    c = started(mode)
    c.announce(SHARDS[0], "v1", "1", PLUS)
    clash = TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "string", "coupon": "long"}, ["id"])
    with pytest.raises(ShardDDLConflict) as err:
        c.announce(SHARDS[2], "x1", "1", clash)
    msg = str(err.value)
    assert "route to shop.orders stopped" in msg and "'coupon'" in msg
    assert "east/shop_01.orders" in msg and "west/shop_03.orders" in msg and "string" in msg and "long" in msg
    assert c.stopped == msg
    assert c.decide(SHARDS[1], "v0") is Decision.STOPPED and c.waiting() == []
    again = round_trip(c)
    assert again.decide(SHARDS[0], "v0") is Decision.STOPPED
    with pytest.raises(ShardDDLConflict, match="stopped"):
        again.announce(SHARDS[3], "v1", "1", PLUS)


def test_a_retype_that_is_no_widening_conflicts_with_the_target():
    c = started("pessimistic", SHARDS[:1])
    with pytest.raises(ShardDDLConflict, match=r"'note' is string in east/shop_01.orders \(schema v0\) but int in "
                                               r"east/shop_01.orders \(schema v1\)"):
        c.announce(SHARDS[0], "v1", "1", TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "int"},
                                                       ["id"]))


def test_pessimistic_widening_waits_for_every_shard_then_applies_to_everyone():
    c = started("pessimistic", SHARDS[:2])
    wide = TableShape.of({"id": "int", "total": "decimal(14,2)", "note": "string"}, ["id"])
    c.announce(SHARDS[0], "v1", "1", wide)
    assert c.decide(SHARDS[0], "v1") is Decision.WAIT and c.target == BASE
    out = c.announce(SHARDS[1], "v1", "1", wide)
    assert out.target.types()["total"] == "decimal(14,2)" and out.released == [(SHARDS[0], "v1")]
    assert c.decide(SHARDS[0], "v0") is Decision.APPLY  # old rows fit the wider column


def test_pessimistic_drop_column_keeps_the_target_and_applies_at_once():
    c = started("pessimistic", SHARDS[:2])
    out = c.announce(SHARDS[0], "v1", "1", TableShape.of({"id": "int", "total": "decimal(10,2)"}, ["id"]))
    assert out.target is None and c.decide(SHARDS[0], "v1") is Decision.APPLY  # the column stays, NULL


def test_pessimistic_a_column_dropped_again_still_reaches_the_target_once_every_shard_ran_its_add():
    c = started("pessimistic", SHARDS[:2])
    with_x = TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "string", "x": "int"}, ["id"])
    c.announce(SHARDS[0], "v1", "1", PLUS)  # ADD coupon
    c.announce(SHARDS[0], "v2", "2", with_x)  # DROP coupon, ADD x
    assert c.decide(SHARDS[0], "v1") is Decision.WAIT and c.decide(SHARDS[0], "v2") is Decision.WAIT
    out = c.announce(SHARDS[1], "v1", "1", PLUS)  # shard 2 runs ADD coupon: it reaches the target
    assert set(out.target.types()) == set(PLUS.types()) and out.released == [(SHARDS[0], "v1")]
    out = c.announce(SHARDS[1], "v2", "2", with_x)
    assert set(out.target.types()) == {"id", "total", "note", "coupon", "x"}
    assert out.released == [(SHARDS[0], "v2")]


def test_key_changes():
    rekeyed = TableShape.of({"id": "int", "total": "decimal(10,2)", "note": "string"}, ["id", "note"])
    c = started("pessimistic", SHARDS[:2])
    c.announce(SHARDS[0], "k1", "1", rekeyed)
    assert c.decide(SHARDS[0], "k1") is Decision.WAIT and c.awaited() == [SHARDS[1]]
    out = c.announce(SHARDS[1], "k1", "1", rekeyed)
    assert out.target.key == ("id", "note") and c.decide(SHARDS[0], "k1") is Decision.APPLY
    assert c.decide(SHARDS[0], "v0") is Decision.WAIT  # rows under the old key: not applied
    o = started("optimistic", SHARDS[:2])
    with pytest.raises(ShardDDLConflict, match=r"keyed by \(id\) but .* by \(id, note\): optimistic mode merges"):
        o.announce(SHARDS[0], "k1", "1", rekeyed)


def test_events_that_break_the_contract():
    with pytest.raises(RouteError, match="ddl mode 'eager'"):
        ShardDDLCoordinator("a.b", "eager")
    with pytest.raises(IncompatibleShards, match="east/shop_01.orders.*west/shop_03.orders"):
        ShardDDLCoordinator("a.b", "pessimistic").start(
            {SHARDS[0]: ("v0", "0", BASE), SHARDS[2]: ("v0", "0", TableShape.of({"id": "string"}, ["id"]))})
    c = started("pessimistic")
    with pytest.raises(RouteError, match="never announced"):
        c.decide(SHARDS[0], "nope")
    assert c.announce(SHARDS[0], "v0", "0", PLUS).target is None  # a known version again: a replay, no change
    state = c.to_state()
    state["version"] = 99
    with pytest.raises(RouteError, match="version 99"):
        ShardDDLCoordinator.from_state(state)


def test_a_shard_that_appears_later():
    c = started("pessimistic", SHARDS[:2])
    out = c.announce(SHARDS[2], "v0", "0", TableShape.of({"id": "int", "note": "string"}, ["id"]))
    assert out.target is None and c.decide(SHARDS[2], "v0") is Decision.APPLY
    c.announce(SHARDS[3], "v1", "5", PLUS)
    assert c.decide(SHARDS[3], "v1") is Decision.WAIT
    first = ShardDDLCoordinator("x.y", "pessimistic")
    assert first.announce(SHARDS[0], "v0", "0", BASE).target == BASE  # no start: the first shard's shape


# ---------------------------------------------------------------------------- properties
RANKS = ["smallint", "int", "long"]
STEPS = st.lists(st.tuples(st.sampled_from(["add", "widen", "drop"]), st.integers(0, 7),
                           st.sampled_from(["smallint", "int", "string", "date", "decimal(8,2)"])), max_size=4)


def versions_of(steps) -> list[TableShape]:
    """The schemas one DDL sequence (run by every shard) goes through, from a base."""
    cols = {"id": "int", "a": "smallint", "b": "string"}
    out = [TableShape.of(cols, ["id"])]
    fresh = 0
    for kind, i, typ in steps:
        cols = dict(cols)
        others = [n for n in cols if n != "id"]
        if kind == "add":
            fresh += 1
            cols[f"c{fresh}"] = typ
        elif kind == "widen":
            ranked = [n for n in others if cols[n] in RANKS[:-1]]
            if not ranked:
                continue
            n = ranked[i % len(ranked)]
            cols[n] = RANKS[RANKS.index(cols[n]) + 1]
        elif others:
            del cols[others[i % len(others)]]
        else:
            continue
        out.append(TableShape.of(cols, ["id"]))
    return out


def oracle_fits(row: TableShape, target: TableShape) -> bool:
    """A row can be written into the target and read back: same key, each column there with
    the same type, or an integer widened."""
    have = target.types()
    return row.key == target.key and all(
        c.name in have and (have[c.name] == c.type or (c.type in RANKS and have[c.name] in RANKS
                                                      and RANKS.index(c.type) < RANKS.index(have[c.name])))
        for c in row.columns)


def shard_events(n_versions: int, rows: list[list[int]]) -> list[tuple]:
    """One shard's events: after each DDL some rows, of that version or (late, from another
    partition) an older one."""
    events = []
    for k in range(n_versions):
        if k:
            events.append(("ddl", k))
        events += [("row", min(j, k)) for j in rows[k % len(rows)]] if rows else []
    return events


def interleave(data, per_shard: dict) -> list[tuple]:
    queues = {s: list(evs) for s, evs in per_shard.items()}
    out = []
    while any(queues.values()):
        s = data.draw(st.sampled_from(sorted(s for s, q in queues.items() if q)))
        out.append((s, queues[s].pop(0)))
    return out


@settings(max_examples=150, deadline=None)
@given(STEPS, st.integers(2, 4), st.lists(st.lists(st.integers(0, 4), max_size=3), min_size=1, max_size=3),
       st.data())
def test_pessimistic_never_misreads_and_releases_every_row_once_every_shard_ran_the_ddl(steps, n, rows, data):
    versions = versions_of(steps)
    shards = SHARDS[:n]
    c = ShardDDLCoordinator("shop.orders", "pessimistic")
    target = c.start({s: ("v0", "0000", versions[0]) for s in shards}).target
    ran: dict[ShardId, int] = {s: 0 for s in shards}
    waiting: set = set()
    for step, (shard, (kind, k)) in enumerate(interleave(data, {s: shard_events(len(versions), rows)
                                                                for s in shards})):
        if kind == "ddl":
            ran[shard] = k
            out = c.announce(shard, f"v{k}", f"{k:04d}", versions[k])
            if out.target is not None:
                had = {s: [versions[j].types() for j in range(ran[s] + 1)] for s in shards}
                for col, typ in out.target.types().items():  # the target changes only once every shard ran the DDL
                    if col not in target.types():
                        assert all(any(col in v for v in had[s]) for s in shards)
                    elif typ != target.types()[col]:
                        assert all(any(v.get(col) == typ for v in had[s]) for s in shards)
                assert oracle_fits(target, out.target)  # it only grows and widens
                target = out.target
            waiting -= set(out.released)
        else:
            decision = c.decide(shard, f"v{k}")
            assert decision in (Decision.APPLY, Decision.WAIT)
            # never a row applied to a target that misreads it, and every row that fits goes on
            assert (decision is Decision.APPLY) == oracle_fits(versions[k], target)
            if decision is Decision.WAIT:
                waiting.add((shard, f"v{k}"))
        assert all(c.decide(s, v) is Decision.WAIT for s, v in waiting)  # released is complete
        assert bool(c.awaited()) == bool(c.waiting())  # a waiting row always names whom it waits for
        if step % 5 == 0:
            c = round_trip(c)
    assert waiting == set() and c.waiting() == []
    assert all(c.decide(s, f"v{k}") is Decision.APPLY for s in shards for k in range(len(versions)))


@settings(max_examples=150, deadline=None)
@given(STEPS, st.integers(2, 4), st.data())
def test_optimistic_applies_every_row_at_once_and_its_union_does_not_depend_on_the_order(steps, n, data):
    versions = versions_of(steps)
    shards = SHARDS[:n]
    # the shards run different parts of the sequence: each its own prefix
    reach = {s: data.draw(st.integers(0, len(versions) - 1)) for s in shards}
    announcements = [(s, k) for s in shards for k in range(1, reach[s] + 1)]
    targets = []
    for order in (announcements, data.draw(st.permutations(announcements))):
        c = ShardDDLCoordinator("shop.orders", "optimistic")
        c.start({s: ("v0", "0000", versions[0]) for s in shards})
        for s, k in order:
            c.announce(s, f"v{k}", f"{k:04d}", versions[k])
            assert c.decide(s, f"v{k}") is Decision.APPLY
        assert all(c.decide(s, f"v{k}") is Decision.APPLY for s in shards for k in range(reach[s] + 1))
        targets.append((c.target.types(), c.target.key))
        assert all(oracle_fits(versions[k], c.target) for s in shards for k in range(reach[s] + 1))
    assert targets[0] == targets[1]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["pessimistic", "optimistic"]), st.integers(2, 4), st.data())
def test_a_conflicting_ddl_stops_the_route_whatever_the_interleaving(mode, n, data):
    shards = SHARDS[:n]
    base = TableShape.of({"id": "int", "v": "string"}, ["id"])
    mine = {s: TableShape.of({"id": "int", "v": "string", "c": data.draw(st.sampled_from(["int", "long"]))}, ["id"])
            for s in shards}
    clash = data.draw(st.sampled_from(shards))
    mine[clash] = TableShape.of({"id": "int", "v": "string", "c": "date"}, ["id"])
    c = ShardDDLCoordinator("shop.orders", mode)
    c.start({s: ("v0", "0", base) for s in shards})
    stopped = None
    for s in data.draw(st.permutations(shards)):
        try:
            c.announce(s, "v1", "1", mine[s])
        except ShardDDLConflict as exc:
            stopped = str(exc)
            break
    assert stopped is not None and "'c'" in stopped and "date" in stopped and str(clash) in stopped
    assert all(c.decide(s, "v0") is Decision.STOPPED for s in shards)
    assert round_trip(c).stopped == stopped


# ---------------------------------------------------------------------------- route reset
def test_force_makes_the_target_take_a_waiting_version_now():
    """A shard that will never run the DDL: ``force`` (DM's unlock) adds the waiting
    version's columns to the target; the others write NULL there; the decision is state."""
    c = started("pessimistic")
    c.announce(SHARDS[0], "v1", "1", PLUS)
    assert c.waiting() == [(SHARDS[0], "v1")] and c.missing(SHARDS[0], "v1") == ["coupon string"]
    out = c.force(SHARDS[0], "v1")
    assert out.target == PLUS and out.released == [(SHARDS[0], "v1")] and c.target_version == 1
    assert c.waiting() == [] and c.decide(SHARDS[0], "v1") is Decision.APPLY
    c = round_trip(c)
    assert c.decisions == {(SHARDS[0], "v1"): "force"} and c.target == PLUS
    # a later DDL of the same shard waits again, as before
    wider = TableShape.of({**PLUS.types(), "total": "decimal(12,2)"}, ["id"])
    c.announce(SHARDS[0], "v2", "2", wider)
    assert c.waiting() == [(SHARDS[0], "v2")] and c.missing(SHARDS[0], "v2") == ["total decimal(12,2) (target: "
                                                                                "decimal(10,2))"]


def test_skip_applies_a_waiting_versions_rows_without_what_the_target_lacks():
    c = started("pessimistic")
    c.announce(SHARDS[1], "v1", "1", PLUS)
    out = c.skip(SHARDS[1], "v1")
    assert out.target is None and out.released == [(SHARDS[1], "v1")]
    assert c.target == BASE and c.decide(SHARDS[1], "v1") is Decision.APPLY and c.waiting() == []
    c = round_trip(c)
    assert c.decisions == {(SHARDS[1], "v1"): "skip"} and c.decide(SHARDS[1], "v1") is Decision.APPLY
    # every shard runs the DDL after all: the target takes the column as pessimistic mode does
    for s in SHARDS:
        c.announce(s, "v1", "1", PLUS)
    assert c.target == PLUS


def test_what_cannot_be_forced_or_skipped_is_refused_with_the_reason():
    c = started("pessimistic")
    with pytest.raises(RouteError, match="do not wait: nothing to force"):
        c.force(SHARDS[0], "v0")
    wider = TableShape.of({**BASE.types(), "total": "decimal(12,2)"}, ["id"])
    c.announce(SHARDS[0], "v1", "1", wider)
    with pytest.raises(RouteError, match=r"cannot be skipped: its total decimal\(12,2\) \(target: decimal\(10,2\)\)"):
        c.skip(SHARDS[0], "v1")
    rekeyed = TableShape.of(BASE.types(), ["id", "note"])
    c.announce(SHARDS[1], "k1", "2", rekeyed)
    with pytest.raises(RouteError, match=r"waits for its key \(id, note\).*not forced"):
        c.force(SHARDS[1], "k1")
    with pytest.raises(RouteError, match="never announced"):
        c.skip(SHARDS[2], "nope")
    assert c.decisions == {} and c.target == BASE
    c.force(SHARDS[0], "v1")  # a wider type is forced: the target widens
    assert c.target.types()["total"] == "decimal(12,2)" and c.waiting() == [(SHARDS[1], "k1")]
