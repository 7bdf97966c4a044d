"""The CDC user's privileges, read from ``SHOW GRANTS`` (pure: lines in, findings out).

The producer needs REPLICATION SLAVE (the binlog stream), REPLICATION CLIENT (binlog
coordinates; MariaDB 10.5+ shows it as BINLOG MONITOR), SELECT (snapshots) and, unless
``snapshot.read_only``, INSERT and DELETE on the signal table (window marker rows).
MariaDB and MySQL 8 shapes are understood::

    GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO `cdc`@`%` IDENTIFIED BY PASSWORD '*...'
    GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`
    GRANT SELECT ON `shop\\_db`.* TO `cdc`@`%`          (a database name pattern)
    GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION
    GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`     (MySQL 8)

Column privileges (``SELECT (`a`)``), routine grants, PROXY and role grants (``GRANT `r` TO
...``) cover nothing here; an active role's own privileges are listed by the server as lines
``... TO `role``` and count like the user's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.sql.quoting import quote_table

ALL = frozenset({"ALL", "ALL PRIVILEGES"})
#: What covers each required global privilege, besides ALL.  SUPER covers REPLICATION
#: CLIENT (SHOW MASTER STATUS works with it on MariaDB 10.11), not REPLICATION SLAVE (the
#: binlog dump is refused with SUPER alone: measured).
_COVERED_BY = {
    "REPLICATION SLAVE": frozenset({"REPLICATION SLAVE"}),
    "REPLICATION CLIENT": frozenset({"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}),
}
_WHY = {
    "REPLICATION SLAVE": "to read the binlog stream",
    "REPLICATION CLIENT": "to read binlog coordinates (SHOW MASTER STATUS, SHOW BINARY LOGS); BINLOG MONITOR on "
                          "MariaDB",
    "SELECT": "to read tables for snapshots",
    "INSERT": "to write snapshot window markers into the signal table",
    "DELETE": "to delete snapshot window markers from the signal table",
}


@dataclass(frozen=True)
class Grant:
    """One ``GRANT ... ON db.table`` line: ``db``/``table`` None for ``*``."""

    privileges: frozenset[str]
    db: str | None
    table: str | None

    def holds(self, privilege: str) -> bool:
        return privilege in self.privileges or bool(self.privileges & ALL)

    def covers_db(self, db: str) -> bool:
        """Whether this grant's database part takes in ``db``: ``*``, the name, or (a
        database-level grant) a LIKE pattern matching it."""
        if self.db is None:
            return True
        if self.table is not None:
            return self.db == db
        return _db_pattern(self.db).fullmatch(db) is not None


@dataclass(frozen=True)
class Missing:
    privilege: str
    why: str
    on: str  # where it is granted: ``*.*`` or the quoted signal table

    def fix(self, account: str) -> str:
        """The GRANT statement that gives it to ``account`` (``CURRENT_USER()``)."""
        return f"GRANT {self.privilege} ON {self.on} TO {account_sql(account)}"


def _scan(text: str, i: int, stop: str) -> int:
    """Index of ``stop`` (upper case) in ``text`` from ``i``, outside quotes and parentheses; -1."""
    depth, quote = 0, ""
    upper = text.upper()
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                if i + 1 < len(text) and text[i + 1] == quote:
                    i += 1  # a doubled quote inside the name
                else:
                    quote = ""
        elif c in "`'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and upper.startswith(stop, i):
            return i
        i += 1
    return -1


_IDENT = re.compile(r"`((?:[^`]|``)*)`|(\*)|([A-Za-z0-9_$]+)")


def _ident(text: str, i: int) -> tuple[str | None, int]:
    """The identifier at ``text[i]`` (unquoted; None for ``*``) and the index after it."""
    m = _IDENT.match(text, i)
    if not m:
        raise ValueError(f"no identifier at {text[i:i + 20]!r}")
    if m.group(2):
        return None, m.end()
    return (m.group(1).replace("``", "`") if m.group(1) is not None else m.group(3)), m.end()


def parse_grant(line: str) -> Grant | None:
    """The privileges of one ``SHOW GRANTS`` line on a database object, or None for a line
    that grants none (role grants, PROXY, routines, ``SET DEFAULT ROLE``)."""
    text = line.strip()
    if not text.upper().startswith("GRANT "):
        return None
    on = _scan(text, 6, " ON ")
    if on < 0:
        return None  # GRANT `role` TO ...
    privileges = set()
    for part in _split_commas(text[6:on]):
        name = " ".join(part.split()).upper()
        if "(" in name or name == "PROXY":
            continue  # column privileges cover no whole table; PROXY covers nothing here
        privileges.add(name)
    target = text[on + 4:].lstrip()
    kind = re.match(r"(TABLE|FUNCTION|PROCEDURE|PACKAGE\s+BODY|PACKAGE)\s+", target, re.I)
    if kind:
        if kind.group(1).upper() != "TABLE":
            return None
        target = target[kind.end():]
    try:
        db, i = _ident(target, 0)
        table = None
        if target[i:i + 1] == ".":
            table, i = _ident(target, i + 1)
        elif db is not None:
            return None  # ``@`%``` of a PROXY line, or another shape that is not db.table
    except ValueError:
        return None
    if not privileges:
        return None
    return Grant(frozenset(privileges), db, table)


def _split_commas(text: str) -> list[str]:
    parts, start = [], 0
    while True:
        comma = _scan(text, start, ",")
        if comma < 0:
            parts.append(text[start:])
            return [p.strip() for p in parts if p.strip()]
        parts.append(text[start:comma])
        start = comma + 1


def _db_pattern(name: str) -> re.Pattern[str]:
    """A database-level grant's name as a LIKE pattern (``_`` and ``%`` wildcards, ``\\``
    escapes), the way the server matches it."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "\\" and i + 1 < len(name):
            out.append(re.escape(name[i + 1]))
            i += 2
            continue
        out.append("." if c == "_" else ".*" if c == "%" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)


