"""The verify report: :class:`VerifyReport` -> :class:`TableReport` (one source table) ->
:class:`SinkResult` (one table against one target) -> :class:`RowDiff` (a sample row), each
with ``to_dict()`` for JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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
    #: Checksum (:mod:`cdc.verify.checksum`, hex) of the target's rows read chunk by chunk.
    checksum: str = ""

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
                "samples": [s.to_dict() for s in self.samples], "notes": list(self.notes), "error": self.error,
                "checksum": self.checksum}


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
    #: A route's target ``db.table`` when the table is one of its shards (``table`` is then
    #: ``source/db.table``) or the route's own line (its rows of no shard).
    target: str | None = None
    #: Checksum (hex) of the source table's rows: its chunks' summed.
    checksum: str = ""
    #: A shard's values in the columns its route's column mapping fills (``{"region": "eu"}``).
    mapped: dict[str, str] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        if self.skipped is not None:
            return True
        return self.error is None and all(r.equal for r in self.results)

    def to_dict(self) -> dict:
        return {"table": self.table, "target": self.target, "key": list(self.key), "mode": self.mode, "equal": self.equal,
                "source_rows": self.source_rows, "chunks": self.chunks, "error": self.error,
                "skipped": self.skipped, "seconds": round(self.seconds, 3), "checksum": self.checksum,
                "mapped": dict(self.mapped), "results": [r.to_dict() for r in self.results]}


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
