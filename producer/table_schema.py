"""Table definitions as read from ``information_schema`` (pure data, no I/O).

The code that runs the ``information_schema.COLUMNS`` / ``KEY_COLUMN_USAGE`` queries and
fills these classes lives elsewhere; this module only describes the result and derives
what the type mapping needs from it.

Notes for whoever fills :class:`ColumnDef` (observed on MariaDB 10.11):

* ``data_type`` is ``DATA_TYPE`` lower-cased (``int``, ``varchar``, ``decimal``...).  MySQL
  reports ``FLOAT(p)`` with ``p > 24`` as ``double``; ``BOOL`` as ``tinyint`` with column
  type ``tinyint(1)``.
* MariaDB has no JSON type: a ``JSON`` column is ``longtext`` with a
  ``CHECK (json_valid(col))`` constraint (``information_schema.CHECK_CONSTRAINTS``).  Left
  as ``longtext`` it maps to a plain string -- exactly what Debezium does on MariaDB.
* ``COLUMN_TYPE`` escapes quotes inside ENUM/SET values as ``''`` and backslashes as
  ``\\\\``; :func:`parse_enum_values` undoes both.
* ``COLUMN_DEFAULT`` is MariaDB's SQL text (``'NULL'``, ``'abc'`` with quotes,
  ``current_timestamp()``); MySQL gives the bare value.  It is kept verbatim and does
  not take part in :meth:`TableDef.fingerprint`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Sequence

__all__ = ["ColumnDef", "TableDef", "parse_enum_values"]

_PAREN_NUMBERS_RE = re.compile(r"^\s*[a-z ]+?\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_WORD_RE = re.compile(r"[a-z]+")

# MySQL's escape sequences inside quoted strings (COLUMN_TYPE uses a subset of them).
_BACKSLASH_ESCAPES = {
    "0": "\0",
    "b": "\b",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "Z": "\x1a",
    "\\": "\\",
    "'": "'",
    '"': '"',
}


def parse_enum_values(column_type: str) -> list[str]:
    """The member strings of an ``enum(...)`` or ``set(...)`` column type, in order.

    Handles quotes doubled inside values (``'it''s'``), backslash escapes (``'a\\\\b'``),
    commas and parentheses inside values, and a trailing ``CHARACTER SET``/``COLLATE``
    clause.  Raises ``ValueError`` for anything that is not an enum/set type.

    >>> parse_enum_values("enum('a','b''q','c,d')")
    ['a', "b'q", 'c,d']
    """
    if not isinstance(column_type, str):
        raise ValueError(f"column type must be a string, got {column_type!r}")
    text = column_type.strip()
    lower = text.lower()
    if lower.startswith("enum"):
        i = 4
    elif lower.startswith("set"):
        i = 3
    else:
        raise ValueError(f"not an ENUM or SET column type: {column_type!r}")
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i >= n or text[i] != "(":
        raise ValueError(f"malformed ENUM/SET column type (no '('): {column_type!r}")
    i += 1
    values: list[str] = []
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == ")" and not values:
            return values  # enum() -- not valid SQL, but harmless
        if i >= n or text[i] != "'":
            raise ValueError(f"malformed ENUM/SET column type (expected a quoted value at {i}): {column_type!r}")
        i += 1
        buf: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"malformed ENUM/SET column type (unterminated value): {column_type!r}")
            ch = text[i]
            if ch == "'":
                if i + 1 < n and text[i + 1] == "'":
                    buf.append("'")
                    i += 2
                    continue
                i += 1
                break
            if ch == "\\" and i + 1 < n:
                nxt = text[i + 1]
                buf.append(_BACKSLASH_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            buf.append(ch)
            i += 1
        values.append("".join(buf))
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == ")":
            return values
        raise ValueError(f"malformed ENUM/SET column type (expected ',' or ')' at {i}): {column_type!r}")


@dataclass(frozen=True)
class ColumnDef:
    """One column as described by ``information_schema.COLUMNS``."""

    name: str
    data_type: str
    column_type: str
    nullable: bool
    ordinal: int
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None
    character_set: str | None = None
    char_max_length: int | None = None
    default: str | None = None
    # Debezium's column mapper of the column in the events (producer/column_mappers.py):
    # set by the column controls' resolve only.
    mapping: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"column name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.data_type, str) or not self.data_type.strip():
            raise ValueError(f"column {self.name!r}: data_type must be a non-empty string, got {self.data_type!r}")
        if not isinstance(self.column_type, str) or not self.column_type.strip():
            raise ValueError(f"column {self.name!r}: column_type must be a non-empty string, got {self.column_type!r}")
        # Normalise: DATA_TYPE compares lower-case everywhere in this package.
        object.__setattr__(self, "data_type", self.data_type.strip().lower())
        object.__setattr__(self, "nullable", bool(self.nullable))

    # -- derived -------------------------------------------------------------
    @cached_property
    def _type_words(self) -> frozenset[str]:
        # words after the parenthesised part, e.g. {'unsigned', 'zerofill'}
        ct = self.column_type.lower()
        if self.data_type in ("enum", "set"):
            ct = ct[ct.rfind(")") + 1:] if ")" in ct else ""
        return frozenset(_WORD_RE.findall(ct))

    @property
    def unsigned(self) -> bool:
        """True for ``... unsigned`` numeric columns."""
        return "unsigned" in self._type_words

    @property
    def zerofill(self) -> bool:
        return "zerofill" in self._type_words

    @cached_property
    def _paren_numbers(self) -> tuple[int | None, int | None]:
        m = _PAREN_NUMBERS_RE.match(self.column_type.lower())
        if not m:
            return None, None
        return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)

    @cached_property
    def enum_values(self) -> tuple[str, ...]:
        """ENUM/SET members in definition order; empty for other types."""
        if self.data_type not in ("enum", "set"):
            return ()
        return tuple(parse_enum_values(self.column_type))

    @property
    def bit_length(self) -> int | None:
        """``n`` of ``BIT(n)``; ``None`` for other types."""
        if self.data_type != "bit":
            return None
        n = self._paren_numbers[0]
        if n is None:
            n = self.numeric_precision if self.numeric_precision else 1
        return n

    @property
    def length(self) -> int | None:
        """The declared length, ``n`` of ``BINARY(n)`` / ``CHAR(n)`` / ``VARCHAR(n)``."""
        if self.char_max_length is not None:
            return self.char_max_length
        return self._paren_numbers[0]

    @property
    def precision(self) -> int | None:
        """Declared precision of DECIMAL/FLOAT/DOUBLE (``M`` of ``DECIMAL(M,D)``)."""
        if self.numeric_precision is not None:
            return self.numeric_precision
        return self._paren_numbers[0]

    @property
    def scale(self) -> int | None:
        """Declared scale (``D``): from NUMERIC_SCALE, else from ``(M,D)`` in the type."""
        if self.numeric_scale is not None:
            return self.numeric_scale
        return self._paren_numbers[1]

    @property
    def fsp(self) -> int:
        """Fractional seconds precision of TIME/DATETIME/TIMESTAMP (0-6)."""
        if self.datetime_precision is not None:
            return self.datetime_precision
        n = self._paren_numbers[0]
        return n if n is not None else 0

    def definition(self) -> dict:
        """The fields that define the column's shape (everything but ``default``)."""
        return {
            "name": self.name,
            "data_type": self.data_type,
            "column_type": self.column_type,
            "nullable": self.nullable,
            "ordinal": self.ordinal,
            "numeric_precision": self.numeric_precision,
            "numeric_scale": self.numeric_scale,
            "datetime_precision": self.datetime_precision,
            "character_set": self.character_set,
            "char_max_length": self.char_max_length,
        } | ({"mapping": self.mapping.definition()} if self.mapping is not None else {})


