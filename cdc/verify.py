"""``cdc verify``: every captured source table compared with its sinks, row for row.

In the spirit of TiDB's sync-diff-inspector and Percona's pt-table-checksum: the source
table is read in primary-key chunks; for every chunk each side gives a row count and an
order-independent checksum over *normalised* row values, computed here in Python; chunks
whose count or checksum differ are compared row by row (drill-down), which names the keys
missing in the sink, the keys only the sink has and the rows whose values differ (with the
columns).  Targets: the PostgreSQL sink table, the MySQL sink table (whichever sinks are
enabled) and, with ``changelog=True``, the clean changelog topic replayed.

Public API::

    report = verify(cfg, ["shop.orders"], changelog=True, chunk_size=10_000, samples=5)
    report.equal           # True only when every table equals every target
    print_report(report)   # rich tables; report.to_dict() for JSON

Chunking (bounded memory for the database comparisons)
======================================================
The source is read with keyset pagination on its key (``ORDER BY k1, k2 LIMIT n`` after
the last key read, compared by the source database), ``chunk_size`` rows at a time: the
last key of a chunk is its upper boundary.  At most one source chunk, one sink chunk and
the samples are held at once, whatever the table size; sink rows are streamed (server-side
cursors) into the count and checksum, and streamed again for a drill-down.

How a chunk's rows are found in a sink depends on the key's column types:

* ``range`` mode, when every key column compares the same way everywhere (integers,
  decimals, floats, BIT, binary strings, dates, times, datetimes, timestamps): the sink
  rows of chunk ``(lo, hi]`` are fetched with a range predicate on the key
  (``(k1, k2) > (lo1, lo2) AND (k1, k2) <= (hi1, hi2)``; the first chunk has no lower
  bound, the last none above), so the chunks tile the whole key space and a row the sink
  has beyond the source's is found in its chunk.
* ``keys`` mode, when a key column is a string (CHAR/VARCHAR/TEXT, ENUM, SET): MySQL's
  collations (``utf8mb4_general_ci`` ignores case and accents, PAD SPACE ignores
  trailing spaces, ENUM sorts by index) and the sinks' byte-wise order
  (``utf8mb4_nopad_bin``, PostgreSQL's ``text``) disagree, so a range would mean other
  rows on each side.  The sink rows of a chunk are fetched by the explicit list of the
  chunk's keys (``WHERE (k1, k2) IN ((..), ..)``, 1,000 keys a statement; the sinks
  compare keys byte for byte).  Rows only the sink has are not in any list: at the end
  ``COUNT(*)`` of the sink table minus the rows found gives their number, and when it is
  not zero the sink's keys are streamed in the sink's own order and looked up in the
  source in batches (the source compares with its collation, so each batch's answers are
  compared again exactly in Python); those not found are "extra in sink".

Rows are compared as sets keyed by the normalised key: Python never relies on two
databases sorting alike.  In the source's own keyset predicates an ENUM or SET key value is
given as its number, because ``ORDER BY`` sorts those by number while ``e > 'text'``
compares text (a text bound skips and repeats rows).  A chunk reads one row more than its
size to know whether it is the last, so no empty chunk trails a table whose size is a
multiple of the chunk size.

Normalisation (:func:`normalise`, one *kind* per source column)
===============================================================
``int`` (all integer types, BOOL, YEAR; BIGINT UNSIGNED is ``numeric`` in PostgreSQL),
``decimal`` (exact text, trailing zeros and exponent removed, ``-0`` is ``0``),
``float32`` (FLOAT: the float32 value, so PostgreSQL's shortest ``real`` text, MySQL's
``CAST(f AS DOUBLE)`` and the Avro float agree; drill-down allows a relative 1e-6),
``double`` (``repr`` of the float; FLOAT(M,D)/DOUBLE(M,D) rounded to D places as the
producer does), ``bit`` (an int: MySQL's big-endian bytes, PostgreSQL's ``bit(n)`` text
or ``boolean``, Avro's little-endian Bits), ``text`` (str, also ENUM, SET, UUID, INET),
``bytes`` (bytes/bytea/memoryview), ``json`` (parsed and dumped with sorted keys:
MySQL JSON, MariaDB's ``json_valid`` LONGTEXT, PostgreSQL ``jsonb``), ``date`` (ISO
text), ``time`` (microseconds: MySQL TIME timedelta, PostgreSQL interval or time),
``datetime`` and ``timestamp`` (naive UTC ``YYYY-MM-DD HH:MM:SS.ffffff``; aware values,
e.g. ``timestamptz``, are converted to UTC; every connection runs on UTC),
``geometry`` (the WKB; the source's 4-byte SRID prefix is dropped, as the sinks do).
MySQL's zero dates (``0000-00-00``, any zero part) count as NULL, as the producer emits
them.  Columns compared: the source's, minus ``source.exclude_columns``; the sinks'
``__cdc_position`` and any sink-only column are ignored; a source column the sink lacks
makes the table differ.

Checksum: the sum modulo 2**128 of the 128-bit BLAKE2b of each normalised row's ``repr``
(order-independent, unlike XOR it does not cancel duplicates), with the row count.

The clean changelog
===================
``<prefix>.clean.<db>.<table>`` is replayed from the beginning into a dict keyed by the
normalised key (a record not above the highest position seen in its partition is a copy
and skipped; ``d`` removes the key).  **This needs memory proportional to the table**
(one normalised row per live key): a replay cannot be bounded.  The source chunks are
then compared with the entries they take out of the dict; what is left is "extra".

Consistency: the source is read chunk by chunk in autocommit (no long transaction, no
lock) and the sinks after it, so verify a drained pipeline (producer caught up, merge job
done); a change landing while verify runs can show up as a difference.  A chunk whose
checksum differs but whose rows compare equal on the second read is reported in the notes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import time
from dataclasses import dataclass, field
from datetime import date, datetime, time as dtime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable, Iterator, Sequence
from cdc.errors import VerifyError
from common.sql.keyset import keyset_predicate
from spark_jobs.sinks.configured import build_sinks
from contract.position import CopyFilter
from common.sql.sessions import read_session
from common.kafka.topic_reader import read_topic
from common.sql.quoting import quote_ident
from contract.schema_store import SchemaStore
from contract.serde import ConfluentRegistry, RecordDecoder
from contract.topics import clean_topic
from producer.capture_filter import CaptureFilter
from producer.table_reader import list_tables, read_table_def
from producer.type_mapping import field_names
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink, quote_pg

__all__ = [
    "VerifyError",
    "RowDiff",
    "SinkResult",
    "TableReport",
    "VerifyReport",
    "ColumnSpec",
    "TableSpec",
    "verify",
    "print_report",
    "normalise",
    "normalise_avro",
    "canonical_decimal",
    "canonical_float32",
    "canonical_json",
    "row_digest",
    "Checksum",
    "checksum",
    "compare_rows",
    "column_kind",
    "replay_changelog",
]

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)
_F32 = struct.Struct("<f")
_MASK = (1 << 128) - 1
#: Keys per ``IN (...)`` statement (sink lookups, source lookups of sink keys).
LOOKUP_BATCH = 1000
#: Rows per round trip of the streaming cursors.
STREAM_BATCH = 2000
#: Relative tolerance for FLOAT (float32) columns in the row-by-row comparison.
FLOAT32_REL_TOL = 1e-6
#: Value of a column the changelog record does not have (an older schema).
ABSENT = "<absent from the record>"


# =============================================================================== normalisation
def canonical_decimal(v: Any) -> str:
    """Exact text of a decimal: no exponent, no trailing fractional zeros, ``-0`` is ``0``.

    Done on the digits (``Decimal.normalize`` would round to the context's 28 digits,
    DECIMAL(65,30) has 65).
    """
    if isinstance(v, Decimal):
        d = v
    elif isinstance(v, float):
        d = Decimal(repr(v))
    else:
        d = Decimal(str(v).strip())
    if not d.is_finite():
        return str(d)
    sign, digits, exp = d.as_tuple()
    ds = list(digits)
    while exp < 0 and len(ds) > 1 and ds[-1] == 0:
        ds.pop()
        exp += 1
    s = "".join(map(str, ds)).lstrip("0") or "0"
    if s == "0":
        return "0"
    if exp >= 0:
        s += "0" * exp
    else:
        n = -exp
        s = ("0." + "0" * (n - len(s)) + s) if len(s) <= n else (s[:-n] + "." + s[-n:])
    return ("-" if sign else "") + s


def _plain_float(f: float) -> Any:
    if f != f:
        return "NaN"
    if f == 0.0:
        return 0.0  # -0.0 is 0.0
    return f


def canonical_float32(v: Any) -> Any:
    """The float32 value of ``v`` as a Python float (3.14, 3.140000104904175 -> the same)."""
    f = float(v)
    try:
        f = _F32.unpack(_F32.pack(f))[0]
    except OverflowError:  # not a float32 at all: left as it is, it will differ
        pass
    return _plain_float(f)


def canonical_double(v: Any, scale: int | None = None) -> Any:
    f = float(v)
    if scale is not None and math.isfinite(f):
        f = round(f, scale)
    return _plain_float(f)


def canonical_json(v: Any) -> Any:
    """JSON as compact text with sorted keys (text that does not parse stays as it is)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        v = bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return v
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _zero_date_text(s: str) -> bool:
    """``0000-00-00``, ``2024-00-10``...: MySQL's zero dates (the producer emits NULL)."""
    m = re.match(r"\s*(\d{1,4})-(\d{1,2})-(\d{1,2})", s)
    return bool(m) and 0 in (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _dt_text(d: datetime) -> str:
    if d.tzinfo is not None:
        d = d.astimezone(_UTC).replace(tzinfo=None)
    return d.isoformat(sep=" ", timespec="microseconds")


def canonical_datetime(v: Any) -> Any:
    """Naive UTC ``YYYY-MM-DD HH:MM:SS.ffffff`` (aware values converted to UTC)."""
    if isinstance(v, datetime):
        return _dt_text(v)
    if isinstance(v, date):
        return _dt_text(datetime(v.year, v.month, v.day))
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    if _zero_date_text(s):
        return None
    try:
        return _dt_text(datetime.fromisoformat(s.strip()))
    except ValueError:
        return s


def canonical_date(v: Any) -> Any:
    if isinstance(v, datetime):
        v = _dt_text(v)[:10]
        return v
    if isinstance(v, date):
        return v.isoformat()
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    if _zero_date_text(s):
        return None
    try:
        return date.fromisoformat(s.strip()[:10]).isoformat()
    except ValueError:
        return s


_TIME_RE = re.compile(r"\s*(-)?(\d+):(\d{1,2})(?::(\d{1,2}))?(?:\.(\d{0,6})\d*)?\s*\Z")


def canonical_time(v: Any) -> Any:
    """Microseconds (negative and above 24 h allowed, as MySQL TIME)."""
    if isinstance(v, timedelta):
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, dtime):
        return (v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000 + v.microsecond
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    s = v.decode() if isinstance(v, (bytes, bytearray)) else str(v)
    m = _TIME_RE.match(s)
    if not m:
        return s
    neg, h, mi, sec, frac = m.groups()
    total = ((int(h) * 60 + int(mi)) * 60 + int(sec or 0)) * 1_000_000 + (int(frac.ljust(6, "0")) if frac else 0)
    return -total if neg else total


def canonical_int(v: Any) -> Any:
    if isinstance(v, int):
        return int(v)
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else canonical_decimal(v)
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if isinstance(v, date):  # YEAR read as a date by some drivers
        return v.year
    try:
        return int(str(v).strip())
    except ValueError:
        return str(v)


def canonical_bits(v: Any) -> Any:
    """BIT(n) as its number: MySQL bytes (big-endian), PostgreSQL bit text or boolean."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return int.from_bytes(bytes(v), "big")
    if isinstance(v, str):
        s = v.strip()
        if s and set(s) <= {"0", "1"}:
            return int(s, 2)
        return s
    return int(v)


def canonical_bytes(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return bytes(v)


def canonical_text(v: Any, members: Sequence[str] = ()) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, (set, frozenset)):  # a SET as a Python set: MySQL's order is the definition order
        order = {m: i for i, m in enumerate(members)}
        return ",".join(sorted((str(x) for x in v), key=lambda m: (order.get(m, len(order)), m)))
    return str(v)


def _generic(v: Any) -> Any:
    """Any value by its Python type (columns of a type verify does not know)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, str)):
        return v
    if isinstance(v, Decimal):
        return canonical_decimal(v)
    if isinstance(v, float):
        return _plain_float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, datetime):
        return _dt_text(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, (timedelta, dtime)):
        return canonical_time(v)
    if isinstance(v, (dict, list)):
        return canonical_json(v)
    return str(v)


