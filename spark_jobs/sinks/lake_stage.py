"""A lake sink's staged parts: what a merge task writes of its partition's changes for the
driver's commit (:class:`~spark_jobs.sinks.interface.BatchSink`), read back by the driver
(the ``driver`` engine: :meth:`StagingArea.read`) or by Spark's executors (the ``spark``
engine: :mod:`spark_jobs.sinks.lake_spark`).

A part is one Parquet file of changes (the table's columns, ``__cdc_position`` and
``__cdc_op``; a delete holds its key columns only) under the sink's staging directory:
``<staging>/<job>/<db>__<table>/b<batch id>/p<partition>-<uuid>.parquet``.  The task writes
it where the work runs; the staging directory must be one the driver reads too (a local
path on one machine, a shared file system or an object store on a cluster).  Nothing in it
is visible in the table until the driver's commit, which removes the batch's directory
after the commit (and after finding the batch committed already, on a replay).  A part's
description (:meth:`StagingArea.write`) carries what the commit needs without opening the
file: its Arrow schema, its rows and deletes, its positions' and first key column's range.

:func:`reduce_changes` is the DBLog upsert rule of docs/DESIGN.md section 4 in Arrow: per
key, the change with the highest position (a part holds each key once).
"""

from __future__ import annotations

import base64
import logging
import re
import time
import uuid
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.lake_types import OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["StagingArea", "reduce_changes", "safe_segment", "part_schema", "unified_schema", "MANIFEST"]

_SAFE = re.compile(r"[^A-Za-z0-9._=-]")
#: A staged batch's manifest in its batch directory (spark_jobs.sinks.lake_journal): the batch
#: waits for its lake commit, and only the committer removes it.
MANIFEST = "_staged.json"
_INDEX = "__cdc_index"


def safe_segment(name: str) -> str:
    """``name`` as one path segment: characters other than letters, digits and ``._=-`` as
    ``_`` (a job's or table's name in a staging path)."""
    return _SAFE.sub("_", name) or "_"


