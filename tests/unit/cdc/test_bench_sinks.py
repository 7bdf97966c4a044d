"""The sinks' race's pure parts: the JDBC sink's configuration from the stack's DSN, and the
section it writes after the peers' one."""

import pytest

from cdc.bench import race_rounds
from cdc.bench.report import PEERS_HEADING, SINKS_HEADING
from cdc.bench.sink_race import JDBC, OURS, jdbc_sink_config, jdbc_url, render_sinks, write_sinks_section
from cdc.errors import BenchError


def test_the_jdbc_url_comes_from_the_libpq_dsn_with_the_schema():
    assert jdbc_url("postgresql://cdc:p%40ss@127.0.0.1:5433/sinkdb", "jdbc_r1") == (
        "jdbc:postgresql://127.0.0.1:5433/sinkdb?currentSchema=jdbc_r1", "cdc", "p@ss")
    assert jdbc_url("postgres://u@h/", "s")[0] == "jdbc:postgresql://h:5432/postgres?currentSchema=s"
    with pytest.raises(BenchError, match="postgresql://"):
        jdbc_url("host=h dbname=x", "s")


def test_the_jdbc_sink_upserts_by_key_applies_deletes_and_names_the_table_as_ours():
    c = jdbc_sink_config("p.db.items", "postgresql://u:p@h:1/d", "jdbc_r1", "db__items", tasks=2)
    assert (c["insert.mode"], c["primary.key.mode"], c["delete.enabled"]) == ("upsert", "record_key", "true")
    assert c["collection.name.format"] == "jdbc_r1.db__items" and c["topics"] == "p.db.items" and c["tasks.max"] == 2
    assert c["connection.url"].endswith("currentSchema=jdbc_r1")


def _result(ours_rates, jdbc_rates, p99s=(900.0, 1500.0)) -> dict:
    rounds = [{"order": list(o), "runs": {OURS: {"events_per_s": a, "steady_events_per_s": a * 1.2},
                                          JDBC: {"records_per_s": b}},
               "ratios": {"merge_job/jdbc_sink": a / b}}
              for o, a, b in zip(race_rounds.round_orders(len(ours_rates)), ours_rates, jdbc_rates)]
    result = {"changes": {"total": 1000, "insert": 600, "update": 300, "delete": 100}, "records": 1100,
              "partitions": 4, "tasks": 2, "rate": 5000, "seconds": 30.0,
              "versions": {"debezium_connector_mysql": "3.6.1.Final", "debezium_connector_jdbc": "3.6.0.Final"}}
    race_rounds.combine_rounds(result, rounds)
    lat = {OURS: {"writes_per_s": 4990.0, "p50_ms": 400.0, "p99_ms": p99s[0], "max_ms": 1200.0, "spread": {}},
           JDBC: {"writes_per_s": 4995.0, "p50_ms": 300.0, "p99_ms": p99s[1], "max_ms": 2000.0, "spread": {}}}
    result["latency"] = lat
    return result


def test_the_section_gives_both_rates_the_goal_and_the_latencies():
    text = render_sinks(_result([30_000.0, 27_000.0, 33_000.0], [10_000.0, 10_000.0, 10_000.0]))
    assert text.startswith(SINKS_HEADING)
    assert "3.6.0.Final" in text and "3.6.1.Final" in text
    assert "| 30,000 (27,000-33,000) |" in text and ">= 2x the JDBC sink: met (3.00x)" in text
    assert "goal: the merge job's p99 no higher (met)" in text
    worse = render_sinks(_result([15_000.0], [10_000.0], p99s=(2000.0, 1000.0)))
    assert "not met (1.50x)" in worse and "no higher (not met)" in worse


def test_the_section_goes_after_the_peers_one(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text(f"# Benchmarks\n\n{PEERS_HEADING}\n\npeers\n\n## Stream\n\nx\n")
    write_sinks_section(out, _result([2.0], [1.0]))
    text = out.read_text()
    assert text.index(PEERS_HEADING) < text.index(SINKS_HEADING) < text.index("## Stream")
    assert "\n\n## Stream" in text and "\n\n" + SINKS_HEADING in text  # (Markdown needs the blank line)
    write_sinks_section(out, _result([3.0], [1.0]))
    assert out.read_text().count(SINKS_HEADING) == 1 and "(3.00x)" in out.read_text()
