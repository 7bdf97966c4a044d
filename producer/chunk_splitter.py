"""Keyset chunk queries over a (possibly composite) primary key.

Chunks are ``ORDER BY k1, k2 ... LIMIT n`` after the last key read and up to the
maximum key read when the table's snapshot started.  Comparisons are written as
``(k1 > ?) OR (k1 = ? AND k2 > ?) ...`` so the database compares with its own
collations and uses the primary key index; Python never compares key values.
"""

from __future__ import annotations

from typing import Any, Sequence

from cdc.sql import quote_ident as _q


def _compare(keys: Sequence[str], values: Sequence[Any], last_op: str) -> tuple[str, list[Any]]:
    """(k1 > v1) OR (k1 = v1 AND k2 > v2) ... with ``last_op`` on the last key column
    (``>`` for strictly after, ``<`` / ``<=`` for before / up to)."""
    strict = "<" if last_op in ("<", "<=") else ">"
    terms, params = [], []
    for i, k in enumerate(keys):
        eqs = [f"{_q(keys[j])} = %s" for j in range(i)]
        op = last_op if i == len(keys) - 1 else strict
        terms.append("(" + " AND ".join([*eqs, f"{_q(k)} {op} %s"]) + ")")
        params.extend(values[:i])
        params.append(values[i])
    return "(" + " OR ".join(terms) + ")", params


def chunk_query(db: str, table: str, columns: Sequence[str], keys: Sequence[str], *, after: Sequence[Any] | None,
                upto: Sequence[Any] | None, condition: str | None, limit: int,
                select_exprs: dict[str, str] | None = None) -> tuple[str, list[Any]]:
    """The SELECT of one chunk.  ``condition`` must already be validated
    (``snapshot_filter.validate_filter``); ``select_exprs`` overrides the expression
    read for a column (e.g. ``CAST(`f` AS DOUBLE)`` for FLOAT on MariaDB)."""
    exprs = select_exprs or {}
    cols = ", ".join(f"{exprs[c]} AS {_q(c)}" if c in exprs else _q(c) for c in columns)
    where, params = [], []
    if after is not None:
        sql, p = _compare(keys, after, ">")
        where.append(sql)
        params += p
    if upto is not None:
        sql, p = _compare(keys, upto, "<=")
        where.append(sql)
        params += p
    if condition:
        where.append(f"({condition})")
    order = ", ".join(_q(k) for k in keys)
    text = f"SELECT {cols} FROM {_q(db)}.{_q(table)}"
    if where:
        text += " WHERE " + " AND ".join(where)
    return f"{text} ORDER BY {order} LIMIT {int(limit)}", params


def max_key_query(db: str, table: str, keys: Sequence[str]) -> str:
    order = ", ".join(f"{_q(k)} DESC" for k in keys)
    return f"SELECT {', '.join(_q(k) for k in keys)} FROM {_q(db)}.{_q(table)} ORDER BY {order} LIMIT 1"
