"""Keyset predicates over a (possibly composite) key: "after this key", "up to that key".

``(k1 > v1) OR (k1 = v1 AND k2 > v2) ...`` with the given operator on the last key column,
so the database compares with its own collations and turns the predicate into a range of
the key index (MariaDB and MySQL do); Python never compares key values.  PostgreSQL's
row comparison ``(k1, k2) > (v1, v2)`` says the same in one term.
"""

from __future__ import annotations

from typing import Any, Sequence


def keyset_predicate(columns: Sequence[str], values: Sequence[Any], op: str, *,
                     row_comparison: bool = False) -> tuple[str, list[Any]]:
    """The predicate "key ``op`` values" (``op``: ``>``, ``>=``, ``<``, ``<=``) over the
    already quoted key ``columns`` (or expressions) and its ``%s`` parameters.
    ``row_comparison``: PostgreSQL's ``(k1, k2) op (v1, v2)``."""
    if len(columns) == 1:
        return f"{columns[0]} {op} %s", [values[0]]
    if row_comparison:
        return f"({', '.join(columns)}) {op} ({', '.join(['%s'] * len(columns))})", list(values)
    strict = "<" if op.startswith("<") else ">"
    terms, params = [], []
    for i, col in enumerate(columns):
        eqs = [f"{columns[j]} = %s" for j in range(i)]
        last = op if i == len(columns) - 1 else strict
        terms.append("(" + " AND ".join([*eqs, f"{col} {last} %s"]) + ")")
        params.extend(values[:i])
        params.append(values[i])
    return "(" + " OR ".join(terms) + ")", params
