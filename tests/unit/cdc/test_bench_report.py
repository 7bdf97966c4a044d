"""The merge section of docs/benchmarks.md: the CPU figures written when the run has them."""

from __future__ import annotations

from cdc.bench.report import _merge_lines


def _merge(cpu: bool) -> dict:
    b = {"seconds": 60.0, "events_per_s": 15000.0, "steady_seconds": 50.0, "steady_events_per_s": 20000.0,
         "phases": {"plan_s": 0.1, "read_s": 1.0}, "session_start_s": 10.0, "query_start_s": 9.0, "batches": 6,
         "driver_serial_share": 0.02, "events": 1_000_000}
    ref = {"events_per_s": 40000.0, "seconds": 25.0}
    if cpu:
        b["phases"] = {**b["phases"], "read_cpu_s": 4.0, "decide_cpu_s": 21.0}
        b["cpu_us_per_event"] = {"PostgreSQL": 9.1, "Spark Python workers": 76.1}
        ref["cpu_us_per_event"] = {"driver (Python)": 22.6}
    return {"reference": ref, "producer": {"seconds": 70.0, "events_per_s": 14000.0}, "merge": b, "partitions": 4}


def test_cpu_per_event_by_process_and_by_phase_are_written():
    text = "\n".join(_merge_lines(_merge(cpu=True), 1_000_000, None))
    assert "per event: read 4.0 µs, decide 21.0 µs." in text
    assert "Spark Python workers 76.1 µs, PostgreSQL 9.1 µs; 85.2 µs in all" in text
    assert "two cores give 100.0 µs of CPU per event at the steady rate" in text
    assert "(a) used driver (Python) 22.6 µs" in text
    assert "read_cpu" not in text  # the CPU phases are not listed with the wall-clock ones


def test_a_run_without_cpu_figures_writes_none():
    text = "\n".join(_merge_lines(_merge(cpu=False), 1_000_000, None))
    assert "CPU time" not in text and "plan 0.1 s, read 1.0 s." in text
