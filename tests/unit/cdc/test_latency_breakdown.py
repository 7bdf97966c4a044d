"""``cdc bench latency``'s lining up of the clocks (:mod:`cdc.bench.latency_breakdown`): a row is
placed in the batch whose ``foreachBatch`` call held its arrival and the range of its
partition, and its parts add up to its latency exactly."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.bench.latency_breakdown import PARTS, batch_summary, batch_timelines, breakdown, debezium_key, iso_ms, row_parts


def _batch(batch_id: int, trigger_ms: float, start_ms: float, seconds: float, plan_s: float,
           spans: dict[int, float]) -> tuple[dict, dict]:
    recent = {"batch_id": batch_id, "started_at": start_ms / 1000, "ended_at": start_ms / 1000 + seconds,
              "input": 10, "phases": {"plan_s": plan_s, "tasks_s": 0.05},
              "spans": [["t", p, began / 1000, began / 1000 + 0.01] for p, began in spans.items()]}
    stamp = dt.datetime.fromtimestamp(trigger_ms / 1000, dt.timezone.utc)
    progress = {"batchId": batch_id, "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "durationMs": {"latestOffset": 5, "addBatch": 90, "other": 1}}
    return recent, progress


def test_iso_ms_reads_sparks_timestamps():
    assert iso_ms("1970-01-01T00:00:01.250Z") == pytest.approx(1250.0)


def test_a_row_is_split_by_its_batch_and_its_range():
    r1, p1 = _batch(1, 1_000_000.0, 1_000_040.0, 0.1, 0.02, {0: 1_000_070.0, 1: 1_000_090.0})
    r2, p2 = _batch(2, 1_000_200.0, 1_000_230.0, 0.1, 0.01, {0: 1_000_250.0})
    batches = batch_timelines([r2, r1], [p1, p2, {"batchId": 9, "timestamp": None}])
    assert [b["batch_id"] for b in batches] == [1, 2] and batches[0]["spark_ms"] == {"latestOffset": 5, "addBatch": 90}
    rows = [(7, 1, 999_900.0, 999_950.0, 1_000_095.0),   # batch 1, partition 1
            (8, 0, 1_000_100.0, 1_000_120.0, 1_000_260.0),  # batch 2
            (9, 1, 1_000_100.0, 1_000_120.0, 1_000_260.0),  # batch 2 names no range of partition 1: left out
            (10, 0, 1_000_100.0, 1_000_120.0, 1_000_180.0)]  # between the batches' calls: left out
    parts = row_parts(rows, batches)
    assert [p["id"] for p in parts] == [7, 8]
    first = parts[0]
    assert first == {"id": 7, "batch_id": 1, "total": 195.0, "producer": 50.0, "to_trigger": 50.0,
                     "spark_before": 40.0, "driver_plan": pytest.approx(20.0), "to_range": pytest.approx(30.0),
                     "in_range": 5.0}


@given(st.lists(st.tuples(st.floats(0, 50), st.floats(0, 400), st.floats(0, 100)), min_size=1, max_size=30),
       st.floats(0, 200))
def test_the_parts_add_up_to_the_latency(rows, producer_ms):
    r, p = _batch(3, 2_000_000.0, 2_000_050.0, 1.0, 0.03, {0: 2_000_100.0})
    batches = batch_timelines([r], [p])
    placed = [(i, 0, 2_000_000.0 - wait - producer_ms, 2_000_000.0 - wait, 2_000_100.0 + into)
              for i, (into, wait, _) in enumerate(rows)]
    parts = row_parts(placed, batches)
    assert len(parts) == len(rows)
    for part in parts:
        assert sum(part[name] for name in PARTS) == pytest.approx(part["total"])


def test_the_breakdown_and_the_batches_summary():
    parts = [{"total": float(t), **{name: t / len(PARTS) for name in PARTS}} for t in range(1, 201)]
    out = breakdown(parts)
    assert out["rows"] == 200 and out["total"]["p50"] == 101.0 and out["total"]["p99"] == 199.0
    assert out["total"]["tail_mean"] == pytest.approx(199.5)  # the two rows at or above the p99
    assert breakdown([]) == {"rows": 0}
    r1, p1 = _batch(1, 1_000.0, 1_010.0, 0.1, 0.02, {})
    r2, p2 = _batch(2, 1_300.0, 1_310.0, 0.1, 0.02, {})
    summary = batch_summary(batch_timelines([r1, r2], [p1, p2]))
    assert summary["batches"] == 2 and summary["trigger_gap_ms_median"] == pytest.approx(300.0)
    assert summary["ours_ms_median"]["plan_s"] == pytest.approx(20.0)


def test_a_debezium_key_is_read_with_and_without_its_schema():
    with_schema = b'{"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 7}}'
    assert debezium_key(with_schema) == {"id": 7}
    assert debezium_key(b'{"id": 8}') == {"id": 8}
    assert debezium_key(b'{"payload": 3, "other": 1}') == {"payload": 3, "other": 1}  # (not the schema's envelope)
    assert debezium_key(b'[1, 2]') is None


def test_the_stacks_servers_are_left_out_of_the_jobs_cpu():
    """The stack's record names its servers' pids (MySQL servers, Kafka nodes, PostgreSQL):
    the idle job's CPU leaves them out when the benchmark started them as its children."""
    from cdc.bench.latency_breakdown import stack_pids

    record = {"state_dir": "/x", "mysql": {"pid": 11, "port": 3306}, "mysql2": {"pid": 12},
              "kafka": {"nodes": [{"id": 1, "pid": 21}, {"id": 2, "pid": 22}, {"id": 3, "pid": None}]},
              "postgres": {"pid": 31}, "spark": {}}
    assert stack_pids(record) == {11, 12, 21, 22, 31}
    assert stack_pids({}) == set()
