"""A PostgreSQL cluster kept in the temp dir for a state dir the service account cannot reach
is removed by a later start once its state dir is gone (a test's temporary dir, a wiped
checkout), and only then: 39 MB each, 160 of them after a day of test runs."""

from __future__ import annotations

import os
from pathlib import Path

from cdc.stack.postgres_server import OWNER_FILE, prune_orphaned_clusters


def _cluster(tmp: Path, name: str, owner: Path | None, pid: int | None = None) -> Path:
    root = tmp / f"cdc-postgres-{name}"
    (root / "data").mkdir(parents=True)
    if owner is not None:
        (root / OWNER_FILE).write_text(str(owner))
    if pid is not None:
        (root / "data" / "postmaster.pid").write_text(f"{pid}\n/data\n")
    return root


def test_only_a_stopped_cluster_whose_state_dir_is_gone_is_removed(tmp_path: Path):
    live_state = tmp_path / "state-live"
    live_state.mkdir()
    gone = tmp_path / "state-gone"
    orphan = _cluster(tmp_path, "a", gone)
    orphan_stale_pid = _cluster(tmp_path, "b", gone, pid=2 ** 22 + 12345)
    owned = _cluster(tmp_path, "c", live_state)
    running = _cluster(tmp_path, "d", gone, pid=os.getpid())
    unknown = _cluster(tmp_path, "e", None)
    assert sorted(prune_orphaned_clusters(tmp_path)) == [orphan, orphan_stale_pid]
    assert not orphan.exists() and not orphan_stale_pid.exists()
    assert owned.exists() and running.exists() and unknown.exists()
