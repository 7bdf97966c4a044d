"""The Iceberg sink's ``driver`` engine (``sinks.iceberg.engine: driver``, the default): the
tables of :class:`~spark_jobs.sinks.iceberg_format.IcebergFormat` written with pyiceberg on
the driver.

Per table per micro-batch, one Iceberg transaction: the rows of the batch's keys are read (key
and position), the changes that win by position are kept, the rows they replace are deleted
(copy-on-write: pyiceberg rewrites the data files that hold them) and the new rows appended,
with the merge job's application id and batch id written into the table's properties and the
snapshots' summaries in the same metadata commit (:mod:`spark_jobs.sinks.lake_sink`): a
replayed batch finds itself committed.

What bounds a commit: reading the batch's keys scans the files whose key range (the
manifests' bounds) covers them, and the delete rewrites every data file holding a replaced
row; with keys spread over the table that is most of its files, so a commit costs about the
table's size, not the batch's.  Compaction (:meth:`IcebergDriverEngine.compact`) rewrites the
small files a commit leaves into files of ``target_file_size``.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import LakeCommitConflict, SinkUnavailable
from spark_jobs.sinks.batch import check_position
from spark_jobs.sinks.iceberg_catalog import catalog_errors
from spark_jobs.sinks.iceberg_format import IcebergFormat, batch_property, evolve_columns
from spark_jobs.sinks.iceberg_maintenance import (
    compact_small_files,
    drop_dead_manifests,
    expiry_cutoffs,
    remove_unreferenced_files,
)
from spark_jobs.sinks.iceberg_merge import held_deletes, rewrite, winners
from spark_jobs.sinks.lake_engine import DriverEngine
from spark_jobs.sinks.lake_format import OWNER_PROPERTY
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN, iceberg_type
from spark_jobs.sinks.naming import POSITION_COLUMN

__all__ = ["IcebergDriverEngine"]


class IcebergDriverEngine(DriverEngine):
    """Iceberg tables written with pyiceberg (see the module docstring)."""

    format: IcebergFormat

    # -- the table ------------------------------------------------------------------------------
    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        err = catalog_errors()
        fmt = self.format
        ident = fmt.identifier(db, table)
        try:
            fmt.catalog.create_namespace_if_not_exists(ident[0])
            return fmt.catalog.create_table(ident, schema=schema, properties={
                OWNER_PROPERTY: owner or "cdc-merge", "format-version": "2",
                "write.parquet.compression-codec": "zstd", "cdc.key": ",".join(key),
                # (each commit writes a metadata file: keep the last 100, as Iceberg's default count)
                "write.metadata.delete-after-commit.enabled": "true"})
        except err["exists"] as exc:
            raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
        except err["down"] as exc:
            raise fmt.catalog_down(db, table, exc) from exc
        except OSError as exc:
            raise SinkUnavailable(f"cannot create the Iceberg table of {db}.{table} under {fmt.warehouse}: {exc} "
                                  "(is sinks.iceberg.warehouse writable by the merge job?)") from exc

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        return evolve_columns(self.format, handle, db, table, schema, key, self._change_columns)

    @staticmethod
    def _change_columns(handle: Any, db: str, table: str, dropped: list[str], added: list[pa.Field],
                        widened: list[pa.Field]) -> None:
        """Drop the columns ``dropped``, then add ``added`` and widen ``widened`` in place."""
        with handle.update_schema() as update:
            for name in dropped:
                update.delete_column(name)
        with handle.update_schema() as update:
            for f in added:
                update.add_column(f.name, iceberg_type(f.type))
            for f in widened:
                update.update_column(f.name, field_type=iceberg_type(f.type))

    def merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
              app: str, meta: dict[str, str]) -> tuple[int, int]:
        err = catalog_errors()
        applied, replaced = winners(handle, changes, key)
        is_delete = pc.equal(applied.column(OP_COLUMN), "d")
        props = {"cdc.app": app, "cdc.batch": str(batch_id), "cdc.commit": uuid.uuid4().hex, **meta}
        try:
            with handle.transaction() as tx:
                rewrite(handle, tx, applied, replaced, key, props, soft_delete=self.soft_delete)
                tx.set_properties({batch_property(app): str(batch_id)})
        except err["conflict"] as exc:
            raise LakeCommitConflict(str(exc)) from exc
        except err["down"] as exc:
            raise self.format.catalog_down(db, table, exc, batch_id) from exc
        deletes = int(pc.sum(is_delete).as_py() or 0)
        if not self.soft_delete:  # a delete of a key the table does not hold removes nothing
            return applied.num_rows - deletes, held_deletes(applied, is_delete, replaced, key) if deletes else 0
        return applied.num_rows - deletes, deletes

    # -- the driver's table operations ----------------------------------------------------------
    @staticmethod
    def _below(position: str, where: dict | None) -> Any:
        from pyiceberg.expressions import And, EqualTo, LessThan
        check_position(position)
        expr = LessThan(POSITION_COLUMN, position)
        for c, v in (where or {}).items():
            expr = And(expr, EqualTo(c, v))
        return expr

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        handle = self.format.load_table(db, table)
        if handle is None:
            return 0
        expr = self._below(position, where)
        doomed = handle.scan(row_filter=expr, selected_fields=(POSITION_COLUMN,)).to_arrow().num_rows
        if not doomed:
            return 0
        if self.soft_delete:
            rows = handle.scan(row_filter=expr).to_arrow()
            flagged = rows.set_column(rows.schema.get_field_index(POSITION_COLUMN), POSITION_COLUMN,
                                      pa.array([position] * rows.num_rows, rows.schema.field(POSITION_COLUMN).type))
            flagged = flagged.set_column(flagged.schema.get_field_index(DELETED_COLUMN), DELETED_COLUMN,
                                         pa.array([True] * rows.num_rows, pa.bool_()))
            with handle.transaction() as tx:
                tx.delete(expr)
                tx.append(flagged)
        else:
            handle.delete(expr)
        return doomed

    def delete_rows_below(self, db: str, table: str, position: str) -> None:
        handle = self.format.load_table(db, table)
        if handle is not None:
            handle.delete(self._below(position, None))

    def has_rows(self, db: str, table: str) -> bool:
        handle = self.format.load_table(db, table)
        return handle is not None and handle.scan(selected_fields=(POSITION_COLUMN,)).to_arrow().num_rows > 0

    def rows_above(self, db: str, table: str, position: str) -> bool:
        from pyiceberg.expressions import GreaterThan
        handle = self.format.load_table(db, table)
        return handle is not None and handle.scan(row_filter=GreaterThan(POSITION_COLUMN, position),
                                                  selected_fields=(POSITION_COLUMN,)).to_arrow().num_rows > 0

    def remove(self, db: str, table: str) -> None:
        self.format.catalog.purge_table(self.format.identifier(db, table))

    def move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        to = self.format.identifier(to_db, to_table)
        self.format.catalog.create_namespace_if_not_exists(to[0])
        self.format.catalog.rename_table(self.format.identifier(db, table), to)

    # -- maintenance -----------------------------------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """Rewrite the table's small data files (below half of ``target_file_size``) into
        files of that size, in one snapshot, after dropping the manifests that list no live
        file."""
        handle = self.format.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        dropped = drop_dead_manifests(handle)
        return {**compact_small_files(handle, self.format.target_file_size), "manifests_dropped": dropped}

    def expire(self, db: str, table: str, retention_hours: float, max_snapshots: int | None = None) -> dict:
        """Expire the snapshots older than ``retention_hours`` and, with ``max_snapshots``, all
        but the newest ``max_snapshots`` (the current one stays;
        :func:`~spark_jobs.sinks.iceberg_maintenance.expiry_cutoffs`), then delete the files no
        snapshot left needs (pyiceberg's expiry only edits the metadata)."""
        handle = self.format.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        before = len(handle.metadata.snapshots)
        snapshots_before, files_before = expiry_cutoffs([s.timestamp_ms for s in handle.metadata.snapshots],
                                                        datetime.now(timezone.utc), retention_hours, max_snapshots)
        if before > 1:
            handle.maintenance.expire_snapshots().older_than(snapshots_before).commit()
        handle = handle.refresh()
        return {"snapshots_expired": before - len(handle.metadata.snapshots),
                "files_removed": remove_unreferenced_files(handle, files_before)}

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """:meth:`expire` at the retention, with the format's ``max_snapshots``."""
        return self.expire(db, table, retention_hours, self.format.max_snapshots)
