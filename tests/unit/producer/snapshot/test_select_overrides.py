"""Debezium's snapshot.select.statement.overrides mapped onto chunked snapshots (pure parts)."""

from __future__ import annotations

import pytest

from common.config import CDCConfig
from producer.snapshot.select_overrides import OverrideError, combined, override_condition


@pytest.mark.parametrize("text, condition", [
    ("SELECT * FROM shop.orders WHERE status <> 'archived'", "status <> 'archived'"),
    ("select *\n from `shop`.`orders`\n where id > 10 and (a = 1 or b = 2);", "id > 10 and (a = 1 or b = 2)"),
    ("SELECT * FROM orders WHERE x = 1", "x = 1"),
    ("status = 'open'", "status = 'open'"),
    ("SELECT * FROM shop.orders", None),
])
def test_debeziums_statement_or_a_condition(text, condition):
    assert override_condition("shop.orders", text) == condition


@pytest.mark.parametrize("text, why", [
    ("SELECT id, total FROM shop.orders WHERE x = 1", "SELECT \\* FROM <table> WHERE"),
    ("SELECT * FROM shop.orders o JOIN shop.c c ON o.c = c.id", "SELECT \\* FROM <table> WHERE"),
    ("SELECT * FROM shop.other WHERE x = 1", "reads shop.other, not shop.orders"),
])
def test_what_does_not_map_is_refused_naming_the_setting(text, why):
    with pytest.raises(OverrideError, match=r"source\.snapshot_select_statement_overrides\['shop\.orders'\]: .*" + why):
        override_condition("shop.orders", text)


def test_the_override_is_anded_with_a_signals_condition_but_not_in_delete_missing_snapshots():
    overrides = {"shop.orders": "SELECT * FROM shop.orders WHERE status <> 'archived'"}
    assert combined("shop.orders", overrides, None, False) == "status <> 'archived'"
    assert combined("shop.orders", overrides, "id > 5", False) == "(status <> 'archived') AND (id > 5)"
    assert combined("shop.orders", overrides, None, True) is None
    assert combined("shop.items", overrides, "id > 5", False) == "id > 5"


def test_the_setting_names_tables():
    cfg = CDCConfig.model_validate({"source": {"snapshot_select_statement_overrides": {"shop.orders": "x = 1"}}})
    assert cfg.source.snapshot_select_statement_overrides == {"shop.orders": "x = 1"}
    with pytest.raises(Exception, match="database.table"):
        CDCConfig.model_validate({"source": {"snapshot_select_statement_overrides": {"orders": "x = 1"}}})
