"""The Iceberg format (``sinks.iceberg``): one Iceberg table per source table (per route
target for routed shards), identifier ``<db>.<table>`` (or ``<namespace>.<db>__<table>``), in
a SQL catalog (PostgreSQL, or SQLite on one machine), data files under ``warehouse``; read with
pyiceberg whichever engine writes it (:mod:`spark_jobs.sinks.iceberg_driver`: pyiceberg,
:mod:`spark_jobs.sinks.iceberg_spark`: Iceberg's Spark runtime over a JDBC catalog on the same
database): the catalog, each table's owner, schema and batch markers, its files and their
statistics, and its rows (position deletes applied).

A batch's marker: the snapshot of its commit carries the merge job's application id and batch
id (``cdc.app``, ``cdc.batch``), and the table property ``cdc.batch.<app>`` holds the last
batch of the ``driver`` engine's commits (written in the same metadata commit) and of the
snapshots the ``spark`` engine's maintenance expires (:meth:`IcebergFormat.committed_batch`
reads both).

Types: Iceberg has no 16-bit integers (SMALLINT, YEAR are int); int -> long, float ->
double and a decimal's precision grow in place; any other type change drops the column's
old values (read as null until the snapshot the producer takes after such DDL refills them):
:func:`evolve_columns`, the schema change both engines make.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.iceberg_catalog import IcebergCatalog, catalog_errors, no_secret
from spark_jobs.sinks.iceberg_maintenance import small_files
from spark_jobs.sinks.lake_engine import evolved_schema
from spark_jobs.sinks.lake_format import EMPTY_TABLE, OWNER_PROPERTY, LakeFormat, batches_held
from spark_jobs.sinks.lake_types import is_list_type
from spark_jobs.sinks.naming import POSITION_COLUMN

log = logging.getLogger(__name__)

__all__ = ["IcebergFormat", "batch_property", "ancestry", "evolve_columns"]


def batch_property(app: str) -> str:
    """The table property holding the last batch ``app`` committed."""
    return f"cdc.batch.{app}"


def ancestry(handle: Any) -> Iterator[Any]:
    """The current snapshot and its ancestors still in the metadata, newest first (the index
    of the snapshots built only when a caller reads past the current one: a commit's check of
    the batch it holds mostly stops there)."""
    snap = handle.current_snapshot()
    by_id: dict[int, Any] | None = None
    while snap is not None:
        yield snap
        if snap.parent_snapshot_id is None:
            return
        if by_id is None:
            by_id = {s.snapshot_id: s for s in handle.metadata.snapshots}
        snap = by_id.get(snap.parent_snapshot_id)


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


def _wider(table_type: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether ``wanted`` is a promotion Iceberg makes in place (int -> long, float -> double,
    a decimal's precision up)."""
    if (table_type, wanted) in {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}:
        return True
    return pa.types.is_decimal(table_type) and pa.types.is_decimal(wanted) and wanted.precision > table_type.precision


def evolve_columns(fmt: "IcebergFormat", handle: Any, db: str, table: str, schema: pa.Schema, key: list[str],
                   change_columns: Callable[[Any, str, str, list[str], list[pa.Field], list[pa.Field]], None]) -> Any:
    """The table with ``schema``'s columns: ``change_columns(handle, db, table, dropped, added,
    widened)`` (the engine's: pyiceberg's schema update or Spark's ALTER TABLE) drops the
    columns retyped beyond what Iceberg promotes, then adds them and the new ones and widens
    the promoted ones in place; a key column retyped so is refused.  The table's handle."""
    current = fmt.schema(handle)
    added, retyped = evolved_schema(current, schema, _promotes)
    widened = [f for f in schema if f.name in current.names and f.name not in retyped
               and current.field(f.name).type != f.type and _wider(current.field(f.name).type, f.type)]
    if not (added or retyped or widened):
        return handle
    if set(retyped) & set(key):
        raise SinkError(f"Iceberg table of {db}.{table}: key column(s) {', '.join(retyped)} changed type; drop the "
                        f"table ({fmt.where(db, table)}) and let the snapshot fill it again")
    change_columns(handle, db, table, retyped, [*(schema.field(n) for n in retyped), *added], widened)
    if retyped:
        log.warning("Iceberg table of %s.%s: column(s) %s changed type beyond what Iceberg promotes; their old "
                    "values read as null until the snapshot refills them", db, table, ", ".join(retyped))
    return fmt.load_table(db, table)