def normalise(kind: str, v: Any, *, scale: int | None = None, members: Sequence[str] = ()) -> Any:
    """The comparable form of a value read from MySQL/MariaDB or PostgreSQL (None stays None).

    ``kind`` is :func:`column_kind` of the source column; ``scale`` the D of FLOAT(M,D) /
    DOUBLE(M,D); ``members`` the SET members (for a SET returned as a Python set).
    """
    if v is None:
        return None
    if kind == "int":
        return canonical_int(v)
    if kind == "decimal":
        try:
            return canonical_decimal(v)
        except (InvalidOperation, ValueError):
            return str(v)
    if kind == "float32":
        return canonical_float32(v) if scale is None else canonical_double(v, scale)
    if kind == "double":
        return canonical_double(v, scale)
    if kind == "bit":
        return canonical_bits(v)
    if kind == "text":
        return canonical_text(v, members)
    if kind == "bytes" or kind == "geometry":
        return canonical_bytes(v)
    if kind == "json":
        return canonical_json(v)
    if kind == "date":
        return canonical_date(v)
    if kind == "time":
        return canonical_time(v)
    if kind in ("datetime", "timestamp"):
        return canonical_datetime(v)
    return _generic(v)


def normalise_avro(kind: str, v: Any, *, fsp: int = 0, scale: int | None = None, members: Sequence[str] = ()) -> Any:
    """The comparable form of a decoded changelog value (Debezium/Avro representation).

    DATE is days since 1970-01-01, TIME microseconds, DATETIME milliseconds (fsp <= 3)
    or microseconds since the epoch, TIMESTAMP ISO-8601 text in UTC, BIT(1) a boolean,
    BIT(n) little-endian bytes, geometry a ``{wkb, srid}`` record; JSON-format records
    carry bytes as base64 and decimals as text.
    """
    if v is None:
        return None
    if kind == "bit":
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, str):
            v = base64.b64decode(v)
        if isinstance(v, (bytes, bytearray)):
            return int.from_bytes(bytes(v), "little")
        return int(v)
    if kind in ("bytes", "geometry"):
        if isinstance(v, dict):
            v = v.get("wkb")
            if v is None:
                return None
        if isinstance(v, str):
            v = base64.b64decode(v)
        return bytes(v)
    if kind == "date" and isinstance(v, int):
        try:
            return (_EPOCH_DATE + timedelta(days=v)).isoformat()
        except OverflowError:
            return v
    if kind == "datetime" and isinstance(v, int):
        try:
            return _dt_text(_EPOCH + (timedelta(milliseconds=v) if fsp <= 3 else timedelta(microseconds=v)))
        except OverflowError:
            return v
    return normalise(kind, v, scale=scale, members=members)


