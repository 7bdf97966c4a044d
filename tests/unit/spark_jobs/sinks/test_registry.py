"""One sink interface: the sinks register under their configuration section, the enabled
ones are built from the configuration, and the driver names none."""

from __future__ import annotations

import pytest

from common.config import CDCConfig
from spark_jobs.errors import SinkError
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.interface import BatchSink, RowSink, Sink
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink
from spark_jobs.sinks.registry import register_sink, registered_sinks


def test_the_table_sinks_are_row_sinks_registered_under_their_sections():
    kinds = registered_sinks()
    assert kinds["postgres"] is PostgresSink and kinds["mysql"] is MySQLSink
    assert all(issubclass(k, RowSink) and k.KIND == "row" for k in (PostgresSink, MySQLSink))
    assert (PostgresSink.NAME, MySQLSink.NAME) == ("postgres", "mysql")


def test_the_enabled_sections_are_built_in_their_order():
    cfg = CDCConfig()
    assert build_sinks(cfg.sinks) == []
    cfg.sinks.mysql.enabled = True
    cfg.sinks.postgres.enabled = True
    cfg.sinks.postgres.schema_name = "lake"
    built = build_sinks(cfg.sinks)
    assert [name for name, _ in built] == ["postgres", "mysql"]
    assert built[0][1].schema_name == "lake" and built[1][1].database == cfg.sinks.mysql.database


def test_a_name_is_registered_once_and_a_sink_is_of_one_kind():
    with pytest.raises(SinkError):
        register_sink("postgres")(type("OtherPostgres", (RowSink,), {}))
    with pytest.raises(SinkError):
        register_sink("neither")(type("Neither", (Sink,), {}))
    lake = register_sink("test_lake")(type("TestLake", (BatchSink,), {}))
    assert registered_sinks()["test_lake"] is lake and lake.KIND == "batch" and lake.NAME == "test_lake"
