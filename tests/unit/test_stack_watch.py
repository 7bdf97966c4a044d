"""The test harness's watch on the session stack (``StackHandle.dead_servers``, run after each
test by ``tests/conftest.py``): a server whose process ended is named with its log."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.stack_handle import StackHandle


def _ended_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)


def test_a_server_whose_process_ended_is_named_with_the_end_of_its_log(tmp_path):
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        broker_log = tmp_path / "kafka-1.log"
        broker_log.write_text("".join(f"line {i}\n" for i in range(100)) +
                              "ERROR Shutdown broker because all log dirs in /x have failed\n")
        data = {"mysql": {"pid": running.pid, "log": str(tmp_path / "mysql.err")},
                "kafka": {"embedded": True, "nodes": [{"id": 0, "pid": running.pid, "log": "unused"},
                                                      {"id": 1, "pid": _ended_pid(), "log": str(broker_log)}]},
                "postgres": {"embedded": False, "pid": None}}
        (tmp_path / "stack.json").write_text(json.dumps(data))
        handle = StackHandle(data, tmp_path)
        dead = handle.dead_servers()
        assert len(dead) == 1, dead
        assert dead[0].startswith("Kafka node 1 (pid ")
        assert "GB free on its disk" in dead[0]
        assert dead[0].endswith("line 99\nERROR Shutdown broker because all log dirs in /x have failed")
        assert "line 84" not in dead[0]  # the last 15 lines only

        data["mysql"]["pid"] = _ended_pid()  # restarted as recorded: the record, not the handle, is read
        (tmp_path / "stack.json").write_text(json.dumps(data))
        assert [d.split(" (")[0] for d in handle.dead_servers()] == ["mysql", "Kafka node 1"]
        assert "(unreadable:" in handle.dead_servers()[0]
        assert StackHandle(data, tmp_path, kind="containers").dead_servers() == []
    finally:
        running.kill()
        running.wait()


def test_the_whole_suite_refuses_to_start_on_a_disk_short_of_space_and_a_part_of_it_starts(monkeypatch):
    import shutil
    from collections import namedtuple
    from pathlib import Path
    from types import SimpleNamespace

    import pytest

    from tests import conftest
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(100 * 2**30, 97 * 2**30, 3 * 2**30))
    whole = str(Path(conftest.__file__).parent)
    with pytest.raises(pytest.UsageError, match=r"the suite needs 10 GB free in .*, and 3.0 GB are"):
        conftest._enough_disk_for_the_suite(SimpleNamespace(args=[whole]))
    conftest._enough_disk_for_the_suite(SimpleNamespace(args=[whole + "/unit"]))  # a part: left to try
    conftest._enough_disk_for_the_suite(SimpleNamespace(args=[whole], workerinput={}))  # the controller checks
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(100 * 2**30, 80 * 2**30, 20 * 2**30))
    conftest._enough_disk_for_the_suite(SimpleNamespace(args=[whole]))
