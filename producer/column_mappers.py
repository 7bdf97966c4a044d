"""Debezium's column mappers: masked, hashed and truncated values, source types as schema parameters.

The MySQL connector settings, with Debezium 3.x's meaning (``io.debezium.relational.mapping``),
under ``source`` in cdc.yaml; each names columns by regular expressions matched in full,
ignoring case, against ``db.table.column``:

* ``column_truncate_to_chars: {N: [regex, ...]}`` (``column.truncate.to.N.chars``): a string
  value longer than N characters (Java's: UTF-16 code units) is cut to its first N, a binary
  value longer than N bytes to its first N; only where the column's declared length is unknown
  or above N (then the schema says so: parameter ``truncateLength``). The type stays.
* ``column_mask_with_chars: {N: [regex, ...]}`` (``column.mask.with.N.chars``): the value of a
  character column (CHAR, VARCHAR, the TEXTs, ENUM, SET: Debezium's JDBC character types) is N
  asterisks, a NULL too (Debezium's mask ignores the value); parameter ``masked: true``.
* ``column_mask_hash: [{algorithm, salt, columns, strategy}]`` (``column.mask.hash.<algorithm>
  .with.salt.<salt>``, ``strategy: v2``: ``column.mask.hash.v2...``): a character column's value
  is the lower-case hex digest of the salt's UTF-8 bytes followed by the value's bytes (v1: the
  Java serialisation of the string, as ``ObjectOutputStream`` writes it; v2: its UTF-8 bytes),
  cut to the column's declared length when it has one; NULL stays NULL; ``masked: true``.
* ``column_propagate_source_type: [regex]`` (``column.propagate.source.type``),
  ``datatype_propagate_source_type: [regex]`` (``datatype.propagate.source.type``, matched
  against ``db.table.TYPE``): the schema parameters ``__debezium.source.column.type``,
  ``.length``, ``.scale`` (when the type has them) and ``.name``.

The parameters are the Avro type's ``connect.parameters`` (the Connect schema's ``parameters``
in debezium-json); a geometry column's are on its field, its named record type being shared.

One mapper per column, the first that matches in Debezium's order: truncations, masks,
propagations (by column, by type), hashes v1, hashes v2. The schema parameters are on the
value's fields only (not the key's), as Debezium's. Masking, hashing or truncating a key
column is refused at start (``producer/column_controls.py``): the sinks key rows by their value.

Pure: :class:`ColumnMappers` picks a column's :class:`ColumnMapping`; the mapping gives the
converter (wrapping the type table's one, ``producer/events/values.py``) and the parameters.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from contract.type_table import family_of
from producer.errors import ColumnControlsError

TRUNCATE = "source.column_truncate_to_chars"
MASK = "source.column_mask_with_chars"
HASH = "source.column_mask_hash"
PROPAGATE = "source.column_propagate_source_type"
PROPAGATE_TYPES = "source.datatype_propagate_source_type"

#: Debezium's JDBC character types, as our families (MaskStrings applies to them only).
CHARACTER_FAMILIES = frozenset({"string", "enum", "set"})

TYPE_PARAMETER = "__debezium.source.column.type"
LENGTH_PARAMETER = "__debezium.source.column.length"
SCALE_PARAMETER = "__debezium.source.column.scale"
NAME_PARAMETER = "__debezium.source.column.name"

#: Java's MessageDigest names (case-insensitive) and hashlib's.
DIGESTS = {"MD5": "md5", "SHA": "sha1", "SHA1": "sha1", "SHA-1": "sha1", "SHA-224": "sha224",
           "SHA-256": "sha256", "SHA-384": "sha384", "SHA-512": "sha512", "SHA-512/224": "sha512_224",
           "SHA-512/256": "sha512_256", "SHA3-224": "sha3_224", "SHA3-256": "sha3_256",
           "SHA3-384": "sha3_384", "SHA3-512": "sha3_512"}

_PAREN = re.compile(r"^\s*[a-z ]+?\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


# -- the value transforms (pure) ------------------------------------------------------------

def java_length(s: str) -> int:
    """Java's ``String.length()``: UTF-16 code units."""
    return len(s) if s.isascii() else len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def truncate_value(v: Any, n: int) -> Any:
    """Debezium's TruncatingValueConverter: a str to its first ``n`` UTF-16 units (a character
    outside the BMP that would be cut in half is left out), bytes to its first ``n`` bytes."""
    if isinstance(v, str):
        if len(v) <= n and (v.isascii() or java_length(v) <= n):
            return v
        if v.isascii():
            return v[:n]
        units, out = 0, []
        for ch in v:
            units += 2 if ord(ch) > 0xFFFF else 1
            if units > n:
                break
            out.append(ch)
        return "".join(out)
    if isinstance(v, (bytes, bytearray)) and len(v) > n:
        return bytes(v[:n])
    return v


