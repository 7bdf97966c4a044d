"""A lake sink's journal, kept in its staging directory beside the staged parts: the batches
handed to the tables' committer (:class:`StagedBatch`, a manifest each) and the commits the
committer means to make (an *intent* each), so that a driver that dies between staging and
committing, or during a commit, commits every staged batch once (docs/lake.md, "Commit
cadence").

* A **staged batch** is one micro-batch's parts of one table, written by the driver once every
  task of the batch is done, *before* the batch counts as done:
  ``<staging>/<app>/<db>__<table>/b<batch>/_staged.json``.  A replayed batch writes it again
  (the same batch: the same offsets, the same decisions).
* A table's commits carry the committer's own application id and a commit number ``k``
  (Delta's ``txnAppId``/``txnVersion``, Iceberg's table property), so the table says which
  commit it holds last.  Before commit ``k`` the committer writes its intent
  ``<staging>/_commits/<db>__<table>/c<k>.json``: the *marks* after it, per application id of
  a merge query the last batch the table then holds (cumulative).  After a crash the table's
  commit number names the intent whose marks are true; the staged batches at or below them
  are committed already and go, the rest are committed (once).

The planning is pure (:func:`split_committed`, :func:`covered`, :func:`commit_runs`): no I/O,
tested exhaustively.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from spark_jobs.errors import SinkUnavailable
from spark_jobs.sinks.lake_stage import MANIFEST, StagingArea, safe_segment, unified_schema

log = logging.getLogger(__name__)

__all__ = ["StagedBatch", "LakeJournal", "split_committed", "covered", "commit_runs", "MANIFEST", "COMMITS_DIR"]

#: The directory of the tables' commit intents, under the staging root.
COMMITS_DIR = "_commits"


@dataclass(frozen=True)
class StagedBatch:
    """One micro-batch's staged parts of one table (``parts``: the parts' descriptions,
    :meth:`StagingArea.write`), handed to the table's committer at ``staged_at`` (epoch s)."""

    app: str
    batch: int
    db: str
    table: str
    parts: tuple = field(default=(), compare=False)
    staged_at: float = field(default=0.0, compare=False)

    @property
    def rows(self) -> int:
        return sum(int(p.get("rows", 0)) for p in self.parts)

    @property
    def max_position(self) -> str:
        return max((str(p.get("max_position") or "") for p in self.parts), default="")

    def to_json(self) -> dict:
        return {"app": self.app, "batch": self.batch, "db": self.db, "table": self.table, "parts": list(self.parts),
                "staged_at": self.staged_at}

    @classmethod
    def from_json(cls, doc: dict) -> "StagedBatch":
        return cls(str(doc["app"]), int(doc["batch"]), str(doc["db"]), str(doc["table"]), tuple(doc["parts"]),
                   float(doc.get("staged_at") or 0.0))


def split_committed(batches: Iterable[StagedBatch], marks: dict[str, int]) -> tuple[list[StagedBatch],
                                                                                      list[StagedBatch]]:
    """``(to commit, committed already)``: a batch at or below its application's mark is in
    the table; of several copies of one batch (a replay staged it again) the last handed over
    is kept, in the order they were handed over."""
    latest: dict[tuple[str, int], StagedBatch] = {}
    done: list[StagedBatch] = []
    for b in batches:
        if b.batch <= marks.get(b.app, -1):
            done.append(b)
            continue
        old = latest.pop((b.app, b.batch), None)
        if old is not None:
            done.append(old)
        latest[(b.app, b.batch)] = b
    return list(latest.values()), done


def covered(marks: dict[str, int], batches: Sequence[StagedBatch]) -> dict[str, tuple[int, int]]:
    """Per application, the batches a commit of ``batches`` covers: from the one after the
    application's mark (or its lowest batch here, if the table holds none of it) to its
    highest here.  Two commits of one table never cover a batch twice when each batch is
    committed once."""
    out: dict[str, tuple[int, int]] = {}
    for b in batches:
        lo, hi = out.get(b.app, (b.batch, b.batch))
        out[b.app] = (min(lo, b.batch), max(hi, b.batch))
    return {app: (marks[app] + 1 if app in marks else lo, hi) for app, (lo, hi) in out.items()}


def commit_runs(batches: Sequence[StagedBatch], compatible) -> list[list[StagedBatch]]:
    """``batches`` (in the order they were handed over: each application's in batch order)
    cut into runs to commit one after another, each in one commit: a run ends where the next
    batch is not ``compatible`` with the run so far (another key, or a column whose type
    changed in a way the parts' schemas cannot unify: such a batch comes after a DDL and is
    merged after the rows before it)."""
    runs: list[list[StagedBatch]] = []
    for b in batches:
        if runs and compatible(runs[-1], b):
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs


