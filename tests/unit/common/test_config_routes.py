"""Several sources and routing rules in the configuration (issue 15)."""

from pathlib import Path

import pytest

from common.config import CDCConfig, dump_config, load_config
from common.errors import ConfigError

TWO_SERVERS = """
kafka:
  topic_prefix: cdc
sources:
  - name: east
    host: db1
    server_id: 5401
    include_databases: ['shop_0[12]']
  - name: west
    host: db2
    server_id: 5402
    include_databases: ['shop_0[34]']
    topic_prefix: cdc_w
routes:
  - source: 'east|west'
    schema: 'shop_0[1-4]'
    table: orders
    target: shop.orders
    ddl: optimistic
  - schema: 'shop_0[1-4]'
    table: 'customers'
    target: shop.customers
    origin: {enabled: false}
"""


def _load(tmp_path: Path, text: str, environ: dict | None = None) -> CDCConfig:
    path = tmp_path / "cdc.yaml"
    path.write_text(text)
    return load_config(path, environ=environ or {})


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    return str(err.value)


def test_the_view_of_a_source_is_a_single_source_configuration_of_its_producer(tmp_path: Path):
    cfg = _load(tmp_path, TWO_SERVERS + "producer:\n  metrics_port: 9100\n")
    west = cfg.for_source("west")
    assert (west.source.host, west.source.server_id, west.source.include_databases) == ("db2", 5402, ["shop_0[34]"])
    assert (west.kafka.topic_prefix, west.producer.name, west.source_name) == ("cdc_w", "west", "west")
    assert west.producer.metrics_port == 9101 and cfg.for_source("east").producer.metrics_port == 9100
    assert west.sources == [] and west.routes == []
    assert west.captured_sources()[0].topic_prefix == "cdc_w"
    west.producer.startup.mode = "earliest"  # a view shares nothing with the configuration
    west.sinks.postgres.schema_name = "other"
    assert cfg.producer.startup.mode == "latest" and cfg.sinks.postgres.schema_name == "public"
    # the configuration itself is left as it was
    assert (cfg.kafka.topic_prefix, cfg.producer.name, cfg.source_name, len(cfg.sources)) == ("cdc", "cdc", None, 2)
    with pytest.raises(ConfigError, match=r"several sources are configured \(east, west\): name one with --source"):
        cfg.for_source()
    with pytest.raises(ConfigError, match="no source named 'north' \\(sources: east, west\\)"):
        cfg.for_source("north")


def test_the_view_of_a_single_source_configuration_is_itself():
    cfg = CDCConfig()
    assert cfg.for_source() is cfg and cfg.for_source("cdc") is cfg and cfg.source_name is None
    with pytest.raises(ConfigError, match="no source named 'east' \\(sources: cdc\\)"):
        cfg.for_source("east")
    one = CDCConfig.model_validate({"sources": [{"name": "east", "host": "db1"}]})
    assert one.for_source().source_name == "east" and one.for_source().source.host == "db1"


def test_a_single_source_configuration_is_one_source_named_by_the_producer():
    cfg = CDCConfig()
    [only] = cfg.captured_sources()
    assert (only.name, only.topic_prefix, only.producer_name) == ("cdc", "cdc", "cdc")
    assert only.config is cfg.source
    assert cfg.routes == [] and cfg.sources == []


def test_several_sources_with_their_prefixes_and_routes(tmp_path: Path):
    cfg = _load(tmp_path, TWO_SERVERS)
    east, west = cfg.captured_sources()
    assert (east.name, east.topic_prefix, east.producer_name, east.config.host) == ("east", "cdc_east", "east", "db1")
    assert (west.topic_prefix, west.config.server_id) == ("cdc_w", 5402)
    assert cfg.captured_source("west") == west
    with pytest.raises(ConfigError, match="no source named 'north'"):
        cfg.captured_source("north")
    orders, customers = cfg.routes
    assert (orders.target_db, orders.target_table, orders.ddl) == ("shop", "orders", "optimistic")
    assert orders.origin.names == ("__source", "__db", "__table")
    assert customers.origin.names == () and customers.ddl == "pessimistic" and customers.source == ".*"
    assert orders.matches("east", "shop_03", "orders")
    assert not orders.matches("east", "shop_05", "orders")
    assert not orders.matches("east", "shop_01", "orders_old")  # matched in full
    assert not orders.matches("north", "shop_01", "orders")


