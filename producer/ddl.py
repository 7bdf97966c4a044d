"""Which table or database a DDL statement names, and what it leaves the sinks unable to follow.

Statements on anything else (users, grants, views, routines) are never published: they can
carry passwords.
"""

from __future__ import annotations

import re

_DDL = re.compile(
    r"^\s*(?P<verb>CREATE|ALTER|DROP|TRUNCATE|RENAME)\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?"
    r"(?P<kind>TABLE|DATABASE|SCHEMA)?\s*(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(?P<name>(?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?)", re.IGNORECASE)
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([\w$]+)")


def _without_comments(ddl: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", ddl, flags=re.S)


def ddl_target(ddl: str, default_db: str) -> tuple[str, str | None, str | None]:
    """``(verb, db, table)`` of a table or database DDL statement.

    ``table`` is None for database statements; ``("", None, None)`` for anything else
    (users, grants, views, routines...), which is never published: such statements can
    carry passwords."""
    m = _DDL.match(_without_comments(ddl))
    if not m:
        return "", None, None
    verb, kind = m.group("verb").lower(), (m.group("kind") or "").upper()
    if verb == "truncate" and not kind:
        kind = "TABLE"  # TRUNCATE t
    if kind not in ("TABLE", "DATABASE", "SCHEMA"):
        return "", None, None
    parts = [a.replace("``", "`") if a else b for a, b in _IDENT.findall(m.group("name"))]
    if kind in ("DATABASE", "SCHEMA"):
        return verb, parts[0], None
    if len(parts) == 2:
        return verb, parts[0], parts[1]
    return verb, default_db or None, parts[0]


# ALTER clauses that change existing rows without logging row events: a column renamed
# (RENAME COLUMN, CHANGE), or added with a value for the existing rows (DEFAULT, or NOT
# NULL and its implicit default).
_DRIFT_ALTER = re.compile(r"\bRENAME\s+COLUMN\b|\bCHANGE\b|\bADD\b(?:\s+COLUMN)?[^,;]*\b(?:DEFAULT|NOT\s+NULL)\b",
                          re.I)


def sink_drift(verb: str, ddl: str) -> str | None:
    """What a table DDL statement leaves the table sinks unable to follow row for row, as
    advice for the log; None when they follow (see docs/operations.md, schema changes)."""
    if verb == "truncate":
        return ("no row events are logged for TRUNCATE, so the sink tables keep their rows: empty the sink "
                "tables, then trigger a snapshot of the table (cdc snapshot) to bring back rows written since")
    if verb == "alter" and _DRIFT_ALTER.search(_without_comments(ddl)):
        return ("rows the statement changed without row events (a column renamed, or added with a value "
                "for the existing rows) reach the sink tables only when they change again: trigger a snapshot "
                "of the table (cdc snapshot) to refresh them")
    return None
