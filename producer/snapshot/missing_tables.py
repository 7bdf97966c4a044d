"""Tables of a running snapshot that the server does not show when their next chunk is due.

The snapshot looks up a table's definition on the live server before each chunk, while the
stream may not have read the binlog that far: a table missing there is usually a DROP or a
RENAME that the stream has yet to reach (and when it does, the snapshot stops reading that
table, ``SnapshotCoordinator.tables_gone``; a DROP DATABASE, each of its tables), or a
moment of gh-ost's two-step cut-over (``ALTER TABLE t RENAME _t_del``, then ``ALTER TABLE
_t_gho RENAME t``), after which the table is there again, altered, and its snapshot must go
on.  So a missing table is waited for; only one missing for :data:`GRACE_S` (a stream far
behind the server) is taken for dropped.  Pure: the caller passes the clock.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: How long a table may be missing before its snapshot takes it for dropped.
GRACE_S = 30.0
#: How often a missing table is looked up again (the snapshot's other chunks wait as long).
RECHECK_S = 0.2


class MissingTables:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float]] = {}  # table -> (missing since, last seen missing)

    def waits(self, table: str, now: float) -> bool:
        """``table`` is missing at ``now``: True while it is waited for, False once it has
        been missing for :data:`GRACE_S` (then it is forgotten).  An absence not looked at for
        :data:`GRACE_S` (its snapshot stopped by the stream, paused, or done) is a new one when
        seen again."""
        since, last = self._seen.get(table, (now, now))
        if now - last >= GRACE_S:
            since = now
        if since == now:
            log.info("%s is missing: waiting up to %.0fs for the binlog to say why (a drop, a rename) or for "
                     "it to be back (a two-step cut-over's moment)", table, GRACE_S)
        if now - since < GRACE_S:
            self._seen[table] = (since, now)
            return True
        del self._seen[table]
        return False

    def found(self, table: str) -> None:
        """``table`` is there (again)."""
        if self._seen.pop(table, None) is not None:
            log.info("%s is back: its snapshot goes on", table)