@dataclass
class TableDef:
    """A table: its columns in ordinal order and its primary key column names."""

    db: str
    name: str
    columns: list[ColumnDef]
    primary_key: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = sorted(self.columns, key=lambda c: c.ordinal)
        self.primary_key = list(self.primary_key)
        by_name: dict[str, ColumnDef] = {}
        by_lower: dict[str, ColumnDef] = {}
        for col in self.columns:
            if col.name in by_name:
                raise ValueError(f"table {self.db}.{self.name}: duplicate column {col.name!r}")
            by_name[col.name] = col
            by_lower.setdefault(col.name.lower(), col)
        self._by_name = by_name
        self._by_lower = by_lower
        for pk in self.primary_key:
            if self._find(pk) is None:
                raise ValueError(
                    f"table {self.db}.{self.name}: primary key column {pk!r} is not a column "
                    f"(columns: {', '.join(self.column_names)})"
                )

    def _find(self, name: str) -> ColumnDef | None:
        col = self._by_name.get(name)
        if col is None:  # MySQL column names are case-insensitive
            col = self._by_lower.get(name.lower()) if isinstance(name, str) else None
        return col

    @property
    def qualified_name(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> ColumnDef:
        """The column called ``name`` (exact match first, then case-insensitive)."""
        col = self._find(name)
        if col is None:
            raise KeyError(f"table {self.db}.{self.name} has no column {name!r} (columns: {', '.join(self.column_names)})")
        return col

    def key_columns(self, names: Sequence[str] | None = None) -> list[ColumnDef]:
        """The columns of ``names`` (default: the primary key), in the given order."""
        names = self.primary_key if names is None else names
        return [self.column(n) for n in names]

    def fingerprint(self) -> str:
        """A stable hex SHA-256 of the column definitions and primary key.

        Changes whenever a column is added, dropped, renamed, reordered, retyped or its
        nullability/charset/precision changes; unaffected by column defaults and by the
        table's own name (so it identifies a *shape*, for schema versioning).
        """
        payload = {
            "columns": [c.definition() for c in self.columns],
            "primary_key": list(self.primary_key),
        }
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode("ascii")).hexdigest()
