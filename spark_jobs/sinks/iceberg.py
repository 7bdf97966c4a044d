"""The Apache Iceberg sink (``sinks.iceberg``): one Iceberg table per source table (per route
target for routed shards), identifier ``<db>.<table>`` (or ``<namespace>.<db>__<table>``),
in a SQL catalog (PostgreSQL, or SQLite on one machine), data files under ``warehouse``; its
``driver`` engine (the default) here, written with pyiceberg; the ``spark`` engine is
:class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkSink`.

Per table per micro-batch, on the driver, one Iceberg transaction: the rows of the batch's
keys are read (key and position), the changes that win by position are kept, the rows they
replace are deleted (copy-on-write: pyiceberg rewrites the data files that hold them) and
the new rows appended, with the merge job's application id and batch id written into the
table's properties and the snapshots' summaries in the same metadata commit
(:mod:`spark_jobs.sinks.lake_base`): a replayed batch finds itself committed.

What bounds a commit: reading the batch's keys scans the files whose key range (the
manifests' bounds) covers them, and the delete rewrites every data file holding a replaced
row; with keys spread over the table that is most of its files, so a commit costs about the
table's size, not the batch's.  Compaction (:meth:`IcebergSink.compact`) rewrites the small
files a commit leaves into files of ``target_file_size``.

Types: Iceberg has no 16-bit integers (SMALLINT, YEAR are int); int -> long, float ->
double and a decimal's precision grow in place; any other type change drops the column's
old values (read as null until the snapshot the producer takes after such DDL refills them).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timezone
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.batch import check_position
from spark_jobs.sinks.iceberg_maintenance import (
    compact_small_files,
    drop_dead_manifests,
    expiry_cutoffs,
    remove_unreferenced_files,
    small_files,
)
from spark_jobs.sinks.iceberg_catalog import IcebergCatalog, catalog_errors, no_secret, warehouse_uri
from spark_jobs.sinks.iceberg_merge import held_deletes, rewrite, winners
from spark_jobs.sinks.lake_base import OWNER_PROPERTY, LakeSinkBase, batches_held, evolved_schema
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN, iceberg_type, is_list_type
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.registry import register_sink

log = logging.getLogger(__name__)

__all__ = ["IcebergSink", "batch_property", "warehouse_uri"]

def batch_property(app: str) -> str:
    """The table property holding the last batch ``app`` committed."""
    return f"cdc.batch.{app}"


def _promotes(table_type: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether Iceberg holds ``wanted``'s values in the column as it is or promoted in place."""
    if table_type == wanted or (pa.types.is_string(wanted) or pa.types.is_large_string(wanted)) and \
            (pa.types.is_string(table_type) or pa.types.is_large_string(table_type)):
        return True
    if pa.types.is_binary(wanted) or pa.types.is_large_binary(wanted):
        return pa.types.is_binary(table_type) or pa.types.is_large_binary(table_type)
    if is_list_type(wanted) and is_list_type(table_type):
        return wanted.value_type == table_type.value_type
    pairs = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}
    if (table_type, wanted) in pairs or (wanted, table_type) in pairs:
        return True
    if pa.types.is_decimal(table_type) and pa.types.is_decimal(wanted):
        return wanted.scale == table_type.scale
    return False