class StagingArea:
    """The staging directory of a lake sink (``uri``: a local path or a URI pyarrow's file
    systems know, e.g. ``s3://bucket/prefix``)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self._fs: pafs.FileSystem | None = None
        self._root = ""

    def __getstate__(self) -> dict:
        return {"uri": self.uri}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["uri"])

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            try:
                self._fs, self._root = pafs.FileSystem.from_uri(self.uri)
            except (pa.ArrowInvalid, ValueError):  # a plain local path
                self._fs, self._root = pafs.LocalFileSystem(), self.uri
        return self._fs

    @property
    def root(self) -> str:
        """The staging directory's path in :attr:`fs`."""
        _ = self.fs  # (sets the root)
        return self._root

    def uri_of(self, path: str) -> str:
        """A part's path (as :meth:`write` returns it) as a URI Spark's executors read."""
        _ = self.fs  # (sets the root)
        scheme = self.uri.split("://", 1)[0] if "://" in self.uri else ""
        if not scheme or scheme == "file":
            import os
            return "file://" + os.path.abspath(path)
        return f"{'s3a' if scheme == 's3' else scheme}://{path}"  # (Hadoop's S3 file system: s3a)

    def batch_dir(self, job: str, db: str, table: str, batch_id: int) -> str:
        _ = self.fs  # (sets the root)
        return f"{self._root}/{safe_segment(job)}/{safe_segment(db)}__{safe_segment(table)}/b{batch_id}"

    def write(self, job: str, db: str, table: str, batch_id: int, partition: int, changes: pa.Table,
              key_names: Sequence[str]) -> dict:
        """Write one part; returns its description for the commit (JSON data)."""
        d = self.batch_dir(job, db, table, batch_id)
        path = f"{d}/p{partition}-{uuid.uuid4().hex}.parquet"
        try:
            self.fs.create_dir(d, recursive=True)
            pq.write_table(changes, path, filesystem=self.fs, compression="zstd")
        except OSError as exc:
            raise SinkUnavailable(f"cannot write a staged part of {db}.{table} under {self.uri!r}: {exc} "
                                  "(the staging directory must be writable by the merge job's executors)") from exc
        positions = changes.column(POSITION_COLUMN)
        part = {"path": path, "rows": changes.num_rows, "key": list(key_names),
                "min_position": pc.min(positions).as_py(), "max_position": pc.max(positions).as_py(),
                "schema": base64.b64encode(changes.schema.serialize().to_pybytes()).decode("ascii"),
                "deletes": int(pc.sum(pc.equal(changes.column(OP_COLUMN), "d")).as_py() or 0)
                if OP_COLUMN in changes.column_names else 0}
        bounds = key_bounds(changes, key_names[0]) if key_names else None
        if bounds is not None:
            part["key_min"], part["key_max"] = bounds
        return part

    def read(self, parts: Sequence[dict]) -> pa.Table:
        """The parts' changes in one table, on the driver (the ``driver`` engine; their schemas
        unified: a column a part lacks is null).  Several parts are read by one dataset scan
        in Arrow's threads (a commit takes a part or more of every micro-batch since the last:
        read one by one, 360 parts held the committer's thread 0.15 s, one scan 0.01 s); parts
        one scan cannot cast to their unified schema are read one by one and concatenated."""
        paths = [part["path"] for part in parts]
        try:
            if len(paths) > 1:
                try:
                    return ds.dataset(paths, schema=unified_schema(parts), format="parquet",
                                      filesystem=self.fs).to_table()
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    pass
            tables = [pq.read_table(path, filesystem=self.fs) for path in paths]
        except FileNotFoundError as exc:
            raise SinkError(f"a staged part is missing: {exc} (the staging directory must be shared by the merge "
                            "job's driver and executors)") from exc
        except OSError as exc:
            raise SinkUnavailable(f"cannot read the staged parts of {paths[0].rsplit('/', 2)[0]}: {exc}") from exc
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")

    def remove_batch(self, job: str, db: str, table: str, batch_id: int) -> None:
        """Remove a batch's staged parts of a table (after its commit, or on a replay)."""
        d = self.batch_dir(job, db, table, batch_id)
        try:
            self.fs.delete_dir(d)
        except FileNotFoundError:
            pass
        except OSError as exc:  # left for `cdc lake vacuum`
            log.warning("could not remove the staged parts %s: %s", d, exc)

    def remove_older(self, job: str, db: str, table: str, batch_id: int) -> int:
        """Remove the table's staged parts of batches before ``batch_id`` (a task attempt that
        failed, a batch whose commit found it committed and crashed before removing them)."""
        d = self.batch_dir(job, db, table, batch_id).rsplit("/", 1)[0]
        return self._remove_batches(d, False, lambda info: int(info.base_name[1:]) < batch_id)

    def remove_stale(self, hours: float) -> int:
        """Remove staged batches not touched for ``hours`` (parts of task attempts that failed,
        of a job whose checkpoint was deleted); how many batch directories.  A batch handed to
        the lake committer (its :data:`MANIFEST` there) stays whatever its age: it waits for its
        commit (a merge job stopped for longer than that commits it when it starts again)."""
        cutoff = time.time() - hours * 3600
        _ = self.fs  # (sets the root)
        return self._remove_batches(self._root, True,
                                    lambda info: info.mtime is not None and info.mtime.timestamp() < cutoff
                                    and not self._handed_over(info.path))

    def _handed_over(self, batch_dir: str) -> bool:
        return self.fs.get_file_info(f"{batch_dir}/{MANIFEST}").type == pafs.FileType.File

    def _remove_batches(self, under: str, recursive: bool, doomed: Callable[[pafs.FileInfo], bool]) -> int:
        """Remove the batch directories (``b<id>``) under ``under`` that ``doomed`` picks."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(under, allow_not_found=True, recursive=recursive))
        except OSError:
            return 0
        removed = 0
        for info in infos:
            name = info.base_name
            if info.type == pafs.FileType.Directory and name[:1] == "b" and name[1:].isdigit() and doomed(info):
                try:
                    self.fs.delete_dir(info.path)
                    removed += 1
                except OSError:  # gone meanwhile, or left for the next time
                    pass
        return removed


def part_schema(part: dict) -> pa.Schema:
    """The Arrow schema of a staged part (from its description: the file is not opened)."""
    return _decoded_schema(part["schema"])


@lru_cache(maxsize=256)
def _decoded_schema(encoded: str) -> pa.Schema:
    """A part description's schema, decoded once: a table's parts share a handful."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))


def unified_schema(parts: Iterable[dict]) -> pa.Schema:
    """The parts' schemas unified (:func:`pyarrow.unify_schemas`, permissive: a column a part
    lacks is null), each distinct one once; the ``pyarrow`` error when they do not unify."""
    distinct = dict.fromkeys(p["schema"] for p in parts)
    return pa.unify_schemas([_decoded_schema(e) for e in distinct], promote_options="permissive")


def key_bounds(changes: pa.Table, column: str) -> tuple[Any, Any] | None:
    """The lowest and highest value of ``column`` (an integer or a string: the commit's
    file pruning by key range), None for other types or nulls."""
    col = changes.column(column)
    if not (pa.types.is_integer(col.type) or pa.types.is_string(col.type)) or col.null_count or not len(col):
        return None
    mm = pc.min_max(col).as_py()
    return mm["min"], mm["max"]


def reduce_changes(changes: pa.Table, key_names: Sequence[str]) -> pa.Table:
    """Per key, the change with the highest position (ties: the last one, copies of one
    event); in rising position order (the input as it is when it holds each key once: a
    batch's parts of different Kafka partitions, whose keys differ)."""
    if changes.num_rows <= 1:
        return changes
    if len(key_names) == 1 and pc.count_distinct(changes.column(key_names[0])).as_py() == changes.num_rows:
        return changes
    order = pc.sort_indices(changes, sort_keys=[(POSITION_COLUMN, "ascending")])
    ordered = changes.take(order)
    indexed = ordered.append_column(_INDEX, pa.array(range(ordered.num_rows), pa.int64()))
    try:
        last = indexed.group_by(list(key_names), use_threads=False).aggregate([(_INDEX, "max")])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SinkError(f"cannot group changes by key {list(key_names)}: {exc}") from exc
    keep = pc.sort_indices(last.column(f"{_INDEX}_max"))
    return ordered.take(last.column(f"{_INDEX}_max").take(keep))

