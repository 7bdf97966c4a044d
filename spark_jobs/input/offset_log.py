"""Spark's streaming checkpoint, read as files: which offsets each micro-batch covers.

A query's checkpoint directory holds ``offsets/<batch>`` (written before the batch runs:
``v1``, a metadata line, then one line per source with that source's end offset as JSON)
and ``commits/<batch>`` (written once the batch's sink finished).  The merge job reads
them to learn a batch's end offsets inside ``foreachBatch`` (which gets only the data)
and, before it starts a query, what the checkpoint will read next.  The format is
Spark's own and the same for every source; a file that cannot be parsed reads as absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def batch_end_offsets(query_dir: Path, batch_id: int) -> list[Any] | None:
    """The end offset of each source of batch ``batch_id`` (parsed JSON), or None."""
    path = Path(query_dir) / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if not lines or not lines[0].startswith("v"):
        return None
    out: list[Any] = []
    for line in lines[2:]:
        line = line.strip()
        if not line or line == "-":
            out.append(None)
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            return None
    return out


def last_batches(query_dir: Path) -> tuple[int | None, int | None]:
    """``(last planned batch, last committed batch)`` of the checkpoint (None: none)."""
    planned = _ids(Path(query_dir) / "offsets")
    committed = _ids(Path(query_dir) / "commits")
    return (planned[-1] if planned else None), (committed[-1] if committed else None)


def next_start(query_dir: Path) -> tuple[Any | None, Any | None]:
    """What a query restarted on this checkpoint reads first: ``(start, planned end)`` of
    its first source.  ``start`` is the last committed batch's end offset (None: from the
    beginning); ``planned end`` is the end of a batch planned but not committed (it is run
    again with those offsets), else None."""
    planned, committed = last_batches(query_dir)
    start = None
    if committed is not None:
        ends = batch_end_offsets(query_dir, committed)
        start = ends[0] if ends else None
    pending = None
    if planned is not None and (committed is None or planned > committed):
        ends = batch_end_offsets(query_dir, planned)
        pending = ends[0] if ends else None
    return start, pending