def same_shape(run: Sequence[StagedBatch], batch: StagedBatch) -> bool:
    """Whether ``batch``'s parts merge in one commit with ``run``'s: the same key, schemas that
    unify (:func:`~spark_jobs.sinks.lake_stage.unified_schema`, permissive: a column a part
    lacks is null).  Their distinct schemas are unified, once per set of them (a run's batches
    carry a handful): cutting n batches into runs costs a set of strings per batch, not the
    n x n schemas decoded and unified it cost before (0.36 s of the committer's thread for 120
    batches of 3 parts, 1.8 s for 240)."""
    first = run[0].parts[0] if run and run[0].parts else None
    if first is None or not batch.parts:
        return True
    if any(list(p["key"]) != list(first["key"]) for p in batch.parts):
        return False
    return _unify(frozenset(p["schema"] for b in [*run, batch] for p in b.parts))


@lru_cache(maxsize=1024)
def _unify(schemas: frozenset[str]) -> bool:
    """Whether the encoded part schemas unify."""
    try:
        unified_schema({"schema": e} for e in schemas)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def commit_marks(record: dict) -> dict[str, int]:
    """The marks of a commit's intent (:meth:`LakeJournal.commit_record`)."""
    return {str(a): int(b) for a, b in (record.get("marks") or {}).items()}


class LakeJournal:
    """The staged batches' manifests and the tables' commit intents of one lake sink, in its
    staging area (a local directory or an object store, as the parts)."""

    def __init__(self, staging: StagingArea) -> None:
        self.staging = staging

    @property
    def fs(self) -> pafs.FileSystem:
        return self.staging.fs

    def _write(self, path: str, doc: dict) -> None:
        """``doc`` as JSON at ``path``, whole or not at all (written aside, then moved)."""
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(tmp) as out:
                out.write(json.dumps(doc, separators=(",", ":")).encode())
            self.fs.move(tmp, path)
        except OSError as exc:
            raise SinkUnavailable(f"cannot write the lake journal's {path}: {exc} (the staging directory "
                                  f"{self.staging.uri!r} must be writable by the merge job's driver)") from exc

    def _read(self, path: str) -> dict | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("the lake journal's %s cannot be read (%s): left alone", path, exc)
            return None

    # -- staged batches ---------------------------------------------------------------------
    def record(self, batch: StagedBatch) -> None:
        """The staged batch's manifest, written before the micro-batch counts as done."""
        d = self.staging.batch_dir(batch.app, batch.db, batch.table, batch.batch)
        self._write(f"{d}/{MANIFEST}", batch.to_json())

    def staged(self) -> list[StagedBatch]:
        """Every staged batch the journal holds, each application's in batch order, older
        applications first (by the time they were staged)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.staging.root, allow_not_found=True, recursive=True))
        except OSError as exc:
            raise SinkUnavailable(f"cannot list the lake sink's staging directory {self.staging.uri!r}: {exc}") from exc
        found = []
        for info in infos:
            if info.type == pafs.FileType.File and info.base_name == MANIFEST:
                doc = self._read(info.path)
                if doc is not None:
                    found.append(StagedBatch.from_json(doc))
        return sorted(found, key=lambda b: (b.staged_at, b.app, b.batch))

    def forget(self, batch: StagedBatch) -> None:
        """A committed batch's directory (its manifest and every part in it) removed."""
        self.staging.remove_batch(batch.app, batch.db, batch.table, batch.batch)

    # -- commit intents -----------------------------------------------------------------------
    def _commits_dir(self, db: str, table: str) -> str:
        return f"{self.staging.root}/{COMMITS_DIR}/{safe_segment(db)}__{safe_segment(table)}"

    def intend(self, db: str, table: str, commit: int, marks: dict[str, int], position: str = "") -> None:
        """Commit ``commit``'s marks and the highest source position it will hold, written
        before the commit."""
        self._write(f"{self._commits_dir(db, table)}/c{commit}.json",
                    {"commit": commit, "marks": marks, "position": position, "at": time.time()})

    def intents(self, db: str, table: str) -> list[int]:
        """The commit numbers of the table's intents on file."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self._commits_dir(db, table), allow_not_found=True))
        except OSError as exc:
            raise SinkUnavailable(f"cannot list the lake journal of {db}.{table}: {exc}") from exc
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
        return sorted(int(n[1:-5]) for n in names if n.startswith("c") and n.endswith(".json") and n[1:-5].isdigit())

    def marks(self, db: str, table: str, committed: int | None) -> dict[str, int]:
        """The marks of the table's commit ``committed`` (the one the table holds last; None:
        none), and every other intent removed (older ones are superseded, newer ones were never
        committed)."""
        return commit_marks(self.commit_record(db, table, committed))

    def commit_record(self, db: str, table: str, committed: int | None) -> dict:
        """The intent of the table's commit ``committed`` as written (``marks``, ``position``,
        ``at``: when it was written, just before the commit; {}: none), and every other intent
        removed, as :meth:`marks` does."""
        doc = self._read(f"{self._commits_dir(db, table)}/c{committed}.json") if committed is not None else None
        for k in self.intents(db, table):
            if k != committed:
                try:
                    self.fs.delete_file(f"{self._commits_dir(db, table)}/c{k}.json")
                except OSError:  # gone meanwhile, or left for the next time
                    pass
        return doc or {}

    def last_commit(self, db: str, table: str) -> int | None:
        """The highest commit number the table's intents name (None: none)."""
        found = self.intents(db, table)
        return found[-1] if found else None
