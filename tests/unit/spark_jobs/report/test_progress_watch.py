"""The merge job's pace, judged as rates: a partition read slower than records arrive is
a warning that names it, its offsets and what it waits for; a batch running long and a
restart on the range that failed are warnings; a healthy job has none."""

from __future__ import annotations

from spark_jobs.report.progress_watch import PartitionRead, ProgressWatch


def _read(start, end, seconds, part=0):
    return PartitionRead("cdc.db.t", part, start, end, seconds)


def test_a_healthy_job_reads_far_faster_than_records_arrive():
    w = ProgressWatch(window_s=60)
    t, off = 0.0, 0
    for _ in range(60):
        t += 1.0
        new = off + 900  # 900 records/s arrive, read in 0.05 s
        assert w.batch_done(t, 0.3, [_read(off, new, 0.05)], {"cdc.db.t[0]": new}) == []
        off = new
    assert w.current() == []


def test_a_trickle_far_below_the_input_rate_is_a_warning_naming_partition_offsets_and_the_lag():
    w = ProgressWatch(window_s=60)
    t, off, latest = 0.0, 0, 0
    warned = []
    for _ in range(10):
        t += 29.0
        latest += 900 * 29  # 900/s arrive
        new = off + 2166  # 2,166 records read in 28 s: 77/s
        warned += w.batch_done(t, 29.0, [_read(off, new, 28.0)], {"cdc.db.t[0]": latest})
        off = new
    assert len(warned) == 1
    msg = warned[0].message
    assert "cdc.db.t[0]" in msg and "77 records/s" in msg and "900/s arrive" in msg and "[" in msg
    assert "behind the log's end" in msg
    assert [x.kind for x in w.current()] == ["falling_behind"]
    # the reads run fast again: cleared
    for _ in range(5):
        t += 1.0
        latest += 900
        w.batch_done(t, 0.5, [_read(off, latest, 0.05)], {"cdc.db.t[0]": latest})
        off = latest
    assert w.current() == []


def test_an_idle_job_with_slow_reads_of_nothing_is_not_falling_behind():
    w = ProgressWatch(window_s=60)
    for i in range(1, 20):
        assert w.batch_done(float(i), 0.2, [_read(i, i + 1, 0.15)], {"cdc.db.t[0]": i + 1}) == []


def test_a_batch_running_long_is_a_warning_once_with_its_ranges():
    w = ProgressWatch(slow_batch_s=30, slow_factor=5)
    for i in range(5):
        w.batch_done(float(i), 1.0, [])
    assert w.running(100.0, 90.0, 7, {"cdc.db.t[1]": (5, 9)}) == []  # 10 s: not long
    got = w.running(140.0, 100.0, 7, {"cdc.db.t[1]": (5, 9)})
    assert len(got) == 1 and "batch 7 has run for 40s" in got[0].message and "cdc.db.t[1] [5, 9)" in got[0].message
    assert w.running(150.0, 100.0, 7, {"cdc.db.t[1]": (5, 9)}) == []  # said once
    w.batch_done(160.0, 60.0, [])
    assert w.current() == []


def test_a_restart_that_starts_where_the_failed_batch_did_is_a_warning():
    w = ProgressWatch()
    w.restarted({"cdc.db.t[0]": 197000, "cdc.db.t[1]": 5}, "KafkaReadTimeout: cdc.db.t/0 made no progress for 120s")
    got = w.batch_started(1.0, {"cdc.db.t[0]": 197000, "cdc.db.t[1]": 7})
    assert len(got) == 1 and "cdc.db.t[0] from 197000" in got[0].message and "made no progress" in got[0].message
    assert w.batch_started(2.0, {"cdc.db.t[0]": 197000}) == []  # only the first batch after the restart
    w.restarted({"cdc.db.t[0]": 1}, "boom")
    assert w.batch_started(3.0, {"cdc.db.t[0]": 2}) == []


def test_a_task_stats_row_gives_its_read():
    r = PartitionRead.from_stats({"topic": "t", "partition": 3, "read": {"start": -2, "end": 40, "seconds": 0.5}})
    assert (r.key, r.start, r.end, r.seconds) == ("t[3]", 0, 40, 0.5)
    assert PartitionRead.from_stats({"topic": "t", "partition": 3}) is None
    assert PartitionRead.from_stats({"topic": "t", "partition": 3, "read": {"start": 4, "end": 4}}) is None
