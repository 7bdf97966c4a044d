"""The upkeep of the Iceberg sink's ``spark`` engine
(:class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkSink`): Iceberg's own Spark procedures
(``rewrite_data_files``, ``rewrite_position_delete_files``, ``expire_snapshots``,
``remove_orphan_files``), which snapshots and files go (docs/lake.md, "Maintenance"), and what
a table holds (its delete files, the batches its snapshots carry, its key statistics), read
with pyiceberg."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

from spark_jobs.sinks.iceberg import batch_property
from spark_jobs.sinks.iceberg_maintenance import expiry_cutoffs
from spark_jobs.sinks.lake_spark import EMPTY_TABLE, java_error, quote, sql_literal

__all__ = ["IcebergSparkMaintenance", "ancestry", "ORPHAN_MARGIN", "CATALOG_DOWN", "jdbc_message"]

#: How old a file no snapshot names must be before ``remove_orphan_files`` deletes it: such
#: files are left by failed writes (the expired snapshots' files go with the expiry), and a
#: file younger than this may belong to a write under way, another job's included.  Iceberg's
#: procedure refuses less than a day (its Java action, which takes less, is not public to Python).
ORPHAN_MARGIN = timedelta(hours=24)
#: Iceberg's exceptions of a catalog database that cannot be reached.
CATALOG_DOWN = ("UncheckedSQLException", "Connection refused", "SQLTransientConnectionException", "PSQLException",
                "Failed to connect", "SQLiteException")


def jdbc_message(exc: Exception) -> str:
    """A JDBC error's first line without a URL or a password."""
    import re
    return re.sub(r"jdbc:[^\s,)]+", "jdbc:...", java_error(exc))