def modified_utf8(s: str) -> bytes:
    """Java's modified UTF-8 (``DataOutput.writeUTF``): U+0000 as C0 80, characters outside
    the BMP as their two surrogates of three bytes each."""
    if s.isascii() and "\0" not in s:
        return s.encode()
    out = bytearray()
    for ch in s:
        o = ord(ch)
        if o == 0:
            out += b"\xc0\x80"
        elif o < 0x10000:
            out += ch.encode("utf-8", "surrogatepass")
        else:
            o -= 0x10000
            out += chr(0xD800 + (o >> 10)).encode("utf-8", "surrogatepass")
            out += chr(0xDC00 + (o & 0x3FF)).encode("utf-8", "surrogatepass")
    return bytes(out)


def java_serialized(s: str) -> bytes:
    """A string as ``new ObjectOutputStream(out).writeObject(s)`` writes it: the stream header,
    then TC_STRING with a 2-byte length (TC_LONGSTRING with 8 above 65,535 bytes)."""
    body = modified_utf8(s)
    if len(body) <= 0xFFFF:
        return b"\xac\xed\x00\x05\x74" + len(body).to_bytes(2, "big") + body
    return b"\xac\xed\x00\x05\x7c" + len(body).to_bytes(8, "big") + body


def hash_value(v: Any, algorithm: str, salt: str, v2: bool = False) -> str | None:
    """Debezium's HashValueConverter: the lower-case hex digest of the salt's bytes then the
    value's (v1: Java-serialised, v2: ``toString()``'s UTF-8 bytes); None stays None."""
    if v is None:
        return None
    h = hashlib.new(DIGESTS[algorithm.upper()])
    h.update(salt.encode("utf-8"))
    text = v if isinstance(v, str) else str(v)
    h.update(text.encode("utf-8") if v2 else java_serialized(text))
    return h.hexdigest()


# -- a column's declared shape as Debezium's DDL parser gives it ----------------------------

#: MariaDB's display widths of the integers declared without one (its SHOW CREATE TABLE, which
#: Debezium parses, writes ``int(11)``; the binlog's table map has none).
_DISPLAY_WIDTHS = {"tinyint": (4, 3), "smallint": (6, 5), "mediumint": (9, 8), "int": (11, 10), "integer": (11, 10),
                   "bigint": (20, 20), "year": (4, 4)}


def declared_length(col: Any) -> int:
    """Debezium's ``Column.length()`` of ``col``: the first number of its type as SHOW CREATE
    TABLE writes it (VARCHAR(20): 20 characters, DECIMAL(10,2): 10, DATETIME(3): 3, INT: its
    display width, MariaDB's), 1 for an ENUM, the members and their commas for a SET (2n-1), -1
    when the type has none (TEXT, DOUBLE)."""
    if col.data_type == "enum":
        return 1
    if col.data_type == "set":
        return max(0, 2 * len(col.enum_values) - 1)
    m = _PAREN.match(col.column_type.lower())
    if m is None:
        widths = _DISPLAY_WIDTHS.get(col.data_type)
        return -1 if widths is None else widths[bool(getattr(col, "unsigned", False))]
    if col.data_type in ("char", "varchar") and col.char_max_length is not None:
        return col.char_max_length  # (a table map's type has the length in bytes)
    return int(m.group(1))


def declared_scale(col: Any) -> int | None:
    """Debezium's ``Column.scale()``: the second number of the type (DECIMAL(10,2): 2)."""
    if col.data_type in ("enum", "set"):
        return None
    m = _PAREN.match(col.column_type.lower())
    return int(m.group(2)) if m and m.group(2) is not None else None


def type_name(col: Any) -> str:
    """Debezium's ``Column.typeName()`` upper-cased: ``VARCHAR``, ``INT UNSIGNED``."""
    name = col.data_type.upper()
    if getattr(col, "unsigned", False):
        name += " UNSIGNED"
    if getattr(col, "zerofill", False):
        name += " ZEROFILL"
    return name


