"""What verify compares: the normalisation kind of a column, the compared columns and key
of a table (:class:`ColumnSpec`, :class:`TableSpec`), and :func:`table_spec`, which builds
them from a source table's definition or says why the table cannot be compared.

Columns compared: those the events carry (the column settings, producer/column_controls.py); the sinks'
``__cdc_position`` and any sink-only column are ignored; a source column the sink lacks
makes the table differ.  The key's column kinds choose how a chunk's sink rows are found
(:attr:`TableSpec.mode`, see :mod:`cdc.verify.targets`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from cdc.verify.normalise import WRITTEN, as_source, as_written, normalise, normalise_avro, source_value
from contract.type_table import DECIMAL20, INTEGER_TYPES, TypeModes, family_of, source_type
from producer.events.avro_types import field_names
from producer.events.builder import type_modes
from producer.column_controls import ColumnControls
from producer.errors import ColumnControlsError
from producer.snapshot.table_reader import read_table_def

_UTC = timezone.utc
#: Relative tolerance for FLOAT (float32) columns in the row-by-row comparison.
FLOAT32_REL_TOL = 1e-6


# --- column kinds ------------------------------------------------------------------------------
#: Key kinds whose order is the same in MySQL (any collation) and PostgreSQL: ranges are safe.
RANGE_SAFE_KINDS = frozenset({"int", "decimal", "float32", "double", "bit", "bytes", "date", "time", "datetime",
                              "timestamp"})


def column_kind(data_type: str, json_columns: bool = False) -> str:
    """The normalisation kind of a source column from its ``DATA_TYPE``."""
    family = family_of(data_type)
    if json_columns:
        return "json"
    return source_type(family).verify if family is not None else "other"


@dataclass(frozen=True)
class ColumnSpec:
    """One compared column: its source name, Avro field name and normalisation kind."""

    name: str
    kind: str
    field: str = ""
    scale: int | None = None
    fsp: int = 0
    bits: int = 1
    members: tuple[str, ...] = ()
    #: "enum" or "set" for those source types (their order in the source is by number).
    enum: str = ""
    #: How the events write the source value under a handling mode (cdc.verify.normalise.WRITTEN;
    #: "": as it is).
    written: str = ""
    #: The column's mask, hash or truncation (producer/column_mappers.py) on its source value as
    #: written: the events carry that, so the comparison does.
    mapped: Any = None

    def source(self, v: Any) -> Any:
        n = source_value(self.kind, as_written(self.written, v), scale=self.scale, members=self.members)
        return n if self.mapped is None else self.mapped(n)

    def sink(self, v: Any) -> Any:
        return normalise(self.kind, v, scale=self.scale, members=self.members)

    def avro(self, v: Any) -> Any:
        if self.written == "time_ms" and isinstance(v, int):
            v *= 1000  # (Kafka Connect's Time: milliseconds)
        return normalise_avro(self.kind, v, fsp=self.fsp, scale=self.scale, members=self.members)

    def same(self, a: Any, b: Any) -> bool:
        """Row-level equality (FLOAT columns within a relative 1e-6)."""
        if a == b:
            return True
        if self.kind == "float32" and self.scale is None and isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=FLOAT32_REL_TOL)
        return False

    # ----- key values as statement parameters
    def param(self, canon: Any, dialect: str) -> Any:
        """A normalised key value as a parameter for ``dialect``: ``postgres``, ``mysql`` (the
        MySQL sink) or ``source`` (MySQL/MariaDB, the source table's own types).

        In the source an ENUM/SET key is given as its number: ``ORDER BY`` sorts ENUM and
        SET by number, while ``e > 'text'`` would compare text, and keyset pagination would
        skip rows."""
        if canon is None:
            return None
        k = self.kind
        if dialect == "source" and self.enum and isinstance(canon, str):
            if self.enum == "enum":
                return self.members.index(canon) + 1 if canon in self.members else 0
            parts = set(canon.split(",")) if canon else set()
            if parts <= set(self.members):
                return sum(1 << i for i, m in enumerate(self.members) if m in parts)
            return canon
        if dialect == "source" and self.written:
            return as_source(self.written, canon)
        if dialect == "source":
            dialect = "mysql"
        try:
            if k == "decimal":
                return Decimal(canon)
            if k == "bit":
                if dialect == "postgres":
                    return bool(canon) if self.bits == 1 else format(canon, f"0{self.bits}b")
                return int(canon)
            if k == "date":
                return date.fromisoformat(canon)
            if k in ("datetime", "timestamp"):
                d = datetime.fromisoformat(canon)
                return d.replace(tzinfo=_UTC) if (k == "timestamp" and dialect == "postgres") else d
            if k == "time" and isinstance(canon, int):
                if dialect == "postgres":
                    return timedelta(microseconds=canon)
                sign, us = ("-", -canon) if canon < 0 else ("", canon)
                s, frac = divmod(us, 1_000_000)
                return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{frac:06d}"
        except (ValueError, TypeError, InvalidOperation):
            return canon
        return canon


@dataclass
class TableSpec:
    """A source table as verify compares it.

    A shard of a route (``routes``, docs/sharding.md) lands in the route's ``target`` table,
    among the other shards' rows: its rows there are those whose ``origin`` columns hold
    its origin values (``{"__source": "east", "__db": "shop_01", "__table": "orders"}``),
    and within them its key is its own (the origin columns lead the target's key)."""

    db: str
    table: str
    columns: list[ColumnSpec]          # compared columns, source order (key columns included)
    key: list[str]                     # key column names, key order
    #: The name of the source the table is read from, when several are configured.
    source: str | None = None
    #: The sink table's ``(db, table)`` when it is not the table's own (a route's target).
    target: tuple[str, str] | None = None
    #: Origin column -> value: the sink rows of this table (a shard in a route's target).
    origin: dict[str, str] = field(default_factory=dict)
    #: What the column settings (producer/column_controls.py) leave out of the comparison, or
    #: give the table as its key: said in the report under each of its results.
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        by = {c.name: c for c in self.columns}
        self.key_specs = [by[k] for k in self.key]
        self.value_specs = [c for c in self.columns if c.name not in set(self.key)]
        self.mode = "range" if all(c.kind in RANGE_SAFE_KINDS and not c.written for c in self.key_specs) else "keys"

    @property
    def name(self) -> str:
        """``db.table``, or ``source/db.table`` when several sources are configured."""
        return f"{self.source}/{self.db}.{self.table}" if self.source else f"{self.db}.{self.table}"

    @property
    def sink_name(self) -> tuple[str, str]:
        """The ``(db, table)`` the sinks name the sink table by."""
        return self.target or (self.db, self.table)

    def key_params(self, key: tuple, dialect: str) -> list:
        return [c.param(v, dialect) for c, v in zip(self.key_specs, key)]


@dataclass(frozen=True)
class Unverifiable:
    """Why a source table cannot be compared (one of the two kinds below)."""

    reason: str


@dataclass(frozen=True)
class MissingTable(Unverifiable):
    """The source table does not exist: the table's report is an error."""


@dataclass(frozen=True)
class KeylessTable(Unverifiable):
    """No primary key and no ``source.key_columns`` entry (the sinks cannot hold it): the
    table is skipped."""


def _json_check_columns(conn, db: str, table: str) -> set[str]:
    """MariaDB's JSON columns: LONGTEXT with a ``CHECK (json_valid(`col`))`` constraint."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s "
                        "AND TABLE_NAME = %s", (db, table))
            clauses = [r[0] for r in cur.fetchall()]
    except Exception:  # noqa: BLE001 - MySQL's CHECK_CONSTRAINTS has no TABLE_NAME (and real JSON)
        return set()
    out = set()
    for c in clauses:
        m = re.fullmatch(r"\s*json_valid\(`((?:[^`]|``)+)`\)\s*", c or "", re.IGNORECASE)
        if m:
            out.add(m.group(1).replace("``", "`"))
    return out


def written_as(col: Any, kind: str, modes: TypeModes) -> tuple[str, str]:
    """``(how the events write the column's values under the handling modes, the kind they are
    compared as)``: ``("", kind)`` where the modes change nothing (cdc.verify.normalise.WRITTEN)."""
    family = family_of(col.data_type)
    if family == "decimal" and modes.decimal == "double":
        return "double", "double"
    if family == "integer" and col.unsigned and INTEGER_TYPES[col.data_type].unsigned == DECIMAL20 \
            and modes.bigint_unsigned == "long":
        return "long", kind
    if family == "binary" and modes.binary != "bytes":
        return modes.binary, "text"
    if family == "time" and modes.time_precision == "connect":
        return "time_ms", kind
    if family == "datetime" and modes.time_precision == "connect":
        return "datetime_ms", kind
    return "", kind


def _mapped(col: Any, kind: str) -> tuple[Any, str]:
    """The function giving a column's compared value from its normalised source value when a
    mask, hash or truncation changes its values (producer/column_mappers.py), and the report's
    note; ``(None, note)``: the column is not compared (a truncated value of a kind other than text
    or bytes, which the normalised value does not hold as the events do)."""
    mapping = col.mapping
    if mapping is None or not mapping.changes_values(col):
        return None, ""
    if kind not in ("text", "bytes"):
        return None, f"column {col.name} not compared: {mapping.describe()}, of a {col.data_type} column"
    return mapping.transform(col), f"column {col.name} compared as {mapping.describe()}"


def table_spec(conn, cfg, db: str, table: str) -> TableSpec | Unverifiable:
    """The :class:`TableSpec` of a source table, or why it cannot be verified."""
    tdef = read_table_def(conn, db, table)
    if tdef is None:
        return MissingTable(f"no such table {db}.{table}")
    controls = ColumnControls.from_config(cfg.source)
    try:  # the columns and key the events carry (producer/column_controls.py)
        captured = controls.resolve(tdef)
    except ColumnControlsError as exc:
        return KeylessTable(f"its column settings do not apply: {exc}")
    key = list(captured.primary_key)
    if not key:
        return KeylessTable("no primary key and no source.message_key_columns (or key_columns) entry "
                            "(the sinks cannot hold it)")
    jsons = _json_check_columns(conn, db, table)
    names = field_names(tdef)
    cols, notes = [], []
    modes = type_modes(cfg.producer)
    for c in captured.columns:
        kind = column_kind(c.data_type, c.name in jsons and c.data_type in ("longtext", "text", "mediumtext"))
        written, kind = written_as(c, kind, modes)
        if written and not WRITTEN[written] and c.name in key:
            return KeylessTable(f"its key column {c.name} is written as {written} by the handling modes "
                                "(producer.*_mode): it cannot be looked up in the source")
        scale = c.scale if c.data_type in ("float", "double", "real") else None
        fsp = 3 if written == "datetime_ms" else c.fsp if kind == "datetime" else 0
        mapped, note = _mapped(c, kind)
        if note:
            notes.append(note)
            if mapped is None:
                continue
        cols.append(ColumnSpec(c.name, kind, names[c.name], scale, fsp,
                               (c.bit_length or 1) if kind == "bit" else 1,
                               tuple(c.enum_values) if c.data_type in ("set", "enum") else (),
                               c.data_type if c.data_type in ("set", "enum") else "", written, mapped))
    key = [tdef.column(k).name for k in key]
    left_out = controls.left_out(tdef)
    if left_out:
        notes.append(f"column(s) {', '.join(left_out)} not compared: the events leave them out "
                     f"({'; '.join(controls.describe())})")
    if key != list(tdef.primary_key):
        notes.append(f"key {', '.join(key)}: from {controls.key_for(tdef)[1]}")
    return TableSpec(db, table, cols, key, notes=tuple(notes))
