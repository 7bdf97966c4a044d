"""The peers' race's pure parts: its options, the server version it needs, the clock's figures,
the ratios, the settings, the Flink runner's class path and properties, and the section of
docs/benchmarks.md it writes (leading the file's sections)."""

import ast
import re
from pathlib import Path

import pytest

from cdc.bench import flink_cdc, race_rounds, race_settings
from cdc.bench.connect_worker import properties_text
from cdc.bench.doc_sections import section_of, with_leading_section
from cdc.bench.peers_race import check_peer_server_version, parse_peers
from cdc.bench.peers_ratios import headline_pairs, pair_ratios
from cdc.bench.peers_report import render_peers, repeated_run_lines, write_peers_section
from cdc.bench.report import PEERS_HEADING, RACE_METHOD_LINK
from cdc.bench.topic_clock import TopicClock, clock_figures
from cdc.errors import BenchError


def test_peers_are_named_and_anything_else_is_refused():
    assert parse_peers("connect,flink") == ("connect", "flink")
    assert parse_peers(" flink , flink ") == ("flink",)
    for bad in ("", "debezium", "connect,spark"):
        with pytest.raises(BenchError, match="connect, flink"):
            parse_peers(bad)


def test_the_server_must_report_a_57_version_before_5720_when_flink_races():
    assert check_peer_server_version("5.7.19-MariaDB-log", ("connect", "flink")) == "5.7.19-MariaDB-log"
    assert check_peer_server_version("5.7.44-MariaDB-log", ("connect",))
    with pytest.raises(BenchError, match="5.7.20"):
        check_peer_server_version("5.7.44-MariaDB-log", ("flink",))
    with pytest.raises(BenchError, match="--version=5.7.19"):
        check_peer_server_version("10.11.19-MariaDB-0+deb12u1", ("connect",))


def _clock(first, warm, done, count=1000) -> TopicClock:
    clock = TopicClock("127.0.0.1:1", "t", count)  # never started: only its marks are read
    clock.first, clock.warm, clock.done, clock.count = first, warm, done, count
    return clock


def test_the_clock_figures_run_from_the_launch_the_first_record_the_warm_up_and_the_signal():
    figs = clock_figures(_clock(12.0, 13.0, 22.0), 1000, launch=10.0, signal=11.0)
    assert figs["startup_s"] == pytest.approx(2.0)
    assert figs["rows_per_s_total"] == pytest.approx(1000 / 12.0)
    assert figs["rows_per_s_from_first"] == pytest.approx(100.0)
    assert figs["rows_per_s_after_warmup"] == pytest.approx(900 / 9.0)
    assert figs["rows_per_s_from_signal"] == pytest.approx(1000 / 11.0)
    assert figs["signal_to_first_s"] == pytest.approx(1.0)
    unfinished = clock_figures(_clock(12.0, None, None, 5), 1000, launch=10.0)
    assert unfinished["records"] == 5 and "rows_per_s_from_first" not in unfinished


def test_pair_ratios_are_ours_over_the_peer_and_the_peer_s_memory_over_ours():
    ours = {"rows_per_s_after_warmup": 300.0, "rows_per_s_from_first": 200.0, "rows_per_s_from_signal": 150.0,
            "rss_peak_mb": 100.0}
    connect = {"rows_per_s_after_warmup": 100.0, "rows_per_s_from_first": 100.0, "rows_per_s_from_signal": 50.0,
               "rss_peak_mb": 1200.0}
    r = pair_ratios(ours, connect, "connect")
    assert r == {"ours/connect_after_warmup": 3.0, "ours/connect_from_first": 2.0, "rss connect/ours": 12.0,
                 "ours/connect_from_signal": 3.0}
    flink = {"rows_per_s_after_warmup": 0.0, "rows_per_s_from_first": 100.0, "rows_per_s_total": 75.0,
             "rss_peak_mb": None}
    r = pair_ratios(ours, flink, "flink_p1", "ours_p1")
    assert r["ours_p1/flink_p1_after_warmup"] is None  # a zero rate gives no ratio, not infinity
    assert r["ours_p1/flink_p1_total"] == 2.0 and r["rss flink_p1/ours_p1"] is None


def test_the_worker_s_producer_gets_our_throughput_settings():
    s = race_settings.connect_worker_settings()
    assert s["producer.linger.ms"] == race_settings.PRODUCER_TUNED["linger.ms"]
    assert s["producer.batch.size"] == race_settings.PRODUCER_TUNED["batch.size"]
    assert s["producer.acks"] == "all" and s["producer.enable.idempotence"] == "true"
    assert s["producer.compression.type"] == "none"
    rows = race_settings.peers_settings_rows("2g", 4096)
    assert all(len(r) == 4 for r in rows)
    assert any("`-Xmx2g`" in r[2] for r in rows) and any("4,096" in r[1] for r in rows)


