"""``cdc bench merge``'s lake runs (f): which runs each engine choice gives, and each run's
configuration (one sink, its engine, a place and an Iceberg catalog of its own)."""

from __future__ import annotations

from pathlib import Path

from cdc.bench.lake import lake_config, lake_run_names
from common.config import CDCConfig


def test_each_engine_adds_a_run_per_format():
    assert lake_run_names() == ("changelog", "delta", "iceberg")
    assert lake_run_names(("spark",)) == ("changelog", "delta-spark", "iceberg-spark")
    assert lake_run_names(("driver", "spark")) == ("changelog", "delta", "iceberg", "delta-spark", "iceberg-spark")


def test_a_runs_configuration_has_one_sink_on_its_engine_in_a_place_of_its_own(tmp_path: Path):
    base = CDCConfig()
    base.kafka.topic_prefix = "bench"
    base.sinks.iceberg.catalog_uri = "sqlite:////tmp/unused.db"  # (the stack gives it)
    seen = set()
    for name in lake_run_names(("driver", "spark")):
        cfg = lake_config(base, tmp_path, name)
        enabled = [s for s in ("changelog", "delta", "iceberg") if getattr(cfg.sinks, s).enabled]
        assert enabled == [name.partition("-")[0]], name
        assert cfg.sinks.delta.engine == cfg.sinks.iceberg.engine == ("spark" if name.endswith("-spark") else "driver")
        assert not cfg.sinks.postgres.enabled and not cfg.sinks.mysql.enabled
        places = (cfg.sinks.delta.path, cfg.sinks.iceberg.warehouse, cfg.sinks.iceberg.catalog_name)
        assert not seen & set(places), name
        seen |= set(places)
        assert cfg.sinks.iceberg.catalog_name.replace("_", "").isalnum()
    assert base.sinks.delta.engine == "driver"  # (a copy: the base is left as it was)


def test_the_lake_section_reports_the_scale_out_with_both_lakes_on():
    from cdc.bench.merge import _lake_summary
    from cdc.bench.report import lake_lines
    run = {"steady_events_per_s": 1000.0, "batches": 4, "phases": {"lake_commit_s": 1.5}}
    lake = {"names": ["changelog", "delta-spark"], "changelog": run, "delta-spark": dict(run, steady_events_per_s=500.0),
            "ratios": {"delta-spark/changelog": 0.5},
            "scale_out": {"lake_engine": "spark", "ratio_2_to_1": 1.25,
                          "workers_1": dict(run, steady_events_per_s=800.0),
                          "workers_2": dict(run, steady_events_per_s=1000.0, batches=5)}}
    text = "\n".join(lake_lines(lake))
    assert "(e') Scale-out with Delta and Iceberg on (spark engine)" in text
    assert "one worker of 1 core 800 events/s (4 batches), two 1,000 (5 batches): **1.25x**" in text
    flat = _lake_summary(lake)
    assert flat["lake_scale_out_ratio"] == 1.25 and flat["lake_standalone_2_workers_events_per_s"] == 1000
    assert "(e')" not in "\n".join(lake_lines({k: v for k, v in lake.items() if k != "scale_out"}))