def source_value(kind: str, v: Any, **kw: Any) -> Any:
    """A value read from the source table (the SRID prefix of geometries dropped)."""
    if kind == "geometry" and v is not None:
        b = bytes(v)
        return b[4:] if len(b) > 4 else b
    return normalise(kind, v, **kw)


# =============================================================================== columns and tables
_INT_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "bool", "boolean", "year"}
_DECIMAL_TYPES = {"decimal", "numeric", "dec", "fixed"}
_DOUBLE_TYPES = {"double", "real", "double precision", "float8"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "long", "long varchar", "nchar",
               "nvarchar", "national char", "national varchar", "character", "character varying", "enum", "set",
               "uuid", "inet4", "inet6"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "long varbinary"}
_GEOMETRY_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                   "geometrycollection", "geomcollection"}
#: Key kinds whose order is the same in MySQL (any collation) and PostgreSQL: ranges are safe.
RANGE_SAFE_KINDS = frozenset({"int", "decimal", "float32", "double", "bit", "bytes", "date", "time", "datetime",
                              "timestamp"})


def column_kind(data_type: str, json_columns: bool = False) -> str:
    """The normalisation kind of a source column from its ``DATA_TYPE``."""
    dt = data_type.lower()
    if json_columns or dt == "json":
        return "json"
    if dt in _INT_TYPES:
        return "int"
    if dt in _DECIMAL_TYPES:
        return "decimal"
    if dt == "float":
        return "float32"
    if dt in _DOUBLE_TYPES:
        return "double"
    if dt == "bit":
        return "bit"
    if dt in _TEXT_TYPES:
        return "text"
    if dt in _BINARY_TYPES:
        return "bytes"
    if dt in ("date", "time", "datetime", "timestamp"):
        return dt
    if dt in _GEOMETRY_TYPES:
        return "geometry"
    return "other"


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

    def source(self, v: Any) -> Any:
        return source_value(self.kind, v, scale=self.scale, members=self.members)

    def sink(self, v: Any) -> Any:
        return normalise(self.kind, v, scale=self.scale, members=self.members)

    def avro(self, v: Any) -> Any:
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
    """A source table as verify compares it."""

    db: str
    table: str
    columns: list[ColumnSpec]          # compared columns, source order (key columns included)
    key: list[str]                     # key column names, key order

    def __post_init__(self) -> None:
        by = {c.name: c for c in self.columns}
        self.key_specs = [by[k] for k in self.key]
        self.value_specs = [c for c in self.columns if c.name not in set(self.key)]
        self.mode = "range" if all(c.kind in RANGE_SAFE_KINDS for c in self.key_specs) else "keys"

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    def key_params(self, key: tuple, dialect: str) -> list:
        return [c.param(v, dialect) for c, v in zip(self.key_specs, key)]


# =============================================================================== checksums
def row_digest(key: tuple, values: tuple) -> int:
    """128-bit BLAKE2b of a normalised row."""
    text = repr((key, values)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


@dataclass
class Checksum:
    """Row count and the sum of the rows' digests modulo 2**128 (order-independent)."""

    count: int = 0
    total: int = 0

    def add(self, key: tuple, values: tuple) -> None:
        self.count += 1
        self.total = (self.total + row_digest(key, values)) & _MASK

    @property
    def hex(self) -> str:
        return f"{self.total:032x}"


def checksum(rows: Iterable[tuple[tuple, tuple]]) -> Checksum:
    c = Checksum()
    for key, values in rows:
        c.add(key, values)
    return c


# =============================================================================== report
@dataclass
class RowDiff:
    """One differing row: ``missing`` (in the sink), ``extra`` (only in the sink) or ``differs``."""

    kind: str
    key: dict[str, Any]
    columns: list[str] = field(default_factory=list)
    source: dict[str, Any] | None = None
    sink: dict[str, Any] | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": _jsonable(self.key), "columns": list(self.columns),
                "source": _jsonable(self.source), "sink": _jsonable(self.sink)}


