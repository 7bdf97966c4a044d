"""Whether a process runs (Linux): for the stack's servers and for what a process leaves behind."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs: it exists, and is not a zombie whose threads have all ended."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not alive, once its last thread has ended: a
    # killed JVM's main thread is a zombie at once while its other threads still end, and
    # they hold its files and sockets meanwhile (a killed Kafka node's port was still
    # listening six seconds later, in `make chaos` on a busy machine).
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ", 1)[1][0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return Path(f"/proc/{pid}").exists()  # (gone meanwhile: not alive)