def test_routes_and_sources_round_trip_through_the_dumped_file(tmp_path: Path):
    cfg = _load(tmp_path, TWO_SERVERS)
    again = _load(tmp_path, dump_config(cfg))
    assert again == cfg
    assert "schema: shop_0[1-4]" in dump_config(cfg)


def test_routes_can_come_from_the_environment(tmp_path: Path):
    cfg = _load(tmp_path, "kafka: {topic_prefix: x}\n",
                {"CDC__ROUTES": "[{schema: 'a_.*', table: t, target: a.t, origin: {source: src}}]"})
    assert cfg.routes[0].origin.names == ("src", "__db", "__table")


@pytest.mark.parametrize("text, message", [
    ("routes: [{schema: 'shop_(', table: orders, target: shop.orders}]", "routes.0.schema"),
    ("routes: [{schema: shop, table: 'o[', target: shop.orders}]", "not a regular expression"),
    ("routes: [{schema: shop, table: orders, target: orders}]", "database.table"),
    ("routes: [{schema: shop, table: orders, target: shop.orders.x}]", "database.table"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, origin: {db: __source}}]", "must differ"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, origin: {db: __SOURCE}}]", "must differ"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, origin: {table: __cdc_position}}]", "__cdc_"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, origin: {table: ''}}]", "empty"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, ddl: eager}]", "routes.0.ddl"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, colour: red}]", "routes.0.colour"),
    ("routes: [{table: orders, target: shop.orders}]", "routes.0.schema"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, source: north}]", "names no configured source"),
    ("sources: [{name: a}, {name: a}]", "'a' is given twice"),
    ("sources: [{name: 'a b'}]", "letters, digits"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_schema: {regexp: 'shop_(', column: s}}]",
     "not a regular expression"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_schema: {regexp: 'shop_.*', column: s}}]",
     "captures nothing"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_table: {regexp: '(.*)', column: 'a b'}}]",
     "routes.0.extract_table.column"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_table: {regexp: '(.*)', column: __cdc_x}}]",
     "__cdc_"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_table: {regexp: '(.*)', column: __DB}}]",
     "origin and extracted column names must differ"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_table: {regexp: '(.*)', column: c},"
     " extract_schema: {regexp: '(.*)', column: C}}]", "must differ"),
    ("routes: [{schema: shop, table: orders, target: shop.orders, extract_table: {regexp: '(.*)'}}]",
     "routes.0.extract_table.column"),
    ("sources: [{name: a, topic_prefix: p}, {name: b, topic_prefix: p}]", "'p' and 'p'"),
    ("sources: [{name: a, topic_prefix: p}, {name: b, topic_prefix: p.b}]", "would mix"),
    ("sources: [{name: a, topic_prefix: 'p/q'}]", "Kafka's topic characters"),
    ("sources: [{host: h}]", "sources.0.name"),
])
def test_bad_routes_and_sources_are_refused_with_their_location(tmp_path: Path, text: str, message: str):
    assert message in _error(tmp_path, text + "\n")


def test_a_route_naming_an_unknown_source_lists_the_sources(tmp_path: Path):
    text = TWO_SERVERS.replace("source: 'east|west'", "source: 'north'")
    msg = _error(tmp_path, text)
    assert "routes[0] (to shop.orders)" in msg and "north" in msg and "east, west" in msg


def test_two_routes_to_one_target_must_agree_on_origin_and_ddl(tmp_path: Path):
    same = ("routes:\n  - {schema: a, table: t, target: x.t}\n  - {schema: b, table: t, target: x.t}\n")
    assert len(_load(tmp_path, same).routes) == 2
    msg = _error(tmp_path, same.replace("- {schema: b", "- {ddl: optimistic, schema: b"))
    assert "routes[0] and routes[1]" in msg and "x.t" in msg
    msg = _error(tmp_path, same.replace("- {schema: b", "- {extract_schema: {regexp: '(.*)', column: s}, schema: b"))
    assert "routes[0] and routes[1]" in msg and "extract_" in msg


