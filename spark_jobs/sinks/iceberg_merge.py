"""An Iceberg table's merge of one batch by position, copy-on-write, in Arrow
(:class:`~spark_jobs.sinks.iceberg.IcebergSink`'s commit):

1. :func:`winners`: the table's rows of the batch's keys (key and position, read batch by
   batch through the files the range of the first key column plans, kept where that column is
   among the batch's values), joined with the batch's changes: the changes with a higher
   position win, and the rows they replace are known by key;
2. :func:`rewrite`: in one overwrite snapshot of the caller's transaction, each data file
   holding a replaced row written again without it (an anti-join by key; a file the batch's
   keys do not touch stays) and the batch's new rows appended (:func:`new_rows`), the files
   read and written through pyiceberg's public API (:mod:`spark_jobs.sinks.iceberg_files`).

pyiceberg's own ``delete(filter)`` matches rows by a filter expression: for a composite key an
``Or`` of one ``And`` per key, which for tens of thousands of keys did not bind in minutes.
Here only the range of the first key column is an expression; the rest is Arrow joins, of the
key columns and each row's index (an Arrow join refuses a list column among the others: a float
vector's).  A range and not an ``In`` of the values: pyiceberg makes and binds an ``In`` in
Python, a literal per value (about 1 s to make and 0.6 s a bind for 100,000 keys, measured
here, and a scan binds it more than once), while the driver's stream waits for the GIL; and it
plans the files by an ``In`` exactly as by its values' range (its metrics evaluator compares the
values with a file's bounds, and above 200 values not at all), so the range plans the same
files or fewer.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.sinks.iceberg_files import read_data_files, write_data_files
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN
from spark_jobs.sinks.naming import POSITION_COLUMN

__all__ = ["winners", "rewrite", "new_rows", "shaped", "coarse", "held_rows", "held_deletes"]

_OLD = "__cdc_old_position"
_ROW = "__cdc_row"


def _indexed_keys(rows: pa.Table, key: list[str]) -> pa.Table:
    """``rows``' key columns and each row's index (:data:`_ROW`): what a join takes of them."""
    return pa.table([rows.column(k) for k in key] + [pa.array(np.arange(rows.num_rows, dtype=np.int64))],
                    names=key + [_ROW])


def coarse(rows: pa.Table, key: list[str]) -> Any:
    """A filter holding at least ``rows``' keys: the first key column within its values' range
    (the rows of a composite key, and the keys in the range that are not ``rows``', are then
    matched in Arrow); nothing for no rows."""
    from pyiceberg.expressions import AlwaysFalse, And, EqualTo, GreaterThanOrEqual, LessThanOrEqual
    bounds = pc.min_max(rows.column(key[0]))
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    if lo is None:
        return AlwaysFalse()
    return EqualTo(key[0], lo) if lo == hi else And(GreaterThanOrEqual(key[0], lo), LessThanOrEqual(key[0], hi))


def held_rows(handle: Any, rows: pa.Table, key: list[str], columns: list[str]) -> pa.Table:
    """``columns`` of the table's rows whose first key column is among ``rows``' values
    (a superset of those holding ``rows``' keys), read batch by batch through the files
    :func:`coarse` plans: bounded by the batch's keys, not by the table."""
    values = pc.unique(rows.column(key[0]))
    reader = handle.scan(row_filter=coarse(rows, key), selected_fields=tuple(columns)).to_arrow_batch_reader()
    kept = [b.filter(pc.is_in(b.column(key[0]).cast(values.type), value_set=values)) for b in reader]
    return pa.Table.from_batches([b for b in kept if b.num_rows], schema=reader.schema)


def keys_as(keys: pa.Table, rows: pa.Table, key: list[str]) -> pa.Table:
    """``keys`` with the types of ``rows``' key columns (to join them)."""
    return pa.table([keys.column(k).cast(rows.schema.field(k).type) for k in key], names=key)


def shaped(rows: pa.Table, schema: pa.Schema, *, deleted: bool) -> pa.Table:
    """``rows`` as the table's columns and types (the soft-delete flag set where the table has it)."""
    arrays = []
    for f in schema:
        if f.name == DELETED_COLUMN:
            arrays.append(pa.array([deleted] * rows.num_rows, pa.bool_()))
        elif f.name in rows.column_names:
            arrays.append(rows.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def winners(handle: Any, changes: pa.Table, key: list[str]) -> tuple[pa.Table, pa.Table]:
    """The changes that win by position over the table's rows of their keys, and the keys of
    the table's rows they replace."""
    existing = held_rows(handle, changes, key, key + [POSITION_COLUMN])
    if existing.num_rows == 0:
        return changes, changes.slice(0, 0).select(key)
    ex = pa.table([existing.column(k).cast(changes.schema.field(k).type) for k in key]
                  + [existing.column(POSITION_COLUMN).cast(pa.string())], names=key + [_OLD])
    joined = _indexed_keys(changes, key).join(ex, keys=key, join_type="left outer")
    old = joined.column(_OLD)
    wins = pc.or_kleene(pc.is_null(old), pc.greater(changes.column(POSITION_COLUMN).take(joined.column(_ROW)), old))
    chosen = joined.filter(wins)
    replaced = chosen.filter(pc.is_valid(chosen.column(_OLD))).select(key)
    return changes.take(chosen.column(_ROW)), replaced


def held_deletes(applied: pa.Table, is_delete: Any, replaced: pa.Table, key: list[str]) -> int:
    """How many of the batch's deletes removed a row the table held (a delete of a key it did
    not hold removes nothing): joined by key alone (a join refuses a list among the other columns)."""
    return applied.filter(is_delete).select(key).join(replaced, keys=key, join_type="inner").num_rows


def new_rows(applied: pa.Table, is_delete: Any, key: list[str], schema: pa.Schema, gone: list[pa.Table],
             soft_delete: bool) -> pa.Table:
    """The rows a commit appends: the upserts, and with ``soft_delete`` the deleted rows
    flagged (their last values, ``gone``: the table's rows they replace, with the delete's
    position; a key the table did not hold, its key alone)."""
    parts = [shaped(applied.filter(pc.invert(is_delete)), schema, deleted=False)]
    deletes = applied.filter(is_delete) if soft_delete else None
    if deletes is not None and deletes.num_rows:
        keys = pa.table([deletes.column(k) for k in key] + [deletes.column(POSITION_COLUMN)],
                        names=key + [POSITION_COLUMN])
        last = pa.concat_tables(gone) if gone else None
        if last is not None and last.num_rows:
            last = last.drop_columns([c for c in (POSITION_COLUMN, DELETED_COLUMN) if c in last.column_names])
            probe = _indexed_keys(pa.table([last.column(k).cast(keys.schema.field(k).type) for k in key], names=key),
                                  key)
            keys = keys.join(probe, keys=key, join_type="left outer")
            at = keys.column(_ROW)  # (null where the table did not hold the key: its values null)
            others = [c for c in last.column_names if c not in key]
            keys = pa.table([keys.column(c) for c in key + [POSITION_COLUMN]]
                            + [last.column(c).take(at) for c in others], names=key + [POSITION_COLUMN] + others)
        parts.append(shaped(keys, schema, deleted=True))
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def rewrite(handle: Any, tx: Any, applied: pa.Table, replaced: pa.Table, key: list[str], props: dict, *,
            soft_delete: bool) -> None:
    """One overwrite snapshot in ``tx``: each data file holding a replaced row written again
    without it, and the batch's new rows appended."""
    schema = handle.schema().as_arrow()
    is_delete = pc.equal(applied.column(OP_COLUMN), "d")
    gone: list[pa.Table] = []  # the replaced rows' last values (soft deletes keep them)
    # (read once: pyiceberg rebuilds ``tx.table_metadata`` with a deep copy, every snapshot in
    # it, at each use, and the overwrite below changes it only when it commits; twice per file
    # touched, that was most of a commit's copies, docs/lake.md)
    meta = tx.table_metadata
    with tx.update_snapshot(snapshot_properties=props).overwrite() as ow:
        counter = itertools.count(0)

        def write(rows: pa.Table) -> None:
            for f in write_data_files(handle, meta, rows, ow.commit_uuid, counter):
                ow.append_data_file(f)
        if replaced.num_rows:
            for task in handle.scan(row_filter=coarse(replaced, key)).plan_files():
                rows = read_data_files(handle, meta, [task])
                keys = keys_as(replaced, rows, key)
                hit = _indexed_keys(rows, key).join(keys, keys=key, join_type="left semi").column(_ROW)
                if len(hit) == 0:
                    continue
                kept = rows.filter(pc.invert(pc.is_in(pa.array(np.arange(rows.num_rows, dtype=np.int64)), hit)))
                if soft_delete:
                    gone.append(rows.take(hit))
                ow.delete_data_file(task.file)
                write(kept)
        write(new_rows(applied, is_delete, key, schema, gone, soft_delete))
