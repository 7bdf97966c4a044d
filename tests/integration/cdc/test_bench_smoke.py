"""``cdc bench stream`` runs end to end at a tiny size (figures are not checked: timing is
never asserted; only that every change made it through every path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from cdc.bench.merge import bench_merge
from cdc.bench.snapshot import bench_snapshot
from cdc.bench.stream import bench_stream
from cdc.stack.manager import stack_down


@pytest.fixture(scope="module")
def bench_state(tmp_path_factory):
    """One embedded stack for the stream, snapshot and merge smokes (each bench starts the stack
    of its state directory or finds it running, and keeps it with ``keep_running``; each run has
    its own database and topics): started once, not once a test; stopped at the module's end."""
    state = tmp_path_factory.mktemp("bench-smoke") / "bench"
    try:
        yield state
    finally:
        stack_down(state)


def test_bench_stream_smoke(bench_state: Path):
    result = bench_stream(bench_state, rows=3000, keep_running=True, console=Console(width=160))
    changes = result["changes"]
    assert result["rows"] == changes["total"] >= 3000
    assert changes["insert"] > changes["update"] > changes["delete"] > 0
    assert result["reference"]["rows"] == result["rows"]
    for key in ("producer_tx", "producer_no_tx"):
        run = result[key]
        assert run["reached_end"]
        assert run["records"] == result["rows"], (key, run)
        assert run["events"] == result["rows"], (key, run)
        assert run["rows_per_s"] > 0
        assert run["rss_peak_mb"] > 0
    for key in ("reference", "native"):
        assert result[key]["rows_per_s"] > 0
    assert set(result["ratios"]) == {"b_tx/a", "b_no_tx/a", "c/a"} | {
        f"{key}_{clock}/native" for key in ("producer_tx", "producer_no_tx") for clock in ("after_startup", "after_warmup")}
    assert result["native"]["runs"] == 1  # (the race runs it at least 3 times, the median kept)
    assert all(r > 0 for r in result["ratios"].values())


def test_bench_snapshot_smoke(bench_state: Path):
    result = bench_snapshot(bench_state, rows=6000, chunk_size=1000, writes_per_s=200, keep_running=True,
                            console=Console(width=160))
    assert result["keyset"]["rows"] == 6000
    assert result["snapshot_quiet"]["rows"] == 6000
    # Under writes the snapshot also reads the rows inserted while it runs (up to its max key).
    assert result["snapshot_writes"]["rows"] >= 6000 and result["snapshot_writes"]["writes"] > 0
    assert result["dump"]["rows_per_s"] > 0
    assert set(result["ratios"]) == {"snapshot_quiet/a", "snapshot_writes/a", "dump/a"}


def test_bench_merge_smoke(bench_state: Path):
    # (figures not judged: a 3 s latency run at 500 writes/s, idle changes 0.5 s apart and the lakes'
    # latency run at a 2 s commit interval go the same ways as the benchmark's longer ones)
    result = bench_merge(bench_state, events=3000, rate=500, seconds=3.0, kafka_sources=1, keep_running=True,
                         idle_gap_s=0.5, lake_latency_interval_s=2.0, console=Console(width=160))
    assert result["reference"]["events"] == result["changes"]["total"] >= 3000
    assert result["reference_compiled"]["events"] == result["changes"]["total"]
    assert result["merge"]["events"] >= result["changes"]["total"] and result["merge"]["events_per_s"] > 0
    lt, idle = result["latency"], result["idle_change"]
    assert lt["writes"] > 0 and lt["rows_measured"] == lt["writes"] and lt["p99_ms"] is not None
    assert idle["changes"] == 5 and idle["median_ms"] is not None
    assert result["ratios"]["b/a"] > 0 and result["merge"]["steady_events_per_s"] > 0
    so = result["scale_out"]  # both standalone runs put every source row in their sink table
    assert so["workers_1"]["events"] == so["workers_2"]["events"] > result["changes"]["total"]
    summary = result["summary"]  # what --json prints
    for key in ("reference_events_per_s", "merge_events_per_s", "ratio", "producer_events_per_s",
                "latency_p50_ms", "latency_p99_ms", "idle_change_ms", "scale_out_ratio",
                "reference_compiled_events_per_s", "steady_ratio_to_compiled"):
        assert summary[key] is not None and summary[key] > 0, key
    # --kafka-sources: both sources' runs (each in a JVM of its own) put every row in their sink
    ks = result["kafka_sources"]
    assert ks["rounds"] == 1 and ks["ratios_jvm_to_python"][0] > 0
    for source in ("cdc-kafka", "kafka"):
        assert ks[source]["events"] >= result["changes"]["total"], (source, ks[source])


def test_bench_race_smoke(tmp_path: Path):
    """Debezium's rows (``--debezium``) at a tiny size: every record of the range and every row
    of the table reached Debezium's handler, and its Kafka runs left them all in the broker."""
    state = tmp_path / "bench"
    try:
        stream = bench_stream(state, rows=3000, transactions=(False,), debezium="count:json,kafka:avro", reference=False,
                              keep_running=True, console=Console(width=160))
        assert stream["server_version"].startswith("5.7")
        for key in ("debezium_count_json", "debezium_kafka_avro"):
            run = stream[key]
            assert run["records"] == stream["rows"] and run["rows_per_s_from_first"] > 0, run
            assert run["rss_peak_mb"] > 0 and run["startup_s"] > 0
        assert stream["debezium_kafka_avro"]["topic_records"] == stream["rows"]
        assert stream["ratios"]["producer_no_tx/debezium_kafka_avro"] > 0
        # both sides timed from their process's launch (issue 40), the round's order recorded
        assert stream["producer_no_tx"]["clock"] == stream["debezium_kafka_avro"]["clock"] == "process launch"
        assert [r["order"] for r in stream["rounds"]] == [["ours", "debezium"]]
        snap = bench_snapshot(state, rows=3000, chunk_size=1024, writes_per_s=0, debezium="kafka:avro",
                              debezium_chunk_sizes=(1024,), reference=False, console=Console(width=160))
        run = snap["debezium_kafka_avro_1024"]
        assert run["records"] == run["topic_records"] == 3000 and run["rows_per_s"] > 0
        assert snap["ratios"]["snapshot_quiet/debezium_kafka_avro_1024"] > 0
        assert snap["snapshot_quiet"]["topic_records"] == 3000  # ours counted in its topic, as Debezium's
    finally:  # the stream's stack is kept for the snapshot's run: stopped whatever happened
        stack_down(state)
