"""``snapshot.new_tables``: which tables a start finds newly matching the capture lists, and the setting's values."""

from __future__ import annotations

import pytest

from common.config import CDCConfig, SourceConfig, load_config
from common.errors import ConfigError
from producer.new_tables import capture_lists, newly_captured

TABLES = [("shop", "orders"), ("shop", "items"), ("shop", "audit"), ("crm", "people"), ("cdc_control", "cdc_signal"),
          ("mysql", "user")]


def _source(**lists) -> SourceConfig:
    return SourceConfig(**lists)


def test_a_widened_table_list_gives_the_tables_it_adds_and_no_other():
    was = capture_lists(_source(include_tables=[r"shop\.orders"]))
    now = _source(include_tables=[r"shop\.orders", r"shop\.i.*", r"crm\..*"])
    assert newly_captured(TABLES, was, now) == ["crm.people", "shop.items"]


def test_a_database_list_an_exclude_list_and_the_signal_table_decide_as_the_capture_filter_does():
    was = capture_lists(_source(include_databases=["shop"], exclude_tables=[r"shop\.(audit|items)"]))
    assert newly_captured(TABLES, was, _source(include_databases=["shop"], exclude_tables=[r"shop\.audit"])) \
        == ["shop.items"]
    # no lists now: every database but the system ones and the signal table's
    assert newly_captured(TABLES, was, _source()) == ["crm.people", "shop.audit", "shop.items"]
    # the signal table's database is never captured; moving the signal table releases its old one
    moved = _source(signal_table="ops.signals")
    assert newly_captured(TABLES, capture_lists(_source()), moved) == ["cdc_control.cdc_signal"]


def test_nothing_is_new_without_stored_lists_with_the_same_lists_or_with_narrower_ones():
    now = _source(include_databases=["shop"])
    assert newly_captured(TABLES, None, now) == []  # a first start, or an offset record of before
    assert newly_captured(TABLES, {}, now) == []
    assert newly_captured(TABLES, capture_lists(now), now) == []
    assert newly_captured(TABLES, capture_lists(_source()), now) == []


def test_the_stored_lists_are_plain_values_that_survive_json():
    import json
    lists = capture_lists(_source(include_tables=[r"shop\..*"], exclude_databases=["tmp"]))
    assert json.loads(json.dumps(lists)) == lists
    assert set(lists) == {"include_databases", "exclude_databases", "include_tables", "exclude_tables", "signal_table"}


def test_the_setting_defaults_to_incremental_and_refuses_other_values_naming_the_allowed_ones(tmp_path):
    assert CDCConfig().snapshot.new_tables == "incremental"
    path = tmp_path / "cdc.yaml"
    for text, expected in (("blocking", "blocking"), ("OFF", "off"), ("off", "off"), ("Incremental", "incremental")):
        path.write_text(f"snapshot:\n  new_tables: {text}\n")  # (YAML reads a bare off as false)
        assert load_config(path, environ={}).snapshot.new_tables == expected, text
    assert load_config(path, environ={"CDC__SNAPSHOT__NEW_TABLES": "blocking"}).snapshot.new_tables == "blocking"
    path.write_text("snapshot:\n  new_tables: initial\n")
    with pytest.raises(ConfigError, match="new_tables.*incremental, blocking, off"):
        load_config(path, environ={})
