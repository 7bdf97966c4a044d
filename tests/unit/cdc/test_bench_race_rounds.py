"""The fair race's pure parts: the rounds' alternation, medians and min-max, the shared-machine
check, both sides' settings and the table rendered from them, the launch clock, and the
race section's headline.  No timing is asserted: every figure here is made up."""

from pathlib import Path

import pytest

from cdc.bench import debezium as dbz
from cdc.bench import race_rounds, race_settings
from cdc.bench.race_rounds import DEBEZIUM, OURS
from cdc.bench.report import RACE_HEADING, render_race
from cdc.bench.snapshot import race_ratios as snapshot_ratios
from cdc.bench.stream import race_ratios as stream_ratios
from producer.kafka_writer import THROUGHPUT_SETTINGS


def test_rounds_alternate_ours_first_in_odd_rounds_debezium_first_in_even():
    assert race_rounds.round_orders(3) == [(OURS, DEBEZIUM), (DEBEZIUM, OURS), (OURS, DEBEZIUM)]
    assert race_rounds.round_orders(4)[3] == (DEBEZIUM, OURS)
    assert race_rounds.round_orders(0) == [(OURS, DEBEZIUM)]  # at least one round
    assert race_rounds.DEFAULT_ROUNDS >= 3


def test_median_and_range_leave_missing_values_out():
    assert race_rounds.median_range([30.0, 10.0, 20.0]) == (20.0, 10.0, 30.0)
    assert race_rounds.median_range([4, None, 2]) == (3.0, 2.0, 4.0)  # an even count: the middle two's mean
    assert race_rounds.median_range([None]) is None and race_rounds.median_range([]) is None


def test_runs_combine_into_medians_with_their_spread():
    runs = [{"rows_per_s": 100.0, "records": 9, "mode": "kafka", "reached": True, "warm": None},
            {"rows_per_s": 300.0, "records": 9, "mode": "kafka", "reached": True, "warm": 5.0},
            {"rows_per_s": 200.0, "records": 9, "mode": "kafka", "reached": True, "warm": 7.0}]
    combined, spread = race_rounds.combine_runs(runs)
    assert combined["rows_per_s"] == 200.0 and spread["rows_per_s"] == (100.0, 300.0)
    assert combined["records"] == 9 and isinstance(combined["records"], int)  # counts stay counts
    assert combined["mode"] == "kafka" and combined["reached"] is True  # not figures: the first round's
    assert "mode" not in spread and "reached" not in spread
    assert "warm" not in spread and combined["warm"] is None  # not a number in the first round: left as it is
    assert race_rounds.combine_runs([]) == ({}, {})


def test_ratios_are_the_median_of_each_rounds_own_ratio_not_the_ratio_of_medians():
    per_round = [{"a/b": 2.0, "c/d": None}, {"a/b": 3.0}, {"a/b": 2.5, "c/d": 1.5}]
    medians, spread = race_rounds.combine_ratios(per_round)
    assert medians == {"a/b": 2.5, "c/d": 1.5}
    assert spread == {"a/b": (2.0, 3.0), "c/d": (1.5, 1.5)}


def test_rounds_combine_into_a_result_with_medians_spreads_and_the_rounds_kept():
    rounds = [{"started": "s1", "loadavg": [1.0, 1, 1], "busy": [], "order": [OURS, DEBEZIUM],
               "runs": {"producer_no_tx": {"rows_per_s_after_warmup": 90.0},
                        "debezium_kafka_avro": {"rows_per_s_after_warmup": 30.0}},
               "ratios": {"producer_no_tx/debezium_kafka_avro_after_warmup": 3.0}},
              {"started": "s2", "loadavg": [1.0, 1, 1], "busy": [], "order": [DEBEZIUM, OURS],
               "runs": {"producer_no_tx": {"rows_per_s_after_warmup": 80.0},
                        "debezium_kafka_avro": {"rows_per_s_after_warmup": 40.0}},
               "ratios": {"producer_no_tx/debezium_kafka_avro_after_warmup": 2.0}}]
    result: dict = {}
    race_rounds.combine_rounds(result, rounds)
    assert result["producer_no_tx"]["rows_per_s_after_warmup"] == 85.0
    assert result["spread"]["debezium_kafka_avro"]["rows_per_s_after_warmup"] == (30.0, 40.0)
    assert result["ratios"]["producer_no_tx/debezium_kafka_avro_after_warmup"] == 2.5
    assert result["ratio_spread"]["producer_no_tx/debezium_kafka_avro_after_warmup"] == (2.0, 3.0)
    assert result["rounds"] is rounds


def test_busy_processes_are_those_outside_the_race_above_a_fifth_of_a_core():
    before = {1: ("soak", 10.0), 2: ("idle", 5.0), 3: ("our producer", 1.0), 4: ("small", 0.0)}
    after = {1: ("soak", 11.5), 2: ("idle", 5.0), 3: ("our producer", 3.0), 4: ("small", 0.2), 5: ("new", 9.0)}
    busy = race_rounds.busy_processes(before, after, 2.0, race_pids={3})
    assert busy == [("soak", 0.75)]  # the race's own (3), the quiet (2, 4: 10%) and the new-born (5) left out
    assert race_rounds.busy_processes(before, after, 0.0, race_pids=set()) == []