def account_sql(account: str) -> str:
    """``CURRENT_USER()`` (``cdc@%``) as SQL: ``'cdc'@'%'``."""
    user, at, host = account.rpartition("@")
    if not at:
        user, host = account, "%"

    def q(s: str) -> str:
        return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"
    return f"{q(user)}@{q(host)}"


def missing_privileges(lines: list[str], *, read_only: bool, signal_table: str) -> list[Missing]:
    """What the CDC user lacks, from its ``SHOW GRANTS`` ``lines``."""
    grants = [g for g in (parse_grant(line) for line in lines) if g is not None]
    global_grants = [g for g in grants if g.db is None]
    missing: list[Missing] = []
    for privilege, covering in _COVERED_BY.items():
        if not any(g.privileges & (covering | ALL) for g in global_grants):
            missing.append(Missing(privilege, _WHY[privilege], "*.*"))
    # SELECT: global, or on a database or table (which tables are captured is not checked here).
    if not any(g.holds("SELECT") for g in grants):
        missing.append(Missing("SELECT", _WHY["SELECT"], "*.*"))
    if not read_only:
        db, _, table = signal_table.partition(".")
        on_signal = [g for g in grants if g.covers_db(db) and g.table in (None, table)]
        for privilege in ("INSERT", "DELETE"):
            if not any(g.holds(privilege) for g in on_signal):
                missing.append(Missing(privilege, _WHY[privilege], quote_table(signal_table)))
    return missing


def grants_problem(missing: list[Missing], account: str, *, read_only: bool) -> str | None:
    """The message naming every missing privilege and the GRANT statements that fix it
    (``account``: the user's ``CURRENT_USER()``); None when nothing is missing."""
    if not missing:
        return None
    who = account_sql(account)
    lines = [f"the CDC user {who} lacks privileges the producer needs:"]
    lines += [f"  - {m.privilege}: {m.why}" for m in missing]
    lines.append("Grant them as an administrator:")
    for on in dict.fromkeys(m.on for m in missing):
        lines.append(f"  GRANT {', '.join(m.privilege for m in missing if m.on == on)} ON {on} TO {who};")
    if not read_only and any(m.privilege in ("INSERT", "DELETE") for m in missing):
        lines.append("or, to write nothing to the source, take read-only snapshots: snapshot.read_only: true "
                     "(CDC__SNAPSHOT__READ_ONLY=true), which needs only REPLICATION SLAVE, REPLICATION CLIENT and "
                     "SELECT")
    return "\n".join(lines)
