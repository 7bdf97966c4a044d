"""The merge job's state store: per micro-batch, its plan (the markers range it reads) and
the table partitions' states after it, as JSON files under ``<checkpoint>/merge-state``.

A batch's plan is written before it is used, so a replayed batch reads the same markers;
its states are written once the batch is applied, so a replay starts from the state stored
for the batch before.  The newest few batches' files are kept.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


class MergeStateStore:
    """Per batch: the plan (markers range) and the partitions' states, as JSON files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def _write(self, path: Path, data: Any) -> None:
        tmp = path.with_suffix(f".tmp{uuid.uuid4().hex[:6]}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def _ids(self, suffix: str) -> list[int]:
        return sorted(int(p.name[:-len(suffix)]) for p in self.dir.glob(f"*{suffix}")
                      if p.name[:-len(suffix)].isdigit())

    def state_before(self, batch_id: int) -> dict:
        ids = [i for i in self._ids(".json") if i < batch_id]
        return json.loads((self.dir / f"{ids[-1]}.json").read_text()) if ids else {"markers_next": 0, "partitions": {}}

    def plan(self, batch_id: int) -> dict | None:
        p = self.dir / f"{batch_id}.plan"
        return json.loads(p.read_text()) if p.exists() else None

    def save_plan(self, batch_id: int, plan: dict) -> None:
        self._write(self.dir / f"{batch_id}.plan", plan)

    def save_state(self, batch_id: int, state: dict) -> None:
        self._write(self.dir / f"{batch_id}.json", state)
        for suffix in (".json", ".plan"):
            for i in self._ids(suffix):
                if i < batch_id - 5:
                    (self.dir / f"{i}{suffix}").unlink(missing_ok=True)