@dataclass
class SinkResult:
    """One table against one target (``postgres``, ``mysql`` or ``changelog``)."""

    sink: str
    target: str
    source_rows: int = 0
    sink_rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    missing: int = 0
    extra: int = 0
    differing: int = 0
    missing_columns: list[str] = field(default_factory=list)
    samples: list[RowDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def equal(self) -> bool:
        return (self.error is None and not self.missing_columns and self.missing == 0 and self.extra == 0
                and self.differing == 0 and self.source_rows == self.sink_rows)

    @property
    def result(self) -> str:
        if self.error is not None:
            return "error"
        return "equal" if self.equal else "differs"

    def to_dict(self) -> dict:
        return {"sink": self.sink, "target": self.target, "result": self.result, "equal": self.equal,
                "source_rows": self.source_rows, "sink_rows": self.sink_rows, "chunks": self.chunks,
                "chunks_differing": self.chunks_differing, "missing": self.missing, "extra": self.extra,
                "differing": self.differing, "missing_columns": list(self.missing_columns),
                "samples": [s.to_dict() for s in self.samples], "notes": list(self.notes), "error": self.error}


@dataclass
class TableReport:
    table: str
    key: list[str] = field(default_factory=list)
    mode: str = ""
    source_rows: int = 0
    chunks: int = 0
    results: list[SinkResult] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        if self.skipped is not None:
            return True
        return self.error is None and all(r.equal for r in self.results)

    def to_dict(self) -> dict:
        return {"table": self.table, "key": list(self.key), "mode": self.mode, "equal": self.equal,
                "source_rows": self.source_rows, "chunks": self.chunks, "error": self.error,
                "skipped": self.skipped, "seconds": round(self.seconds, 3),
                "results": [r.to_dict() for r in self.results]}


@dataclass
class VerifyReport:
    tables: list[TableReport] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    chunk_size: int = 0
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        """Every table equal to every target (tables skipped for having no key aside)."""
        return all(t.equal for t in self.tables)

    def to_dict(self) -> dict:
        return {"equal": self.equal, "targets": list(self.targets), "chunk_size": self.chunk_size,
                "seconds": round(self.seconds, 3), "tables": [t.to_dict() for t in self.tables]}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        b = bytes(v)
        return "0x" + b[:256].hex() + (f"...({len(b)} bytes)" if len(b) > 256 else "")
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


# =============================================================================== row comparison
@dataclass
class _Diffs:
    """Counts and samples of one (table, target)."""

    result: SinkResult
    spec: TableSpec
    samples: int

    def _sample(self, kind: str) -> bool:
        return sum(1 for s in self.result.samples if s.kind == kind) < self.samples

    def _key(self, key: tuple) -> dict:
        return {c.name: v for c, v in zip(self.spec.key_specs, key)}

    def _row(self, values: tuple) -> dict:
        return {c.name: v for c, v in zip(self.spec.value_specs, values)}

    def missing(self, key: tuple, values: tuple) -> None:
        self.result.missing += 1
        if self._sample("missing"):
            self.result.samples.append(RowDiff("missing", self._key(key), source=self._row(values)))

    def extra(self, key: tuple, values: tuple | None) -> None:
        self.result.extra += 1
        if self._sample("extra"):
            self.result.samples.append(RowDiff("extra", self._key(key), sink=None if values is None
                                               else self._row(values)))

    def extra_room(self) -> int:
        """How many more "extra" samples fit."""
        return max(0, self.samples - sum(1 for s in self.result.samples if s.kind == "extra"))

    def differs(self, key: tuple, cols: list[int], src: tuple, dst: tuple) -> None:
        self.result.differing += 1
        if self._sample("differs"):
            specs = self.spec.value_specs
            self.result.samples.append(RowDiff(
                "differs", self._key(key), [specs[i].name for i in cols],
                {specs[i].name: src[i] for i in cols}, {specs[i].name: dst[i] for i in cols}))


def compare_rows(specs: Sequence[ColumnSpec], source: dict[tuple, tuple],
                 sink_rows: Iterable[tuple[tuple, tuple]]) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Row-by-row comparison of one chunk: ``(missing, extra, differing)``.

    ``source`` maps normalised keys to normalised value tuples (``specs`` order);
    ``missing`` are ``(key, source values)``, ``extra`` ``(key, sink values)``,
    ``differing`` ``(key, [column indexes], source values, sink values)``.  ``source``
    is not modified.
    """
    seen: set[tuple] = set()
    extra, differing = [], []
    for key, values in sink_rows:
        src = source.get(key)
        if src is None and key not in source:
            extra.append((key, values))
            continue
        seen.add(key)
        cols = [i for i, (c, a, b) in enumerate(zip(specs, src, values)) if not c.same(a, b)]
        if cols:
            differing.append((key, cols, src, values))
    missing = [(k, v) for k, v in source.items() if k not in seen]
    return missing, extra, differing


# =============================================================================== SQL helpers
def _q_my(name: str) -> str:
    return quote_ident(name)


def _q_pg(name: str) -> str:
    return quote_pg(name)


def _after(dialect: str, qkeys: list[str], params: list, op: str) -> tuple[str, list]:
    """Key ``op`` params (``>`` or ``<=``): PostgreSQL's row comparison, MySQL's expanded form."""
    return keyset_predicate(qkeys, params, op, row_comparison=dialect == "postgres")


def _in_list(qkeys: list[str], keys: list[list]) -> tuple[str, list]:
    if len(qkeys) == 1:
        return f"{qkeys[0]} IN ({', '.join(['%s'] * len(keys))})", [k[0] for k in keys]
    one = "(" + ", ".join(["%s"] * len(qkeys)) + ")"
    return f"({', '.join(qkeys)}) IN ({', '.join([one] * len(keys))})", [v for k in keys for v in k]


# =============================================================================== the source
@dataclass
class _Chunk:
    index: int
    lo: tuple | None                   # exclusive lower bound (normalised key), None: none
    hi: tuple | None                   # inclusive upper bound, None: none (the last chunk)
    rows: dict[tuple, tuple]           # normalised key -> normalised values
    checksum: Checksum


class _Source:
    """The source table, read in keyset chunks on a UTC, READ COMMITTED, autocommit session."""

    def __init__(self, conn, spec: TableSpec) -> None:
        self.conn = conn
        self.spec = spec
        exprs = []
        for c in [*spec.key_specs, *spec.value_specs]:
            q = _q_my(c.name)
            exprs.append(f"CAST({q} AS DOUBLE)" if c.kind == "float32" else q)
        self.select = ", ".join(exprs)
        self.qkeys = [_q_my(k) for k in spec.key]
        self.table = f"{_q_my(spec.db)}.{_q_my(spec.table)}"
        self.nkey = len(spec.key)

    def _rows(self, raw: Iterable[tuple]) -> Iterator[tuple[tuple, tuple]]:
        ks, vs, n = self.spec.key_specs, self.spec.value_specs, self.nkey
        for r in raw:
            yield (tuple(c.source(v) for c, v in zip(ks, r[:n])), tuple(c.source(v) for c, v in zip(vs, r[n:])))

    def chunks(self, size: int) -> Iterator[_Chunk]:
        lo: tuple | None = None
        index = 0
        order = ", ".join(self.qkeys)
        while True:
            sql, params = f"SELECT {self.select} FROM {self.table}", []
            if lo is not None:
                pred, params = _after("mysql", self.qkeys, self.spec.key_params(lo, "source"), ">")
                sql += f" WHERE {pred}"
            # One row more than the chunk: it tells whether this chunk is the last (no empty
            # trailing chunk when the table size is a multiple of the chunk size).
            sql += f" ORDER BY {order} LIMIT {int(size) + 1}"
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                raw = cur.fetchall()
            last = len(raw) <= size
            rows: dict[tuple, tuple] = {}
            cs = Checksum()
            last_key = None
            for key, values in self._rows(raw[:size]):
                rows[key] = values
                cs.add(key, values)
                last_key = key
            del raw
            yield _Chunk(index, lo, None if last else last_key, rows, cs)
            if last:
                return
            lo = last_key
            index += 1

    def lookup(self, keys: list[tuple]) -> set[tuple]:
        """Which of ``keys`` the source holds, compared exactly (after the source's own,
        possibly case- and accent-insensitive, comparison found candidates)."""
        found: set[tuple] = set()
        ks = self.spec.key_specs
        for i in range(0, len(keys), LOOKUP_BATCH):
            batch = keys[i:i + LOOKUP_BATCH]
            pred, params = _in_list(self.qkeys, [self.spec.key_params(k, "source") for k in batch])
            with self.conn.cursor() as cur:
                cur.execute(f"SELECT {', '.join(self.qkeys)} FROM {self.table} WHERE {pred}", params)
                for r in cur.fetchall():
                    found.add(tuple(c.source(v) for c, v in zip(ks, r)))
        return {k for k in keys if k in found}


# =============================================================================== targets
class _Target:
    """One place a table is copied to."""

    sink = ""

    def __init__(self) -> None:
        self.error: str | None = None

    def open(self, spec: TableSpec, result: SinkResult) -> bool:
        """Prepare for a table; False when it cannot be compared (result says why)."""
        raise NotImplementedError

    def chunk_rows(self, chunk: _Chunk) -> Iterator[tuple[tuple, tuple]]:
        raise NotImplementedError

    def finish(self, source: _Source, diffs: _Diffs) -> None:
        """After the last chunk: count the rows the chunks did not cover."""

    def close(self) -> None:
        pass


class _DBTarget(_Target):
    """A sink table in PostgreSQL or MySQL (dialect-specific parts in the subclasses)."""

    dialect = ""

    def __init__(self) -> None:
        super().__init__()
        self.conn = None
        self.spec: TableSpec | None = None
        self.matched = 0

    # -- dialect parts
    def quote(self, name: str) -> str:
        raise NotImplementedError

    def connect(self):
        raise NotImplementedError

    def qualified(self, db: str, table: str) -> str:
        raise NotImplementedError

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        """Column name -> data type of the sink table (None: no such table)."""
        raise NotImplementedError

    def select_expr(self, name: str, data_type: str) -> str:
        return self.quote(name)

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        raise NotImplementedError

    def fetch(self, sql: str, params: list) -> list[tuple]:
        raise NotImplementedError

    # -- common
    def open(self, spec: TableSpec, result: SinkResult) -> bool:
        self.spec = spec
        self.matched = 0
        if self.conn is None:
            self.conn = self.connect()
        self.table = self.qualified(spec.db, spec.table)
        result.target = self.table
        cols = self.sink_columns(spec.db, spec.table)
        if cols is None:
            result.error = f"sink table {self.table} does not exist"
            return False
        lower = {k.lower(): k for k in cols}
        names: dict[str, str] = {}
        for c in spec.columns:
            found = c.name if c.name in cols else lower.get(c.name.lower())
            if found is None:
                result.missing_columns.append(c.name)
            else:
                names[c.name] = found
        missing_keys = [k for k in spec.key if k not in names]
        if missing_keys:
            result.error = f"sink table {self.table} lacks key column(s) {', '.join(missing_keys)}"
            return False
        # Columns the sink lacks are compared as NULL (and listed in missing_columns).
        self.qkeys = [self.quote(names[k]) for k in spec.key]
        exprs = [self.select_expr(names[c.name], cols[names[c.name]]) if c.name in names else "NULL"
                 for c in [*spec.key_specs, *spec.value_specs]]
        self.select = ", ".join(exprs)
        return True

    def _rows(self, raw: Iterable[tuple]) -> Iterator[tuple[tuple, tuple]]:
        spec = self.spec
        ks, vs, n = spec.key_specs, spec.value_specs, len(spec.key)
        for r in raw:
            yield (tuple(c.sink(v) for c, v in zip(ks, r[:n])), tuple(c.sink(v) for c, v in zip(vs, r[n:])))

    def chunk_rows(self, chunk: _Chunk) -> Iterator[tuple[tuple, tuple]]:
        spec = self.spec
        if spec.mode == "range":
            where, params = [], []
            if chunk.lo is not None:
                p, ps = _after(self.dialect, self.qkeys, spec.key_params(chunk.lo, self.dialect), ">")
                where.append(p)
                params += ps
            if chunk.hi is not None:
                p, ps = _after(self.dialect, self.qkeys, spec.key_params(chunk.hi, self.dialect), "<=")
                where.append(p)
                params += ps
            sql = f"SELECT {self.select} FROM {self.table}" + (f" WHERE {' AND '.join(where)}" if where else "")
            yield from self._rows(self.stream(sql, params))
            return
        keys = list(chunk.rows)
        for i in range(0, len(keys), LOOKUP_BATCH):
            yield from self._lookup(keys[i:i + LOOKUP_BATCH])

    def _lookup(self, keys: list[tuple]) -> Iterator[tuple[tuple, tuple]]:
        pred, params = _in_list(self.qkeys, [self.spec.key_params(k, self.dialect) for k in keys])
        yield from self._rows(self.fetch(f"SELECT {self.select} FROM {self.table} WHERE {pred}", params))

    def finish(self, source: _Source, diffs: _Diffs) -> None:
        if self.spec.mode == "range":
            return  # the chunks tiled the key space: every sink row was in one
        total = self.fetch(f"SELECT COUNT(*) FROM {self.table}", [])[0][0]
        diffs.result.sink_rows = int(total)
        if total <= self.matched:
            return
        # Rows only the sink has: its keys in its own order, looked up in the source.
        ks = self.spec.key_specs
        room = diffs.extra_room()
        sample_keys: list[tuple] = []
        batch: list[tuple] = []

        def check(batch: list[tuple]) -> None:
            held = source.lookup(batch)
            for k in batch:
                if k not in held:
                    if len(sample_keys) < room:
                        sample_keys.append(k)  # counted below, with its values
                    else:
                        diffs.result.extra += 1

        for r in self.stream(f"SELECT {', '.join(self.qkeys)} FROM {self.table}", []):
            batch.append(tuple(c.sink(v) for c, v in zip(ks, r)))
            if len(batch) >= LOOKUP_BATCH:
                check(batch)
                batch = []
        if batch:
            check(batch)
        found = {k: v for k, v in self._lookup(sample_keys)} if sample_keys else {}
        for k in sample_keys:
            diffs.extra(k, found.get(k))

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing only
                pass
            self.conn = None


class _PostgresTarget(_DBTarget):
    sink = "postgres"
    dialect = "postgres"

    def __init__(self, sink: PostgresSink) -> None:
        super().__init__()
        self.dsn = sink.dsn
        self.names = sink
        self._n = 0

    def quote(self, name: str) -> str:
        return _q_pg(name)

    def connect(self):
        import psycopg
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET extra_float_digits = 3")  # exact float text on every version
        return conn

    def qualified(self, db: str, table: str) -> str:
        return self.names.qualified_name(db, table)

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        rows = self.fetch("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                          "AND table_name = %s", [self.names.schema_name, self.names.table_name(db, table)])
        return {r[0]: r[1] for r in rows} or None

    def select_expr(self, name: str, data_type: str) -> str:
        q = self.quote(name)
        if data_type in ("jsonb", "json", "bit", "bit varying"):
            return f"{q}::text"  # jsonb 'null' stays text, bit(n) a '0101' string
        return q

    def fetch(self, sql: str, params: list) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        self._n += 1
        with self.conn.transaction(), self.conn.cursor(name=f"cdc_verify_{self._n}") as cur:
            cur.itersize = STREAM_BATCH
            cur.execute(sql, params)
            while True:
                rows = cur.fetchmany(STREAM_BATCH)
                if not rows:
                    return
                yield from rows


class _MySQLTarget(_DBTarget):
    sink = "mysql"
    dialect = "mysql"

    def __init__(self, sink: MySQLSink) -> None:
        super().__init__()
        self.args = dict(host=sink.host, port=sink.port, user=sink.user, password=sink.password)
        self.database = sink.database
        self.names = sink

    def quote(self, name: str) -> str:
        return _q_my(name)

    def connect(self):
        import pymysql
        conn = pymysql.connect(**self.args, charset="utf8mb4", autocommit=True, connect_timeout=10,
                               binary_prefix=True)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    def qualified(self, db: str, table: str) -> str:
        return self.names.qualified_name(db, table)

    def sink_columns(self, db: str, table: str) -> dict[str, str] | None:
        rows = self.fetch("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                          "AND TABLE_NAME = %s", [self.database, self.names.table_name(db, table)])
        return {r[0]: r[1].lower() for r in rows} or None

    def select_expr(self, name: str, data_type: str) -> str:
        q = self.quote(name)
        return f"CAST({q} AS DOUBLE)" if data_type == "float" else q

    def fetch(self, sql: str, params: list) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def stream(self, sql: str, params: list) -> Iterator[tuple]:
        import pymysql.cursors
        cur = self.conn.cursor(pymysql.cursors.SSCursor)
        try:
            cur.execute(sql, params or None)
            while True:
                rows = cur.fetchmany(STREAM_BATCH)
                if not rows:
                    return
                yield from rows
        finally:
            cur.close()


def replay_changelog(records: Iterable[tuple[int, dict | None, dict | None]], spec: TableSpec,
                     notes: list[str] | None = None) -> dict[tuple, tuple]:
    """Replay decoded clean-changelog records ``(partition, key record, envelope)`` in
    offset order per partition: normalised key -> normalised values.

    Memory is proportional to the table (one entry per live key).  A record whose
    position is not above the highest seen in its partition is a copy and skipped.
    """
    rows: dict[tuple, tuple] = {}
    copies = CopyFilter()
    ks, vs = spec.key_specs, spec.value_specs
    for partition, key, value in records:
        if value is None:
            continue
        pos = value.get("position") or ""
        if pos and not copies.keep(partition, pos):
            continue
        op = value.get("op")
        row = value.get("before") if op == "d" else value.get("after")
        src = key if isinstance(key, dict) and key else row
        if src is None:
            continue
        k = tuple(c.avro(src.get(c.field, src.get(c.name))) for c in ks)
        if op == "d":
            rows.pop(k, None)
        elif row is not None:
            rows[k] = tuple(c.avro(row[c.field]) if c.field in row else ABSENT for c in vs)
    if copies.copies and notes is not None:
        notes.append(f"{copies.copies} copies skipped in the changelog (position not above their partition's "
                     "highest)")
    return rows


class _ChangelogTarget(_Target):
    """The clean changelog topic, replayed into memory (proportional to the table)."""

    sink = "changelog"

    def __init__(self, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.decoder = None
        self.rows: dict[tuple, tuple] = {}
        self._chunk: tuple[int, list] | None = None

    def _decoder(self):
        if self.decoder is None:
            k = self.cfg.kafka
            registry = ConfluentRegistry(k.schema_registry_url) if k.schema_registry_url else None
            self.decoder = RecordDecoder(SchemaStore(k.bootstrap_servers, k.topic_prefix, k.client or None).get,
                                         registry)
        return self.decoder

    def _exists(self, topic: str) -> bool:
        from confluent_kafka.admin import AdminClient
        k = self.cfg.kafka
        # All topics: a metadata request naming the topic may create it (auto-creation).
        md = AdminClient({"bootstrap.servers": k.bootstrap_servers, **k.client}).list_topics(timeout=15)
        t = md.topics.get(topic)
        return t is not None and t.error is None and bool(t.partitions)

    def open(self, spec: TableSpec, result: SinkResult) -> bool:
        k = self.cfg.kafka
        topic = clean_topic(k.topic_prefix, spec.db, spec.table)
        result.target = topic
        self.rows = {}
        self._chunk = None
        if not self._exists(topic):
            result.error = f"topic {topic} does not exist"
            return False
        dec = self._decoder()

        def records() -> Iterator[tuple[int, dict | None, dict | None]]:
            for m in read_topic(k.bootstrap_servers, topic, client_config=k.client or None, timeout=300):
                yield m.partition(), dec.decode(m.key()), dec.decode(m.value())
        self.rows = replay_changelog(records(), spec, result.notes)
        result.sink_rows = len(self.rows)
        return True

    def chunk_rows(self, chunk: _Chunk) -> Iterator[tuple[tuple, tuple]]:
        if self._chunk is None or self._chunk[0] != chunk.index:
            taken = []
            for key in chunk.rows:
                values = self.rows.pop(key, None)
                if values is not None:
                    taken.append((key, values))
            self._chunk = (chunk.index, taken)
        return iter(self._chunk[1])

    def finish(self, source: _Source, diffs: _Diffs) -> None:
        for key, values in self.rows.items():
            diffs.extra(key, values)
        self.rows = {}


# =============================================================================== building specs
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


def table_spec(conn, cfg, db: str, table: str) -> TableSpec | str:
    """The :class:`TableSpec` of a source table, or why it cannot be verified."""
    tdef = read_table_def(conn, db, table)
    if tdef is None:
        return f"no such table {db}.{table}"
    qualified = f"{db}.{table}"
    excluded = set(cfg.source.exclude_columns.get(qualified, []))
    key = list(tdef.primary_key) or list(cfg.source.key_columns.get(qualified, []))
    if not key:
        return "no primary key and no source.key_columns entry (the sinks cannot hold it)"
    jsons = _json_check_columns(conn, db, table)
    names = field_names(tdef)
    cols = []
    for c in tdef.columns:
        if c.name in excluded and c.name not in key:
            continue
        kind = column_kind(c.data_type, c.name in jsons and c.data_type in ("longtext", "text", "mediumtext"))
        scale = c.scale if c.data_type in ("float", "double", "real") else None
        cols.append(ColumnSpec(c.name, kind, names[c.name], scale, c.fsp if kind == "datetime" else 0,
                               (c.bit_length or 1) if kind == "bit" else 1,
                               tuple(c.enum_values) if c.data_type in ("set", "enum") else (),
                               c.data_type if c.data_type in ("set", "enum") else ""))
    key = [tdef.column(k).name for k in key]
    return TableSpec(db, table, cols, key)


def _source_tables(conn, cfg, tables: Sequence[str] | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The tables to verify (captured ones, or those named) and names that matched nothing."""
    every = list_tables(conn)
    if not tables:
        flt = CaptureFilter(cfg.source)
        sink = cfg.sinks.mysql
        same_server = sink.enabled and (sink.host, sink.port) == (cfg.source.host, cfg.source.port)
        return [(d, t) for d, t in every if flt.captures(d, t) and not (same_server and d == sink.database)], []
    out: list[tuple[str, str]] = []
    unknown: list[str] = []
    names = {f"{d}.{t}": (d, t) for d, t in every}
    for name in tables:
        if name in names:
            hits = [names[name]]
        else:
            try:
                pat = re.compile(name)
            except re.error:
                pat = None
            hits = [dt for n, dt in names.items() if pat is not None and pat.fullmatch(n)]
        if not hits:
            unknown.append(name)
        for h in hits:
            if h not in out:
                out.append(h)
    return out, unknown


# =============================================================================== verify
def _targets(cfg, changelog: bool) -> list[_Target]:
    out: list[_Target] = []
    for _, sink in build_sinks(cfg.sinks):
        out.append(_PostgresTarget(sink) if isinstance(sink, PostgresSink) else _MySQLTarget(sink))
    if changelog:
        out.append(_ChangelogTarget(cfg))
    return out


def _verify_table(src_conn, spec: TableSpec, targets: list[_Target], chunk_size: int, samples: int,
                  report: TableReport, progress: Callable[[str], None] | None) -> None:
    source = _Source(src_conn, spec)
    live: list[tuple[_Target, _Diffs]] = []
    for t in targets:
        res = SinkResult(t.sink, "")
        report.results.append(res)
        try:
            if t.open(spec, res):
                live.append((t, _Diffs(res, spec, samples)))
        except Exception as exc:  # noqa: BLE001 - reported per target
            res.error = f"{type(exc).__name__}: {exc}"
            t.close()
    for chunk in source.chunks(chunk_size):
        report.chunks += 1
        report.source_rows += len(chunk.rows)
        if progress is not None:
            progress(f"{spec.name}: chunk {chunk.index + 1}, {report.source_rows:,} rows")
        for t, diffs in list(live):
            res = diffs.result
            try:
                got = checksum(t.chunk_rows(chunk))
                res.chunks += 1
                if isinstance(t, _DBTarget):
                    if spec.mode == "range":
                        res.sink_rows += got.count
                    else:
                        t.matched += got.count
                if (got.count, got.total) == (chunk.checksum.count, chunk.checksum.total):
                    continue
                missing, extra, differing = compare_rows(spec.value_specs, chunk.rows, t.chunk_rows(chunk))
                if not (missing or extra or differing):
                    res.notes.append(f"chunk {chunk.index}: checksums differ but the rows compare equal "
                                     "(FLOAT values within tolerance, or a change landed meanwhile)")
                    continue
                res.chunks_differing += 1
                for k, v in missing:
                    diffs.missing(k, v)
                for k, v in extra:
                    diffs.extra(k, v)
                for k, cols, a, b in differing:
                    diffs.differs(k, cols, a, b)
            except Exception as exc:  # noqa: BLE001 - reported per target
                res.error = f"{type(exc).__name__}: {exc}"
                live.remove((t, diffs))
                t.close()  # a fresh connection for the next table
    for t, diffs in live:
        try:
            t.finish(source, diffs)
        except Exception as exc:  # noqa: BLE001
            diffs.result.error = f"{type(exc).__name__}: {exc}"
            t.close()
    for res in report.results:
        res.source_rows = report.source_rows
        if res.error is not None and "does not exist" in res.error:
            res.missing = report.source_rows
        if res.missing_columns:
            res.notes.append(f"the sink lacks column(s) {', '.join(res.missing_columns)} (compared as NULL)")


def verify(cfg, tables: Sequence[str] | None = None, *, changelog: bool = False, chunk_size: int = 10_000,
           samples: int = 5, progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Compare every captured source table (or ``tables``: ``db.table`` names or regular
    expressions) with each enabled sink table and, with ``changelog``, its clean changelog
    topic.  See the module docstring for how; ``report.equal`` says whether all are equal.

    Memory: the database comparisons hold one chunk (``chunk_size`` rows) per side plus
    ``samples`` rows per kind of difference; the changelog replay holds the whole table.
    """
    if chunk_size < 1:
        raise VerifyError("chunk_size must be at least 1")
    targets = _targets(cfg, changelog)
    if not targets:
        raise VerifyError("nothing to compare with: no sink is enabled (sinks.postgres / sinks.mysql) "
                          "and the changelog was not asked for")
    t0 = time.monotonic()
    try:
        conn = read_session(cfg.source, binary_prefix=True)
    except Exception as exc:  # noqa: BLE001 - shown to the user
        raise VerifyError(f"cannot connect to the source {cfg.source.host}:{cfg.source.port} "
                          f"as {cfg.source.user}: {exc}") from None
    report = VerifyReport(targets=[t.sink for t in targets], chunk_size=chunk_size)
    try:
        todo, unknown = _source_tables(conn, cfg, tables)
        for name in unknown:
            report.tables.append(TableReport(name, error="no source table matches this name"))
        for db, table in todo:
            started = time.monotonic()
            spec = table_spec(conn, cfg, db, table)
            if isinstance(spec, str):
                tr = TableReport(f"{db}.{table}")
                if spec.startswith("no such"):
                    tr.error = spec
                else:
                    tr.skipped = spec
                report.tables.append(tr)
                continue
            tr = TableReport(spec.name, key=list(spec.key), mode=spec.mode)
            report.tables.append(tr)
            try:
                _verify_table(conn, spec, targets, chunk_size, samples, tr, progress)
            except Exception as exc:  # noqa: BLE001 - the source failed for this table
                tr.error = f"{type(exc).__name__}: {exc}"
            tr.seconds = time.monotonic() - started
    finally:
        for t in targets:
            t.close()
        conn.close()
    report.seconds = time.monotonic() - t0
    return report


# =============================================================================== output
def _show(v: Any, limit: int = 60) -> str:
    if isinstance(v, (bytes, bytearray)):
        text = "0x" + bytes(v).hex()
    else:
        text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _key_text(key: dict) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in key.items())


def print_report(report: VerifyReport, console=None) -> None:
    """The report as rich tables: one row per table and target, then the sample rows."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    console = console or Console()
    table = Table("table", "target", "rows source / sink", "chunks differing / all", "missing / extra / differing",
                  "result", title="cdc verify")
    reasons: list[str] = []  # why a table was skipped or failed: under the table, in full
    for tr in report.tables:
        if tr.skipped is not None or tr.error is not None:
            skipped = tr.skipped is not None
            table.add_row(escape(tr.table), "", "", "", "", "[yellow]skipped[/yellow]" if skipped else "[red]error[/red]")
            reasons.append(f"[bold]{escape(tr.table)}[/bold]: {'skipped' if skipped else 'error'}: "
                           f"{escape(tr.skipped if skipped else tr.error or '')}")
            continue
        for r in tr.results:
            if r.error is not None:
                result = "[red]error[/red]"
                reasons.append(f"[bold]{escape(tr.table)}[/bold] vs {r.sink}: error: {escape(r.error)}")
            elif r.equal:
                result = "[green]equal[/green]"
            else:
                result = "[red]DIFFERS[/red]"
            table.add_row(escape(tr.table), f"{r.sink} {escape(r.target)}", f"{r.source_rows:,} / {r.sink_rows:,}",
                          f"{r.chunks_differing:,} / {r.chunks:,} ({tr.mode})",
                          f"{r.missing:,} / {r.extra:,} / {r.differing:,}", result)
    console.print(table)
    for line in reasons:
        console.print(line, highlight=False)
    for tr in report.tables:
        for r in tr.results:
            lines = [f"  {escape(n)}" for n in r.notes]
            for s in r.samples:
                if s.kind == "missing":
                    lines.append(f"  missing in sink: {escape(_key_text(s.key))}")
                elif s.kind == "extra":
                    lines.append(f"  extra in sink:   {escape(_key_text(s.key))}")
                else:
                    cols = "; ".join(f"{c}: source {_show((s.source or {}).get(c))} sink {_show((s.sink or {}).get(c))}"
                                     for c in s.columns)
                    lines.append(f"  values differ:   {escape(_key_text(s.key))}: {escape(cols)}")
            if lines:
                console.print(f"[bold]{escape(tr.table)}[/bold] vs {r.sink} {escape(r.target)}:")
                for line in lines:
                    console.print(line, highlight=False)
    n_bad = sum(1 for t in report.tables if not t.equal)
    console.print(("[green]equal[/green]: every table equals its sinks" if report.equal
                   else f"[red]{n_bad} table(s) differ[/red]") + f" ({len(report.tables)} table(s), "
                  f"{report.seconds:.1f}s)")
