"""A lake table (Delta Lake, Iceberg) as a verify target: read back through its library
(delta-rs, pyiceberg) into Arrow, batch by batch, into a dict keyed by the normalised key.

Like the clean changelog's replay (:mod:`cdc.verify.changelog`) **this needs memory
proportional to the table** (one normalised row per key); the source chunks then take their
keys out of it and what is left is "extra".  Rows a soft delete flagged (``__cdc_deleted``)
are not rows of the table; a route's target holds one shard's rows where its origin columns
hold the shard's values, and its rows of no shard are counted as in the database targets
(:meth:`LakeTarget.origin_counts`).  Values compare in verify's normal forms
(:mod:`cdc.verify.normalise`): the lake's types (docs/lake.md) are Python values those forms know.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from cdc.errors import TargetMissing
from cdc.verify.report import SinkResult
from cdc.verify.spec import TableSpec
from cdc.verify.targets import KeyedRowsTarget
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.lake_types import DELETED_COLUMN


class LakeTarget(KeyedRowsTarget):
    """One lake sink's tables, each read into memory when its turn comes."""

    def __init__(self, name: str, lake: LakeSink) -> None:
        super().__init__()
        self.sink = name
        self.lake = lake

    def open(self, spec: TableSpec, result: SinkResult) -> None:
        db, table = spec.sink_name
        result.target = self.lake.where(db, table)
        self.rows, self._chunk = {}, None
        batches = self.lake.read_batches(db, table)
        if batches is None:
            raise TargetMissing(f"no {self.lake.FORMAT} table {result.target}")
        ks, vs = spec.key_specs, spec.value_specs
        for batch in batches:
            batch = self._own_rows(batch, spec)
            names = set(batch.schema.names)
            for c in spec.columns:
                if c.name not in names and c.name not in result.missing_columns:
                    result.missing_columns.append(c.name)
            for row in batch.to_pylist():
                key = tuple(c.sink(row.get(c.name)) for c in ks)
                self.rows[key] = tuple(c.sink(row.get(c.name)) for c in vs)
        result.sink_rows = len(self.rows)

    @staticmethod
    def _own_rows(batch: pa.RecordBatch, spec: TableSpec) -> pa.RecordBatch:
        """The batch's rows of the table: not flagged deleted, of the shard's origin values."""
        keep = None
        if DELETED_COLUMN in batch.schema.names:
            keep = pc.invert(pc.fill_null(batch.column(DELETED_COLUMN), False))
        for col, value in (spec.origin or {}).items():
            cond = pc.equal(batch.column(col), value) if col in batch.schema.names else pa.array(
                [False] * batch.num_rows)
            keep = cond if keep is None else pc.and_(keep, cond)
        return batch if keep is None else batch.filter(keep)

    def qualified(self, db: str, table: str) -> str:
        return self.lake.where(db, table)

    def origin_counts(self, target: tuple[str, str], origin: list[str]) -> dict[tuple, int] | None:
        """Rows per origin values (the shards' rows) in a route's lake target, rows a soft
        delete flagged left out; None when the table or one of the origin columns does not
        exist."""
        batches = self.lake.read_batches(*target)
        if batches is None:
            return None
        counts: dict[tuple, int] = {}
        for batch in batches:
            if any(c not in batch.schema.names for c in origin):
                return None
            if DELETED_COLUMN in batch.schema.names:
                batch = batch.filter(pc.invert(pc.fill_null(batch.column(DELETED_COLUMN), False)))
            for values in zip(*(batch.column(c).to_pylist() for c in origin)):
                counts[values] = counts.get(values, 0) + 1
        return counts

    def close(self) -> None:
        self.lake.close()
