"""The race's pure parts: the runner's output, its properties file, run specs, the ratios and
the race section of docs/benchmarks.md."""

import json

import pytest

from cdc.bench import debezium as dbz
from cdc.bench.report import RACE_HEADING, race_section_of, render_race, with_race_section
from cdc.bench.snapshot import race_ratios as snapshot_ratios
from cdc.bench.stream import race_ratios as stream_ratios
from cdc.errors import BenchError

RESULT = {"event": "result", "mode": "kafka", "format": "avro", "reached": True, "records": 1000, "target": 1000,
          "other_records": 3, "tombstones": 0, "value_bytes": 280_000, "batches": 4, "warmup_records": 100,
          "main_s": 0.3, "startup_s": 2.0, "first_record_s": 4.0, "total_s": 6.0, "clock_s": 2.5,
          "from_first_s": 2.0, "after_warmup_s": 1.5, "rss_peak_mb": 600.0, "rss_end_mb": 590.0,
          "heap_max_mb": 6000, "cpus": 2}


def test_the_result_line_is_found_among_the_jvm_logs_and_its_rates_derived():
    text = "\n".join(["2026-11-23 INFO starting {not json", json.dumps({"event": "polling", "startup_s": 2.0}),
                      "some log line", json.dumps(RESULT)])
    r = dbz.parse_runner_output(text)
    assert "event" not in r
    assert r["rows_per_s"] == pytest.approx(1000 / 2.5)
    assert r["rows_per_s_total"] == pytest.approx(1000 / 6.0)
    assert r["rows_per_s_from_first"] == pytest.approx(500.0)
    assert r["rows_per_s_after_warmup"] == pytest.approx(900 / 1.5)
    assert r["bytes_per_record"] == pytest.approx(280.0)


def test_startup_comes_from_the_polling_line_when_the_result_lacks_it_and_no_result_is_an_error():
    r = dbz.parse_runner_output(json.dumps({"event": "polling", "startup_s": 3.5}) + "\n" +
                                json.dumps({**RESULT, "startup_s": None, "after_warmup_s": None}))
    assert r["startup_s"] == 3.5
    assert r["rows_per_s_after_warmup"] == 0.0
    with pytest.raises(BenchError, match="no result"):
        dbz.parse_runner_output('{"event": "polling", "startup_s": 1}\nException in thread main')


def test_java_properties_escape_what_java_would_misread():
    text = dbz.java_properties({"b": "x=y:z #1", "a key": " lead", "c": "C:\\dir\nnext", "d": "été"})
    assert text.splitlines() == ["a\\ key=\\ lead", "b=x\\=y\\:z \\#1", "c=C\\:\\\\dir\\nnext", "d=\\u00e9t\\u00e9"]


def test_runs_are_mode_format_pairs_times_chunk_sizes():
    assert dbz.parse_runs("count:json, kafka:avro") == [("count", "json"), ("kafka", "avro")]
    assert dbz.parse_runs("kafka:avro", chunk_sizes=(8192, 1024)) == [("kafka", "avro", 8192),
                                                                      ("kafka", "avro", 1024)]
    for bad in ("kafka", "kafka:xml", "print:json"):
        with pytest.raises(BenchError, match="MODE:FORMAT"):
            dbz.parse_runs(bad)
    assert dbz.run_key("kafka", "avro", 1024) == "debezium_kafka_avro_1024"


def test_connector_properties_turn_tombstones_off_and_pick_the_converter(tmp_path):
    mysql = {"host": "127.0.0.1", "port": 3306, "admin_user": "root", "admin_password": "pw"}
    avro = dbz.connector_properties(mysql, "db", prefix="p", state=tmp_path, fmt="avro", server_id=9,
                                    **{"snapshot.mode": "recovery"})
    assert avro["tombstones.on.delete"] == "false" and avro["snapshot.mode"] == "recovery"
    assert avro["converter.class"] == "DebeziumRace$MockRegistryAvroConverter"
    assert avro["database.port"] == "3306" and avro["database.protocol"] == "jdbc:mariadb"
    js = dbz.connector_properties(mysql, "db", prefix="p", state=tmp_path, fmt="json", server_id=9)
    assert js["converter.schemas.enable"] == "true" and "converter.class" not in js


def _ours(rate, after_startup, warm, rss):
    return {"rows_per_s": rate, "rows_per_s_after_startup": after_startup, "rows_per_s_after_warmup": warm,
            "total_rss_peak_mb": rss, "startup_s": 0.5, "bytes_per_record": 250.0}


def _theirs(mode, fmt, total, first, warm, rss, chunk=None):
    r = {**RESULT, "mode": mode, "format": fmt, "rows_per_s_total": total, "rows_per_s_from_first": first,
         "rows_per_s": first, "rows_per_s_after_warmup": warm, "rss_peak_mb": rss, "bytes_per_record": 280.0}
    if chunk:
        r["chunk_size"] = chunk
    return r


