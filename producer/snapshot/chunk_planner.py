"""Planning a table's chunks: where its snapshot starts and ends, and the key range of the
next chunk.

With one reader, plain keyset pagination: ``(lo, max]`` read ``chunk_size`` rows at a time
(a range that had more rows continues from its last row).  With several, ranges are planned
ahead so that they can be read at once: a dense integer key is cut evenly (Flink CDC's
distribution factor, :func:`even_split_step`), any other key by asking the database for the
key ``chunk_size`` rows further on (:func:`~producer.snapshot.chunk_queries.boundary_query`).
"""

from __future__ import annotations

from contract.position import BinlogPosition
from producer.binlog.reader import based
from producer.binlog.server import current_position
from producer.snapshot.state import KeyRange, TableJob
from producer.snapshot.table_reader import boundary_key, estimated_rows, max_key, min_key
from producer.table_schema import TableDef

_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


def even_split_step(min_key: int, max_key: int, estimated_rows: int, chunk_size: int) -> int | None:
    """Flink CDC's even split for a dense integer key: the key step holding about
    ``chunk_size`` rows, or None when the keys are too sparse (distribution factor above
    1000) or the row estimate is unusable.  A step that turns out to hold more rows is
    still read ``chunk_size`` rows at a time (the rest of its range is read next)."""
    if estimated_rows <= 0 or max_key < min_key:
        return None
    factor = (max_key - min_key + 1) / estimated_rows
    if factor > 1000:
        return None
    return max(1, int(chunk_size * max(factor, 1.0)))


class ChunkPlanner:
    def __init__(self, chunk_size: int, parallelism: int, file_base: int = 0) -> None:
        self.chunk_size = chunk_size
        self.parallelism = parallelism
        self.file_base = file_base  # added to binlog file indexes in positions (producer.binlog.reader.based)

    @staticmethod
    def keys(job: TableJob, tdef: TableDef) -> list[str]:
        """The columns a table's chunks are cut on: the surrogate key, else the primary key."""
        return [job.surrogate_key] if job.surrogate_key else list(tdef.primary_key)

    def start_table(self, conn, job: TableJob, tdef: TableDef) -> list[str]:
        """Begin (or, after a restart, resume) a table's snapshot: its key space up to the
        maximum key when the table began; returns the key columns."""
        db, table = job.db_table
        keys = self.keys(job, tdef)
        if job.delete_missing and job.below is None:
            # Every change after this point reaches the sinks, and every row the table holds
            # now is read after it: a sink row below it that the snapshot does not refresh
            # was deleted at the source.
            file, pos = current_position(conn)
            job.below = based(BinlogPosition.from_binlog(file, pos), self.file_base).encode()
        mk = job.max_key
        if not job.max_key_read:
            found = max_key(conn, tdef, keys)
            mk = list(found) if found is not None else None
        job.start(mk, estimated_rows(conn, db, table))
        return keys

    def next_range(self, conn, job: TableJob, tdef: TableDef, keys: list[str], busy: set[int]) -> KeyRange:
        """The range of the next chunk of ``job``: an outstanding one no reader holds
        (``busy``: ids of the ranges in flight), else a new one planned after the last."""
        rng = next((r for r in job.outstanding if id(r) not in busy), None)
        if rng is None:
            rng = job.plan(self._next_bound(conn, job, tdef, keys))
        return rng

    def _next_bound(self, conn, job: TableJob, tdef: TableDef, keys: list[str]) -> list:
        """The upper bound of the next range to plan."""
        if self.parallelism == 1 or job.max_key is None:
            return job.max_key  # keyset: (lo, max] read chunk_size rows at a time
        lo = job.planned_to
        col = tdef.column(keys[0]) if len(keys) == 1 else None
        if col is not None and col.data_type in _INTEGER_TYPES:
            start = lo[0] if lo is not None else None
            if start is None:
                first = min_key(conn, tdef, keys)
                start = first[0] - 1 if first is not None else None
            step = even_split_step(start + 1, job.max_key[0], job.estimated, self.chunk_size) \
                if start is not None else None
            if step is not None:
                return [min(start + step, job.max_key[0])]
        found = boundary_key(conn, tdef, keys, after=lo, upto=job.max_key, rows=self.chunk_size)
        return list(found) if found is not None else job.max_key