class IcebergFormat(LakeFormat):
    """Iceberg tables of a SQL catalog (see the module docstring)."""

    NAME = "Iceberg"
    SMALL_INTS = False

    def __init__(self, catalog_uri: str, warehouse: str, *, catalog_name: str = "cdc", namespace: str = "",
                 properties: dict[str, str] | None = None, max_snapshots: int | None = None,
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
        self._catalog = IcebergCatalog(catalog_uri, self.warehouse, catalog_name, self.properties)

    def default_staging(self) -> str:
        return f"{self.warehouse}/_cdc_staging"

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
        """The table's catalog identifier ``(namespace, name)``."""
        if not db or not table or "." in db + table:
            raise SinkError(f"{db!r}.{table!r} cannot name an Iceberg table (dots separate namespaces)")
        return (self.namespace, f"{db}__{table}") if self.namespace else (db, table)

    def where(self, db: str, table: str) -> str:
        return "iceberg:" + ".".join(self.identifier(db, table))

    def catalog_down(self, db: str, table: str, exc: Exception, batch: int | None = None) -> SinkUnavailable:
        """The error of a catalog database that cannot be reached (the connection closed, made
        again on next use), without its URL or password."""
        self.close()
        what = f"table {db}.{table}" + (f", batch {batch}" if batch is not None else "")
        return SinkUnavailable(f"the Iceberg catalog database cannot be reached ({what}): {no_secret(exc)}")

    # -- the table ------------------------------------------------------------------------------
    def load_table(self, db: str, table: str) -> Any:
        err = catalog_errors()
        try:
            return self.catalog.load_table(self.identifier(db, table))
        except err["missing"]:
            return None
        except err["down"] as exc:
            raise self.catalog_down(db, table, exc) from exc

    def owner(self, handle: Any) -> str | None:
        return handle.properties.get(OWNER_PROPERTY)

    def committed_batch(self, handle: Any, app: str) -> int | None:
        """The last batch of ``app`` the table holds: the newest snapshot of the current one's
        ancestry that ``app`` committed, else the table property (the ``driver`` engine's
        commits write it; the ``spark`` engine's maintenance before it expires snapshots)."""
        found = handle.properties.get(batch_property(app))
        best = int(found) if found is not None else None
        for snap in ancestry(handle):
            props = snap.summary.additional_properties if snap.summary else {}
            if props.get("cdc.app") == app and "cdc.batch" in props:
                batch = int(props["cdc.batch"])
                return batch if best is None else max(best, batch)
        return best

    def schema(self, handle: Any) -> pa.Schema:
        return handle.schema().as_arrow()

    def key_upper_bound(self, handle: Any, column: str) -> Any:
        from pyiceberg.conversions import from_bytes
        from pyiceberg.types import IntegerType, LongType
        if handle.current_snapshot() is None:
            return EMPTY_TABLE
        field = handle.schema().find_field(column)
        if not isinstance(field.field_type, (IntegerType, LongType)):
            return None
        top, files = None, 0
        for task in handle.scan(selected_fields=(column,)).plan_files():
            files += 1
            bound = (task.file.upper_bounds or {}).get(field.field_id)
            if bound is None:
                return None  # a file without statistics of the column
            value = from_bytes(field.field_type, bound)
            top = value if top is None else max(top, value)
        return top if files else EMPTY_TABLE

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

    def commit_marks(self, db: str, table: str) -> list[list[tuple[str, int]]]:
        """Per commit the merge job made to the table (its snapshots not yet expired; a commit
        is one snapshot, counted by its ``cdc.commit``), oldest first, the ``(app, batch)`` of
        every batch it holds (:func:`~spark_jobs.sinks.lake_format.batches_held`)."""
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
        """Data files of the current snapshot below half of ``target_file_size`` (what compaction rewrites)."""
        h = self.load_table(db, table)
        return 0 if h is None or h.current_snapshot() is None else len(small_files(h, self.target_file_size))

    def file_count(self, db: str, table: str) -> int:
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return 0
        return len(handle.scan().plan_files())

    def delete_file_count(self, db: str, table: str) -> int:
        """Position (or equality) delete files the current snapshot's data files carry."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return 0
        return len({d.file_path for t in handle.scan().plan_files() for d in t.delete_files})