def test_a_route_with_column_mapping(tmp_path: Path):
    text = TWO_SERVERS.replace("    ddl: optimistic\n", "    ddl: optimistic\n    extract_source: {regexp: '(.*)', column: "
                               "region}\n    extract_schema: {regexp: 'shop_(.*)', column: shard}\n")
    cfg = _load(tmp_path, text)
    rule = cfg.routes[0]
    assert {w: (r.regexp, r.column) for w, r in rule.extracts.items()} == {
        "source": ("(.*)", "region"), "schema": ("shop_(.*)", "shard")}
    assert _load(tmp_path, dump_config(cfg)) == cfg
    assert cfg.routes[1].extracts == {}


def test_source_and_sources_together_are_refused(tmp_path: Path):
    assert "either 'source'" in _error(tmp_path, "source: {host: h}\nsources: [{name: a}]\n")
    with pytest.raises(ConfigError, match="either 'source'"):
        _load(tmp_path, "sources: [{name: a}]\n", {"CDC__SOURCE__HOST": "db"})


def test_the_example_of_docs_sharding_md_is_valid(tmp_path: Path):
    doc = (Path(__file__).resolve().parents[3] / "docs" / "sharding.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = _load(tmp_path, example)
    assert [c.topic_prefix for c in cfg.captured_sources()] == ["cdc_east", "cdc_west"]
    [route] = cfg.routes
    shards = [("east", 1), ("east", 2), ("west", 3), ("west", 4)]
    assert all(route.matches(s, f"shop_0{i}", "orders") for s, i in shards)


def test_the_sinks_database_on_the_source_server_is_never_captured():
    """The MySQL sink writing into the source server (localhost and 127.0.0.1 are one
    server): the view every part reads excludes its database, so the producer never feeds
    the merge job its own writes; another port, another host or a disabled sink: unchanged."""
    from producer.capture_filter import CaptureFilter

    def view(sink: dict, **source) -> CDCConfig:
        return CDCConfig.model_validate({"source": {"host": "localhost", "port": 3306, **source},
                                         "sinks": {"mysql": {"enabled": True, "host": "127.0.0.1", "port": 3306,
                                                             "database": "out.sink", **sink}}}).for_source()

    on_source = view({}, include_databases=["out.sink", "shop"])
    assert on_source.source.exclude_databases == [r"out\.sink"]
    flt = CaptureFilter(on_source.source)
    assert flt.captures("shop", "t") and not flt.captures("out.sink", "shop__t")
    assert flt.captures("outXsink", "t")  # (only the sink's own name: its dot is escaped in the pattern)
    assert view({}, exclude_databases=[r"out\.sink"]).source.exclude_databases == [r"out\.sink"]  # once
    for other in ({"port": 3307}, {"host": "db2"}, {"enabled": False}):
        cfg = view(other)
        assert cfg.source.exclude_databases == [] and cfg.sink_databases_on(cfg.source) == []
    two = CDCConfig.model_validate({"sources": [{"name": "east", "host": "db1"}, {"name": "west", "host": "DB2"}],
                                    "sinks": {"mysql": {"enabled": True, "host": "db2", "port": 3306}}})
    assert two.for_source("east").source.exclude_databases == []
    assert two.for_source("west").source.exclude_databases == ["cdc_sink"]


def test_same_server():
    from common.config import same_server
    assert same_server(("localhost", 3306), ("127.0.0.1", 3306)) and same_server(("[::1]", 1), ("127.0.1.1", 1))
    assert same_server(("DB", 3306), ("db", 3306)) and not same_server(("db", 3306), ("db", 3307))
    assert not same_server(("db1", 3306), ("localhost", 3306)) and not same_server((None, 3306), ("db", 3306))
