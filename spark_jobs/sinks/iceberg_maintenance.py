"""An Iceberg table's upkeep in a long run, on pyiceberg: small files compacted, manifests that
list no live file dropped, and the files no snapshot needs any more deleted (docs/lake.md,
"Maintenance")."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from spark_jobs.sinks.iceberg_files import read_data_files, write_data_files

#: How long a file no snapshot names is left alone when the snapshot cap (not the age) expired
#: what named it: a file that young may belong to a commit under way (another writer's).
COMMIT_MARGIN = timedelta(minutes=5)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def expiry_cutoffs(timestamps_ms: Sequence[int], now: datetime, retention_hours: float,
                   max_snapshots: int | None) -> tuple[datetime, datetime]:
    """(snapshots, files): the snapshots committed before the first expire (the current one
    always stays), and the files no remaining snapshot names written before the second are
    deleted.  ``retention_hours`` before ``now``; where that keeps more than
    ``max_snapshots`` of the snapshots (``timestamps_ms``, their commit times), the
    snapshots' cutoff is the commit time of the oldest of the newest ``max_snapshots``
    (those committed in the same millisecond stay too), and the files' is that or
    :data:`COMMIT_MARGIN` before ``now``, whichever is earlier (never earlier than the age's)."""
    by_age = now - timedelta(hours=retention_hours)
    if not max_snapshots or len(timestamps_ms) <= max_snapshots:
        return by_age, by_age
    oldest_kept = _EPOCH + timedelta(milliseconds=sorted(timestamps_ms, reverse=True)[max_snapshots - 1])
    if oldest_kept <= by_age:
        return by_age, by_age
    return oldest_kept, max(by_age, min(oldest_kept, now - COMMIT_MARGIN))


def small_files(handle: Any, target_file_size: int) -> list[Any]:
    """The scan tasks of the table's data files below half of ``target_file_size`` (what
    :func:`compact_small_files` rewrites)."""
    return [t for t in handle.scan().plan_files() if t.file.file_size_in_bytes < target_file_size // 2]


def file_groups(tasks: Sequence[Any], limit: int) -> list[list[Any]]:
    """``tasks`` in groups of at most ``limit`` bytes of files each (a file larger than that
    alone), smallest files first; a group of one file is left out (nothing to merge)."""
    groups: list[list[Any]] = [[]]
    size = 0
    for t in sorted(tasks, key=lambda t: t.file.file_size_in_bytes):
        if groups[-1] and size + t.file.file_size_in_bytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.file.file_size_in_bytes
    return [g for g in groups if len(g) > 1]


def compact_small_files(handle: Any, target_file_size: int) -> dict:
    """Rewrite the table's data files below half of ``target_file_size`` into files of that
    size, in one snapshot, a group of files of at most ``target_file_size`` at a time (the
    memory a compaction takes follows that, not the table); what was done."""
    groups = file_groups(small_files(handle, target_file_size), target_file_size)
    if not groups:
        return {"files_removed": 0, "files_added": 0}
    removed = added = 0
    with handle.transaction() as tx:
        meta = tx.table_metadata  # (a deep copy at each use: once, as in iceberg_merge.rewrite)
        with tx.update_snapshot(snapshot_properties={"cdc.maintenance": "compact"}).overwrite() as ow:
            counter = itertools.count(0)
            for group in groups:
                for f in write_data_files(handle, meta, read_data_files(handle, meta, group), ow.commit_uuid, counter):
                    ow.append_data_file(f)
                    added += 1
                for t in group:
                    ow.delete_data_file(t.file)
                removed += len(group)
    return {"files_removed": removed, "files_added": added}


def drop_dead_manifests(handle: Any) -> int:
    """A snapshot without the manifests that list no live file: pyiceberg's overwrite carries
    every earlier commit's manifest of deleted entries into the next snapshot, so a table
    that each batch rewrites would gain a manifest per commit and every commit (which reads
    them all) would slow down with the run's length. An append of no file keeps only the
    manifests with live files (as Iceberg's own commits do); how many went."""
    snap = handle.current_snapshot()
    manifests = snap.manifests(handle.io) if snap is not None else []
    dead = sum(1 for m in manifests if not (m.has_added_files() or m.has_existing_files()))
    if dead:
        with handle.transaction() as tx:
            with tx.update_snapshot(snapshot_properties={"cdc.maintenance": "manifests"}).fast_append():
                pass
        handle.refresh()
    return dead


def remove_unreferenced_files(handle: Any, cutoff: datetime) -> int:
    """Delete the files under the table's data and metadata directories that neither a
    snapshot of ``handle`` (its manifest lists, manifests and live data files) nor its
    metadata (the current file and its log) names, written before ``cutoff`` (a file written
    since may belong to a commit under way); how many."""
    import pyarrow.fs as pafs
    io, meta = handle.io, handle.metadata
    keep = {handle.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    read: set[str] = set()
    for snap in meta.snapshots:
        keep.add(snap.manifest_list)
        for manifest in snap.manifests(io):
            keep.add(manifest.manifest_path)
            if manifest.manifest_path not in read:
                read.add(manifest.manifest_path)
                keep.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    path_of = getattr(io, "parse_location", None)
    if path_of is None or not hasattr(io, "fs_by_scheme"):
        return 0  # a FileIO other than pyarrow's: nothing to list with
    scheme, netloc, root = path_of(meta.location, io.properties)
    fs = io.fs_by_scheme(scheme, netloc)  # the table's own file system, with the catalog's settings
    keep_paths = {path_of(p, io.properties)[2] for p in keep}
    removed = 0
    for sub in ("data", "metadata"):
        for info in fs.get_file_info(pafs.FileSelector(f"{root}/{sub}", allow_not_found=True, recursive=True)):
            if (info.type == pafs.FileType.File and info.path not in keep_paths and info.mtime is not None
                    and info.mtime < cutoff):
                fs.delete_file(info.path)
                removed += 1
    return removed
