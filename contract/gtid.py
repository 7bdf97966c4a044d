"""GTID sets: how far a server's (or the binlog reader's) history goes, per GTID source.

MariaDB writes a GTID as ``domain-server-sequence`` (``0-1-42``) and reports positions
as one GTID per replication domain (``@@gtid_binlog_pos``: ``0-1-42,1-2-7``); MySQL
writes ``source_uuid:transaction_number`` and reports sets of intervals
(``@@gtid_executed``: ``3e11fa47-...:1-5:7-9,...``).  Inside one binlog the sequence of a
domain (MariaDB, strict mode) or the transaction numbers of a source uuid (MySQL with
commit order preserved) only grow, so how far a history goes is, per source, the highest
number it holds.  :class:`GtidSet` keeps exactly that: ``source -> (last GTID, number)``.

* :meth:`GtidSet.covers`: every source of the other set is here, at least as far;
* :meth:`GtidSet.add`: one transaction's GTID passed;
* ``str()``: the set in the server's own syntax, usable to start replication from
  (MariaDB's ``slave_connect_state``; for MySQL the ``1-n`` prefix of each source).

Pure: no I/O, so it is tested exhaustively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from contract.errors import GtidError

__all__ = ["GtidSet", "GtidError"]

_MARIADB_ONE = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_ONE = re.compile(r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
                        r"((?::(?:\d+(?:-\d+)?|[A-Za-z_][A-Za-z0-9_]{0,31}))+)$")
_TAG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


@dataclass
class GtidSet:
    """Per GTID source (MariaDB domain id, MySQL source uuid), the furthest transaction.

    ``last`` maps a source to ``(server_id, number)`` for MariaDB (the server that wrote
    the domain's last GTID is part of its text) and to ``("", number)`` for MySQL."""

    flavor: str = "mariadb"  # "mariadb" | "mysql"
    last: dict[str, tuple[str, int]] = field(default_factory=dict)

    # ------------------------------------------------------------------ parsing
    @classmethod
    def parse(cls, text: str | None, flavor: str | None = None) -> "GtidSet":
        """A set from the server's text (empty text: the empty set).  ``flavor``: when
        known; else told from the text (an empty set is then MariaDB's)."""
        items = [p.strip() for p in (text or "").replace("\n", "").split(",") if p.strip()]
        if flavor is None:
            flavor = "mysql" if items and ":" in items[0] else "mariadb"
        gs = cls(flavor)
        for item in items:
            gs._merge_text(item)
        return gs

    def _merge_text(self, item: str) -> None:
        if self.flavor == "mariadb":
            m = _MARIADB_ONE.match(item)
            if not m:
                raise GtidError(f"not a MariaDB GTID (domain-server-sequence, e.g. 0-1-42): {item!r}")
            self._raise(m.group(1), m.group(2), int(m.group(3)))
            return
        m = _MYSQL_ONE.match(item)
        if not m:
            raise GtidError(f"not a MySQL GTID set element (uuid[:tag]:interval[:interval...]): {item!r}")
        # A tag (MySQL 8.3+: ``uuid:1-14:batch:1-3``) starts the intervals of another source,
        # ``uuid:tag`` (tags compare case-insensitively: the server writes them in lower case).
        uuid = source = m.group(1).lower()
        for part in m.group(2).strip(":").split(":"):
            if _TAG.fullmatch(part):
                source = f"{uuid}:{part.lower()}"
                continue
            lo, _, hi = part.partition("-")
            self._raise(source, "", int(hi or lo))

    def _raise(self, source: str, server: str, number: int) -> None:
        have = self.last.get(source)
        if have is None or number > have[1]:
            self.last[source] = (server, number)

    # ------------------------------------------------------------------ growing
    def add(self, gtid: str | None) -> None:
        """One transaction's GTID (``0-1-42`` / ``uuid:42``) has passed."""
        if gtid:
            if self.flavor == "mariadb":  # (once per transaction: the plain form without the regex)
                parts = gtid.split("-")
                if len(parts) == 3 and parts[0].isdecimal() and parts[1].isdecimal() and parts[2].isdecimal():
                    self._raise(parts[0], parts[1], int(parts[2]))
                    return
            self._merge_text(gtid.strip())

    def copy(self) -> "GtidSet":
        return GtidSet(self.flavor, dict(self.last))

    # ------------------------------------------------------------------ comparing
    def covers(self, other: "GtidSet") -> bool:
        """Whether this history reaches at least as far as ``other`` in every source."""
        return not self.missing(other)

    def missing(self, other: "GtidSet") -> list[str]:
        """The sources of ``other`` this set does not reach, as text (``0: 1-17 < 0-1-42``)."""
        out = []
        for source, (server, number) in sorted(other.last.items()):
            have = self.last.get(source)
            if have is None or have[1] < number:
                mine = "nothing" if have is None else self._text(source, *have)
                out.append(f"{source}: {mine} < {self._text(source, server, number)}")
        return out

    def item(self, source: str) -> str:
        """The furthest GTID of ``source`` in this set, as text."""
        return self._text(source, *self.last[source])

    def __bool__(self) -> bool:
        return bool(self.last)

    def _text(self, source: str, server: str, number: int) -> str:
        return f"{source}-{server}-{number}" if self.flavor == "mariadb" else f"{source}:1-{number}"

    def __str__(self) -> str:
        return ",".join(self._text(s, *v) for s, v in sorted(self.last.items()))