def test_stream_ratios_pair_each_of_ours_with_each_debezium_run():
    result = {"debezium_runs": "kafka:avro", "producer_tx": _ours(40_000, 44_000, 45_000, 120.0),
              "debezium_kafka_avro": _theirs("kafka", "avro", 20_000, 22_000, 30_000, 600.0)}
    r = stream_ratios(result)
    assert r["producer_tx/debezium_kafka_avro"] == pytest.approx(2.0)
    assert r["producer_tx/debezium_kafka_avro_after_warmup"] == pytest.approx(1.5)
    assert r["producer_tx/debezium_kafka_avro_total"] == pytest.approx(2.0)
    assert r["rss debezium_kafka_avro/producer_tx"] == pytest.approx(5.0)
    assert dbz.run_keys(result) == ["debezium_kafka_avro"]  # not the run spec beside it


def test_snapshot_ratios_and_the_race_section_round_trip(tmp_path):
    machine = {"nproc": 2, "cpu": "EPYC", "loadavg": [2.5, 2.0, 1.0]}
    snap = {"machine": machine, "rows": 2000, "chunk_size": 8192, "server_version": "5.7.44-MariaDB-log",
            "debezium_runs": "kafka:avro", "debezium_chunk_sizes": [1024],
            "snapshot_quiet": {"rows_per_s": 40_000, "rows_per_s_after_warmup": 42_000, "rss_max_mb": 150.0,
                               "bytes_per_record": 260.0},
            "debezium_kafka_avro_1024": _theirs("kafka", "avro", 0, 20_000, 21_000, 750.0, chunk=1024)}
    snap["ratios"] = snapshot_ratios(snap)
    assert snap["ratios"]["snapshot_quiet/debezium_kafka_avro_1024"] == pytest.approx(2.0)
    assert snap["ratios"]["rss debezium_kafka_avro_1024/snapshot_quiet"] == pytest.approx(5.0)
    stream = {"machine": machine, "rows": 3000, "requested_rows": 3000,
              "producer_no_tx": _ours(40_000, 44_000, 45_000, 120.0),
              "debezium_count_json": _theirs("count", "json", 20_000, 22_000, 30_000, 600.0)}
    stream["ratios"] = stream_ratios(stream)
    race = render_race(stream, snap, when="2026-11-23 03:30")
    assert race.startswith(RACE_HEADING)
    assert "| Debezium, Kafka Java producer, idempotent, acks=all | Avro converter" in race
    assert "| rows/s from first record, ours no tx | 2.00 |" in race
    assert "| 1,024 | 2.00 | 20,000 | 21,000 | 280 | 750 | 2.00 | 2.00 | 5.00 |" in race
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nold figures\n")
    doc.write_text(with_race_section(doc.read_text(), race))
    assert race_section_of(doc).rstrip() == race.rstrip()
    # A new report keeps the race; a new race replaces the old one.
    doc.write_text(with_race_section("# Benchmarks\n\nnew figures\n", race_section_of(doc)))
    doc.write_text(with_race_section(doc.read_text(), race.replace("03:30", "03:45")))
    text = doc.read_text()
    assert "new figures" in text and text.count(RACE_HEADING) == 1 and "03:45" in text and "03:30" not in text


def test_the_stream_race_states_the_physical_limit_of_the_same_run():
    from cdc.bench.report import native_limit_lines
    stream = {"native": {"tool": "mariadb-binlog", "rows_per_s": 1_000_000.0, "runs": 3},
              "producer_no_tx": {"rows_per_s_after_startup": 200_000.0},
              "ratios": {"producer_no_tx_after_startup/native": 0.2, "producer_no_tx_after_warmup/native": 0.26}}
    [blank, line] = native_limit_lines(stream)
    assert blank == "" and "1,000,000 rows/s (the median of 3 runs" in line
    assert "0.20 from the first record, 0.26 after the warm-up (goal >= 0.25)" in line
    assert native_limit_lines({"producer_no_tx": {}}) == []


def test_the_single_row_race_has_its_headline_row_and_its_own_table():
    machine = {"nproc": 2, "cpu": "Xeon", "loadavg": [1.0, 1.0, 1.0]}
    stream = {"machine": machine, "rows": 3000, "requested_rows": 3000, "debezium_runs": "kafka:avro",
              "producer_no_tx": _ours(40_000, 44_000, 45_000, 120.0),
              "debezium_kafka_avro": _theirs("kafka", "avro", 20_000, 22_000, 30_000, 600.0)}
    stream["ratios"] = stream_ratios(stream)
    oltp = {**stream, "single_row": True, "rows": 1000, "requested_rows": 1000,
            "producer_no_tx": _ours(9_000, 9_500, 10_000, 130.0),
            "debezium_kafka_avro": _theirs("kafka", "avro", 10_000, 15_000, 20_000, 650.0)}
    oltp["ratios"] = stream_ratios(oltp)
    race = render_race(stream, None, when="2026-11-26 10:00", oltp=oltp)
    assert "| streaming, ours without transactions | 45,000 | 30,000 | 1.50 | 5.00 |" in race
    assert "| streaming, single-row transactions (OLTP), ours without transactions | 10,000 | 20,000 | 0.50 | 5.00 |" \
        in race
    assert ("### Streaming, single-row autocommit transactions: 1,000 binlog row events to Kafka "
            "(`cdc bench stream --rows 1000 --single-row --transactions off --debezium kafka:avro --no-reference`)") \
        in race
    without = render_race(stream, None, when="2026-11-26 10:00")  # (no such row nor table without the run)
    assert "single-row transactions (OLTP)" not in without and "### Streaming, single-row" not in without
