"""The source table, read in key chunks (bounded memory for the database comparisons).

The source is read with keyset pagination on its key (``ORDER BY k1, k2 LIMIT n`` after
the last key read, compared by the source database), ``chunk_size`` rows at a time: the
last key of a chunk is its upper boundary.  At most one source chunk, one sink chunk and
the samples are held at once, whatever the table size; sink rows are streamed (server-side
cursors) into the count and checksum, and streamed again for a drill-down.

In the source's own keyset predicates an ENUM or SET key value is given as its number,
because ``ORDER BY`` sorts those by number while ``e > 'text'`` compares text (a text bound
skips and repeats rows).  A chunk reads one row more than its size to know whether it is
the last, so no empty chunk trails a table whose size is a multiple of the chunk size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from cdc.verify.checksum import Checksum
from cdc.verify.spec import TableSpec
from cdc.verify.sql import LOOKUP_BATCH, key_after, key_in_list
from common.sql.quoting import quote_ident
from common.sql.row_reads import RowSession


@dataclass
class Chunk:
    index: int
    lo: tuple | None                   # exclusive lower bound (normalised key), None: none
    hi: tuple | None                   # inclusive upper bound, None: none (the last chunk)
    rows: dict[tuple, tuple]           # normalised key -> normalised values
    checksum: Checksum


class SourceTable:
    """The source table, read in keyset chunks on ``session``, a row session
    (:func:`common.sql.sessions.row_session`: the project's own connection, UTC, READ
    COMMITTED, autocommit; its values pymysql's)."""

    def __init__(self, session: RowSession, spec: TableSpec) -> None:
        self.session = session
        self.spec = spec
        exprs = []
        for c in [*spec.key_specs, *spec.value_specs]:
            q = quote_ident(c.name)
            exprs.append(f"CAST({q} AS DOUBLE)" if c.kind == "float32" else q)
        self.select = ", ".join(exprs)
        self.qkeys = [quote_ident(k) for k in spec.key]
        # The key in a lookup's row IN list: an ENUM/SET column by its number (``+ 0``), as its
        # parameters are (TableSpec's key_params).  MySQL compares an ENUM or SET column with
        # an integer by number in ``col = n`` and ``col IN (n, m)``, but as text in a row IN
        # list of several rows (``(e, k) IN ((1, 'a'), (2, 'b'))`` found nothing on MySQL 9.7,
        # where MariaDB finds both).
        self.lookup_keys = [f"({q} + 0)" if c.enum and len(spec.key) > 1 else q
                            for q, c in zip(self.qkeys, spec.key_specs)]
        self.table = f"{quote_ident(spec.db)}.{quote_ident(spec.table)}"
        self.nkey = len(spec.key)

    def _rows(self, raw: Iterable[tuple]) -> Iterator[tuple[tuple, tuple]]:
        ks, vs, n = self.spec.key_specs, self.spec.value_specs, self.nkey
        for r in raw:
            yield (tuple(c.source(v) for c, v in zip(ks, r[:n])), tuple(c.source(v) for c, v in zip(vs, r[n:])))

    def chunks(self, size: int) -> Iterator[Chunk]:
        lo: tuple | None = None
        index = 0
        order = ", ".join(self.qkeys)
        while True:
            sql, params = f"SELECT {self.select} FROM {self.table}", []
            if lo is not None:
                pred, params = key_after("mysql", self.qkeys, self.spec.key_params(lo, "source"), ">")
                sql += f" WHERE {pred}"
            # One row more than the chunk: it tells whether this chunk is the last (no empty
            # trailing chunk when the table size is a multiple of the chunk size).
            sql += f" ORDER BY {order} LIMIT {int(size) + 1}"
            raw = self.session.values(sql, params)
            last = len(raw) <= size
            rows: dict[tuple, tuple] = {}
            cs = Checksum()
            last_key = None
            for key, values in self._rows(raw[:size]):
                rows[key] = values
                cs.add(key, values)
                last_key = key
            del raw
            yield Chunk(index, lo, None if last else last_key, rows, cs)
            if last:
                return
            lo = last_key
            index += 1

    def lookup(self, keys: list[tuple]) -> set[tuple]:
        """Which of ``keys`` the source holds, compared exactly (after the source's own,
        possibly case- and accent-insensitive, comparison found candidates)."""
        found: set[tuple] = set()
        ks = self.spec.key_specs
        for i in range(0, len(keys), LOOKUP_BATCH):
            batch = keys[i:i + LOOKUP_BATCH]
            pred, params = key_in_list(self.lookup_keys, [self.spec.key_params(k, "source") for k in batch])
            for r in self.session.values(f"SELECT {', '.join(self.qkeys)} FROM {self.table} WHERE {pred}", params):
                found.add(tuple(c.source(v) for c, v in zip(ks, r)))
        return {k for k in keys if k in found}
