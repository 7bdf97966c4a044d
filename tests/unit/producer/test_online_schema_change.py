"""gh-ost's and pt-osc's helper tables and cut-overs, as the producer reads them."""

from __future__ import annotations

from common.config import SourceConfig
from producer.capture_filter import CaptureFilter
from producer.online_schema_change import Helper, OnlineSchemaChanges, helper_candidates


def test_helper_names_of_both_tools():
    assert helper_candidates("_orders_gho") == [Helper("gh-ost", "gho", "orders")]
    assert helper_candidates("_orders_ghc") == [Helper("gh-ost", "ghc", "orders")]
    assert helper_candidates("_orders_20261128161800_del") == [Helper("gh-ost", "del", "orders")]
    assert helper_candidates("_orders_new") == [Helper("pt-online-schema-change", "new", "orders")]
    assert helper_candidates("__orders_old") == [Helper("pt-online-schema-change", "old", "_orders"),
                                                 Helper("pt-online-schema-change", "old", "orders")]
    assert helper_candidates("orders") == [] and helper_candidates("orders_new") == []


def test_helper_tables_of_captured_tables_are_not_captured():
    flt = CaptureFilter(SourceConfig(include_tables=[r"shop\..*"]))
    assert flt.captures("shop", "orders")
    for helper in ("_orders_gho", "_orders_ghc", "_orders_ghk", "_orders_del", "_orders_new", "_orders_old",
                   "__orders_new"):
        assert not flt.captures("shop", helper), helper
        assert flt.listed("shop", helper)
    # a table whose name only looks like one, of a table not captured, stays captured
    assert CaptureFilter(SourceConfig(include_tables=[r"shop\._.*"])).captures("shop", "_orders_new")
    # source.online_schema_change: capture treats them as any table
    assert CaptureFilter(SourceConfig(include_tables=[r"shop\..*"], online_schema_change="capture")).captures(
        "shop", "_orders_gho")


def _osc() -> OnlineSchemaChanges:
    return OnlineSchemaChanges(CaptureFilter(SourceConfig(include_tables=[r"shop\..*"])).listed)


def test_a_gh_ost_cut_over_takes_its_alter():
    osc = _osc()
    assert osc.helper_ddl("create", "shop", "_orders_gho", "create /* gh-ost */ table `shop`.`_orders_gho` like t")
    assert osc.helper_ddl("alter", "shop", "_orders_gho", "alter /* gh-ost */ table `shop`.`_orders_gho` ADD x INT")
    assert not osc.helper_ddl("alter", "shop", "orders", "ALTER TABLE orders ADD y INT")
    cuts, others = osc.cut_overs([(("shop", "orders"), ("shop", "_orders_del")),
                                  (("shop", "_orders_gho"), ("shop", "orders")),
                                  (("shop", "a"), ("shop", "b"))])
    assert others == [(("shop", "a"), ("shop", "b"))]
    assert [(c.db, c.table, c.ghost, c.tool) for c in cuts] == [("shop", "orders", "_orders_gho", "gh-ost")]
    assert cuts[0].snapshot_reason() is None  # a nullable column added: the copy changed no value


def test_a_cut_over_whose_copy_rewrote_rows_or_whose_alter_was_not_read_snapshots():
    osc = _osc()
    osc.helper_ddl("create", "shop", "_orders_new", "CREATE TABLE `shop`.`_orders_new` (id INT)")
    osc.helper_ddl("alter", "shop", "_orders_new", "ALTER TABLE `shop`.`_orders_new` ADD c CHAR(3) DEFAULT 'EUR'")
    cuts, _ = osc.cut_overs([(("shop", "orders"), ("shop", "_orders_old")),
                             (("shop", "_orders_new"), ("shop", "orders"))])
    assert "pt-online-schema-change's copy _orders_new: a column added with a value" in cuts[0].snapshot_reason()
    cuts, _ = osc.cut_overs([(("shop", "_orders_new"), ("shop", "orders"))])  # its ALTER was taken already
    assert "was not read" in cuts[0].snapshot_reason()


def test_a_two_step_cut_over_is_one_rename_at_a_time():
    """gh-ost's ``--cut-over=two-step``: ``t`` moved aside, then the copy renamed to ``t``."""
    osc = _osc()
    osc.helper_ddl("create", "shop", "_orders_gho", "create table `shop`.`_orders_gho` like `shop`.`orders`")
    osc.helper_ddl("alter", "shop", "_orders_gho", "alter table `shop`.`_orders_gho` MODIFY v VARCHAR(80)")
    assert osc.cut_overs([(("shop", "orders"), ("shop", "_orders_del"))]) == ([], [])
    cuts, others = osc.cut_overs([(("shop", "_orders_gho"), ("shop", "orders"))])
    assert others == [] and cuts[0].snapshot_reason() == "gh-ost's copy _orders_gho: a column's type changed"


def test_renames_that_are_no_cut_over_stay_renames():
    osc = _osc()
    pairs = [(("shop", "orders"), ("shop", "_invoices_old")),  # another table's helper name
             (("shop", "_orders_gho"), ("other", "orders"))]  # into another database
    assert osc.cut_overs(pairs) == ([], pairs)
