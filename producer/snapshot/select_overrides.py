"""Debezium's ``snapshot.select.statement.overrides``, mapped onto chunked snapshots
(``source.snapshot_select_statement_overrides``: ``{"db.table": "..."}``).

Debezium replaces the whole SELECT of a table's (blocking) snapshot with the user's statement.
Our snapshots read a table without locks in primary-key chunks, each chunk a SELECT of the
captured columns over a key range between two window markers, so a whole statement cannot
replace them; what maps is its WHERE condition, ANDed into every chunk SELECT of the table
(signal-triggered and initial snapshots alike, with a signal's ``additional-conditions`` when
it has some). An override is Debezium's statement ``SELECT * FROM [db.]table WHERE <condition>``
or the condition alone; the condition is checked as ``additional-conditions`` filters are
(:func:`producer.snapshot.filter.validate_filter`: the table's own columns, pure functions, no
subqueries) at start and at each snapshot, and anything else (a column list, a join, ORDER BY,
LIMIT) is refused naming the setting.

A delete-missing snapshot (``lost_history: snapshot``, ``startup.when_needed: snapshot``, a
signal's ``delete-missing``) reads the whole table without it: the sinks delete the rows such a
snapshot does not find, which would take rows outside the condition with them.
"""

from __future__ import annotations

import logging
import re
from typing import Callable, Mapping

from common.errors import ConfigError
from producer.errors import FilterRefused
from producer.snapshot.filter import validate_filter
from producer.snapshot.table_reader import read_table_def

log = logging.getLogger(__name__)

SETTING = "source.snapshot_select_statement_overrides"

_SELECT = re.compile(r"\s*SELECT\s+\*\s+FROM\s+(?P<table>[\w$`.]+)(?:\s+WHERE\s+(?P<where>.*?))?\s*;?\s*\Z",
                     re.IGNORECASE | re.DOTALL)


class OverrideError(ConfigError):
    """A select statement override that cannot be used (the message names the setting)."""


def override_condition(table: str, text: str) -> str | None:
    """The condition of ``table``'s override ``text`` (None: the whole table)."""
    if not re.match(r"\s*SELECT\b", text, re.IGNORECASE):
        return text.strip() or None
    m = _SELECT.match(text)
    if m is None:
        raise OverrideError(f"{SETTING}[{table!r}]: {text!r} is not 'SELECT * FROM <table> WHERE <condition>': "
                            "snapshots read the table in key-range chunks, so only a WHERE condition can apply to "
                            "them (or give the condition alone)")
    named = m.group("table").replace("`", "")
    if named not in (table, table.split(".", 1)[1]):
        raise OverrideError(f"{SETTING}[{table!r}]: the statement reads {named}, not {table}")
    return (m.group("where") or "").strip() or None


def combined(table: str, overrides: Mapping[str, str], condition: str | None, delete_missing: bool) -> str | None:
    """The filter of ``table``'s snapshot: its override's condition ANDed with the signal's
    ``condition``; the signal's alone for a delete-missing snapshot (see the module's text)."""
    text = overrides.get(table)
    override = override_condition(table, text) if text else None
    if override is None:
        return condition
    if delete_missing:
        log.warning("%s[%r] does not apply to this delete-missing snapshot: it reads the whole table (the sinks "
                    "delete the rows it does not find)", SETTING, table)
        return condition
    return override if condition is None else f"({override}) AND ({condition})"


def check_overrides(conn, overrides: Mapping[str, str], captures: Callable[[str, str], bool]) -> None:
    """Every override checked now (a table created later: at its snapshot), naming the setting."""
    for table, text in overrides.items():
        db, _, name = table.partition(".")
        if not captures(db, name):
            raise OverrideError(f"{SETTING}[{table!r}]: {table} is not captured, the override would never apply")
        condition = override_condition(table, text)
        tdef = read_table_def(conn, db, name)
        if condition is not None and tdef is not None:
            try:
                validate_filter(condition, tdef.column_names)
            except FilterRefused as exc:
                raise OverrideError(f"{SETTING}[{table!r}]: condition refused: {exc}") from None
