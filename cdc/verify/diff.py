"""Row-by-row comparison of a chunk whose checksums differ (:func:`compare_rows`), and the
counts and samples of one table against one target (:class:`Diffs`).

Rows are compared as sets keyed by the normalised key: Python never relies on two
databases sorting alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from cdc.verify.report import RowDiff, SinkResult
from cdc.verify.spec import ColumnSpec, TableSpec


@dataclass
class Diffs:
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
