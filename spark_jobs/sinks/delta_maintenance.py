"""The upkeep of the Delta Lake sink's ``driver`` engine (:class:`~spark_jobs.sinks.delta.DeltaSink`)
with delta-rs: OPTIMIZE, VACUUM and the log's retention, and what a table holds (its files, the
job's commits), read from its log (docs/lake.md, "Maintenance").  The ``spark`` engine's own
(:mod:`spark_jobs.sinks.delta_spark_maintenance`) comes before it in that sink's bases."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.sinks.lake_base import batches_held

__all__ = ["DeltaMaintenance", "LOG_RETENTION", "retention_interval"]

#: The table property that says how long the log keeps its entries.
LOG_RETENTION = "delta.logRetentionDuration"


def retention_interval(hours: float) -> str:
    """A retention of ``hours`` as a Delta table property's interval (whole minutes, rounded
    up: ``0.5`` is 30 minutes, not 0)."""
    return f"interval {math.ceil(hours * 60)} minutes"


def _user_metadata(entry: dict) -> dict:
    """A commit's ``userMetadata`` (delta-spark's commits carry the app and batch there, as JSON)."""
    import json
    try:
        meta = json.loads(entry.get("userMetadata") or "{}")
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}



class DeltaMaintenance:
    """The maintenance of :class:`~spark_jobs.sinks.delta.DeltaSink` (which gives ``load_table`` and
    ``target_file_size``)."""

    target_file_size: int

    # -- maintenance ---------------------------------------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """Compact small files (OPTIMIZE) and write a checkpoint of the log."""
        handle = self.load_table(db, table)
        if handle is None:
            return {}
        done = handle.optimize.compact(target_size=self.target_file_size)
        handle.create_checkpoint()
        return {"files_removed": done.get("numFilesRemoved", 0), "files_added": done.get("numFilesAdded", 0)}

    def vacuum(self, db: str, table: str, retention_hours: float) -> dict:
        """Remove files no version within ``retention_hours`` references, and old log entries."""
        handle = self.load_table(db, table)
        if handle is None:
            return {}
        # (delta-rs takes whole hours: rounded up, a file a reader within the retention needs never goes)
        removed = handle.vacuum(retention_hours=math.ceil(retention_hours), dry_run=False,
                                enforce_retention_duration=False)
        handle.cleanup_metadata()
        return {"files_removed": len(removed)}

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """VACUUM at the retention, and the log entries before the last checkpoint (the one
        the compaction just before wrote) older than it too (``delta.logRetentionDuration`` set
        to the retention: by default a table keeps 30 days of log, a file per commit)."""
        handle = self.load_table(db, table)
        if handle is None:
            return {}
        wanted = retention_interval(retention_hours)
        if handle.metadata().configuration.get(LOG_RETENTION) != wanted:
            handle.alter.set_table_properties({LOG_RETENTION: wanted}, raise_if_not_exists=False)
        return self.vacuum(db, table, retention_hours)

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (within the log's retention, oldest
        first), the ``(app, batch)`` of every batch it holds
        (:func:`~spark_jobs.sinks.lake_base.batches_held`)."""
        handle = self.load_table(db, table)
        if handle is None:
            return []
        out = []
        for entry in reversed(handle.history()):
            meta = entry if "cdc.batch" in entry else _user_metadata(entry)  # (delta-rs's commits; delta-spark's)
            if "cdc.batch" in meta:
                out.append(batches_held(meta))
        return out

    def small_file_count(self, db: str, table: str) -> int:
        """Data files of the latest version below half of ``target_file_size`` (two of them always
        make one file of OPTIMIZE's, which bin-packs files up to the target; counting every file
        below the target would count what it leaves, a table of files just below it, each time)."""
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        sizes = pa.table(handle.get_add_actions(flatten=True)).column("size_bytes")
        return int(pc.sum(pc.less(sizes, self.target_file_size // 2)).as_py() or 0)

    def file_count(self, db: str, table: str) -> int:
        """Data files in the table's latest version."""
        handle = self.load_table(db, table)
        return 0 if handle is None else len(handle.file_uris())