def test_the_report_warns_when_a_round_shared_the_machine():
    # The 1-minute load average after a round carries the race's own work: with threads
    # ready to run sampled while the race was idle, that decides.
    after_own_round = {"loadavg": [2.8, 1, 1], "runnable": 1, "busy": []}
    assert race_rounds.shared_machine_warning([after_own_round, after_own_round], cores=2) is None
    crowded = {"loadavg": [3.4, 2, 1], "runnable": 3, "busy": []}
    busy = {"loadavg": [0.5, 1, 1], "runnable": 0, "busy": [["python -m pytest tests/integration", 0.9]]}  # JSON's
    text = race_rounds.shared_machine_warning([after_own_round, crowded, busy], cores=2)
    assert "round 2 (3 threads ready to run while the race was idle, for 2 cores)" in text
    assert "round 3 (busy: `python -m pytest tests/integration` 90% of a core)" in text
    assert "round 1" not in text and text.startswith("**Warning: the machine was shared**")
    # a round recorded without the threads sample: the load average above the cores decides
    assert "round 1 (load average 3.4 above the 2 cores)" in race_rounds.shared_machine_warning(
        [{"loadavg": [3.4, 2, 1], "busy": []}], cores=2)


def test_debezium_in_the_race_gets_our_throughput_settings_and_a_heap():
    assert race_settings.PRODUCER_TUNED == {"linger.ms": THROUGHPUT_SETTINGS["linger.ms"],
                                            "batch.size": THROUGHPUT_SETTINGS["batch.size"],
                                            "buffer.memory": THROUGHPUT_SETTINGS["queue.buffering.max.kbytes"] * 1024}
    assert race_settings.PRODUCER_TUNED == {"linger.ms": 20, "batch.size": 1_000_000, "buffer.memory": 256 * 2**20}
    assert race_settings.engine_settings("tuned") == {"max.batch.size": 20480, "max.queue.size": 81920,
                                                      "poll.interval.ms": 50}
    assert race_settings.engine_settings("defaults") == race_settings.ENGINE_DEFAULTS
    assert race_settings.producer_settings("defaults")["linger.ms"] == 5
    assert race_settings.heap_options("tuned") == ["-Xmx1g"] and race_settings.heap_options("tuned", "2g") == ["-Xmx2g"]
    assert race_settings.heap_options("defaults") == []
    mysql = {"host": "127.0.0.1", "port": 3306, "admin_user": "root", "admin_password": "pw"}
    tuned = dbz.connector_properties(mysql, "db", prefix="p", state=Path("/tmp/s"), fmt="avro", server_id=9)
    assert tuned["max.batch.size"] == "20480" and tuned["poll.interval.ms"] == "50"
    plain = dbz.connector_properties(mysql, "db", prefix="p", state=Path("/tmp/s"), fmt="avro", server_id=9,
                                     tuning="defaults")
    assert plain["max.queue.size"] == "8192"
    assert dbz.run_key("kafka", "avro", 1024, "defaults") == "debezium_kafka_avro_1024_defaults"
    assert dbz.run_key("kafka", "avro") == "debezium_kafka_avro"


def test_the_settings_table_is_rendered_from_the_constants_the_harness_uses():
    lines = race_settings.settings_table_lines("1g")
    assert lines[0] == "| setting | ours | Debezium in the race |" and lines[1] == "| --- | --- | --- |"
    text = "\n".join(lines)
    assert f"`linger.ms` {THROUGHPUT_SETTINGS['linger.ms']} | `linger.ms` {race_settings.PRODUCER_TUNED['linger.ms']}" \
        in text
    assert "`buffer.memory` 268,435,456 B" in text and "`max.batch.size` 20,480" in text and "`-Xmx1g`" in text
    assert "`batch.size` 1,000,000 B, `batch.num.messages` 10,000 | `batch.size` 1,000,000 B |" in text
    # (Debezium's engine batch is ours: as many records handed over and committed at once)
    assert "`producer.batch_size` 20,480 events per Kafka batch | `max.batch.size` 20,480 |" in text
    wide = race_settings.settings_table_lines("1g", with_defaults=True)
    assert wide[0].endswith("| Debezium at its defaults (extra row) |")
    assert all(line.count("|") == 5 for line in wide)
    assert "`max.batch.size` 2,048" in "\n".join(wide) and "`buffer.memory` 33,554,432 B" in "\n".join(wide)


