"""verify of a merged target (cdc.verify.shards, the shard scope of the sink targets, the report)."""

import io

from rich.console import Console

from cdc.verify import print_report
from cdc.verify.checksum import Checksum, checksum
from cdc.verify.report import RowDiff, SinkResult, TableReport, VerifyReport
from cdc.verify.shards import indistinct, mapped, shard_spec, stray_rows
from cdc.verify.source import Chunk
from cdc.verify.spec import ColumnSpec, TableSpec
from cdc.verify.targets import DBTarget
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.routes import Route
from spark_jobs.sharding.shapes import ShardId

ROUTE = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders"))


def _spec() -> TableSpec:
    return TableSpec("shop_01", "orders", [ColumnSpec("id", "int", "id"), ColumnSpec("amount", "int", "amount")],
                     ["id"])


def test_a_shard_lands_in_the_target_with_its_origin_values():
    spec = shard_spec(_spec(), ROUTE, "east")
    assert spec.name == "east/shop_01.orders" and spec.sink_name == ("shop", "orders")
    assert spec.origin == {"__source": "east", "__db": "shop_01", "__table": "orders"}
    assert spec.key == ["id"] and spec.mode == "range"  # the shard's own key within its rows
    plain = _spec()
    assert (plain.name, plain.sink_name, plain.origin) == ("shop_01.orders", ("shop_01", "orders"), {})


def test_rows_of_no_shard_are_named_by_their_origin():
    counts = {("east", "shop_01", "orders"): 5, ("west", "shop_09", "orders"): 2, ("west", None, "orders"): 1,
              ("west", "shop_03", "orders"): 0}
    shards = [ShardId("east", "shop_01", "orders"), ShardId("west", "shop_03", "orders")]
    assert stray_rows(counts, ROUTE, shards) == {"west/NULL.orders": 1, "west/shop_09.orders": 2}
    assert stray_rows({("east", "shop_01", "orders"): 5}, ROUTE, shards) == {}


MAPPED = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders",
                                 extract_source={"regexp": "(.*)", "column": "region"},
                                 extract_schema={"regexp": "shop_(.*)", "column": "shard"}))


def test_a_shard_of_a_mapped_route_is_scoped_by_its_extracted_values_too():
    spec = shard_spec(_spec(), MAPPED, "east")
    assert spec.origin == {"__source": "east", "__db": "shop_01", "__table": "orders", "region": "east",
                           "shard": "01"}
    assert mapped(MAPPED, ShardId("east", "shop_01", "orders")) == {"region": "east", "shard": "01"}
    assert mapped(ROUTE, ShardId("east", "shop_01", "orders")) == {}
    t = _Recorder({"__source": "text", "__db": "text", "__table": "text", "region": "text", "shard": "text",
                   "id": "integer", "amount": "integer"})
    t.open(spec, SinkResult("postgres", ""))
    list(t.chunk_rows(Chunk(0, (3,), (9,), {}, None)))
    sql, params = t.sql[-1]
    assert '"region" = %s AND "shard" = %s AND ' in sql and params[:5] == ["east", "shop_01", "orders", "east", "01"]
    # a row with a shard's origin but another extracted value belongs to no shard
    shards = [ShardId("east", "shop_01", "orders")]
    counts = {("east", "shop_01", "orders", "east", "01"): 4, ("east", "shop_01", "orders", "west", "01"): 1}
    assert stray_rows(counts, MAPPED, shards) == {"east/shop_01.orders (region='west', shard='01')": 1}


def test_without_origin_columns_the_column_mapping_must_tell_the_shards_apart():
    shards = [ShardId("east", "shop_01", "orders"), ShardId("west", "shop_01", "orders")]
    by_schema = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders",
                                        origin={"enabled": False},
                                        extract_schema={"regexp": "shop_(.*)", "column": "shard"}))
    assert "gives east/shop_01.orders and west/shop_01.orders the same values (shard='01')" in \
        indistinct(by_schema, shards)
    both = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders",
                                   origin={"enabled": False}, extract_source={"regexp": "(.*)", "column": "region"},
                                   extract_schema={"regexp": "shop_(.*)", "column": "shard"}))
    assert indistinct(both, shards) is None
    assert shard_spec(_spec(), both, "west").origin == {"region": "west", "shard": "01"}
    assert stray_rows({("east", "01"): 2, ("north", "01"): 3}, both, shards) == {"region='north', shard='01'": 3}
    off = Route.of(0, RouteConfig(schema="shop_0[1-4]", table="orders", target="shop.orders",
                                  origin={"enabled": False}))
    assert "no column mapping" in indistinct(off, shards)
    assert indistinct(ROUTE, shards) is None


