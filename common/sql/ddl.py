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


# ALTER clauses that change existing rows without logging row events: the primary key
# changed (every row's key), a column renamed (RENAME COLUMN, CHANGE), added with a value
# for the existing rows (a DEFAULT other than NULL, NOT NULL and its implicit default, a
# generated column), or retyped (MODIFY, CHANGE), which may rewrite every value.
_REWRITES = (
    (re.compile(r"\b(?:ADD|DROP)\s+PRIMARY\s+KEY\b", re.I), "the primary key changed"),
    (re.compile(r"\bRENAME\s+COLUMN\b", re.I), "a column renamed"),
    (re.compile(r"\bCHANGE\b", re.I), "a column changed or renamed"),
    (re.compile(r"\bMODIFY\b", re.I), "a column's type changed"),
    (re.compile(r"\bADD\b(?!\s+(?:INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|CONSTRAINT|FOREIGN|PRIMARY|CHECK|PARTITION)\b)"
                r"(?:\s+COLUMN)?[^,;]*?\b(?:GENERATED\s+ALWAYS|AS\s*\()", re.I), "a generated column added"),
    (re.compile(r"\bADD\b(?!\s+(?:INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|CONSTRAINT|FOREIGN|PRIMARY|CHECK|PARTITION)\b)"
                r"(?:\s+COLUMN)?[^,;]*?\b(?:DEFAULT\s+(?!NULL\b)|NOT\s+NULL\b)", re.I),
     "a column added with a value for the existing rows"),
)


def rows_rewritten(verb: str, ddl: str) -> str | None:
    """Why a table DDL statement changed existing rows without logging row events (the
    producer snapshots the table again, so the sinks follow), or None when it did not.

    TRUNCATE is not one of them: it is emitted as a truncate event (``op: t``)."""
    if verb != "alter":
        return None
    text = _without_comments(ddl)
    for pattern, reason in _REWRITES:
        if pattern.search(text):
            return reason
    return None


_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[\w$]+))?"
_RENAME_PAIR = re.compile(rf"({_NAME})\s+TO\s+({_NAME})", re.I)
_ALTER_RENAME = re.compile(rf"^\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?({_NAME})"
                           rf"(?:[^;]*?,)?\s*RENAME\s+(?:TO\s+|AS\s+)?(?!COLUMN\b|INDEX\b|KEY\b)({_NAME})\s*(?:,|;|$)",
                           re.I)
_DROP = re.compile(r"^\s*DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(?:/\*.*?\*/\s*)?(?P<names>.+?)"
                   r"\s*(?:RESTRICT|CASCADE)?\s*;?\s*$", re.I | re.S)


def _qualified(name: str, default_db: str) -> tuple[str | None, str]:
    parts = [a.replace("``", "`") if a else b for a, b in _IDENT.findall(name)]
    return (parts[0], parts[1]) if len(parts) == 2 else (default_db or None, parts[0])


def renamed_tables(ddl: str, default_db: str) -> list[tuple[tuple[str | None, str], tuple[str | None, str]]]:
    """``((db, table), (new db, new table))`` of each table a ``RENAME TABLE a TO b, c TO d``
    or an ``ALTER TABLE a RENAME [TO] b`` renames; empty for anything else."""
    text = _without_comments(ddl)
    if re.match(r"^\s*RENAME\s+TABLES?\b", text, re.I):
        body = re.sub(r"^\s*RENAME\s+TABLES?\s+", "", text, flags=re.I)
        return [(_qualified(a, default_db), _qualified(b, default_db)) for a, b in _RENAME_PAIR.findall(body)]
    m = _ALTER_RENAME.match(text)
    if m:
        return [(_qualified(m.group(1), default_db), _qualified(m.group(2), default_db))]
    return []


def dropped_tables(ddl: str, default_db: str) -> list[tuple[str | None, str]]:
    """``(db, table)`` of each table a ``DROP TABLE a, b`` drops; empty for anything else."""
    m = _DROP.match(_without_comments(ddl))
    if not m:
        return []
    return [_qualified(n, default_db) for n in re.findall(_NAME, m.group("names"))]
