"""The soak in its short form: partitions as deep as hours of load leave them, made in
seconds (one-record batches of tombstones before the producer starts), then the producer
and the merge job under a steady mixed load: the job keeps up and the sink ends equal.

(On the stand-in broker the project ran on before Apache Kafka, such a partition starved a
reader with a 10 ms fetch wait for good.)  The run also samples what ``cdc status`` says of lost
Kafka history while the producer commits under load: nothing, since nothing is lost.
"""

from __future__ import annotations

from rich.console import Console

from cdc.bench.soak import PEAK_SECTION, MixedLoads, render, run_soak, verdict
from cdc.stack.kafka_broker import kafka_pids

#: One-record batches per partition (the stand-in broker of before answered a 10 ms fetch of
#: such a partition with nothing).
DEEP_BATCHES = 40_000


def test_a_short_soak_on_deep_partitions_ends_equal_without_false_alarms(stack, config, tmp_path):
    pids = {**kafka_pids(stack.data["kafka"]), "postgres": stack.data["postgres"].get("pid")}
    # (a minute of load: the deep partitions are read through within the first 20-30 s, the rest is
    # the steady load on top of them; samples every 6 s, the sinks compared every 2 s after it)
    result = run_soak(config, mysql=stack.mysql, work_dir=tmp_path / "soak", minutes=1.0, rate=300, rows=3000,
                      partitions=2, sample_s=6.0, deep_batches=DEEP_BATCHES, drain_s=150.0, drain_poll_s=2.0,
                      stack_pids=pids, loss_checks=20, console=Console(width=200))
    assert result["equal"], result
    samples = result["samples"]
    assert len(samples) >= 5  # (a sample every 6 s plus its look-ups: how many fit in 60 s depends on the machine)
    # what ``cdc status`` says of lost history, asked 20 times a sample while the producer commits every 0.1 s
    assert result["loss_checks"] == 20 * len(samples) and result["lost_history_alarms"] == []
    # the load ran, the merge job merged it, the sink's rows were measured and memory sampled
    assert sum(result["ops"].values()) > 300 * 40  # (two thirds of the minute's 300/s, as before of 90 s)
    assert set(result["ops"]) == {"insert", "update", "delete", "key_change"}
    assert all(v > 0 for v in result["ops"].values())
    assert any(s["merged_per_s"] for s in samples)
    assert sum(s["rows_measured"] for s in samples) > 1000
    assert all(s["rss_mb"]["producer"] > 0 and s["rss_mb"]["merge"] > 0 for s in samples)
    assert result["final_warnings"] == []
    v = result["verdict"]
    assert v["equal"] and v["no_stall"] and v["false_loss_alarms"] == 0
    text = render(result, when="now")
    assert text.startswith("## Soak") and "| min |" in text


def test_the_verdict_compares_the_ends_of_the_run_after_the_warm_up():
    def sample(t, p99, rss):
        return {"t_s": t, "latency_p99_ms": p99, "rss_mb": {"producer": rss, "merge": rss, "broker": rss * 3}}
    base = {"equal": True, "final_warnings": [], "lost_history_alarms": []}
    flat = [sample(t, 900 if t > 60 else 5000, 100) for t in range(0, 3600, 30)]
    v = verdict({**base, "samples": flat})
    assert v["passed"] and v["latency_p99_ratio"] == 1.0 and v["rss_growth"]["merge"] == 1.0
    assert v["latency_p99_max_ms"] == 5000 and v["latency_p99_max_after_warm_up_ms"] == 900  # (the warm-up's not judged)
    rising = [sample(t, 900 + t, 100 + t / 10) for t in range(0, 3600, 30)]
    v = verdict({**base, "samples": rising})
    assert not v["latency_flat"] and not v["rss_flat"] and not v["passed"]
    # 1.3 times at the end: more than the 1.2 allowed
    v = verdict({**base, "samples": [sample(t, 900 if t < 1800 else 1170, 100) for t in range(0, 3600, 30)]})
    assert v["latency_p99_ratio"] == 1.3 and not v["latency_flat"] and not v["passed"]
    # one sample past 2 s after the warm-up
    v = verdict({**base, "samples": [sample(t, 2100 if t == 1200 else 900, 100) for t in range(0, 3600, 30)]})
    assert v["latency_flat"] and not v["latency_bounded"] and not v["passed"]
    # the broker's memory is judged too
    growing = [{**s, "rss_mb": {**s["rss_mb"], "broker": 300 + s["t_s"] / 5}} for s in flat]
    v = verdict({**base, "samples": growing})
    assert v["rss_growth"]["broker"] > 1.25 and not v["rss_flat"] and not v["passed"]
    # equal, but 90 s after the load: more than the 60 allowed
    v = verdict({**base, "samples": flat, "drain_s": 90.0})
    assert v["equal"] and not v["no_stall"] and not v["passed"]
    v = verdict({**base, "samples": flat, "lost_history_alarms": ["the position Kafka holds ..."]})
    assert v["false_loss_alarms"] == 1 and not v["passed"]
    v = verdict({**base, "samples": flat, "final_warnings": ["t[0] is read at 77 records/s while 900/s arrive"]})
    assert not v["no_stall"] and not v["passed"]


def test_writers_side_by_side_own_disjoint_rows_and_share_the_rate():
    loads = MixedLoads({}, "db", 1000, 10, writers=3)
    owned = [set(load.live) for load in loads.loads]
    assert set().union(*owned) == set(range(10)) and sum(map(len, owned)) == 10
    assert [load.next_id % 3 for load in loads.loads] == [10 % 3, 11 % 3, 12 % 3]  # (each inserts ids of its own)
    assert [load.rate for load in loads.loads] == [334] * 3 and not any(load.single_row for load in loads.loads)
    peak = MixedLoads({}, "db", 0, 10, writers=2)
    assert all(load.rate == 0 and load.single_row and load.per_tick == 1 for load in peak.loads)


def test_at_the_sources_peak_the_pipeline_keeps_pace_and_ends_equal(stack, config, tmp_path):
    """Two connections write single-row transactions as fast as the server takes them while the
    producer and the merge job run: the sink ends equal, the rate the source took is reported."""
    result = run_soak(config, mysql=stack.mysql, work_dir=tmp_path / "peak", minutes=0.75, rate=0, writers=2,
                      rows=6000, partitions=2, sample_s=15.0, drain_s=150.0, drain_poll_s=2.0,
                      console=Console(width=200))
    assert result["equal"], result
    assert result["writers"] == 2 and all(v > 0 for v in result["ops"].values())
    assert sum(result["ops"].values()) >= result["samples"][-1]["changes_written"] > 0
    assert any(s["written_per_s"] for s in result["samples"]) and any(s["merged_per_s"] for s in result["samples"])
    text = render(result, when="now")
    assert text.startswith(PEAK_SECTION) and "fastest single-row load (2 connections" in text


def test_the_verdict_reports_what_was_sustained_after_the_warm_up():
    samples = [{"t_s": t, "latency_p99_ms": 900, "rss_mb": {"producer": 100}, "written_per_s": t,
                "merged_per_s": 2 * t, "source_lag_s": 9.0 if t < 120 else t / 1000} for t in range(0, 600, 30)]
    v = verdict({"equal": True, "final_warnings": [], "lost_history_alarms": [], "samples": samples})
    assert (v["written_per_s_median"], v["merged_per_s_median"]) == (345, 690)  # 120..570 s only
    assert (v["source_lag_median_s"], v["source_lag_max_s"]) == (0.345, 0.57)  # (the warm-up's 9 s not counted)
