"""The soak's report with the lake sinks on: a section of its own (the hour-long soak's stays),
each lake table's files and MB per sample, and its disk growth beside the verdict."""

from cdc.bench.doc_sections import section_of, with_section
from cdc.bench.soak import LAKE_SECTION, SECTION, WARM_UP_S, render, section_heading, verdict


def _samples(lake: bool) -> list[dict]:
    out = []
    for i in range(1, 41):
        s = {"t_s": 30.0 * i, "source_lag_s": 0.5, "latency_p50_ms": 500, "latency_p99_ms": 900, "rows_measured": 10,
             "changes_written": 1000 * i, "written_per_s": 1000, "merged_per_s": 1000,
             "rss_mb": {"producer": 100, "merge": 900}, "private_mb": {"producer": 90, "merge": 800},
             "checkpoint_files": 100, "tombstones": 5, "pace_warnings": [], "lost_history_alarm": None}
        if lake:
            s["lake"] = {"delta": {"files": 12, "mb": 10.0 if 30.0 * i < WARM_UP_S else 20.0},
                         "iceberg": {"files": 30, "mb": 8.0 if i < 40 else 1200.0}}
            s["lake_commits"] = {"delta": {"commits": i, "commit_delay_p99_s": 65.0},
                                 "iceberg": {"commits": i, "commit_delay_p99_s": 75.0}}
        out.append(s)
    return out


def _result(lake: bool) -> dict:
    r = {"minutes": 20, "rate": 1000, "rows": 50_000, "partitions": 2, "sample_s": 30, "samples": _samples(lake),
         "equal": True, "lake": lake, "lake_retention_hours": 0 if lake else None,
         "lake_interval_s": 60.0 if lake else None}
    r["verdict"] = verdict(r)
    return r


def test_a_lake_soak_reports_the_lake_tables_disk_in_a_section_of_its_own():
    lake, plain = _result(True), _result(False)
    assert section_heading(lake) == LAKE_SECTION and section_heading(plain) == SECTION
    ends = lake["verdict"]["lake_end"]
    assert ends["delta"] == {"mb": 20.0, "files": 12, "commits": 40, "commit_delay_p99_s": 65.0, "commits_per_h": 120,
                             "fresh": True}
    assert ends["iceberg"]["mb"] == 1200.0 and ends["iceberg"]["fresh"] is False  # (75 s > 60 + 10)
    assert not lake["verdict"]["lake_disk_bounded"] and not lake["verdict"]["lake_fresh"]
    assert not lake["verdict"]["passed"] and plain_passes()
    text = render(lake, when="now")
    assert text.startswith(LAKE_SECTION + "\n") and "Delta and Iceberg tables" in text
    assert "| delta files / MB | iceberg files / MB |" in text and " 12 / 20.0 | 30 / 8.0 |" in text
    assert "(retention 0 h): MB / files | delta 20.0 / 12, iceberg 1,200.0 / 30 | no |" in text
    assert "(interval 60 s) | delta 65.0 s, iceberg 75.0 s | no |" in text
    assert "| lake commits per table per hour | delta 120, iceberg 120 | shown |" in text
    assert "lake" not in render(plain, when="now").split("\n", 1)[0]
    doc = with_section(with_section("# Benchmarks\n", SECTION, render(plain, when="then")), LAKE_SECTION, text)
    spark = dict(lake, lake_engine="spark")  # (a section of its own: the driver engine's stays)
    assert section_heading(spark) == LAKE_SECTION + ", spark engine" and "--lake-engine spark" in render(spark, when="x")
    both = with_section(doc, section_heading(spark), render(spark, when="later"))
    assert section_of(both, LAKE_SECTION).rstrip() == text.rstrip() and "later" in section_of(both, section_heading(spark))
    assert section_of(doc, SECTION).startswith(SECTION) and section_of(doc, LAKE_SECTION).rstrip() == text.rstrip()


def plain_passes() -> bool:
    """A run without lakes is not judged on them."""
    plain = _result(False)
    return plain["verdict"]["lake_end"] == {} and plain["verdict"]["lake_disk_bounded"] and plain["verdict"]["passed"]
