"""An Iceberg table's data files read into Arrow and written from Arrow, for the commits that
choose which files a snapshot deletes and adds (the driver engine's copy-on-write merge,
:func:`~spark_jobs.sinks.iceberg_merge.rewrite`, and compaction,
:func:`~spark_jobs.sinks.iceberg_maintenance.compact_small_files`), through pyiceberg's public
API only (issue 56): ``ArrowScan`` reads the files, ``write_file`` writes ``WriteTask``\\ s of
Arrow batches ``bin_pack_arrow_table`` cut at the table's ``write.target-file-size-bytes``,
their columns matched to the table's by name (``pyarrow_to_schema`` with the schema's name
mapping), as pyiceberg's own ``append`` and ``overwrite`` write them.  Those make a snapshot of
their own each (a delete, an overwrite and an append); here the caller adds the files to one
snapshot producer of its transaction (``update_snapshot(...).overwrite()``), so a batch stays
one snapshot with its properties.

The lake tables are unpartitioned (both engines create them so); a partitioned one is refused
(its files would need a partition value each).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from spark_jobs.errors import SinkError

__all__ = ["read_data_files", "write_data_files"]


def read_data_files(handle: Any, meta: Any, tasks: Sequence[Any]) -> pa.Table:
    """The rows of the scan ``tasks`` (their position deletes applied) in the table's current
    schema; ``meta``: the table's metadata (the transaction's, read once)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    return ArrowScan(table_metadata=meta, io=handle.io, projected_schema=handle.schema(),
                     row_filter=AlwaysTrue()).to_table(tasks=tasks)


def write_data_files(handle: Any, meta: Any, rows: pa.Table, write_uuid: uuid.UUID,
                     counter: Iterator[int]) -> list[Any]:
    """``rows`` (the table's columns) written as data files of the table, none when empty;
    their ``DataFile``\\ s, named ``00000-<n>-<write_uuid>.parquet`` with ``n`` from ``counter``."""
    from pyiceberg.io.pyarrow import bin_pack_arrow_table, pyarrow_to_schema, write_file
    from pyiceberg.table import TableProperties, WriteTask
    from pyiceberg.utils.properties import property_as_int
    if not rows.num_rows:
        return []
    if not meta.spec().is_unpartitioned():
        raise SinkError(f"Iceberg table at {meta.location} is partitioned: the driver engine writes unpartitioned "
                        "tables only (the ones it or the spark engine created)")
    target = property_as_int(meta.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                             TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
    schema = pyarrow_to_schema(rows.schema, name_mapping=meta.schema().name_mapping,
                               format_version=meta.format_version)
    tasks = (WriteTask(write_uuid=write_uuid, task_id=next(counter), record_batches=batches, schema=schema)
             for batches in bin_pack_arrow_table(rows, target))
    return list(write_file(handle.io, meta, tasks))
