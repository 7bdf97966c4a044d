"""The upkeep of the Delta Lake sink's ``spark`` engine
(:class:`~spark_jobs.sinks.delta_spark.DeltaSparkSink`): Spark's OPTIMIZE and VACUUM, the log's
old entries pruned, and what a table holds (its deletion vectors and the job's commits),
read from its log with delta-rs (docs/lake.md, "Maintenance")."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs

from spark_jobs.errors import SinkError
from spark_jobs.sinks.lake_spark import sql_literal

__all__ = ["DeltaSparkMaintenance", "FILE_RETENTION"]

#: The table property that says how long VACUUM leaves the files a version removed.
FILE_RETENTION = "delta.deletedFileRetentionDuration"


class DeltaSparkMaintenance:
    """The maintenance of :class:`~spark_jobs.sinks.delta_spark.DeltaSparkSink` (which gives
    ``load_table``, ``run_sql``, ``_fs``, ``spark_name``, ``_retention_properties`` and ``target_file_size``)."""

    target_file_size: int

    # -- maintenance (Spark's OPTIMIZE and VACUUM) -----------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """OPTIMIZE: small files bin-packed into files of ``target_file_size``, and every file
        whose deletion vector marks a row written again without it (Delta's
        ``optimize.maxDeletedRowsRatio`` 0: the deletes folded back)."""
        if self.load_table(db, table) is None:
            return {}
        rows = self.run_sql("OPTIMIZE", db, table, f"OPTIMIZE {self.spark_name(db, table)}",
                         {"spark.databricks.delta.optimize.maxFileSize": str(self.target_file_size),
                          "spark.databricks.delta.optimize.maxDeletedRowsRatio": "0"})
        metrics = rows[0]["metrics"].asDict() if rows else {}
        return {"files_removed": int(metrics.get("numFilesRemoved") or 0),
                "files_added": int(metrics.get("numFilesAdded") or 0)}

    def vacuum(self, db: str, table: str, retention_hours: float) -> dict:
        """VACUUM: the files no version within ``retention_hours`` references removed (the log's
        entries older than the table's log retention go at its next checkpoint)."""
        if self.load_table(db, table) is None:
            return {}
        before = self._files_on_disk(db, table)
        self.run_sql("VACUUM", db, table, f"VACUUM {self.spark_name(db, table)} RETAIN {float(retention_hours)} HOURS")
        return {"files_removed": max(0, before - self._files_on_disk(db, table))}

    def _files_on_disk(self, db: str, table: str) -> int:
        fs, root = self._fs()
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{db}/{table}", allow_not_found=True, recursive=True))
        return sum(1 for i in infos if i.type == pafs.FileType.File and "/_delta_log/" not in i.path
                   and not i.base_name.startswith("."))  # (Hadoop's hidden .crc beside each local file)

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """VACUUM at the retention, with the table's log and file retention set to it (by default
        a table keeps 30 days of log, a file per commit), and the log's entries older than it
        and before its last checkpoint removed (:meth:`prune_log`)."""
        handle = self.load_table(db, table)
        if handle is None:
            return {}
        wanted = self._retention_properties(retention_hours)
        config = handle.metadata().configuration
        if any(config.get(k) != v for k, v in wanted.items()):
            props = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in wanted.items())
            self.run_sql("setting the retention", db, table,
                      f"ALTER TABLE {self.spark_name(db, table)} SET TBLPROPERTIES ({props})")
        return {**self.vacuum(db, table, retention_hours), "log_entries_removed": self.prune_log(db, table)}

    def prune_log(self, db: str, table: str) -> int:
        """Remove the log's entries older than the table's log retention and before its last
        checkpoint (delta-rs's ``cleanup_metadata``; delta-spark writes the checkpoints).
        Delta's own cleanup, at its checkpoints, cuts at the start of a day: at a commit a
        second a table would keep up to a day of log, 86,400 files; this keeps the retention's.
        Only log files go: no version within the retention loses an entry."""
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        from deltalake.exceptions import DeltaError
        before = len(self._log_files(db, table))
        try:
            handle.cleanup_metadata()
        except (DeltaError, OSError) as exc:
            raise SinkError(f"Delta table of {db}.{table}: removing old log entries failed: {exc}") from exc
        left = self._log_files(db, table)
        fs, _ = self._fs()
        names = {i.base_name for i in left}
        for info in left:  # Hadoop's hidden checksum of a log entry delta-rs removed
            name = info.base_name
            if name.startswith(".") and name.endswith(".crc") and name[1:-4] not in names:
                fs.delete_file(info.path)
        return max(0, before - len(self._log_files(db, table)))

    def _log_files(self, db: str, table: str) -> list[pafs.FileInfo]:
        fs, root = self._fs()
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{db}/{table}/_delta_log", allow_not_found=True))
        return [i for i in infos if i.type == pafs.FileType.File]

    def deletion_vectors(self, db: str, table: str) -> int:
        """Data files of the latest version that carry a deletion vector (rows marked deleted)."""
        handle = self.load_table(db, table)
        if handle is None:
            return 0
        return len(pa.RecordBatchReader.from_stream(handle.deletion_vectors()).read_all())
