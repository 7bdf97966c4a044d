"""``cdc bench peers`` and ``cdc bench sinks`` end to end at a tiny size: Debezium in a real
Kafka Connect worker and Flink CDC in a real MiniCluster race ours on one binlog range and one
table; the merge job and Debezium's JDBC sink land the same Debezium topic.  Figures are not
checked (timing is never asserted); what is: every side's topic held exactly the records
expected, each peer's JVM was measured, every sink table equals the source, and the section
written names what ran."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from cdc.bench.peers_race import bench_peers
from cdc.bench.peers_report import write_peers_section
from cdc.bench.report import PEERS_HEADING
from cdc.bench.sink_race import JDBC, OURS, bench_sinks
from cdc.stack.manager import stack_down


@pytest.fixture(scope="module")
def bench_state(tmp_path_factory):
    """One embedded stack (its server as the peers need it) for both races: each bench starts the
    stack of its state directory or finds it running, and keeps it with ``keep_running``; each run
    has its own databases and topics. Started once, not once a test; stopped at the module's end."""
    state = tmp_path_factory.mktemp("bench-peers") / "bench"
    try:
        yield state
    finally:
        stack_down(state)


def test_bench_peers_smoke(bench_state: Path, tmp_path: Path):
    result = bench_peers(bench_state, stream_rows=2000, oltp_rows=300, snapshot_rows=3000, chunk_size=1024,
                         rounds=1, parallelisms=(2,), keep_running=True, console=Console(width=160))
    assert result["server_version"].startswith("5.7.")
    assert result["versions"]["debezium_connector_mysql"].startswith("3.6.")
    assert result["versions"]["flink_cdc"] != "?" and result["versions"]["kafka_connect"] != "?"
    stream = result["streaming"]
    for workload in ("streaming", "single_row"):  # the second workload's runs after the first's, same round
        changes = result[workload]["changes"]
        for side in ("ours", "connect"):  # each delete followed by its tombstone, on both sides
            run = result[workload][side]
            assert run["topic_records"] == changes["total"] + changes["delete"], (workload, side, run)
            assert run["rows_per_s_from_first"] > 0 and run["rss_peak_mb"] > 0 and run["bytes_per_record"] > 0
    assert stream["connect"]["rss_peak_mb"] > 100  # a JVM of its own, not this process
    snap = result["snapshot"]
    assert set(snap["rounds"][0]["runs"]) == {"ours_p1", "ours_p2", "connect", "flink_p2"}
    for side in ("ours_p1", "ours_p2", "connect", "flink_p2"):
        assert snap[side]["topic_records"] == 3000, (side, snap[side])
        assert snap[side]["rows_per_s_from_first"] > 0 and snap[side]["rss_peak_mb"] > 0
    assert snap["flink_p2"]["parallelism"] == snap["ours_p2"]["parallelism"] == 2
    for name in ("ours/connect_after_warmup", "rss connect/ours"):
        assert stream["ratios"][name] > 0
    for name in ("ours_p1/connect_from_signal", "ours_p2/flink_p2_from_first", "rss flink_p2/ours_p2"):
        assert snap["ratios"][name] > 0
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\n## Stream\n\nkept\n")
    write_peers_section(out, result)
    text = out.read_text()
    assert text.index(PEERS_HEADING) < text.index("## Stream") and "kept" in text
    assert "Kafka Connect" in text and "Flink CDC" in text


def test_bench_sinks_smoke(bench_state: Path):
    """The merge job and Debezium's JDBC sink land the same Debezium topic, each verified equal to
    the source after the backlog and again after the latency runs (bench_sinks raises otherwise)."""
    result = bench_sinks(bench_state, events=3000, rate=300, seconds=4.0, rounds=1, partitions=2, keep_running=True,
                         console=Console(width=160))
    changes = result["changes"]
    assert result["records"] == changes["total"] + changes["delete"]  # Debezium wrote them, tombstones too
    runs = result["rounds"][0]["runs"]
    assert runs[OURS]["verify"]["equal"] and runs[JDBC]["verify"]["equal"]
    assert runs[OURS]["events"] == result["records"]  # the merge job read every record of the topic
    assert runs[JDBC]["records"] == result["records"] and runs[JDBC]["records_per_s"] > 0
    for side in (OURS, JDBC):
        lat = result["latency"][side]
        assert lat["writes"] > 0 and lat["rows_measured"] == lat["writes"] and lat["p99_ms"] is not None
    assert result["final_verify"] == {OURS: {"equal": True}, JDBC: {"equal": True}}
    assert result["ratios"]["merge_job/jdbc_sink"] > 0
