"""A run's ``cdc`` processes (cdc/pipeline_run.py): starting one that still runs is refused, so
a chaos run's kill that did not happen cannot go unnoticed as a second process beside the first
(two producers of one name fence each other); killed, it starts again."""

from __future__ import annotations

import sys

import pytest

from cdc.errors import CommandError
from cdc.pipeline_run import CdcProcess


def test_a_running_process_is_not_started_twice_and_starts_again_once_killed(tmp_path):
    p = CdcProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "sleeper.log")
    p.start()
    try:
        first = p.proc.pid
        with pytest.raises(CommandError, match="still runs"):
            p.start()
        assert p.alive() and p.proc.pid == first and p.starts == 1
        p.kill9()
        assert not p.alive()
        p.start()
        assert p.alive() and p.proc.pid != first and p.starts == 2
    finally:
        p.kill9()