class IcebergSparkMaintenance:
    """The maintenance and table reads of :class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkSink`
    (which gives ``load_table``, ``run_sql``, ``identifier``, ``spark_name``, ``catalog_name``,
    ``target_file_size`` and ``max_snapshots``)."""

    catalog_name: str
    target_file_size: int
    max_snapshots: int | None

    def _committed_batch(self, handle: Any, app: str) -> int | None:
        """The last batch of ``app`` the table holds: the newest snapshot of the current one's
        ancestry that ``app`` committed, else the table property maintenance wrote."""
        found = handle.properties.get(batch_property(app))
        best = int(found) if found is not None else None
        for snap in ancestry(handle):
            props = snap.summary.additional_properties if snap.summary else {}
            if props.get("cdc.app") == app and "cdc.batch" in props:
                batch = int(props["cdc.batch"])
                return batch if best is None else max(best, batch)
        return best

    def _key_upper_bound(self, handle: Any, column: str) -> Any:
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

    # -- maintenance (Iceberg's Spark procedures) ------------------------------------------------
    def _call(self, db: str, table: str, procedure: str, args: str) -> dict:
        ident = ".".join(self.identifier(db, table))
        rows = self.run_sql(procedure, db, table,
                         f"CALL {quote(self.catalog_name)}.system.{procedure}(table => {sql_literal(ident)}{args})")
        return rows[0].asDict() if rows else {}

    def compact(self, db: str, table: str) -> dict:
        """``rewrite_data_files``: small files bin-packed into files of ``target_file_size`` and
        every data file with position deletes written again without the deleted rows (the
        deletes folded back), then ``rewrite_position_delete_files`` (the delete files left
        dangling removed, the rest compacted)."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        data = self._call(db, table, "rewrite_data_files", ", options => map("
                          f"'target-file-size-bytes', '{int(self.target_file_size)}', 'min-input-files', '2', "
                          "'delete-file-threshold', '1', 'remove-dangling-deletes', 'true')")
        deletes = self._call(db, table, "rewrite_position_delete_files",
                             ", options => map('rewrite-all', 'true')")
        return {"files_removed": int(data.get("rewritten_data_files_count") or 0),
                "files_added": int(data.get("added_data_files_count") or 0),
                "delete_files_removed": int(deletes.get("rewritten_delete_files_count") or 0)
                + int(data.get("removed_delete_files_count") or 0)}

    def expire(self, db: str, table: str, retention_hours: float, max_snapshots: int | None = None) -> dict:
        """``expire_snapshots`` older than ``retention_hours`` and, with ``max_snapshots``, all
        but the newest ``max_snapshots`` (the current one stays;
        :func:`~spark_jobs.sinks.iceberg_maintenance.expiry_cutoffs`), then
        ``remove_orphan_files`` (files no snapshot names, left by failed writes, older than the
        same cutoff and at least :data:`ORPHAN_MARGIN`: a younger one may belong to a commit
        under way).  The batch markers of the snapshots that go are kept as table
        properties first (:meth:`_committed_batch` reads them)."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return {}
        snapshots = handle.metadata.snapshots
        now = datetime.now(timezone.utc)
        by_snapshot, by_file = expiry_cutoffs([s.timestamp_ms for s in snapshots], now, retention_hours, max_snapshots)
        self._keep_batch_markers(db, table, handle)
        expired = self._call(db, table, "expire_snapshots", f", older_than => TIMESTAMP {_ts(by_snapshot)}, "
                                                          "retain_last => 1")
        orphans = self._remove_orphan_files(db, table, min(by_file, now - ORPHAN_MARGIN))
        after = self.load_table(db, table)
        removed = sum(int(expired.get(k) or 0) for k in ("deleted_data_files_count",
                                                          "deleted_position_delete_files_count",
                                                          "deleted_equality_delete_files_count",
                                                          "deleted_manifest_files_count",
                                                          "deleted_manifest_lists_count"))
        return {"snapshots_expired": len(snapshots) - len(after.metadata.snapshots),
                "files_removed": removed + orphans}

    def _remove_orphan_files(self, db: str, table: str, older_than: datetime) -> int:
        """Iceberg's ``remove_orphan_files``: the files under the table's location that no
        snapshot or metadata names, written before ``older_than``; how many went (a row each)."""
        ident = ".".join(self.identifier(db, table))
        return len(self.run_sql("remove_orphan_files", db, table,
                             f"CALL {quote(self.catalog_name)}.system.remove_orphan_files(table => "
                             f"{sql_literal(ident)}, older_than => TIMESTAMP {_ts(older_than)})"))

    def _keep_batch_markers(self, db: str, table: str, handle: Any) -> None:
        """The newest batch of each app along the current snapshot's ancestry as the table
        property ``cdc.batch.<app>``, where it is newer than the property's."""
        found: dict[str, int] = {}
        for snap in ancestry(handle):
            props = snap.summary.additional_properties if snap.summary else {}
            if "cdc.app" in props and "cdc.batch" in props and props["cdc.app"] not in found:
                found[props["cdc.app"]] = int(props["cdc.batch"])
        newer = {batch_property(a): str(b) for a, b in found.items()
                 if int(handle.properties.get(batch_property(a), -1)) < b}
        if newer:
            self.run_sql("keeping the batch markers", db, table, f"ALTER TABLE {self.spark_name(db, table)} SET "
                      "TBLPROPERTIES (" + ", ".join(f"{sql_literal(k)} = {sql_literal(v)}"
                                                   for k, v in newer.items()) + ")")

    def remove_old_versions(self, db: str, table: str, retention_hours: float) -> dict:
        """:meth:`expire` at the retention, with the sink's ``max_snapshots``."""
        return self.expire(db, table, retention_hours, self.max_snapshots)

    def delete_file_count(self, db: str, table: str) -> int:
        """Position (or equality) delete files the current snapshot's data files carry."""
        handle = self.load_table(db, table)
        if handle is None or handle.current_snapshot() is None:
            return 0
        return len({d.file_path for t in handle.scan().plan_files() for d in t.delete_files})


def ancestry(handle: Any) -> Iterator[Any]:
    """The current snapshot and its ancestors still in the metadata, newest first."""
    by_id = {s.snapshot_id: s for s in handle.metadata.snapshots}
    snap = handle.current_snapshot()
    while snap is not None:
        yield snap
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None


def _ts(when: datetime) -> str:
    """A UTC time as a Spark SQL timestamp literal's text."""
    return "'" + when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "'"
