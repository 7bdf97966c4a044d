"""The Delta Lake sink's ``spark`` engine (``sinks.delta.engine: spark``): the tables of
:class:`~spark_jobs.sinks.delta_format.DeltaFormat`, merged by Spark's executors with delta-spark in the
merge job's session, a MERGE by position per table per micro-batch, merge-on-read: a replaced
or deleted row is marked in a deletion vector, its file is not written again; compaction
(OPTIMIZE) folds them back on its schedule.

Exactly once: each MERGE carries the merge job's application transaction (Delta's idempotent
DML: ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` = the batch id,
:mod:`spark_jobs.sinks.lake_sink`), so a replayed batch finds ``transaction_version(app) >=
batch`` (checked before the commit, and by Delta itself in it) and commits nothing; the
commit's ``userMetadata`` names the app and the batch.  The key columns and the position carry
file statistics (``delta.dataSkippingStatsColumns``): the MERGE skips the files outside the
batch's key range.

The driver reads the table's log with delta-rs (owner, schema, the batch the table holds,
the key's upper bound) and, for ``cdc verify``, its rows (DataFusion's reader, which applies
deletion vectors); every write is Spark's.  A column whose type changes so that the table's
type cannot hold the new values writes the whole table again (one overwrite commit, by the
executors), as the ``driver`` engine does.  Maintenance is Spark's OPTIMIZE and VACUUM, and
the log's old entries pruned with delta-rs (docs/lake.md, "Maintenance").
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.delta_format import LOG_RETENTION, DeltaFormat, fits_delta_column, retention_interval
from spark_jobs.sinks.lake_engine import evolved_schema
from spark_jobs.sinks.lake_spark import (
    SparkEngine,
    java_error,
    lake_session,
    merge_statement,
    quote,
    spark_type,
    sql_literal,
    temp_view,
)
from spark_jobs.sinks.lake_stage import StagingArea
from spark_jobs.sinks.lake_types import DELETED_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["DeltaSparkEngine", "FILE_RETENTION"]

#: Delta's exceptions of a commit that lost the race with another writer.
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
              "ConcurrentTransactionException", "ProtocolChangedException", "MetadataChangedException",
              "ConcurrentWriteException", "DELTA_CONCURRENT")
#: The table property that says how long VACUUM leaves the files a version removed.
FILE_RETENTION = "delta.deletedFileRetentionDuration"


class DeltaSparkEngine(SparkEngine):
    """Delta tables written by Spark (see the module docstring)."""

    conflicts = _CONFLICTS

    format: DeltaFormat

    def __init__(self, fmt: DeltaFormat, staging: StagingArea, *, soft_delete: bool = False,
                 retention_hours: float | None = None) -> None:
        super().__init__(fmt, staging, soft_delete=soft_delete)
        self.retention_hours = retention_hours

    # -- where ---------------------------------------------------------------------------------
    def spark_uri(self, db: str, table: str) -> str:
        """The table's location as Spark's file systems name it."""
        uri = self.format.table_uri(db, table)
        if "://" not in uri:
            return "file://" + os.path.abspath(uri)
        return "s3a://" + uri[5:] if uri.startswith("s3://") else uri

    def spark_name(self, db: str, table: str) -> str:
        """The table as Spark SQL names it (a path table)."""
        return "delta." + quote(self.spark_uri(db, table))

    # -- the table (its log read with delta-rs, written by Spark) ---------------------------------
    def configuration(self, key: list[str], owner: str) -> dict[str, str]:
        """The properties of a new table: the format's, deletion vectors and the retention."""
        conf = {**self.format.configuration(key, owner),
                # merge-on-read: a MERGE marks the rows it replaces instead of writing their files again
                "delta.enableDeletionVectors": "true"}
        if self.retention_hours is not None:
            conf.update(self._retention_properties(self.retention_hours))
        return conf

    @staticmethod
    def _retention_properties(hours: float) -> dict[str, str]:
        """How long the log keeps its entries and VACUUM the files they remove."""
        return {LOG_RETENTION: retention_interval(hours), FILE_RETENTION: retention_interval(hours)}

    def spark_error(self, what: str, db: str, table: str, exc: Exception) -> SinkError:
        """An unreachable place :class:`SinkUnavailable`, the rest :class:`SinkError`."""
        if any(m in str(exc) for m in ("AccessDeniedException", "FileAlreadyExistsException", "Mkdirs failed",
                                       "ParentNotDirectoryException", "IOException", "Permission denied")):
            return SinkUnavailable(f"Delta table of {db}.{table} ({self.format.table_uri(db, table)}): {what} failed: "
                                   f"{java_error(exc)} (is sinks.delta.path writable by the merge job?)")
        return SinkError(f"Delta table of {db}.{table}: {what} failed: {java_error(exc)}")

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        columns = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in schema)
        props = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in self.configuration(key, owner).items())
        try:
            self.run_sql("creating the table", db, table,
                      f"CREATE TABLE {self.spark_name(db, table)} ({columns}) USING delta TBLPROPERTIES ({props})")
        except SinkError as exc:
            if "already exists" in str(exc).lower() or "DELTA_PATH_EXISTS" in str(exc):
                raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
            raise
        handle = self.format.load_table(db, table)
        if handle is None:
            raise SinkUnavailable(f"the Delta table of {db}.{table} was created but cannot be read at "
                                  f"{self.format.table_uri(db, table)}")
        return handle

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        current = self.format.schema(handle)
        added, retyped = evolved_schema(current, schema, fits_delta_column)
        if retyped:
            return self._rewrite_by_spark(db, table, current, schema, retyped)
        if added:
            columns = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in added)
            self.run_sql("adding columns", db, table,
                         f"ALTER TABLE {self.spark_name(db, table)} ADD COLUMNS ({columns})")
            log.info("Delta table of %s.%s: columns added: %s", db, table, ", ".join(f.name for f in added))
            return self.format.load_table(db, table)
        return handle

    def _rewrite_by_spark(self, db: str, table: str, current: pa.Schema, wanted: pa.Schema,
                          retyped: list[str]) -> Any:
        """The table written again by Spark with ``retyped`` columns of ``wanted``'s types, in
        one commit (values that do not fit: null)."""
        types = {f.name: f.type for f in wanted}
        log.warning("Delta table of %s.%s: column(s) %s changed type beyond what the table holds; writing the table "
                    "again with the new type(s) (values that do not fit are null until the snapshot refills them)",
                    db, table, ", ".join(retyped))
        spark = lake_session()
        old = spark.read.format("delta").load(self.spark_uri(db, table))
        cols = [f"try_cast({quote(f.name)} AS {spark_type(types.get(f.name, f.type))}) AS {quote(f.name)}"
                for f in current]
        cols += [f"CAST(NULL AS {spark_type(f.type)}) AS {quote(f.name)}" for f in wanted
                 if f.name not in current.names]
        self.run("writing it again with the new types", db, table,
                  lambda: (old.selectExpr(*cols).write.format("delta").mode("overwrite")
                           .option("overwriteSchema", "true").save(self.spark_uri(db, table))))
        return self.format.load_table(db, table)

    def merge_frame(self, db: str, table: str, changes: Any, columns: list[str], key: list[str], batch_id: int,
                     app: str, bounds: tuple | None, meta: dict[str, str]) -> tuple[int, int] | None:
        conf = {"spark.databricks.delta.write.txnAppId": app, "spark.databricks.delta.write.txnVersion": str(batch_id),
                "spark.databricks.delta.commitInfo.userMetadata": json.dumps({"cdc.app": app,
                                                                              "cdc.batch": str(batch_id), **meta})}
        with temp_view(changes) as view:
            rows = self.run_sql(f"the MERGE of batch {batch_id}", db, table,
                             merge_statement(self.spark_name(db, table), view, columns, key,
                                             soft_delete=self.soft_delete, bounds=bounds), conf)
        if not rows:  # Delta found the batch committed (its app transaction): nothing was written
            return None
        m = rows[0].asDict()
        changed = int(m.get("num_inserted_rows") or 0) + int(m.get("num_updated_rows") or 0)
        if self.soft_delete:
            return changed, 0  # (SparkEngine.apply splits the flagged deletes off)
        return changed, int(m.get("num_deleted_rows") or 0)

    def append_frame(self, db: str, table: str, changes: Any, columns: list[str], batch_id: int, app: str,
                      meta: dict[str, str]) -> None:
        rows = changes.selectExpr(*[quote(c) if c != DELETED_COLUMN else f"false AS {quote(c)}" for c in columns])
        self.run(f"the append of batch {batch_id}", db, table,
                  lambda: (rows.write.format("delta").mode("append").option("txnAppId", app)
                           .option("txnVersion", batch_id)
                           .option("userMetadata", json.dumps({"cdc.app": app, "cdc.batch": str(batch_id), **meta}))
                           .save(self.spark_uri(db, table))))

    # -- the driver's table operations (Spark's DELETE and UPDATE) ---------------------------------
    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        if self.format.load_table(db, table) is None:
            return 0
        predicate = self.spark_predicate(position, where)
        name = self.spark_name(db, table)
        if self.soft_delete:
            rows = self.run_sql("flagging rows below a marker", db, table,
                             f"UPDATE {name} SET {quote(DELETED_COLUMN)} = true, {quote(POSITION_COLUMN)} = "
                             f"{sql_literal(position)} WHERE {predicate} "
                             f"AND NOT coalesce({quote(DELETED_COLUMN)}, false)")
            return int(rows[0][0]) if rows else 0
        rows = self.run_sql("deleting rows below a marker", db, table, f"DELETE FROM {name} WHERE {predicate}")
        return int(rows[0][0]) if rows else 0

    def remove(self, db: str, table: str) -> None:
        self.format.remove_dir(db, table)

    def move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        self.format.move_dir(db, table, to_db, to_table)

    # -- maintenance (Spark's OPTIMIZE and VACUUM) -----------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """OPTIMIZE: small files bin-packed into files of ``target_file_size``, and every file
        whose deletion vector marks a row written again without it (Delta's
        ``optimize.maxDeletedRowsRatio`` 0: the deletes folded back)."""
        if self.format.load_table(db, table) is None:
            return {}
        rows = self.run_sql("OPTIMIZE", db, table, f"OPTIMIZE {self.spark_name(db, table)}",
                         {"spark.databricks.delta.optimize.maxFileSize": str(self.format.target_file_size),
                          "spark.databricks.delta.optimize.maxDeletedRowsRatio": "0"})
        metrics = rows[0]["metrics"].asDict() if rows else {}
        return {"files_removed": int(metrics.get("numFilesRemoved") or 0),
                "files_added": int(metrics.get("numFilesAdded") or 0)}

    def vacuum(self, db: str, table: str, retention_hours: float) -> dict:
        """VACUUM: the files no version within ``retention_hours`` references removed (the log's
        entries older than the table's log retention go at its next checkpoint)."""
        if self.format.load_table(db, table) is None:
            return {}
        before = self.format.files_on_disk(db, table)
        self.run_sql("VACUUM", db, table, f"VACUUM {self.spark_name(db, table)} RETAIN {float(retention_hours)} HOURS")
        return {"files_removed": max(0, before - self.format.files_on_disk(db, table))}

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """VACUUM at the retention, with the table's log and file retention set to it (by default
        a table keeps 30 days of log, a file per commit), and the log's entries older than it
        and before its last checkpoint removed (:meth:`prune_log`)."""
        handle = self.format.load_table(db, table)
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
        handle = self.format.load_table(db, table)
        if handle is None:
            return 0
        from deltalake.exceptions import DeltaError
        before = len(self._log_files(db, table))
        try:
            handle.cleanup_metadata()
        except (DeltaError, OSError) as exc:
            raise SinkError(f"Delta table of {db}.{table}: removing old log entries failed: {exc}") from exc
        left = self._log_files(db, table)
        fs, _ = self.format.fs()
        names = {i.base_name for i in left}
        for info in left:  # Hadoop's hidden checksum of a log entry delta-rs removed
            name = info.base_name
            if name.startswith(".") and name.endswith(".crc") and name[1:-4] not in names:
                fs.delete_file(info.path)
        return max(0, before - len(self._log_files(db, table)))

    def _log_files(self, db: str, table: str) -> list[pafs.FileInfo]:
        fs, root = self.format.fs()
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{db}/{table}/_delta_log", allow_not_found=True))
        return [i for i in infos if i.type == pafs.FileType.File]
