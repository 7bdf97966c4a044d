"""Which databases, tables and events are captured (include/exclude, names or regexes).

Patterns are matched against the whole name (``re.fullmatch``), so a plain name matches
only itself and ``shop\\.line_.*`` matches every ``shop.line_*`` table.  Tables are
written ``db.table``.  System databases are never captured; the signal table is read
but never published as a table.
"""

from __future__ import annotations

import re
from functools import lru_cache

from common.config import SourceConfig
from producer.errors import FilterConfigError
from producer.online_schema_change import helper_of

SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
DML_EVENTS = frozenset({"insert", "update", "delete"})
DDL_EVENTS = frozenset({"truncate", "drop", "create", "alter", "rename"})
KNOWN_EVENTS = DML_EVENTS | DDL_EVENTS


def _compile(patterns: list[str], what: str) -> list[re.Pattern[str]]:
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise FilterConfigError(f"{what}: {p!r} is not a valid regular expression: {exc}") from exc
    return out


def _matches(pats: list[re.Pattern[str]], name: str) -> bool:
    return any(p.fullmatch(name) for p in pats)


class CaptureFilter:
    def __init__(self, cfg: SourceConfig) -> None:
        self.include_db = _compile(cfg.include_databases, "source.include_databases")
        self.exclude_db = _compile(cfg.exclude_databases, "source.exclude_databases")
        self.include_tables = _compile(cfg.include_tables, "source.include_tables")
        self.exclude_tables = _compile(cfg.exclude_tables, "source.exclude_tables")
        self.signal_db, self.signal_table = cfg.signal_table.split(".")
        self._ignore: list[tuple[re.Pattern[str], frozenset[str]]] = []
        for pattern, events in cfg.ignore_events.items():
            bad = set(e.lower() for e in events) - KNOWN_EVENTS
            if bad:
                raise FilterConfigError(f"source.ignore_events[{pattern!r}]: unknown event(s) {sorted(bad)}; "
                                        f"known: {sorted(KNOWN_EVENTS)}")
            self._ignore.append((_compile([pattern], "source.ignore_events")[0], frozenset(e.lower() for e in events)))
        self.follow_online_schema_changes = cfg.online_schema_change == "follow"
        self.listed = lru_cache(maxsize=65536)(self._listed)
        self.captures = lru_cache(maxsize=65536)(self._captures)

    def is_signal(self, db: str, table: str) -> bool:
        return db == self.signal_db and table == self.signal_table

    def database_captured(self, db: str) -> bool:
        if db in SYSTEM_DATABASES or db == self.signal_db:
            return False
        if self.include_db and not _matches(self.include_db, db):
            return False
        return not _matches(self.exclude_db, db)

    def _captures(self, db: str, table: str) -> bool:
        """Listed, and not a helper table of gh-ost or pt-osc of a listed table
        (``source.online_schema_change: follow``)."""
        if not self.listed(db, table):
            return False
        return not (self.follow_online_schema_changes and helper_of(db, table, self.listed) is not None)

    def _listed(self, db: str, table: str) -> bool:
        """What the database and table lists say of ``db.table``."""
        if not self.database_captured(db):
            return False
        name = f"{db}.{table}"
        if self.include_tables and not _matches(self.include_tables, name):
            return False
        return not _matches(self.exclude_tables, name)

    def wants(self, db: str, table: str) -> bool:
        """Row events of this table are read: captured tables and the signal table."""
        return self.is_signal(db, table) or self.captures(db, table)

    def ignored(self, db: str, table: str | None, event: str) -> bool:
        """Event filter in the spirit of TiDB DM: drop ``event`` for matching tables."""
        if not self._ignore:
            return False
        name = f"{db}.{table}" if table else db
        return any(event in events and pat.fullmatch(name) for pat, events in self._ignore)
