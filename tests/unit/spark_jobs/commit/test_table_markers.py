"""The table markers: applied once every partition of their table was read past them."""

from __future__ import annotations

import json

from common.config import CDCConfig
from contract.markers import TRUNCATE
from spark_jobs.task.settings import MergeSettings
from spark_jobs.sharding.routes import Router
from spark_jobs.commit.table_markers import TableMarkers, debezium_truncates


def test_debeziums_truncates_become_truncate_markers_at_each_tables_highest():
    stats = [{"truncates": [["shop", "orders", "0005"], ["shop", "items", "0002"]]},
             {"truncates": [["shop", "orders", "0009"]]}, {}]
    assert debezium_truncates(stats) == [
        {"marker": {"kind": TRUNCATE, "db": "shop", "table": "items", "below": "0002"}, "required": {}},
        {"marker": {"kind": TRUNCATE, "db": "shop", "table": "orders", "below": "0009"}, "required": {}}]
    assert debezium_truncates([]) == []


def test_a_marker_waits_until_the_checkpoint_passed_every_end_it_waits_for(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "4").write_text("v1\n{}\n" + json.dumps({"cdc.shop.orders": {"0": 10, "1": 3}}))
    cfg = CDCConfig()
    settings = MergeSettings(bootstrap="127.0.0.1:1", prefix="cdc", sinks=cfg.sinks)
    markers = TableMarkers(cfg, "cdc", "source", tmp_path, Router.from_config(cfg), settings)
    waiting = [{"marker": {"kind": TRUNCATE, "db": "shop", "table": "orders", "below": "0001"},
                "required": {"cdc.shop.orders|0": 10, "cdc.shop.orders|1": 5}}]
    assert markers.apply(waiting, 4) == (waiting, 0, 0)  # partition 1 is read to 3 of 5
    assert markers.apply(waiting, 5) == (waiting, 0, 0)  # no offsets of batch 5 yet