def test_every_side_compresses_alike():
    assert race_settings.connect_worker_settings("lz4")["producer.compression.type"] == "lz4"
    assert race_settings.flink_producer_settings("lz4")["compression.type"] == "lz4"
    row = next(r for r in race_settings.peers_settings_rows("1g", 8192, "lz4") if "compression" in r[0])
    assert row[1:] == ("`kafka.compression: lz4`", "`producer.compression.type` lz4", "`compression.type` lz4")


def test_properties_text_escapes_backslashes():
    assert properties_text({"a": 1, "path": "C:\\x"}) == "a=1\npath=C:\\\\x\n"


def test_flink_cdc_s_own_jars_lead_its_class_path(tmp_path, monkeypatch):
    folder = tmp_path / "flink-cdc"
    folder.mkdir()
    for name in ("debezium-connector-mysql-1.9.8.Final.jar", "flink-cdc-common-3.2.0.jar",
                 "flink-connector-mysql-cdc-3.2.0.jar", "flink-runtime-1.20.4.jar", "flink-connector-kafka-3.4.0-1.20.jar"):
        (folder / name).write_bytes(b"")
    monkeypatch.setenv("CDC_JARS_DIR", str(tmp_path))
    names = [Path(p).name for p in flink_cdc.classpath().split(":")]
    assert names[:2] == ["flink-connector-mysql-cdc-3.2.0.jar", "flink-cdc-common-3.2.0.jar"]
    assert names.index("flink-cdc-common-3.2.0.jar") < names.index("debezium-connector-mysql-1.9.8.Final.jar")
    assert flink_cdc.versions() == {"flink_cdc": "3.2.0", "flink": "1.20.4", "debezium": "1.9.8.Final",
                                    "kafka_sink": "3.4.0-1.20"}


def test_flink_s_properties_need_a_parallelism_and_enough_server_ids():
    mysql = {"host": "h", "port": 1, "admin_user": "u", "admin_password": "p"}
    props = flink_cdc.runner_properties(mysql, "db", "items", parallelism=2, chunk_size=8192, bootstrap="b:1",
                                        topic="t", producer={"linger.ms": 5}, server_id_base=7000)
    assert props["server.ids"] == "7000-7002" and props["producer.linger.ms"] == 5
    with pytest.raises(BenchError, match="at least 1"):
        flink_cdc.runner_properties(mysql, "db", "items", parallelism=0, chunk_size=1, bootstrap="b", topic="t",
                                    producer={}, server_id_base=1)


def test_a_new_leading_section_goes_before_the_first_section_and_an_old_one_stays_in_place():
    text = "# Benchmarks\n\nlead\n\n## Stream\n\nx\n\n## Soak\n\ny\n"
    new = with_leading_section(text, "## Peers", "## Peers\n\np1\n")
    assert new.index("## Peers") < new.index("## Stream") and new.startswith("# Benchmarks\n\nlead\n")
    again = with_leading_section(new.replace("## Peers\n\np1", "## Peers\n\np0"), "## Peers", "## Peers\n\np2\n")
    assert section_of(again, "## Peers") == "## Peers\n\np2\n\n" and again.count("## Peers") == 1
    assert with_leading_section("", "## Peers", "## Peers\n") == "## Peers\n"