@register_sink("iceberg")
class IcebergSink(LakeSinkBase):
    """Source tables as Iceberg tables of a SQL catalog (see the module docstring)."""

    FORMAT = "Iceberg"
    SMALL_INTS = False

    @classmethod
    def from_config(cls, section: Any) -> "IcebergSink":
        """The sink of ``sinks.iceberg``."""
        return cls(section.catalog_uri.get_secret_value(), section.warehouse, catalog_name=section.catalog_name,
                   namespace=section.namespace,
                   properties={k: v.get_secret_value() for k, v in (section.properties or {}).items()},
                   staging=section.staging_path or None, soft_delete=section.soft_delete,
                   compact_every=section.compact_every, compact_min_files=section.compact_min_files,
                   retention_hours=section.retention_hours,
                   max_snapshots=section.max_snapshots, target_file_size=section.target_file_size)

    def __init__(self, catalog_uri: str, warehouse: str, *, catalog_name: str = "cdc", namespace: str = "",
                 properties: dict[str, str] | None = None, staging: str | None = None, soft_delete: bool = False,
                 compact_every: int = 0, compact_min_files: int = 0, retention_hours: int | None = None,
                 max_snapshots: int | None = None,
                 target_file_size: int = 128 * 1024 * 1024) -> None:
        if not catalog_uri or not warehouse:
            raise SinkError("sinks.iceberg.catalog_uri and sinks.iceberg.warehouse must be set")
        self.catalog_uri = catalog_uri
        self.warehouse = str(warehouse).rstrip("/")
        self.catalog_name = catalog_name
        self.namespace = namespace
        self.properties = dict(properties or {})
        self.target_file_size = target_file_size
        self.max_snapshots = max_snapshots
        super().__init__(staging or f"{self.warehouse}/_cdc_staging", soft_delete=soft_delete,
                         compact_every=compact_every, compact_min_files=compact_min_files,
                         retention_hours=retention_hours)
        self._catalog = IcebergCatalog(catalog_uri, self.warehouse, catalog_name, self.properties)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_layouts": {}}

    def close(self) -> None:
        self._catalog.close()

    def prepare(self) -> None:
        self._catalog.get()

    @property
    def catalog(self) -> Any:
        """pyiceberg's catalog (:class:`~spark_jobs.sinks.iceberg_catalog.IcebergCatalog`)."""
        return self._catalog.get()

    # -- where ---------------------------------------------------------------------------------
    def identifier(self, db: str, table: str) -> tuple[str, str]:
        if not db or not table or "." in db + table:
            raise SinkError(f"{db!r}.{table!r} cannot name an Iceberg table (dots separate namespaces)")
        return (self.namespace, f"{db}__{table}") if self.namespace else (db, table)

    def where(self, db: str, table: str) -> str:
        return "iceberg:" + ".".join(self.identifier(db, table))

    def read_batches(self, db: str, table: str) -> Iterator[pa.RecordBatch] | None:
        """The table's rows in Arrow batches (None: no such table)."""
        handle = self.load_table(db, table)
        if handle is None:
            return None
        return iter(()) if handle.current_snapshot() is None else iter(handle.scan().to_arrow_batch_reader())

    def duckdb_scan(self, db: str, table: str) -> str:
        """DuckDB's table function reading the table's current metadata (its iceberg extension)."""
        handle = self.load_table(db, table)
        if handle is None:
            raise SinkError(f"no Iceberg table of {db}.{table}")
        return "iceberg_scan('" + handle.metadata_location.replace("'", "''") + "')"

    # -- the table ------------------------------------------------------------------------------
    def load_table(self, db: str, table: str) -> Any:
        err = catalog_errors()
        try:
            return self.catalog.load_table(self.identifier(db, table))
        except err["missing"]:
            return None
        except err["down"] as exc:
            self.close()
            raise SinkUnavailable(f"the Iceberg catalog database cannot be reached (table {db}.{table}): "
                                  f"{no_secret(exc)}") from exc

    def _owner(self, handle: Any) -> str | None:
        return handle.properties.get(OWNER_PROPERTY)

    def _committed_batch(self, handle: Any, app: str) -> int | None:
        v = handle.properties.get(batch_property(app))
        return int(v) if v is not None else None

    def _schema(self, handle: Any) -> pa.Schema:
        return handle.schema().as_arrow()

    def create_table(self, db: str, table: str, schema: pa.Schema, key: list[str], owner: str) -> Any:
        err = catalog_errors()
        ident = self.identifier(db, table)
        try:
            self.catalog.create_namespace_if_not_exists(ident[0])
            return self.catalog.create_table(ident, schema=schema, properties={
                OWNER_PROPERTY: owner or "cdc-merge", "format-version": "2",
                "write.parquet.compression-codec": "zstd", "cdc.key": ",".join(key),
                # (each commit writes a metadata file: keep the last 100, as Iceberg's default count)
                "write.metadata.delete-after-commit.enabled": "true"})
        except err["exists"] as exc:
            raise LakeCommitConflict(f"the table was created meanwhile: {exc}") from exc
        except err["down"] as exc:
            self.close()
            raise SinkUnavailable(f"the Iceberg catalog database cannot be reached (table {db}.{table}): "
                                  f"{no_secret(exc)}") from exc
        except OSError as exc:
            raise SinkUnavailable(f"cannot create the Iceberg table of {db}.{table} under {self.warehouse}: {exc} "
                                  "(is sinks.iceberg.warehouse writable by the merge job?)") from exc

    def _evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        current = self._schema(handle)
        added, retyped = evolved_schema(current, schema, _promotes)
        widened = [f for f in schema if f.name in current.names and f.name not in retyped
                   and current.field(f.name).type != f.type and _wider(current.field(f.name).type, f.type)]
        if not (added or retyped or widened):
            return handle
        if set(retyped) & set(key):
            raise SinkError(f"Iceberg table of {db}.{table}: key column(s) {', '.join(retyped)} changed type; drop the "
                            f"table ({self.where(db, table)}) and let the snapshot fill it again")
        self._change_columns(handle, db, table, retyped, [*(schema.field(n) for n in retyped), *added], widened)
        if retyped:
            log.warning("Iceberg table of %s.%s: column(s) %s changed type beyond what Iceberg promotes; their old "
                        "values read as null until the snapshot refills them", db, table, ", ".join(retyped))
        return self.load_table(db, table)

    def _change_columns(self, handle: Any, db: str, table: str, dropped: list[str], added: list[pa.Field],
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

    def _merge(self, handle: Any, db: str, table: str, changes: pa.Table, key: list[str], batch_id: int,
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
            self.close()
            raise SinkUnavailable(f"the Iceberg catalog database cannot be reached (table {db}.{table}, batch "
                                  f"{batch_id}): {no_secret(exc)}") from exc
        deletes = int(pc.sum(is_delete).as_py() or 0)
        if not self.soft_delete:  # a delete of a key the table does not hold removes nothing
            return applied.num_rows - deletes, held_deletes(applied, is_delete, replaced, key) if deletes else 0
        return applied.num_rows - deletes, deletes

    # -- the driver's table operations ----------------------------------------------------------
    def _below(self, position: str, where: dict | None) -> Any:
        from pyiceberg.expressions import And, EqualTo, LessThan
        check_position(position)
        expr = LessThan(POSITION_COLUMN, position)
        for c, v in (where or {}).items():
            expr = And(expr, EqualTo(c, v))
        return expr

    def delete_below(self, db: str, table: str, position: str, where: dict | None = None) -> int:
        handle = self.load_table(db, table)
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

    def _delete_rows_below(self, db: str, table: str, position: str) -> None:
        handle = self.load_table(db, table)
        if handle is not None:
            handle.delete(self._below(position, None))

    def _has_rows(self, db: str, table: str) -> bool:
        handle = self.load_table(db, table)
        return handle is not None and handle.scan(selected_fields=(POSITION_COLUMN,)).to_arrow().num_rows > 0

    def _rows_above(self, db: str, table: str, position: str) -> bool:
        from pyiceberg.expressions import GreaterThan
        handle = self.load_table(db, table)
        return handle is not None and handle.scan(row_filter=GreaterThan(POSITION_COLUMN, position),
                           selected_fields=(POSITION_COLUMN,)).to_arrow().num_rows > 0

    def _remove(self, db: str, table: str) -> None:
        self.catalog.purge_table(self.identifier(db, table))

    def _move(self, db: str, table: str, to_db: str, to_table: str) -> None:
        to = self.identifier(to_db, to_table)
        self.catalog.create_namespace_if_not_exists(to[0])
        self.catalog.rename_table(self.identifier(db, table), to)

    def tables(self) -> list[tuple[str, str]]:
        out = []
        for ns in self.catalog.list_namespaces():
            for ident in self.catalog.list_tables(ns):
                ns_name, name = ".".join(ident[:-1]), ident[-1]
                if self.namespace:
                    if ns_name == self.namespace and "__" in name:
                        out.append(tuple(name.split("__", 1)))
                else:
                    out.append((ns_name, name))
        return sorted(out)

    def applied_positions(self) -> dict[tuple[str, str], str]:
        out = {}
        for db, table in self.tables():
            handle = self.load_table(db, table)
            if handle is None or handle.current_snapshot() is None:
                continue
            positions = handle.scan(selected_fields=(POSITION_COLUMN,)).to_arrow().column(POSITION_COLUMN)
            top = pc.max(positions).as_py() if len(positions) else None
            if top:
                out[(db, table)] = top
        return out

    # -- maintenance -----------------------------------------------------------------------------
    def compact(self, db: str, table: str) -> dict:
        """Rewrite the table's small data files (below half of ``target_file_size``) into
        files of that size, in one snapshot, after dropping the manifests that list no live
        file."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        dropped = drop_dead_manifests(handle)
        return {**compact_small_files(handle, self.target_file_size), "manifests_dropped": dropped}

    def expire(self, db: str, table: str, retention_hours: float, max_snapshots: int | None = None) -> dict:
        """Expire the snapshots older than ``retention_hours`` and, with ``max_snapshots``, all
        but the newest ``max_snapshots`` (the current one stays;
        :func:`~spark_jobs.sinks.iceberg_maintenance.expiry_cutoffs`), then delete the files no
        snapshot left needs (pyiceberg's expiry only edits the metadata)."""
        handle = self.load_table(db, table)
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
        """:meth:`expire` at the retention, with the sink's ``max_snapshots``."""
        return self.expire(db, table, retention_hours, self.max_snapshots)

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (its snapshots not yet expired; a commit
        is one snapshot, counted by its ``cdc.commit``), oldest first, the ``(app, batch)`` of
        every batch it holds (:func:`~spark_jobs.sinks.lake_base.batches_held`)."""
        handle = self.load_table(db, table)
        if handle is None:
            return []
        found: dict[str, list[tuple[str, int]]] = {}  # by the commit's own id
        for snap in handle.metadata.snapshots:
            props = snap.summary.additional_properties if snap.summary else {}
            if "cdc.batch" in props:
                found.setdefault(props.get("cdc.commit", str(snap.snapshot_id)), batches_held(props))
        return list(found.values())

    def small_file_count(self, db: str, table: str) -> int:
        """Data files of the current snapshot below half of ``target_file_size`` (what :meth:`compact` rewrites)."""
        h = self.load_table(db, table)
        return 0 if h is None or h.current_snapshot() is None else len(small_files(h, self.target_file_size))

    def file_count(self, db: str, table: str) -> int:
        """Data files in the table's current snapshot."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return 0
        return len(handle.scan().plan_files())


def _wider(table_type: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether ``wanted`` is a promotion Iceberg makes in place (int -> long, float -> double,
    a decimal's precision up)."""
    if (table_type, wanted) in {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}:
        return True
    return pa.types.is_decimal(table_type) and pa.types.is_decimal(wanted) and wanted.precision > table_type.precision

