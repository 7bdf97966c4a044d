"""The producer's figures as Prometheus serves them: Debezium's names, HELP and TYPE, the
snapshot MBean from the notifications, and the health probes."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc.stack.process import free_port
from producer.metrics import ProducerMetrics


@dataclass
class Resume:
    file: str
    pos: int


def _samples(m: ProducerMetrics) -> dict[tuple[str, tuple], float]:
    """Every sample scraped from ``m``'s endpoint: (name, sorted labels) -> value; and the families' types."""
    server = m.start_server(free_port())
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    out = {}
    for fam in text_string_to_metric_families(text):
        assert fam.documentation, f"{fam.name} has no HELP"
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _dbz(attribute: str, context: str = "streaming", **extra) -> tuple[str, tuple]:
    labels = {"plugin": "mysql", "name": "east", "context": context, **extra}
    return f"debezium_metrics_{attribute}", tuple(sorted(labels.items()))


def test_streaming_figures_under_debeziums_names_and_per_table_and_op():
    m = ProducerMetrics("east")
    now_ms = int(time.time() * 1000)
    m.event(now_ms - 2000, 3, ("shop", "orders", "insert"))
    m.event(now_ms - 1000, 2, ("shop", "orders", "update"))
    m.event(now_ms, 1, ("shop", 'odd "name"', "delete"))
    m.filtered(4)
    m.transaction("0-1-42")
    m.transaction(None)
    m.queue_capacity, m.queue_length = 1000, lambda: 10
    m.set_connected()
    m.committed(Resume("mysql-bin.000003", 777), 0.02)
    s = _samples(m)
    assert s[_dbz("TotalNumberOfEventsSeen")] == 6
    assert (s[_dbz("TotalNumberOfCreateEventsSeen")], s[_dbz("TotalNumberOfUpdateEventsSeen")],
            s[_dbz("TotalNumberOfDeleteEventsSeen")]) == (3, 2, 1)
    assert s[_dbz("NumberOfEventsFiltered")] == 4 and s[_dbz("NumberOfCommittedTransactions")] == 2
    assert s[_dbz("Connected")] == 1 and s[_dbz("NumberOfDisconnects")] == 0
    assert s[_dbz("QueueTotalCapacity")] == 1000 and s[_dbz("QueueRemainingCapacity")] == 990
    assert s[_dbz("BinlogPosition")] == 777 and 0 <= s[_dbz("MilliSecondsBehindSource")] < 60_000
    assert s[("cdc_producer_events_seen_total", (("op", "c"), ("table", "shop.orders")))] == 3
    assert s[("cdc_producer_events_seen_total", (("op", "d"), ("table", 'shop.odd "name"')))] == 1  # escaped, read back
    assert s[("cdc_producer_events_total", ())] == 6 and s[("cdc_producer_commits_total", ())] == 1
    assert s[("cdc_producer_binlog_position", (("file", "mysql-bin.000003"),))] == 777
    assert s[("cdc_producer_gtid_sequence", (("gtid_source", "0-1"),))] == 42
    assert s[("cdc_producer_commit_seconds_count", ())] == 1 and s[("cdc_producer_commit_lag_seconds_count", ())] == 1
    assert s[("process_cpu_seconds_total", ())] > 0
    m.disconnected("the source connection was lost (gone); reconnecting")
    s = _samples(m)
    assert s[_dbz("Connected")] == 0 and s[_dbz("NumberOfDisconnects")] == 1


def test_the_snapshot_mbean_follows_the_notifications_and_the_coordinators_progress():
    m = ProducerMetrics("east")
    m.snapshots.notification("STARTED", "s1", {"tables": ["shop.a", "shop.b", "shop.c"]})
    m.snapshot_progress = {"snapshot_id": "s1", "paused": False,
                           "tables": [{"table": "shop.a", "rows": 10}, {"table": "shop.b", "rows": 4}]}
    m.committed(Resume("f", 1))
    m.snapshots.notification("TABLE_SCAN_COMPLETED", "s1", {"table": "shop.a"})
    m.snapshots.notification("PAUSED", "s1", {})
    s = _samples(m)
    assert s[_dbz("SnapshotRunning", "snapshot")] == 1 and s[_dbz("SnapshotPaused", "snapshot")] == 1
    assert s[_dbz("TotalTableCount", "snapshot")] == 3 and s[_dbz("RemainingTableCount", "snapshot")] == 2
    assert s[_dbz("RowsScanned", "snapshot", table="shop.b")] == 4
    assert s[("cdc_snapshot_rows_total", (("table", "shop.a"),))] == 10
    m.snapshots.notification("IN_PROGRESS", "s1", {"table": "shop.b", "chunk": 3, "rows": 6, "estimated": 9})
    assert _samples(m)[_dbz("RowsScanned", "snapshot", table="shop.b")] == 6
    m.snapshots.notification("RESUMED", "s1", {})
    m.snapshots.notification("ABORTED", "s1", {"tables": ["shop.c"], "reason": "chunk read failed"})
    m.snapshots.notification("COMPLETED", "s1", {"aborted_tables": ["shop.c"]})
    m.snapshot_progress = None
    m.committed(Resume("f", 2))
    s = _samples(m)
    assert (s[_dbz("SnapshotRunning", "snapshot")], s[_dbz("SnapshotCompleted", "snapshot")],
            s[_dbz("SnapshotAborted", "snapshot")]) == (0, 1, 1)
    assert s[_dbz("RowsScanned", "snapshot", table="shop.a")] == 10  # (kept after the snapshot, as Debezium's)
    assert s[("cdc_snapshot_tables_aborted_total", ())] == 1
    # a snapshot whose every table was stopped ends without COMPLETED: the coordinator's state says so
    m.snapshots.notification("STARTED", "s2", {"tables": ["shop.d"]})
    m.snapshots.notification("ABORTED", "s2", {"tables": ["shop.d"]})
    m.committed(Resume("f", 3))
    s = _samples(m)
    assert s[_dbz("SnapshotRunning", "snapshot")] == 0 and s[_dbz("SnapshotCompleted", "snapshot")] == 0


def test_health_and_readiness_answer_503_with_the_reason():
    m = ProducerMetrics("east")
    server = m.start_server(free_port(), stall_s=5)
    base = f"http://127.0.0.1:{server.server_port}"

    def probe(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode().strip()
    try:
        assert probe("/healthz") == (200, "ok")
        assert probe("/readyz") == (503, "not connected yet")
        m.set_connected()
        assert probe("/readyz") == (200, "ok")
        m.disconnected("a Kafka write failed (broker down); restarting")
        assert probe("/readyz") == (503, "a Kafka write failed (broker down); restarting")
        m.alive_at -= 10  # the loop has not moved for 10 s
        code, reason = probe("/healthz")
        assert code == 503 and "has not moved for 10s" in reason
        assert probe("/nope")[0] == 404
    finally:
        server.shutdown()


@pytest.mark.parametrize("gtid,expected", [("3E11FA47-71CA-11E1-9E33-C80AA9429562:23", 23), ("0-1-42", 42)])
def test_the_last_gtid_is_a_sequence_number_by_its_source(gtid, expected):
    m = ProducerMetrics("east")
    m.transaction(gtid)
    found = [v for (name, _), v in _samples(m).items() if name == "cdc_producer_gtid_sequence"]
    assert found == [expected]
