"""The Delta Lake sink's ``driver`` engine (``sinks.delta.engine: driver``, the default): the
tables of :class:`~spark_jobs.sinks.delta_format.DeltaFormat` written with delta-rs on the
driver, no JVM: a MERGE by position per table per micro-batch, copy-on-write (each commit
writes again the files holding a row it replaces); OPTIMIZE, VACUUM and the log's retention
(docs/lake.md, "Maintenance").

Exactly once: each commit carries the merge job's application transaction (app id, version
= the batch id: :mod:`spark_jobs.sinks.lake_sink`), so a replayed batch finds
``transaction_version(app) >= batch`` and commits nothing.

A column whose type changes so that the table's type cannot hold the new values is the one
case that writes the whole table again: one overwrite commit, the old values cast where they
fit and null where not (the producer snapshots a table after DDL that retypes a column, and
refills them).  Columns a newer schema adds are added.  Columns are never dropped.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.batch import check_position
from spark_jobs.sinks.delta_format import (
    LOG_RETENTION,
    DeltaFormat,
    delta_errors,
    fits_delta_column,
    literal,
    query,
    quote_delta,
    retention_interval,
    retyped,
)
from spark_jobs.sinks.lake_engine import DriverEngine, evolved_schema
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["DeltaDriverEngine"]


class DeltaDriverEngine(DriverEngine):
    """Delta tables written with delta-rs (see the module docstring)."""

    format: DeltaFormat

    # -- the table ------------------------------------------------------------------------------
    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        from deltalake import DeltaTable
        _, delta_error, _ = delta_errors()
        fmt = self.format
        uri = fmt.table_uri(db, table)
        try:
            return DeltaTable.create(uri, schema, mode="error", name=f"{db}.{table}",
                                     configuration=fmt.configuration(key, owner),
                                     storage_options=fmt.storage_options or None, raise_if_key_not_exists=False)
        except delta_error as exc:
            if "already exists" in str(exc).lower():  # another writer made it first: load it and check it
                raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
            raise SinkUnavailable(f"cannot create the Delta table of {db}.{table} at {uri}: {exc}") from exc
        except OSError as exc:
            raise SinkUnavailable(f"cannot create the Delta table of {db}.{table} at {uri}: {exc} (is "
                                  "sinks.delta.path writable by the merge job?)") from exc

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        current = self.format.schema(handle)
        added, changed = evolved_schema(current, schema, fits_delta_column)
        if changed:
            return self._rewrite(handle, db, table, current, schema, changed)
        if added:
            from deltalake import Schema as DeltaSchema
            fields = DeltaSchema.from_arrow(pa.schema(added)).fields
            handle.alter.add_columns(fields)
            log.info("Delta table of %s.%s: columns added: %s", db, table, ", ".join(f.name for f in added))
        return handle

    def _rewrite(self, handle: Any, db: str, table: str, current: pa.Schema, wanted: pa.Schema,
                 changed: list[str]) -> Any:
        """The table written again with ``changed`` columns of ``wanted``'s types, in one commit."""
        from deltalake import write_deltalake
        types = {f.name: f.type for f in wanted}
        schema = pa.schema([pa.field(f.name, types.get(f.name, f.type), nullable=True) for f in current] +
                           [f for f in wanted if f.name not in current.names])
        log.warning("Delta table of %s.%s: column(s) %s changed type beyond what the table holds; writing the table "
                    "again with the new type(s) (values that do not fit are null until the snapshot refills them)",
                    db, table, ", ".join(changed))

        old = query(handle, "SELECT * FROM t")  # (opened here: delta-rs cannot open it while it writes; streamed)
        write_deltalake(handle, pa.RecordBatchReader.from_batches(schema, retyped(old, schema)), mode="overwrite",
                        schema_mode="overwrite", storage_options=self.format.storage_options or None)
        return self.format.load_table(db, table)

    def merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
              app: str, meta: dict[str, str]) -> tuple[int, int]:
        from deltalake import CommitProperties, Transaction
        conflict, delta_error, _ = delta_errors()
        q = quote_delta
        columns = [n for n in changes.column_names if n != OP_COLUMN]
        every = {q(c): f"s.{q(c)}" for c in columns}
        is_delete = f"s.{q(OP_COLUMN)} = 'd'"
        newer = f"s.{q(POSITION_COLUMN)} > t.{q(POSITION_COLUMN)}"
        merger = handle.merge(
            changes, " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key), source_alias="s", target_alias="t",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id=app, version=batch_id)],
                                               custom_metadata={"cdc.app": app, "cdc.batch": str(batch_id), **meta}))
        if self.soft_delete:
            flag = q(DELETED_COLUMN)
            merger = (merger
                      .when_matched_update({q(POSITION_COLUMN): f"s.{q(POSITION_COLUMN)}", flag: "true"},
                                           predicate=f"{is_delete} AND {newer}")
                      .when_matched_update({**every, flag: "false"}, predicate=f"NOT {is_delete} AND {newer}")
                      .when_not_matched_insert({**{q(c): f"s.{q(c)}" for c in key + [POSITION_COLUMN]}, flag: "true"},
                                               predicate=is_delete)
                      .when_not_matched_insert({**every, flag: "false"}, predicate=f"NOT {is_delete}"))
        else:
            merger = (merger
                      .when_matched_delete(predicate=f"{is_delete} AND {newer}")
                      .when_matched_update(every, predicate=f"NOT {is_delete} AND {newer}")
                      .when_not_matched_insert(every, predicate=f"NOT {is_delete}"))
        try:
            m = merger.execute()
        except conflict as exc:
            raise LakeCommitConflict(str(exc)) from exc
        except delta_error as exc:
            raise SinkError(f"Delta table of {db}.{table}: the MERGE of batch {batch_id} failed: {exc}") from exc
        except OSError as exc:
            raise SinkUnavailable(f"Delta table of {db}.{table}: the MERGE of batch {batch_id} failed: {exc}") from exc
        changed = int(m.get("num_target_rows_inserted", 0)) + int(m.get("num_target_rows_updated", 0))
        if self.soft_delete:
            deletes = int(pc.sum(pc.equal(changes.column(OP_COLUMN), "d")).as_py() or 0)
            deleted = min(deletes, changed)
            return changed - deleted, deleted
        return changed, int(m.get("num_target_rows_deleted", 0))

    # -- the driver's table operations --------------------------------------------------------------
    @staticmethod
    def _predicate(position: str, where: dict | None) -> str:
        check_position(position)
        conds = [f"{quote_delta(POSITION_COLUMN)} < {literal(position)}"]
        conds += [f"{quote_delta(c)} = {literal(v)}" for c, v in (where or {}).items()]
        return " AND ".join(conds)

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        handle = self.format.load_table(db, table)
        if handle is None:
            return 0
        predicate = self._predicate(position, where)
        if self.soft_delete:
            m = handle.update({quote_delta(DELETED_COLUMN): "true", quote_delta(POSITION_COLUMN): literal(position)},
                              predicate=f"{predicate} AND NOT coalesce({quote_delta(DELETED_COLUMN)}, false)")
            return int(m.get("num_updated_rows", 0))
        return int(handle.delete(predicate).get("num_deleted_rows", 0))

    def delete_rows_below(self, db: str, table: str, position: str) -> None:
        handle = self.format.load_table(db, table)
        if handle is not None:
            handle.delete(self._predicate(position, None))

    def has_rows(self, db: str, table: str) -> bool:
        handle = self.format.load_table(db, table)
        return handle is not None and handle.count() > 0

    def rows_above(self, db: str, table: str, position: str) -> bool:
        handle = self.format.load_table(db, table)
        return handle is not None and query(handle, f"SELECT 1 FROM t WHERE {quote_delta(POSITION_COLUMN)} > "
                                                     f"{literal(position)} LIMIT 1").read_all().num_rows > 0

    def remove(self, db: str, table: str) -> None:
        self.format.remove_dir(db, table)

    def move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        self.format.move_dir(db, table, to_db, to_table)

    # -- maintenance ---------------------------------------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """Compact small files (OPTIMIZE) and write a checkpoint of the log."""
        handle = self.format.load_table(db, table)
        if handle is None:
            return {}
        done = handle.optimize.compact(target_size=self.format.target_file_size)
        handle.create_checkpoint()
        return {"files_removed": done.get("numFilesRemoved", 0), "files_added": done.get("numFilesAdded", 0)}

    def vacuum(self, db: str, table: str, retention_hours: float) -> dict:
        """Remove files no version within ``retention_hours`` references, and old log entries."""
        handle = self.format.load_table(db, table)
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
        handle = self.format.load_table(db, table)
        if handle is None:
            return {}
        wanted = retention_interval(retention_hours)
        if handle.metadata().configuration.get(LOG_RETENTION) != wanted:
            handle.alter.set_table_properties({LOG_RETENTION: wanted}, raise_if_not_exists=False)
        return self.vacuum(db, table, retention_hours)
