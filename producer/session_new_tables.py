"""The stream session's snapshots of a start: the start's own (``startup.mode: initial``,
``snapshot.mode``, a recovery: :class:`~producer.session_start.SessionStart`) and the newly
added tables' (``snapshot.new_tables``, :mod:`producer.new_tables`).

The capture lists a run reads under are stored with every offset record. A start whose lists
match tables the stored lists did not (the lists changed, the producer restarted) snapshots
those tables, and only those, by itself: incrementally (chunk windows while the stream runs)
or blocking (the stream pauses at the start position), as ``snapshot.new_tables`` says; or
logs a WARNING naming them (``off``). The new lists go into the same offset record as the
snapshot's state, so a producer killed before that record is stored finds the old lists and
starts the snapshot again, and one killed after resumes the stored snapshot as any other.
"""

from __future__ import annotations

import logging
import re
import time

from common.sql.sessions import read_session
from contract.errors import BadSignal
from contract.notifications import Notification
from producer.new_tables import CAPTURE_LISTS, capture_lists, newly_captured
from producer.session_services import SessionServices
from producer.session_start import SessionStart
from producer.snapshot.table_reader import list_tables

log = logging.getLogger(__name__)

#: Why the producer snapshots a newly added table (the STARTED notification's ``reason``).
REASON = "newly captured: the capture lists match it since this start (snapshot.new_tables)"


class SessionNewTables:
    """What a :class:`~producer.session.StreamSession` (``session``) snapshots as it starts:
    the start's own snapshot (``start``'s) or the newly added tables'."""

    def __init__(self, session: SessionServices, start: SessionStart) -> None:
        self.session, self.start = session, start

    def start_snapshots(self) -> None:
        """The start's snapshot of every captured table, if it takes one; else the newly added
        tables' (a snapshot of every table holds them already)."""
        every_table = self.session.state.extra.get("initial_snapshot") == "pending"
        if every_table:
            self.start.initial_snapshot()
        self._start_new_tables(every_table)

    def _start_new_tables(self, every_table: bool) -> None:
        source, coord = self.session.cfg.source, self.session.coord
        stored, lists = self.session.state.extra.get(CAPTURE_LISTS), capture_lists(source)
        self.session.state.extra[CAPTURE_LISTS] = lists
        if stored == lists:
            return
        self.session.batch_events += 1  # (the next commit stores the lists, even when nothing else is written)
        if every_table or not stored:
            return
        conn = read_session(source)
        try:
            tables = newly_captured(list_tables(conn), stored, source)
        finally:
            conn.close()
        if self.session.outbox is not None:  # (its rows are events: routed when inserted, never by a snapshot)
            tables = [t for t in tables if not self.session.outbox.routes(*t.split(".", 1))]
        mode = self.session.cfg.snapshot.new_tables
        if not tables:
            log.info("the capture lists changed since the stored position; no existing table newly matches them")
            return
        if mode == "off":
            log.warning("%d table(s) match the capture lists since this start and are not snapshotted "
                        "(snapshot.new_tables: off): %s. Their rows written before now reach Kafka only by a "
                        "snapshot: cdc snapshot %s", len(tables), ", ".join(tables), " ".join(tables))
            return
        snapshot_id = f"new-tables-{int(time.time() * 1000)}"
        log.info("%d table(s) match the capture lists since this start: %s; snapshotting them (%s, "
                 "snapshot.new_tables: %s)", len(tables), ", ".join(tables), snapshot_id, mode)
        if mode == "blocking":
            coord.blocking.startup(coord.conn(), tables, snapshot_id, resolve=coord.resolve, overrides=coord.overrides,
                                   first_start=False,
                                   skipped=lambda t, why: self._skipped(snapshot_id, [t] if t else tables, why))
            return
        try:  # (a table that cannot be snapshotted, no primary key, is skipped with a SKIPPED notification)
            coord.add_tables(tables, snapshot_id, skippable=set(tables), reason=REASON)
        except BadSignal as exc:  # none of them can be (no key, gone since listed): each named, the stream goes on
            log.warning("the newly added tables %s are not snapshotted: %s", ", ".join(tables), exc.reason)
            self._skipped(snapshot_id, tables, exc.reason)

    def _skipped(self, snapshot_id: str, tables: list[str], reason: str) -> None:
        """A SKIPPED notification per table of ``tables`` left out, with the part of ``reason``
        that names it (the reasons of several tables come joined by "; ")."""
        for table in tables:
            named = re.compile(rf"(?<![\w.]){re.escape(table)}(?![\w.])")
            why = [r for r in reason.split("; ") if named.search(r)] or [reason]
            self.session.notify(Notification("SKIPPED", snapshot_id, {"table": table, "reason": "; ".join(why)}))
