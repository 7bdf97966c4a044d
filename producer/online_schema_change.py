"""Online schema change tools in the binlog: gh-ost and pt-online-schema-change.

Both alter a copy of table ``t`` and swap it in with a RENAME:

* gh-ost: ``CREATE TABLE _t_gho LIKE t``, ``ALTER TABLE _t_gho ...``, the rows copied into
  ``_t_gho`` (and t's binlog events applied to it), its changelog table ``_t_ghc`` (and
  checkpoints in ``_t_ghk``), the cut-over ``RENAME TABLE t TO _t_del, _t_gho TO t`` (with
  ``--timestamp-old-table``: ``_t_<yyyymmddhhmmss>_del``; two-step: one RENAME each);
* pt-osc: ``CREATE TABLE _t_new``, ``ALTER TABLE _t_new ...``, triggers on ``t`` writing into
  ``_t_new`` (in t's own transactions), the rows copied, the cut-over ``RENAME TABLE t TO
  _t_old, _t_new TO t`` (``__t_new`` when ``_t_new`` is taken).

With ``source.online_schema_change: follow`` (the default) these helper tables of a captured
table are not captured: their rows (the copy, the triggers' writes, gh-ost's heartbeats) never
reach a topic. The ALTER of ``_t_gho``/``_t_new`` is kept as ``t``'s, and the cut-over is ``t``
changing schema in place: no RENAME_TABLE marker, no snapshot of ``t`` unless that ALTER
rewrote the rows it copied (a column added with a value, a column retyped or renamed, the key
changed: what makes the producer snapshot a table after a plain ALTER). Flink CDC's MySQL source
(``scan.parse.online.schema.changes.enabled``) does the same: the ALTER of ``_t_gho``/``_t_new``
taken as t's, the helper tables not captured.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from common.sql.ddl import rows_rewritten

log = logging.getLogger(__name__)

# gh-ost: _<t>_gho (the ghost table), _<t>_ghc (its changelog), _<t>_ghk (checkpoints),
# _<t>_del (the old table after the cut-over; _<t>_<timestamp>_del with --timestamp-old-table).
_GH_OST = re.compile(r"^_(?P<table>.+?)(?:_\d{14})?_(?P<kind>gho|ghc|ghk|del)$", re.S)
# pt-osc: _<t>_new and _<t>_old, with more leading underscores while the name is taken.
_PT_OSC = re.compile(r"^(?P<prefix>_+)(?P<table>.+)_(?P<kind>new|old)$", re.S)

GHOST_KINDS = ("gho", "new")  # the copy that becomes the table at the cut-over
OLD_KINDS = ("del", "old")  # the table's old self after the cut-over


@dataclass(frozen=True)
class Helper:
    """A helper table of an online schema change: its tool, its kind (``gho``, ``ghc``,
    ``ghk``, ``del``, ``new``, ``old``) and the table it serves."""

    tool: str
    kind: str
    table: str


def helper_candidates(name: str) -> list[Helper]:
    """Every reading of ``name`` as a helper table of gh-ost or pt-osc (``__t_new`` reads as
    pt-osc's of ``t`` and of ``_t``); empty for any other name."""
    out = []
    m = _GH_OST.match(name)
    if m:
        out.append(Helper("gh-ost", m.group("kind"), m.group("table")))
    m = _PT_OSC.match(name)
    if m:
        for i in range(len(m.group("prefix"))):
            out.append(Helper("pt-online-schema-change", m.group("kind"), m.group("prefix")[i + 1:] + m.group("table")))
    return out


def helper_of(db: str, name: str, captured: Callable[[str, str], bool]) -> Helper | None:
    """The helper reading of ``db.name`` whose table is captured (by ``captured(db, table)``,
    which must not itself leave helper tables out), or None."""
    for h in helper_candidates(name):
        if h.table != name and captured(db, h.table):
            return h
    return None


@dataclass(frozen=True)
class CutOver:
    """A cut-over: ``db.table`` replaced by its altered copy ``ghost``."""

    db: str
    table: str
    ghost: str
    tool: str
    alter: str | None  # the ALTER of the copy, None when it was not read (a restart since)

    def snapshot_reason(self) -> str | None:
        """Why the table's rows changed without row events of it (the producer snapshots it),
        or None: the copy holds the rows the table's own events gave the sinks."""
        if self.alter is None:
            return (f"{self.tool}'s cut-over of {self.db}.{self.table}, whose ALTER of {self.ghost} was not read "
                    "(the producer started after it)")
        why = rows_rewritten("alter", self.alter)
        return f"{self.tool}'s copy {self.ghost}: {why}" if why else None


class OnlineSchemaChanges:
    """The ALTERs of the copies under way, by ``(db, table)``, until their cut-over."""

    def __init__(self, captured: Callable[[str, str], bool]) -> None:
        self._captured = captured
        self._alters: dict[tuple[str, str], list[str]] = {}

    def helper(self, db: str, name: str) -> Helper | None:
        return helper_of(db, name, self._captured)

    def helper_ddl(self, verb: str, db: str, name: str, ddl: str) -> bool:
        """A DDL statement on ``db.name``: True when ``name`` is a helper table of a captured
        table (the statement is not the table's; the copy's CREATE and ALTER are noted)."""
        h = self.helper(db, name)
        if h is None:
            return False
        if h.kind in GHOST_KINDS and verb == "create":
            self._alters[(db, h.table)] = []
        elif h.kind in GHOST_KINDS and verb == "alter":
            self._alters.setdefault((db, h.table), []).append(ddl)
            log.info("%s alters %s.%s through its copy %s: %s", h.tool, db, h.table, name, ddl)
        return True

    def cut_overs(self, renames: list[tuple[tuple[str, str], tuple[str, str]]]
                  ) -> tuple[list[CutOver], list[tuple[tuple[str, str], tuple[str, str]]]]:
        """The RENAME pairs (databases filled in) split into the cut-overs they make (a copy
        renamed to its table) and the other renames. A table renamed to its own old-table name
        (``t`` to ``_t_del``/``_t_old``) is part of a cut-over: neither."""
        cuts, others = [], []
        for (odb, old), (ndb, new) in renames:
            h_old, h_new = self.helper(odb, old), self.helper(ndb, new)
            if odb == ndb and h_new is not None and h_new.kind in OLD_KINDS and h_new.table == old:
                continue  # t moved aside
            if odb == ndb and h_old is not None and h_old.kind in GHOST_KINDS and h_old.table == new:
                alters = self._alters.pop((odb, new), None)
                cuts.append(CutOver(odb, new, old, h_old.tool, "; ".join(alters) if alters is not None else None))
                continue
            others.append(((odb, old), (ndb, new)))
        return cuts, others
