"""A benchmark whose stack fails to start leaves no server running: the broker's jars missing
(CDC_JARS_DIR at an empty folder) after the MariaDB server is up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from cdc.bench.harness import start_stack
from common.errors import CDCError


def _servers_of(state_dir: Path) -> list[int]:
    """Pids of processes whose command line names ``state_dir`` (its MariaDB, its broker)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state_dir) in cmdline and int(proc.name) != os.getpid():
            pids.append(int(proc.name))
    return pids


def test_a_stack_that_fails_to_start_is_stopped(tmp_path: Path, monkeypatch):
    empty = tmp_path / "no-jars"
    empty.mkdir()
    monkeypatch.setenv("CDC_JARS_DIR", str(empty))
    state_dir = (tmp_path / "bench").resolve()
    with pytest.raises(CDCError, match="no jars"):
        start_stack(state_dir, Console(width=160))
    assert (state_dir / "mysql").exists()  # (the server did start before the broker failed)
    assert _servers_of(state_dir) == []