def test_debezium_is_timed_from_its_launch_on_the_monotonic_clock():
    r = {"records": 1000, "warmup_records": 100, "startup_s": 2.0, "total_s": 5.0, "clock_s": 4.0,
         "from_first_s": 2.0, "after_warmup_s": 1.5, "value_bytes": 0,
         "polling_mono_ns": 10_500_000_000, "first_mono_ns": 11_000_000_000, "end_mono_ns": 13_000_000_000}
    out = dbz.with_launch_clock(dict(r), launch_ns=10_000_000_000)
    assert out["startup_s"] == pytest.approx(0.5) and out["first_record_s"] == pytest.approx(1.0)
    assert out["total_s"] == pytest.approx(3.0) and out["rows_per_s_total"] == pytest.approx(1000 / 3.0)
    assert out["jvm_total_s"] == 5.0 and out["clock"] == "process launch"
    old = dbz.with_launch_clock({**r, "end_mono_ns": 0}, launch_ns=1)
    assert old["total_s"] == 5.0 and "clock" not in old  # an older runner's result: as it was


def _run(rate: float, rss: float, **more) -> dict:
    return {"rows_per_s": rate, "rows_per_s_after_startup": rate, "rows_per_s_after_warmup": rate,
            "rows_per_s_total": rate, "rows_per_s_from_first": rate, "total_rss_peak_mb": rss, "rss_peak_mb": rss,
            "startup_s": 0.5, "first_record_s": 3.0, "bytes_per_record": 280.0, **more}


def _stream_round(i: int, ours: float, tx: float, theirs: float, load: float) -> dict:
    runs = {"producer_no_tx": _run(ours, 100.0), "producer_tx": _run(tx, 100.0),
            "debezium_kafka_avro": _run(theirs, 800.0, mode="kafka", format="avro", tuning="tuned"),
            "debezium_count_json": _run(theirs / 2, 900.0, mode="count", format="json", tuning="tuned")}
    return {"started": f"2026-11-25 10:0{i}:00", "loadavg": [load, 1.0, 1.0], "busy": [],
            "order": list(race_rounds.round_orders(3)[i]), "runs": runs, "ratios": stream_ratios(runs)}


def test_the_race_section_leads_with_the_medians_after_warm_up_ours_without_transactions_first():
    machine = {"nproc": 2, "cpu": "EPYC", "loadavg": [1.0, 1.0, 1.0]}
    stream = {"machine": machine, "rows": 1000, "requested_rows": 1000, "heap": "1g",
              "debezium_runs": "kafka:avro,count:json"}
    race_rounds.combine_rounds(stream, [_stream_round(0, 90_000, 80_000, 30_000, 1.0),
                                        _stream_round(1, 60_000, 50_000, 30_000, 3.5),
                                        _stream_round(2, 75_000, 70_000, 25_000, 1.0)])
    snap_rounds = []
    for i, (ours, big, small) in enumerate(((80_000, 20_000, 30_000), (70_000, 25_000, 35_000),
                                            (90_000, 22_000, 40_000))):
        runs = {"snapshot_quiet": {**_run(ours, 200.0), "rss_max_mb": 180.0},
                "debezium_kafka_avro_8192": _run(big, 900.0, mode="kafka", format="avro", chunk_size=8192),
                "debezium_kafka_avro_1024": _run(small, 800.0, mode="kafka", format="avro", chunk_size=1024)}
        snap_rounds.append({"started": "t", "loadavg": [1.0, 1, 1], "busy": [], "order": ["ours", "debezium"],
                            "runs": runs, "ratios": snapshot_ratios(runs)})
    snap = {"machine": machine, "rows": 500, "chunk_size": 8192, "debezium_runs": "kafka:avro",
            "debezium_chunk_sizes": [8192, 1024]}
    race_rounds.combine_rounds(snap, snap_rounds)

    race = render_race(stream, snap, when="2026-11-25 10:30")
    assert race.startswith(RACE_HEADING)
    sections = [line for line in race.splitlines() if line.startswith("### ")]
    assert sections[0].startswith("### Headline: medians after warm-up over 3 round(s)")
    headline = race.split(sections[0], 1)[1].split("\n\n", 2)[1].splitlines()
    # ours without transactions first, with them the second row; medians with the min-max
    assert headline[2] == "| streaming, ours without transactions | 75,000 (60,000-90,000) | 30,000 (25,000-30,000) " \
                          "| 3.00 (2.00-3.00) | 8.00 |"
    assert headline[3].startswith("| streaming, ours with Kafka transactions | 70,000 (50,000-80,000) |")
    # Debezium's better chunk size (1,024: 35,000 median against 22,000), its ratio the rounds' median
    assert headline[4] == "| incremental snapshot, Debezium at its better chunk size (1,024) | 80,000 (70,000-90,000) " \
                          "| 35,000 (30,000-40,000) | 2.25 (2.00-2.67) | 4.00 |"
    assert len(headline) == 5  # the JSON converter's and count-only runs stay out of the headline
    assert "| streaming | 2 | 2026-11-25 10:01:00 | 3.5, 1.0, 1.0 | - | debezium | none |" in race
    assert "Streaming: **Warning: the machine was shared** during round 2 (load average 3.5 above the 2 cores)" in race
    assert "Snapshot: **Warning" not in race
    assert "| memory ceiling | none (CPython) | `-Xmx1g` |" in race
    assert "| Debezium, count-only handler | JSON converter, schemas on |" in race  # in the tables below
