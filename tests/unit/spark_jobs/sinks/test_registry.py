"""One sink interface: the sinks register under their configuration section, the enabled
ones are built from the configuration, and the driver names none."""

from __future__ import annotations

import pytest

from common.config import CDCConfig
from common.config_sections import sink_settings
from spark_jobs.errors import SinkError
from spark_jobs.sinks import registry
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


def test_a_name_is_registered_once_and_a_sink_is_of_one_kind(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(registry, "_SINKS", registered_sinks())  # (the test's sink gone after it)
    with pytest.raises(SinkError):
        register_sink("postgres")(type("OtherPostgres", (RowSink,), {}))
    with pytest.raises(SinkError):
        register_sink("neither")(type("Neither", (Sink,), {}))
    lake = register_sink("test_lake")(type("TestLake", (BatchSink,), {}))
    assert registered_sinks()["test_lake"] is lake and lake.KIND == "batch" and lake.NAME == "test_lake"


def test_every_sink_has_its_settings_registered_beside_it():
    settings = sink_settings()
    assert set(registered_sinks()) <= set(settings)
    assert all(model.__module__ == f"spark_jobs.sinks.{name}_settings"
               for name, model in settings.items() if name in registered_sinks())


def test_a_sink_whose_settings_are_not_registered_is_named(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(registry, "_SINKS", registered_sinks())
    register_sink("unsettled")(type("Unsettled", (RowSink,), {}))
    with pytest.raises(SinkError, match="no settings registered for the sinks unsettled"):
        build_sinks(CDCConfig().sinks)
