"""Which columns of a captured table its events carry, and which make its message key.

Debezium's MySQL connector settings, with Debezium's meaning (``source.*`` in cdc.yaml):

* ``column_include_list`` / ``column_exclude_list`` (``column.include.list`` /
  ``column.exclude.list``): regular expressions matched, in full and ignoring case, against
  a column's fully-qualified name ``db.table.column``; with an include list only the columns
  it matches are captured, with an exclude list every column but those it matches. The two
  are mutually exclusive.
* ``message_key_columns`` (``message.key.columns``): ``db.table:col1,col2;db2.t2:c``, each
  table part a regular expression on ``db.table``; a matching table's key is its columns that
  the entry names (in the table's column order, as Debezium's ``KeyMapper``), instead of its
  primary key, or where it has none.

The older per-table settings ``source.exclude_columns`` (``{"db.table": [col]}``) and
``source.key_columns`` (a key for a table without a primary key) are read here too, as
exact names.

:meth:`ColumnControls.resolve` turns a table definition read from the server or the binlog
into the one the events are made from: the columns left out, the key set. Everything that
turns a table into events, schemas, chunk reads or comparisons (the event builder, the binlog
image encoder, the snapshot's chunk SELECTs, ``cdc verify``) asks it, so the
rules live here only. Pure: no connection, no state but a cache.

A key column cannot be left out: Debezium keeps a primary key column left out of the value
in the key, which the sinks could not hold (a sink row is its value); a table whose key
would lose a column is refused with an error naming the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from producer.column_mappers import NO_MAPPERS, ColumnMappers, mapped_columns
from producer.errors import ColumnControlsError
from producer.table_schema import TableDef

INCLUDE = "source.column_include_list"
EXCLUDE = "source.column_exclude_list"
KEY = "source.message_key_columns"
LEGACY_EXCLUDE = "source.exclude_columns"
LEGACY_KEY = "source.key_columns"


def _compile(pattern: str, setting: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ColumnControlsError(f"{setting}: {pattern!r} is not a valid regular expression: {exc}") from None


@dataclass(frozen=True)
class KeyRule:
    """One entry of ``message_key_columns``: the tables it is for and its column patterns."""

    text: str
    table: re.Pattern[str]
    columns: tuple[re.Pattern[str], ...]


def parse_message_key_columns(text: str) -> tuple[KeyRule, ...]:
    """The entries of a ``message.key.columns`` value (``db.table:c1,c2;db2.t2:c``); raises
    :class:`ColumnControlsError` naming the setting for a malformed one."""
    rules = []
    for entry in (e.strip() for e in (text or "").split(";")):
        if not entry:
            continue
        table, sep, cols = entry.partition(":")
        names = [c.strip() for c in cols.split(",")]
        if not sep or not table.strip() or ":" in cols or not all(names):
            raise ColumnControlsError(f"{KEY}: {entry!r} is not '<db.table regex>:<column>[,<column>...]' "
                                      f"(Debezium's message.key.columns: 'db.t1:c1,c2;db.t2:c')")
        rules.append(KeyRule(entry, _compile(table.strip(), KEY),
                             tuple(_compile(n, KEY) for n in names)))
    return tuple(rules)


class ColumnControls:
    """The column rules of one source (see the module's text). ``active`` is False when no
    rule is set: :meth:`resolve` then gives back the table it is given."""

    def __init__(self, *, include: Iterable[str] = (), exclude: Iterable[str] = (), message_key_columns: str = "",
                 exclude_columns: Mapping[str, Sequence[str]] | None = None,
                 key_columns: Mapping[str, Sequence[str]] | None = None,
                 mappers: ColumnMappers = NO_MAPPERS) -> None:
        include, exclude = list(include), list(exclude)
        if include and exclude:
            raise ColumnControlsError(f"{INCLUDE} and {EXCLUDE} are mutually exclusive (as Debezium's "
                                      "column.include.list and column.exclude.list): set one")
        self.include = tuple(_compile(p, INCLUDE) for p in include)
        self.exclude = tuple(_compile(p, EXCLUDE) for p in exclude)
        self.key_rules = parse_message_key_columns(message_key_columns)
        self.exclude_columns = {t: frozenset(cols) for t, cols in (exclude_columns or {}).items() if cols}
        self.key_columns = {t: tuple(cols) for t, cols in (key_columns or {}).items() if cols}
        self.mappers = mappers  # masks, hashes, truncations, source types (producer/column_mappers.py)
        self.active = bool(self.include or self.exclude or self.key_rules or self.exclude_columns or self.key_columns
                           or mappers.active)
        self._resolved: dict[tuple[str, str], TableDef] = {}

    @classmethod
    def from_config(cls, source: Any) -> ColumnControls:
        """The controls of a ``source`` section (:class:`common.config.SourceConfig`)."""
        return cls(include=source.column_include_list, exclude=source.column_exclude_list,
                   message_key_columns=source.message_key_columns, exclude_columns=source.exclude_columns,
                   key_columns=source.key_columns, mappers=ColumnMappers.from_config(source))

    def __getstate__(self) -> dict:  # (sent to the binlog reader process: without the cache)
        return {**self.__dict__, "_resolved": {}}

    # -- columns ---------------------------------------------------------------------------

    def captured(self, db: str, table: str, column: str) -> bool:
        """Whether the events of ``db.table`` carry ``column``."""
        if column in self.exclude_columns.get(f"{db}.{table}", ()):
            return False
        name = f"{db}.{table}.{column}"
        if self.include:
            return any(p.fullmatch(name) for p in self.include)
        return not any(p.fullmatch(name) for p in self.exclude)

    def left_out(self, table: TableDef) -> list[str]:
        """The columns of ``table`` its events do not carry, in the table's order."""
        if not self.active:
            return []
        return [c.name for c in table.columns if not self.captured(table.db, table.name, c.name)]

    # -- key -------------------------------------------------------------------------------

    def key_for(self, table: TableDef) -> tuple[list[str], str | None]:
        """The key columns of ``table``'s events, and the setting that gave them (None: its
        primary key). Raises :class:`ColumnControlsError` for a ``message_key_columns`` entry
        naming a column the table does not have."""
        qualified = table.qualified_name
        chosen: set[str] = set()
        for rule in self.key_rules:
            if not rule.table.fullmatch(qualified):
                continue
            for pat in rule.columns:
                hits = [c.name for c in table.columns if pat.fullmatch(c.name)]
                if not hits:
                    raise ColumnControlsError(
                        f"{KEY}: {rule.text!r} names column {pat.pattern!r}, which table {qualified} does not have "
                        f"(columns: {', '.join(table.column_names)})")
                chosen.update(hits)
        if chosen:  # (in the table's column order, as Debezium's KeyMapper gives them)
            return [c.name for c in table.columns if c.name in chosen], KEY
        if table.primary_key:
            return list(table.primary_key), None
        legacy = self.key_columns.get(qualified)
        if legacy:
            missing = [k for k in legacy if k not in table.column_names]
            if missing:
                raise ColumnControlsError(f"{LEGACY_KEY}[{qualified!r}]: no column(s) {missing} in the table "
                                          f"(columns: {', '.join(table.column_names)})")
            return [table.column(k).name for k in legacy], LEGACY_KEY
        return [], None

    # -- the table the events are made from -------------------------------------------------

    def resolve(self, table: TableDef) -> TableDef:
        """``table`` as its events carry it: the columns left out, its key as the primary key.
        The same table when no rule applies; resolving a resolved table gives it back."""
        if not self.active:
            return table
        cache_key = (table.qualified_name, table.fingerprint())
        hit = self._resolved.get(cache_key)
        if hit is not None:
            return hit
        key, key_setting = self.key_for(table)
        out = set(self.left_out(table))
        lost = [k for k in key if k in out]
        if lost:
            setting = INCLUDE if self.include else EXCLUDE
            if any(k in self.exclude_columns.get(table.qualified_name, ()) for k in lost):
                setting = LEGACY_EXCLUDE
            raise ColumnControlsError(
                f"{setting} leaves out key column(s) {lost} of {table.qualified_name} (its "
                f"{'key from ' + key_setting if key_setting else 'primary key'}): a key column is always captured "
                f"(Debezium would keep it in the key but not in the value, which the sinks cannot hold); "
                f"capture it, or give the table another key with {KEY}")
        columns = [self._mapped(table, c) for c in table.columns if c.name not in out]
        self._check_mapped_key(table, columns, key)
        if not out and key == table.primary_key and all(c.mapping is None for c in columns):
            resolved = table
        else:
            resolved = TableDef(table.db, table.name, columns, key)
        if len(self._resolved) >= 4096:
            self._resolved.clear()
        self._resolved[cache_key] = resolved
        return resolved

    def _mapped(self, table: TableDef, col: Any) -> Any:
        mapping = self.mappers.mapping_for(table.db, table.name, col) if self.mappers.active else None
        return col if mapping is None else replace(col, mapping=mapping)

    @staticmethod
    def _check_mapped_key(table: TableDef, columns: list, key: list[str]) -> None:
        changed = [(name, m) for name, m in mapped_columns(columns) if name in key]
        if changed:
            name, m = changed[0]
            raise ColumnControlsError(
                f"{m.setting} would change the values of key column {name!r} of {table.qualified_name}: a key "
                f"column is never {m.describe().split(' (')[0]} (the sinks key rows by their values); leave it out "
                f"of the setting's patterns, or give the table another key with {KEY}")

    def check(self, tables: Iterable[TableDef]) -> None:
        """Resolve each of ``tables`` (the captured tables at start): a rule that cannot apply
        to one of them is an error now rather than when its first row comes."""
        for t in tables:
            self.resolve(t)

    def describe(self) -> list[str]:
        """The rules, for a report (``cdc verify``)."""
        out = []
        if self.include:
            out.append(f"{INCLUDE}: {', '.join(p.pattern for p in self.include)}")
        if self.exclude:
            out.append(f"{EXCLUDE}: {', '.join(p.pattern for p in self.exclude)}")
        for t, cols in sorted(self.exclude_columns.items()):
            out.append(f"{LEGACY_EXCLUDE}[{t}]: {', '.join(sorted(cols))}")
        if self.key_rules:
            out.append(f"{KEY}: {';'.join(r.text for r in self.key_rules)}")
        return out


#: No rule: every column, the primary key.
NO_CONTROLS = ColumnControls()

__all__ = ["NO_CONTROLS", "ColumnControls", "KeyRule", "parse_message_key_columns"]