# -- one column's mapping -------------------------------------------------------------------

@dataclass(frozen=True)
class ColumnMapping:
    """What one rule does to a column: ``kind`` ``truncate`` (``length``), ``mask`` (``mask``),
    ``hash`` (``algorithm``, ``salt``, ``v2``) or ``propagate``; ``setting`` names the rule."""

    kind: str
    setting: str
    length: int = 0
    mask: str = ""
    algorithm: str = ""
    salt: str = ""
    v2: bool = False

    def definition(self) -> dict:
        """Its part of the table's fingerprint (a schema per mapping)."""
        return {"kind": self.kind, "length": self.length, "mask": self.mask, "algorithm": self.algorithm,
                "salt": self.salt, "v2": self.v2}

    def changes_values(self, col: Any) -> bool:
        """Whether the column's values are not the type table's (the fast encoders convert it by its converter)."""
        if self.kind == "truncate":  # (a BIT's bytes are a byte[] to Debezium, which it does not cut)
            return self._truncation_possible(col) and family_of(col.data_type) != "bit"
        return self.kind in ("mask", "hash") and family_of(col.data_type) in CHARACTER_FAMILIES

    def _truncation_possible(self, col: Any) -> bool:
        n = declared_length(col)
        return n < 0 or n > self.length

    def describe(self) -> str:
        """For ``cdc verify``'s report: ``masked (source.column_mask_with_chars)``."""
        word = {"truncate": f"truncated to {self.length}", "mask": "masked",
                "hash": f"hashed ({self.algorithm}{', v2' if self.v2 else ''})", "propagate": "source type"}[self.kind]
        return f"{word} ({self.setting})"

    def transform(self, col: Any) -> Callable[[Any], Any] | None:
        """The function applied to the type table's value of ``col`` (None: none)."""
        if not self.changes_values(col):
            return None
        if self.kind == "truncate":
            return lambda v, n=self.length: truncate_value(v, n)
        if self.kind == "mask":
            return lambda v, m=self.mask: m
        cut = declared_length(col)
        algorithm, salt, v2 = self.algorithm, self.salt, self.v2

        def hashed(v: Any) -> Any:
            h = hash_value(v, algorithm, salt, v2)
            return h if h is None or cut <= 0 else h[:cut]
        return hashed

    def wrap(self, convert: Callable[[Any], Any], col: Any) -> Callable[[Any], Any]:
        """``convert`` followed by the mapping (a new function: none of ``convert``'s attributes,
        so no encoder takes it for a pass-through)."""
        then = self.transform(col)
        if then is None:
            return convert

        def mapped(v: Any) -> Any:
            return then(convert(v))
        return mapped

    def parameters(self, col: Any) -> dict[str, str]:
        """The Connect schema parameters the mapping adds to the value field of ``col``."""
        if self.kind in ("mask", "hash"):
            return {"masked": "true"}
        if self.kind == "truncate":
            return {"truncateLength": str(self.length)} if self._truncation_possible(col) else {}
        out = {TYPE_PARAMETER: type_name(col)}
        length, scale = declared_length(col), declared_scale(col)
        if length != -1:
            out[LENGTH_PARAMETER] = str(length)
        if scale is not None:
            out[SCALE_PARAMETER] = str(scale)
        out[NAME_PARAMETER] = col.name
        return out


# -- the rules of a source ------------------------------------------------------------------

def _patterns(value: Any, setting: str) -> tuple[re.Pattern[str], ...]:
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value or ())
    out = []
    for p in items:
        if not p:
            continue
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as exc:
            raise ColumnControlsError(f"{setting}: {p!r} is not a valid regular expression: {exc}") from None
    return tuple(out)


def _length(n: Any, setting: str) -> int:
    text = str(n).strip()
    if not text.isdigit():
        debezium = "column.truncate.to.N.chars" if setting == TRUNCATE else "column.mask.with.N.chars"
        raise ColumnControlsError(f"{setting}: {n!r} is not a number of characters (an integer, 0 or more, "
                                  f"as N of Debezium's {debezium})")
    return int(text)


@dataclass(frozen=True)
class _Rule:
    patterns: tuple[re.Pattern[str], ...]
    mapping: ColumnMapping
    by_type: bool = False

    def matches(self, db: str, table: str, col: Any) -> bool:
        name = f"{db}.{table}.{type_name(col) if self.by_type else col.name}"
        return any(p.fullmatch(name) for p in self.patterns)


