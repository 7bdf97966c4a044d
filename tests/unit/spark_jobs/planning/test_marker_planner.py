"""The marker planner: what each table partition gets of a batch's markers."""

from __future__ import annotations

import json

from spark_jobs.planning.marker_planner import batch_inputs, debezium_markers


def test_markers_of_a_table_without_topic_wait_for_it():
    m1 = {"db": "shop", "table": "quiet", "kind": "OPEN", "position": "1" * 30}
    m2 = {"db": "shop", "table": "orders", "kind": "OPEN", "position": "2" * 30}
    inputs, orphans = batch_inputs("cdc", {}, {}, [("cdc.shop.orders", 0), ("cdc.shop.orders", 1)], [m1, m2])
    assert inputs["cdc.shop.orders|0"] == (None, [m2]) and inputs["cdc.shop.orders|1"] == (None, [m2])
    assert orphans == {"cdc.shop.quiet": [m1]}
    # The next batch: the topic exists now (2 partitions): both get the kept markers.
    m3 = {"db": "shop", "table": "quiet", "kind": "CLOSE", "position": "3" * 30}
    inputs, orphans = batch_inputs("cdc", {}, orphans, [("cdc.shop.quiet", 0), ("cdc.shop.quiet", 1)], [m3])
    assert inputs["cdc.shop.quiet|0"][1] == [m1, m3] == inputs["cdc.shop.quiet|1"][1] and orphans == {}


def test_a_debezium_record_that_is_no_schema_change_is_passed_over():
    assert debezium_markers(b"not json", 7) == []
    assert debezium_markers(json.dumps({"no": "ddl"}).encode(), 8) == []