def _result() -> dict:
    def run(rate, rss):
        return {"rows_per_s_after_warmup": rate, "rows_per_s_from_first": rate, "rows_per_s_total": rate / 2,
                "rss_peak_mb": rss, "startup_s": 1.0, "bytes_per_record": 1200.0}

    result = {"machine": {"nproc": 2, "cpu": "test", "loadavg": [1.0]}, "peers": ["connect", "flink"],
              "heap": "1g", "chunk_size": 8192, "parallelisms": [1, 2], "server_version": "5.7.19-MariaDB-log",
              "versions": {"debezium_connector_mysql": "3.6.1.Final", "kafka_connect": "4.3.0",
                           "flink_cdc": "3.2.0", "flink_cdc_flink": "1.20.4", "flink_cdc_debezium": "1.9.8.Final"}}
    for key, ours_rate in (("streaming", 120_000.0), ("single_row", 30_000.0)):
        rounds = [{"order": list(o), "runs": {"ours": run(ours_rate * f, 90.0), "connect": run(30_000.0, 1100.0)},
                   "ratios": pair_ratios(run(ours_rate * f, 90.0), run(30_000.0, 1100.0), "connect")}
                  for o, f in zip(race_rounds.round_orders(3), (1.0, 0.9, 1.1))]
        part = {"rows": 1000, "label": key, "changes": {"insert": 600, "update": 300, "delete": 100, "total": 1000}}
        race_rounds.combine_rounds(part, rounds)
        result[key] = part
    snap_runs = {"ours_p1": run(90_000.0, 80.0), "ours_p2": run(120_000.0, 95.0), "connect": run(20_000.0, 900.0),
                 "flink_p1": run(60_000.0, 700.0), "flink_p2": run(70_000.0, 800.0)}
    ratios = {**pair_ratios(snap_runs["ours_p1"], snap_runs["connect"], "connect", "ours_p1"),
              **pair_ratios(snap_runs["ours_p1"], snap_runs["flink_p1"], "flink_p1", "ours_p1"),
              **pair_ratios(snap_runs["ours_p2"], snap_runs["flink_p2"], "flink_p2", "ours_p2")}
    snap = {"rows": 5000}
    race_rounds.combine_rounds(snap, [{"order": ["ours", "debezium"], "runs": snap_runs, "ratios": ratios}])
    result["snapshot"] = snap
    return result


def test_the_section_says_which_peers_ran_their_versions_and_each_goal_met_or_not(tmp_path):
    result = _result()
    assert [p[2] for p in headline_pairs(result)] == ["connect", "connect", "connect", "flink_p1", "flink_p2"]
    text = render_peers(result, when="2026-11-27 01:00")
    assert text.startswith(PEERS_HEADING)
    assert "Debezium 3.6.1.Final's MySQL connector in a Kafka Connect 4.3.0" in text
    assert "Flink CDC 3.2.0's MySQL source (bundling Debezium 1.9.8.Final) on Flink 1.20.4" in text
    lines: dict[str, str] = {}  # the headline's rows come first (the rounds' table has rows named alike)
    for ln in text.splitlines():
        if ln.startswith("| "):
            lines.setdefault(ln.split(" | ")[0], ln)
    assert "4.00 (3.60-4.40) | >= 3: met" in lines["| streaming"]
    assert "| 1.00 (0.90-1.10) | >= 2: not met" in lines["| single_row"]
    assert ">= 2: not met" in lines["| snapshot, parallelism 2"]  # 120k / 70k
    assert "12.22 | >= 10: met" in lines["| streaming"]
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nlead\n\n## Stream\n\nx\n")
    write_peers_section(out, result)
    written = out.read_text()
    assert written.index(PEERS_HEADING) < written.index("## Stream")


def test_a_peers_job_that_failed_and_ran_again_is_named_in_the_section():
    result = _result()
    assert repeated_run_lines(result) == []
    result["snapshot"]["rounds"][0]["runs"]["flink_p2"]["failed_runs"] = ["Caused by: java.util.NoSuchElementException"]
    lines = repeated_run_lines(result)
    assert lines[0].startswith("**Runs repeated**")
    assert "- snapshot, round 1, Flink CDC, parallelism 2: the job failed (Caused by: java.util.NoSuchElementException)" \
        in "\n".join(lines)
    assert "the job failed" in render_peers(result)

ROOT = Path(__file__).resolve().parents[3]


def _linked_heading(text: str) -> str:
    """The doc's text under the heading that ``text``'s link into docs/ points at."""
    doc, anchor = re.search(r"\]\(([\w-]+\.md)#([\w-]+)\)", text).groups()
    method = (ROOT / "docs" / doc).read_text()
    parts = re.split(r"^#+ (.+)$", method, flags=re.M)
    under = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-"): body
             for h, body in zip(parts[1::2], parts[2::2])}
    assert anchor in under, (anchor, sorted(under))
    return under[anchor]


def test_the_races_sections_send_their_reader_to_the_method_told_once_in_docs():
    """What the races' figures measure is prose of docs/race-method.md, not of the code: each
    section links to its heading there, and the races' modules hold no paragraph."""
    text = render_peers(_result(), when="2026-11-27 01:00")
    assert "*Flink CDC*: its MySQL source in a local MiniCluster" in _linked_heading(text) and "*Flink CDC*" not in text
    assert "*Debezium*: Debezium 3.6.3.Final's MySQL connector embedded" in _linked_heading(RACE_METHOD_LINK)
    for module in ("peers_race", "peers_ratios", "peers_report", "report"):
        tree = ast.parse((ROOT / "cdc" / "bench" / f"{module}.py").read_text())
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        longest = max(len(n.value) for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings)
        assert longest < 700, f"cdc/bench/{module}.py holds a text of {longest} characters: prose goes to docs/"
