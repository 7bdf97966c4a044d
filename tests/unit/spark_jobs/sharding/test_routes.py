"""Table routing: the route of a table, the target's key and rows with origin columns, and the
sink tables two sources of rows would share."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.config import CDCConfig
from spark_jobs.errors import ColumnMappingMismatch, IncompatibleShards, RouteCollision, RouteError
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId, TableShape

RULES = [
    RouteConfig(source="east|west", schema="shop_0[1-4]", table="orders", target="shop.orders"),
    RouteConfig(schema="shop_.*", table="orders|customers", target="shop.rest", ddl="optimistic",
                origin={"source": "src", "db": "sch", "table": "tbl"}),
    RouteConfig(schema="log_.*", table="events", target="logs.events", origin={"enabled": False}),
]


def test_first_matching_route_wins_and_unrouted_tables_keep_their_name():
    router = Router(RULES)
    r = router.route_of("east", "shop_02", "orders")
    assert (r.index, r.name, r.origin, r.ddl) == (0, "shop.orders", ("__source", "__db", "__table"), "pessimistic")
    assert router.route_of("north", "shop_02", "orders").name == "shop.rest"  # source not matched by the first
    assert router.route_of("east", "shop_05", "orders").name == "shop.rest"
    assert router.route_of("east", "shop_02", "customers").index == 1
    assert router.route_of("east", "shop_02", "orders2") is None  # matched in full
    assert router.target_of(ShardId("east", "shop_02", "orders2")) == ("shop_02", "orders2")
    assert router.target_of(ShardId("east", "log_1", "events")) == ("logs", "events")
    assert router.route_named("shop.rest").index == 1
    with pytest.raises(RouteError, match="no route leads to x.y"):
        router.route_named("x.y")
    assert Router.from_config(CDCConfig(routes=RULES[1:])).route_of("cdc", "shop_04", "orders").name == "shop.rest"


def test_target_key_row_and_shape_carry_the_origin_columns():
    router = Router(RULES)
    shard = ShardId("east", "shop_02", "orders")
    r = router.route_of(*shard)
    assert r.key(["id"]) == ["__source", "__db", "__table", "id"]
    row = r.row(shard, {"id": 7, "total": 3})
    assert row == {"__source": "east", "__db": "shop_02", "__table": "orders", "id": 7, "total": 3}
    assert list(row)[:3] == ["__source", "__db", "__table"]
    shape = r.shape(TableShape.of({"id": "int", "total": "long"}, ["id"]))
    assert [(c.name, c.type, c.nullable) for c in shape.columns][:4] == [
        ("__source", "string", False), ("__db", "string", False), ("__table", "string", False), ("id", "int", False)]
    assert shape.key == ("__source", "__db", "__table", "id")
    off = router.route_of("east", "log_1", "events")
    assert off.key(["id"]) == ["id"] and off.row(shard, {"id": 1}) == {"id": 1}
    renamed = router.route_of("x", "shop_9", "customers")
    assert renamed.row(ShardId("x", "shop_9", "customers"), {"id": 1}) == {"src": "x", "sch": "shop_9",
                                                                         "tbl": "customers", "id": 1}


def test_a_shard_column_named_like_an_origin_column_is_refused():
    r = Router(RULES).route_of("east", "shop_01", "orders")
    shard = ShardId("east", "shop_01", "orders")
    with pytest.raises(IncompatibleShards, match=r"'__db'.*routes\[0\]\.origin"):
        r.row(shard, {"id": 1, "__db": "x"})
    with pytest.raises(IncompatibleShards, match="__DB"):
        r.shape(TableShape.of({"id": "int", "__DB": "string"}, ["id"]))
    with pytest.raises(IncompatibleShards, match="__source"):
        r.check({shard: TableShape.of({"id": "int", "__source": "string"}, ["id"])})


MAPPED = RouteConfig(source="east|west", schema="app_.*", table="orders_.*", target="app.orders",
                     extract_source={"regexp": "(.*)", "column": "region"},
                     extract_schema={"regexp": "app_(.*)", "column": "tenant"},
                     extract_table={"regexp": r"orders_(\d+)(?:_(x))?", "column": "part"})


def test_column_mapping_fills_target_columns_from_the_shards_names():
    r = Router([MAPPED]).route_of("east", "app_eu", "orders_07")
    shard = ShardId("east", "app_eu", "orders_07")
    assert r.columns == ("__source", "__db", "__table", "region", "tenant", "part")
    assert r.extracted_values(shard) == {"region": "east", "tenant": "eu", "part": "07"}
    assert r.extracted_values(ShardId("west", "app_us", "orders_3_x")) == {"region": "west", "tenant": "us",
                                                                            "part": "3x"}  # groups joined, as DM
    assert r.key(["id"]) == ["__source", "__db", "__table", "region", "tenant", "part", "id"]
    assert r.row(shard, {"id": 1}) == {"__source": "east", "__db": "app_eu", "__table": "orders_07",
                                       "region": "east", "tenant": "eu", "part": "07", "id": 1}
    shape = r.check({shard: TableShape.of({"id": "int"}, ["id"])})
    assert [(c.name, c.type, c.nullable) for c in shape.columns][3:6] == [
        ("region", "string", False), ("tenant", "string", False), ("part", "string", False)]
    assert shape.key == ("__source", "__db", "__table", "region", "tenant", "part", "id")
    # instead of the origin columns
    alone = Router([RouteConfig(**{**MAPPED.model_dump(), "origin": {"enabled": False}})]).route_of(*shard)
    assert alone.key(["id"]) == ["region", "tenant", "part", "id"]
    assert alone.values(shard) == {"region": "east", "tenant": "eu", "part": "07"}


def test_a_shard_name_the_column_mapping_does_not_match_is_refused_naming_it():
    r = Router([MAPPED]).route_of("east", "app_eu", "orders_x")  # routed (orders_.*), but not orders_(\d+)
    bad = ShardId("east", "app_eu", "orders_x")
    with pytest.raises(ColumnMappingMismatch, match=r"routes\[0\]\.extract_table regexp 'orders_.*' does not match "
                                                    r"the table 'orders_x' of east/app_eu.orders_x.*'part'"):
        r.check({ShardId("east", "app_eu", "orders_1"): TableShape.of({"id": "int"}, ["id"]),
                 bad: TableShape.of({"id": "int"}, ["id"])})
    with pytest.raises(ColumnMappingMismatch, match="does not match"):
        r.row(bad, {"id": 1})
    with pytest.raises(IncompatibleShards, match=r"'tenant'.*routes\[0\]\.extract_schema\.column"):
        r.row(ShardId("east", "app_eu", "orders_1"), {"id": 1, "tenant": "x"})
    with pytest.raises(IncompatibleShards, match=r"'Region'.*routes\[0\]\.extract_source\.column"):
        r.shape(TableShape.of({"id": "int", "Region": "string"}, ["id"]))


def test_check_gives_the_target_shape_or_refuses_naming_both_tables():
    r = Router(RULES).route_of("east", "shop_01", "orders")
    a, b = ShardId("east", "shop_01", "orders"), ShardId("west", "shop_03", "orders")
    target = r.check({a: TableShape.of({"id": "int", "v": "string"}, ["id"]),
                      b: TableShape.of({"id": "long", "w": "date"}, ["id"])})
    assert target.types() == {"__source": "string", "__db": "string", "__table": "string", "id": "long",
                              "v": "string", "w": "date"}
    with pytest.raises(IncompatibleShards, match="east/shop_01.orders.*west/shop_03.orders"):
        r.check({a: TableShape.of({"id": "int"}, ["id"]), b: TableShape.of({"id": "string"}, ["id"])})


def test_plan_groups_shards_by_target_and_refuses_collisions():
    router = Router(RULES)
    shards = [ShardId("west", "shop_03", "orders"), ShardId("east", "shop_01", "orders"),
              ShardId("east", "shop_01", "items"), ShardId("east", "log_1", "events")]
    plan = router.plan(shards)
    assert plan == {("shop", "orders"): [ShardId("east", "shop_01", "orders"), ShardId("west", "shop_03", "orders")],
                    ("shop_01", "items"): [ShardId("east", "shop_01", "items")],
                    ("logs", "events"): [ShardId("east", "log_1", "events")]}
    with pytest.raises(RouteCollision, match="east/shop.orders is not routed.*merges east/shop_01.orders"):
        router.plan(shards + [ShardId("east", "shop", "orders")])
    with pytest.raises(RouteCollision, match="east/shop_01.items and west/shop_01.items"):
        router.plan(shards + [ShardId("west", "shop_01", "items")])


NAMES = st.text(alphabet="ab_01", min_size=1, max_size=6)
SHARDS = st.builds(ShardId, NAMES, NAMES, NAMES)
PATTERNS = st.sampled_from([".*", "a.*", "b.*", "a", "[ab]_0", "a|b", ".*1"])
RULE_LISTS = st.lists(st.builds(lambda s, d, t, n: RouteConfig(source=s, schema=d, table=t, target=f"db.t{n}"),
                                PATTERNS, PATTERNS, PATTERNS, st.integers(0, 3)), max_size=5)


@given(RULE_LISTS, st.lists(SHARDS, max_size=12))
def test_routing_is_deterministic_and_the_first_match(rules, shards):
    one, two = Router(rules), Router(list(rules))
    for shard in shards + list(reversed(shards)):
        route = one.route_of(*shard)
        assert route == two.route_of(*shard)
        first = next((i for i, r in enumerate(rules) if r.matches(*shard)), None)
        assert (route.index if route is not None else None) == first


@given(SHARDS, SHARDS, st.dictionaries(st.sampled_from(["id", "k2"]), st.integers() | st.text(), min_size=1))
def test_equal_source_keys_of_different_shards_never_collide_in_the_target(a, b, key_values):
    route = Router([RouteConfig(schema=".*", table=".*", target="all.t")]).route_of(*a)
    key = route.key(sorted(key_values))
    ka = tuple(route.row(a, key_values)[k] for k in key)
    kb = tuple(route.row(b, key_values)[k] for k in key)
    assert (ka == kb) == (a == b)
