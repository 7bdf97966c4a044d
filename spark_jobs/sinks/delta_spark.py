"""The Delta Lake sink's ``spark`` engine (``sinks.delta.engine: spark``): the tables of
:class:`~spark_jobs.sinks.delta.DeltaSink`, merged by Spark's executors with delta-spark in the
merge job's session, a MERGE by position per table per micro-batch, merge-on-read: a replaced
or deleted row is marked in a deletion vector, its file is not written again; compaction
(OPTIMIZE) folds them back on its schedule.

Exactly once: each MERGE carries the merge job's application transaction (Delta's idempotent
DML: ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` = the batch id,
:mod:`spark_jobs.sinks.lake_base`), so a replayed batch finds ``transaction_version(app) >=
batch`` (checked before the commit, and by Delta itself in it) and commits nothing; the
commit's ``userMetadata`` names the app and the batch.  The key columns and the position carry
file statistics (``delta.dataSkippingStatsColumns``): the MERGE skips the files outside the
batch's key range.

The driver reads the table's log with delta-rs (owner, schema, the batch the table holds,
the key's upper bound) and, for ``cdc verify``, its rows (DataFusion's reader, which applies
deletion vectors); every write is Spark's.  A column whose type changes so that the table's
type cannot hold the new values writes the whole table again (one overwrite commit, by the
executors), as the ``driver`` engine does.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.delta import LOG_RETENTION, DeltaSink, fits_delta_column, retention_interval
from spark_jobs.sinks.delta_spark_maintenance import FILE_RETENTION, DeltaSparkMaintenance
from spark_jobs.sinks.lake_base import evolved_schema
from spark_jobs.sinks.lake_spark import (
    EMPTY_TABLE,
    SparkMerge,
    java_error,
    lake_session,
    merge_statement,
    quote,
    spark_type,
    sql_literal,
    temp_view,
)
from spark_jobs.sinks.lake_types import DELETED_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.registry import register_sink

log = logging.getLogger(__name__)

__all__ = ["DeltaSparkSink"]

#: Delta's exceptions of a commit that lost the race with another writer.
_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
              "ConcurrentTransactionException", "ProtocolChangedException", "MetadataChangedException",
              "ConcurrentWriteException", "DELTA_CONCURRENT")


@register_sink("delta", engine="spark")
class DeltaSparkSink(SparkMerge, DeltaSparkMaintenance, DeltaSink):
    """Source tables as Delta tables under ``path``, written by Spark (see the module docstring)."""

    conflicts = _CONFLICTS

    # -- where ---------------------------------------------------------------------------------
    def spark_uri(self, db: str, table: str) -> str:
        """The table's location as Spark's file systems name it."""
        uri = self.table_uri(db, table)
        if "://" not in uri:
            return "file://" + os.path.abspath(uri)
        return "s3a://" + uri[5:] if uri.startswith("s3://") else uri

    def spark_name(self, db: str, table: str) -> str:
        """The table as Spark SQL names it (a path table)."""
        return "delta." + quote(self.spark_uri(db, table))

    # -- the table (its log read with delta-rs, written by Spark) ---------------------------------
    def _configuration(self, key: list[str], owner: str) -> dict[str, str]:
        conf = {**super()._configuration(key, owner),
                # merge-on-read: a MERGE marks the rows it replaces instead of writing their files again
                "delta.enableDeletionVectors": "true"}
        if self.retention_hours is not None:
            conf.update(self._retention_properties(self.retention_hours))
        return conf

    @staticmethod
    def _retention_properties(hours: float) -> dict[str, str]:
        """How long the log keeps its entries and VACUUM the files they remove."""
        return {LOG_RETENTION: retention_interval(hours), FILE_RETENTION: retention_interval(hours)}

    def _spark_error(self, what: str, db: str, table: str, exc: Exception) -> SinkError:
        """An unreachable place :class:`SinkUnavailable`, the rest :class:`SinkError`."""
        if any(m in str(exc) for m in ("AccessDeniedException", "FileAlreadyExistsException", "Mkdirs failed",
                                       "ParentNotDirectoryException", "IOException", "Permission denied")):
            return SinkUnavailable(f"Delta table of {db}.{table} ({self.table_uri(db, table)}): {what} failed: "
                                   f"{java_error(exc)} (is sinks.delta.path writable by the merge job?)")
        return SinkError(f"Delta table of {db}.{table}: {what} failed: {java_error(exc)}")

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        columns = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in schema)
        props = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in self._configuration(key, owner).items())
        try:
            self.run_sql("creating the table", db, table,
                      f"CREATE TABLE {self.spark_name(db, table)} ({columns}) USING delta TBLPROPERTIES ({props})")
        except SinkError as exc:
            if "already exists" in str(exc).lower() or "DELTA_PATH_EXISTS" in str(exc):
                raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
            raise
        handle = self.load_table(db, table)
        if handle is None:
            raise SinkUnavailable(f"the Delta table of {db}.{table} was created but cannot be read at "
                                  f"{self.table_uri(db, table)}")
        return handle

    def _evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        current = self._schema(handle)
        added, retyped = evolved_schema(current, schema, fits_delta_column)
        if retyped:
            return self._rewrite_by_spark(db, table, current, schema, retyped)
        if added:
            columns = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in added)
            self.run_sql("adding columns", db, table,
                         f"ALTER TABLE {self.spark_name(db, table)} ADD COLUMNS ({columns})")
            log.info("Delta table of %s.%s: columns added: %s", db, table, ", ".join(f.name for f in added))
            return self.load_table(db, table)
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
        self._run("writing it again with the new types", db, table,
                  lambda: (old.selectExpr(*cols).write.format("delta").mode("overwrite")
                           .option("overwriteSchema", "true").save(self.spark_uri(db, table))))
        return self.load_table(db, table)

    def _merge_frame(self, db: str, table: str, changes: Any, columns: list[str], key: list[str], batch_id: int,
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
            return changed, 0  # (SparkMerge splits the flagged deletes off)
        return changed, int(m.get("num_deleted_rows") or 0)

    def _key_upper_bound(self, handle: Any, column: str) -> Any:
        actions = pa.table(handle.get_add_actions(flatten=True))
        if "num_records" in actions.column_names:
            actions = actions.filter(pc.greater(pc.fill_null(actions.column("num_records"), 1), 0))
        if actions.num_rows == 0:
            return EMPTY_TABLE
        col = f"max.{column}"
        if col not in actions.column_names or actions.column(col).null_count:
            return None  # a file without statistics of the column
        return pc.max(actions.column(col)).as_py()

    def _append_frame(self, db: str, table: str, changes: Any, columns: list[str], batch_id: int, app: str,
                      meta: dict[str, str]) -> None:
        rows = changes.selectExpr(*[quote(c) if c != DELETED_COLUMN else f"false AS {quote(c)}" for c in columns])
        self._run(f"the append of batch {batch_id}", db, table,
                  lambda: (rows.write.format("delta").mode("append").option("txnAppId", app)
                           .option("txnVersion", batch_id)
                           .option("userMetadata", json.dumps({"cdc.app": app, "cdc.batch": str(batch_id), **meta}))
                           .save(self.spark_uri(db, table))))

    # -- the driver's table operations (Spark's DELETE and UPDATE) ---------------------------------
    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        if self.load_table(db, table) is None:
            return 0
        predicate = self._spark_predicate(position, where)
        name = self.spark_name(db, table)
        if self.soft_delete:
            rows = self.run_sql("flagging rows below a marker", db, table,
                             f"UPDATE {name} SET {quote(DELETED_COLUMN)} = true, {quote(POSITION_COLUMN)} = "
                             f"{sql_literal(position)} WHERE {predicate} "
                             f"AND NOT coalesce({quote(DELETED_COLUMN)}, false)")
            return int(rows[0][0]) if rows else 0
        rows = self.run_sql("deleting rows below a marker", db, table, f"DELETE FROM {name} WHERE {predicate}")
        return int(rows[0][0]) if rows else 0
