"""The SQL pieces verify builds its statements from: a keyset predicate on the key in a
dialect, and a key ``IN`` list."""

from __future__ import annotations

from common.sql.keyset import keyset_predicate

#: Keys per ``IN (...)`` statement (sink lookups, source lookups of sink keys).
LOOKUP_BATCH = 1000


def key_after(dialect: str, qkeys: list[str], params: list, op: str) -> tuple[str, list]:
    """Key ``op`` params (``>`` or ``<=``): PostgreSQL's row comparison, MySQL's expanded form."""
    return keyset_predicate(qkeys, params, op, row_comparison=dialect == "postgres")


def key_in_list(qkeys: list[str], keys: list[list]) -> tuple[str, list]:
    """``(k1, k2) IN ((..), ..)`` for ``keys`` (``k IN (..)`` for a one-column key)."""
    if len(qkeys) == 1:
        return f"{qkeys[0]} IN ({', '.join(['%s'] * len(keys))})", [k[0] for k in keys]
    one = "(" + ", ".join(["%s"] * len(qkeys)) + ")"
    return f"({', '.join(qkeys)}) IN ({', '.join([one] * len(keys))})", [v for k in keys for v in k]
