"""The batch report: a batch's figures aggregated from its tasks, totals, the status file."""

from __future__ import annotations

import json

from spark_jobs.report.batch_report import BatchReport
from spark_jobs.input.data_loss import DataLoss


def test_a_batchs_figures_go_to_the_totals_the_status_file_and_the_samples(tmp_path):
    report = BatchReport(tmp_path / "state" / "merge-status.json")
    stats = [{"input": 10, "emitted": 9, "dropped": 1, "held": 2, "read_s": 0.5, "sinks_s": 0.25,
              "latencies_ms": [[10.0, 3], [30.0, 1]]},
             {"input": 5, "emitted": 5, "read_s": 0.5}]
    lost = [DataLoss("cdc.shop.t", 0, 3, 10, 20, "truncated", 7, 10)]
    report.report(3, stats, 2, 0.5, lost=lost, deleted_missing=4, phases={"plan_s": 0.1})
    status = json.loads(report.status_path.read_text())
    lb = status["last_batch"]
    assert status["batch_id"] == 3 and status["batches"] == 1
    assert (lb["input"], lb["emitted"], lb["dropped"], lb["markers"], lb["rows_per_second"]) == (15, 14, 1, 2, 30.0)
    assert (lb["lost_partitions"], lb["lost_records"], lb["deleted_missing"]) == (1, 7, 4)
    assert lb["phases"]["plan_s"] == 0.1 and lb["phases"]["read_s"] == 1.0 and lb["lost"] == [lost[0].to_json()]
    assert status["totals"]["input"] == 15 and (report.held, report.held_peak) == (2, 2)
    report.report(4, [{"input": 1}], 0, 1.0)
    assert report.totals["input"] == 16 and report.totals["lost_records"] == 7 and report.held == 0
    assert report.phase_totals["read_s"] == 1.0 and report.held_peak == 2
    samples = {name: value for name, _, value in report.samples()}
    assert samples["cdc_merge_input_total"] == 16 and samples["cdc_merge_batches_total"] == 2
    assert samples["cdc_merge_last_batch_rows_per_second"] == 1.0
    assert "cdc_merge_last_batch_latency_p50_ms" not in samples  # (no latencies in the last batch)


def test_an_unwritable_status_file_does_not_stop_the_job(tmp_path):
    (tmp_path / "blocked").write_text("a file where the state directory should be")
    report = BatchReport(tmp_path / "blocked" / "merge-status.json")
    report.report(0, [{"input": 1}], 0, 1.0)
    assert report.batches == 1
