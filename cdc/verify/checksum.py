"""Chunk checksums: the row count and the sum modulo 2**128 of the 128-bit BLAKE2b of each
normalised row's ``repr`` (order-independent; unlike XOR it does not cancel duplicates)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable

_MASK = (1 << 128) - 1


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

    def include(self, other: "Checksum") -> None:
        """Add ``other``'s rows (a chunk's into the table's)."""
        self.count += other.count
        self.total = (self.total + other.total) & _MASK

    @property
    def hex(self) -> str:
        return f"{self.total:032x}"


def checksum(rows: Iterable[tuple[tuple, tuple]]) -> Checksum:
    c = Checksum()
    for key, values in rows:
        c.add(key, values)
    return c
