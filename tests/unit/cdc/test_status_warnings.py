"""``cdc status`` shows the merge job's pace warnings from its status file, escaped (a
partition name is no markup), and nothing when there are none."""

from __future__ import annotations

import io
import time

from rich.console import Console

from cdc.status import _merge_table


def _status(warnings):
    return {"pid": 1, "updated_at": time.time(), "batch_id": 7, "last_batch": {"input": 10}, "totals": {"input": 10},
            "warnings": warnings}


def test_the_merge_jobs_warnings_are_shown_with_what_they_name():
    out = io.StringIO()
    msg = ("cdc.app.orders[1] is read at 77 records/s while 900/s arrive (over the last 58s; last range "
           "[197000, 199166) read in 28.1s): the job waits for the broker's fetch answers")
    _merge_table(_status([{"kind": "falling_behind", "subject": "cdc.app.orders[1]", "message": msg}]),
                 Console(file=out, width=400), None)
    text = out.getvalue()
    assert "WARNING" in text and "cdc.app.orders[1] is read at 77 records/s" in text and "[197000, 199166)" in text


def test_no_warning_row_without_warnings():
    out = io.StringIO()
    _merge_table(_status([]), Console(file=out, width=400), None)
    assert "WARNING" not in out.getvalue()