class ColumnMappers:
    """The mapper rules of a source, in Debezium's order (see the module's text)."""

    def __init__(self, *, truncate: Mapping[Any, Any] | None = None, mask: Mapping[Any, Any] | None = None,
                 hashes: Sequence[Mapping[str, Any]] = (), propagate: Any = (), propagate_types: Any = ()) -> None:
        rules: list[_Rule] = []
        for n, cols in (truncate or {}).items():
            mapping = ColumnMapping("truncate", TRUNCATE, length=_length(n, TRUNCATE))
            rules.append(_Rule(_patterns(cols, TRUNCATE), mapping))
        for n, cols in (mask or {}).items():
            rules.append(_Rule(_patterns(cols, MASK), ColumnMapping("mask", MASK, mask="*" * _length(n, MASK))))
        rules.append(_Rule(_patterns(propagate, PROPAGATE), ColumnMapping("propagate", PROPAGATE)))
        rules.append(_Rule(_patterns(propagate_types, PROPAGATE_TYPES), ColumnMapping("propagate", PROPAGATE_TYPES),
                           by_type=True))
        entries = [self._hash_rule(e, i) for i, e in enumerate(hashes)]
        rules += [r for r in entries if not r.mapping.v2] + [r for r in entries if r.mapping.v2]
        self.rules = tuple(r for r in rules if r.patterns)
        self.active = bool(self.rules)

    @staticmethod
    def _hash_rule(entry: Mapping[str, Any], i: int) -> _Rule:
        where = f"{HASH}[{i}]"
        unknown = set(entry) - {"algorithm", "salt", "columns", "strategy"}
        if unknown:
            raise ColumnControlsError(f"{where}: unknown key(s) {sorted(unknown)} (keys: algorithm, salt, columns, "
                                      "strategy)")
        algorithm = str(entry.get("algorithm", ""))
        if algorithm.upper() not in DIGESTS:
            raise ColumnControlsError(f"{where}.algorithm: {algorithm!r} is not a hash algorithm Debezium's "
                                      f"MessageDigest and we both know ({', '.join(DIGESTS)})")
        strategy = str(entry.get("strategy", "v1")).lower()
        if strategy not in ("v1", "v2"):
            raise ColumnControlsError(f"{where}.strategy: {strategy!r} is not v1 or v2 (Debezium's "
                                      "column.mask.hash.v2... is v2)")
        patterns = _patterns(entry.get("columns", ()), f"{where}.columns")
        if not patterns:
            raise ColumnControlsError(f"{where}.columns: no column regular expression")
        return _Rule(patterns, ColumnMapping("hash", HASH, algorithm=algorithm.upper(),
                                             salt=str(entry.get("salt", "")), v2=strategy == "v2"))

    @classmethod
    def from_config(cls, source: Any) -> ColumnMappers:
        """The mappers of a ``source`` section (:class:`common.config.SourceConfig`)."""
        return cls(truncate=getattr(source, "column_truncate_to_chars", None),
                   mask=getattr(source, "column_mask_with_chars", None),
                   hashes=getattr(source, "column_mask_hash", ()),
                   propagate=getattr(source, "column_propagate_source_type", ()),
                   propagate_types=getattr(source, "datatype_propagate_source_type", ()))

    def mapping_for(self, db: str, table: str, col: Any) -> ColumnMapping | None:
        """The mapping of ``db.table``'s column ``col`` (its first rule), or None."""
        for rule in self.rules:
            if rule.matches(db, table, col):
                return rule.mapping
        return None

    def describe(self) -> list[str]:
        """The rules, for a report."""
        return [f"{r.mapping.describe()}: {', '.join(p.pattern for p in r.patterns)}" for r in self.rules]


NO_MAPPERS = ColumnMappers()


def mapped_columns(columns: Iterable[Any]) -> list[tuple[str, ColumnMapping]]:
    """``(column, mapping)`` of the columns whose values a mapping changes."""
    return [(c.name, c.mapping) for c in columns if c.mapping is not None and c.mapping.changes_values(c)]


__all__ = ["ColumnMapping", "ColumnMappers", "NO_MAPPERS", "declared_length", "hash_value", "java_serialized",
           "mapped_columns", "truncate_value"]