class _Recorder(DBTarget):
    """A sink target that records its statements (no database)."""

    dialect = "postgres"

    def __init__(self, columns: dict[str, str]) -> None:
        super().__init__()
        self.conn = object()
        self.columns = columns
        self.sql: list[tuple[str, list]] = []

    def quote(self, name: str) -> str:
        return f'"{name}"'

    def qualified(self, db: str, table: str) -> str:
        return f'"public"."{db}__{table}"'

    def sink_columns(self, db: str, table: str):
        return self.columns

    def stream(self, sql, params):
        self.sql.append((sql, params))
        return iter([])

    def fetch(self, sql, params):
        self.sql.append((sql, params))
        return [(0,)] if "COUNT" in sql else []


def test_a_shard_reads_only_its_rows_of_the_target():
    t = _Recorder({"__source": "text", "__db": "text", "__table": "text", "id": "integer", "amount": "integer"})
    res = SinkResult("postgres", "")
    t.open(shard_spec(_spec(), ROUTE, "east"), res)
    assert res.target == '"public"."shop__orders"'
    list(t.chunk_rows(Chunk(0, (3,), (9,), {}, None)))
    sql, params = t.sql[-1]
    assert sql.startswith('SELECT "id", "amount" FROM "public"."shop__orders" WHERE "__source" = %s AND '
                          '"__db" = %s AND "__table" = %s AND ')
    assert params[:3] == ["east", "shop_01", "orders"] and params[3:] == [3, 9]


def test_a_target_without_the_origin_columns_is_unusable():
    t = _Recorder({"id": "integer", "amount": "integer"})
    res = SinkResult("postgres", "")
    try:
        t.open(shard_spec(_spec(), ROUTE, "east"), res)
    except Exception as exc:  # noqa: BLE001
        assert "lacks the route's origin or column mapping column(s) __source, __db, __table" in str(exc)
    else:
        raise AssertionError("opened")


def test_the_report_shows_a_shards_keys_with_their_origin():
    res = SinkResult("mysql", "`cdc_sink`.`shop__orders`", source_rows=2, sink_rows=1, missing=1,
                     samples=[RowDiff("missing", {"id": 7}, source={"amount": 70})])
    report = VerifyReport(tables=[TableReport("east/shop_01.orders", key=["id"], mode="range", results=[res],
                                              target="shop.orders"),
                                  TableReport("shop.orders: rows of no shard", target="shop.orders",
                                              results=[SinkResult("mysql", "`cdc_sink`.`shop__orders`")])],
                          targets=["mysql"])
    out = io.StringIO()
    print_report(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "east/shop_01.orders -> shop.orders" in text and "column mapping" not in text
    assert "missing in sink: east/shop_01.orders id=7" in text
    assert "shop.orders: rows of no shard" in text and "-> shop.orders: rows" not in text
    assert report.to_dict()["tables"][0]["target"] == "shop.orders" and not report.equal


def test_a_tables_checksum_is_its_chunks_summed():
    rows = [((i,), (i * 10,)) for i in range(10)]
    whole = Checksum()
    for part in (rows[:3], rows[3:]):
        whole.include(checksum(part))
    assert (whole.count, whole.hex) == (10, checksum(reversed(rows)).hex)


def test_the_report_shows_a_shards_mapped_values():
    res = SinkResult("postgres", '"public"."shop__orders"', source_rows=2, sink_rows=2)
    report = VerifyReport(tables=[TableReport("east/shop_01.orders", key=["id"], mode="range", results=[res],
                                              target="shop.orders", mapped={"region": "east", "shard": "01"})],
                          targets=["postgres"])
    out = io.StringIO()
    print_report(report, Console(file=out, width=250))
    assert "column mapping: east/shop_01.orders -> shop.orders: region='east', shard='01'" in out.getvalue()
    assert report.to_dict()["tables"][0]["mapped"] == {"region": "east", "shard": "01"}
