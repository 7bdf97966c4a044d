"""The SQL of chunk reads: keyset chunk queries over a (possibly composite) primary key.

Chunks are ``ORDER BY k1, k2 ... LIMIT n`` after the last key read and up to the
maximum key read when the table's snapshot started.  Comparisons are written as
``(k1 > ?) OR (k1 = ? AND k2 > ?) ...`` so the database compares with its own
collations and uses the primary key index; Python never compares key values.
"""

from __future__ import annotations

from typing import Any, Sequence

from common.sql.keyset import keyset_predicate
from common.sql.quoting import quote_ident as _q


def _compare(keys: Sequence[str], values: Sequence[Any], last_op: str,
             key_exprs: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """The keyset predicate (:func:`common.sql.keyset.keyset_predicate`) over the key
    columns; ``key_exprs``: the expression compared for a column instead of the column
    (``(`e`+0)`` for ENUM/SET keys, which sort by their index: the values must then be
    indexes too)."""
    exprs = key_exprs or {}
    return keyset_predicate([exprs.get(k, _q(k)) for k in keys], values, last_op)


def chunk_query(db: str, table: str, columns: Sequence[str], keys: Sequence[str], *, after: Sequence[Any] | None,
                upto: Sequence[Any] | None, condition: str | None, limit: int | None,
                select_exprs: dict[str, str] | None = None,
                key_exprs: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """The SELECT of one chunk.  ``condition`` must already be validated
    (``snapshot_filter.validate_filter``); ``select_exprs`` overrides the expression
    read for a column (e.g. ``CAST(`f` AS DOUBLE)`` for FLOAT on MariaDB).  No ``keys`` and
    no ``limit``: the whole table (its rows matching ``condition``) in the server's order, as a
    blocking snapshot reads a table without a key."""
    exprs = select_exprs or {}
    cols = ", ".join(f"{exprs[c]} AS {_q(c)}" if c in exprs else _q(c) for c in columns)
    where, params = [], []
    if after is not None:
        sql, p = _compare(keys, after, ">", key_exprs)
        where.append(sql)
        params += p
    if upto is not None:
        sql, p = _compare(keys, upto, "<=", key_exprs)
        where.append(sql)
        params += p
    if condition:
        # The driver formats the statement with %-parameters: a literal % must be doubled.
        where.append(f"({condition.replace('%', '%%')})")
    text = f"SELECT {cols} FROM {_q(db)}.{_q(table)}"
    if where:
        text += " WHERE " + " AND ".join(where)
    if keys:
        text += " ORDER BY " + ", ".join(_q(k) for k in keys)
    return text if limit is None else f"{text} LIMIT {int(limit)}", params


def max_key_query(db: str, table: str, keys: Sequence[str], *, lowest: bool = False) -> str:
    """The highest key (``lowest``: the lowest), by the key index."""
    order = ", ".join(f"{_q(k)}{'' if lowest else ' DESC'}" for k in keys)
    return f"SELECT {', '.join(_q(k) for k in keys)} FROM {_q(db)}.{_q(table)} ORDER BY {order} LIMIT 1"


def boundary_query(db: str, table: str, keys: Sequence[str], *, after: Sequence[Any] | None,
                   upto: Sequence[Any], rows: int, key_exprs: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """The key of the ``rows``-th row after ``after`` (and up to ``upto``): the upper bound
    of a chunk of that many rows, found by the database on the key index without reading
    the rows out, so chunks can be planned ahead and read in parallel."""
    where, params = [], []
    if after is not None:
        sql, p = _compare(keys, after, ">", key_exprs)
        where.append(sql)
        params += p
    sql, p = _compare(keys, upto, "<=", key_exprs)
    where.append(sql)
    params += p
    cols = ", ".join(_q(k) for k in keys)
    return (f"SELECT {cols} FROM {_q(db)}.{_q(table)} WHERE {' AND '.join(where)} ORDER BY {cols} "
            f"LIMIT 1 OFFSET {int(rows) - 1}"), params
