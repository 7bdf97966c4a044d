"""The stream session's schema changes: a DDL statement of the binlog, followed.

A statement on a captured table is published as a schema change record; TRUNCATE, DROP
TABLE and RENAME TABLE also as table markers the merge job applies to the sinks; the
snapshot coordinator learns of the change (a chunk read across it is read again), and a DDL
that rewrites rows without logging them (``rows_rewritten``) starts a snapshot of the table.
gh-ost's and pt-osc's helper tables are not the table's (``producer.online_schema_change``):
their CREATE and ALTER are noted, and their cut-over RENAME is the table altered in place.
"""

from __future__ import annotations

import logging
import time

from common.sql.ddl import ddl_target, dropped_tables, renamed_tables, rows_rewritten
from common.sql.sessions import read_session
from contract.envelope import source_block
from contract.errors import BadSignal
from contract.markers import DROP_TABLE, RENAME_TABLE, TRUNCATE, table_ddl_marker
from contract.position import BinlogPosition
from contract.records import schema_change_record
from producer.binlog.reader import SchemaChange
from producer.online_schema_change import CutOver
from producer.session_services import SessionServices
from producer.snapshot.table_reader import read_table_def

log = logging.getLogger(__name__)


class SessionSchemaChanges:
    """What a :class:`~producer.session.StreamSession` (``session``: it writes and counts the
    records) does on a schema change of the binlog: the schema change record, the table
    markers (TRUNCATE, DROP and RENAME TABLE), the snapshot coordinator told, and the
    snapshot a rewriting DDL needs."""

    def __init__(self, session: SessionServices) -> None:
        self.session = session

    def follow(self, item: SchemaChange) -> None:
        session = self.session
        verb, db, table = ddl_target(item.ddl, item.db)
        if not verb or db is None:
            return
        renames = [((odb or db, otable), (ndb or db, ntable)) for (odb, otable), (ndb, ntable)
                   in (renamed_tables(item.ddl, item.db) if verb in ("rename", "alter") else [])]
        drops = dropped_tables(item.ddl, item.db) if verb == "drop" and table is not None else []
        session.coord.on_schema_change(db, table)
        for (odb, otable), _ in renames:
            session.coord.on_schema_change(odb, otable)
        captures = session.app.filter.captures
        osc = session.app.online_schema_changes if session.app.filter.follow_online_schema_changes else None
        if osc is not None and table is not None and not renames and verb in ("create", "alter") \
                and osc.helper_ddl(verb, db, table, item.ddl):
            return  # gh-ost's or pt-osc's copy of a captured table: not the table's statement
        resulting = [n for _, n in renames] if renames else [(db, table)]
        cut_overs, renames = osc.cut_overs(renames) if osc is not None and renames else ([], renames)
        captured = (session.app.filter.database_captured(db) if table is None else
                    any(captures(d or db, t) for d, t in
                        [(db, table), *drops, *(n for pair in renames for n in pair),
                         *((c.db, c.table) for c in cut_overs)]))
        if not captured:
            return
        session.encoder.schemas_changed()
        gone = [f"{d or db}.{t}" for d, t in drops] + [f"{d}.{t}" for (d, t), _ in renames]
        if verb == "drop" and table is None:  # DROP DATABASE: its tables the running snapshot reads
            gone += [j.table for j in session.coord.jobs if j.db_table[0] == db]
        if gone:  # a running snapshot of them stops (their chunks could only fail)
            session.coord.tables_gone(set(gone))
        if verb != "drop" and table is not None:  # (the names the statement leaves: a cut-over's table)
            self._blocking_read_crossed(resulting, item)
        if verb and session.app.filter.ignored(db, table, verb):
            log.info("ignoring %s of %s.%s (source.ignore_events)", verb.upper(), db, table)
            return
        source = source_block(session.cfg.producer.name, session.info.server_id, db=db, table=table,
                              ts_ms=item.ts_ms, file=item.file, pos=item.pos, gtid=item.gtid)
        session.writer.produce(*schema_change_record(session.prefix, source, db=db, ddl=item.ddl,
                                                     position=item.position.encode(), encode=session.encoder.encode))
        session.batch_events += 1
        if table is None:
            return
        if verb == "truncate":
            self._truncate(db, table, item, source)
        elif drops:
            for d, t in drops:
                if captures(d or db, t):
                    session.write_marker(table_ddl_marker(DROP_TABLE, d or db, t, item.position))
        elif renames or cut_overs:
            self._renames(renames, cut_overs, item)
        else:
            reason = rows_rewritten(verb, item.ddl)
            if reason:
                self._snapshot_after_ddl(db, table, reason)

    def _renames(self, renames: list, cut_overs: list[CutOver], item: SchemaChange) -> None:
        """RENAME TABLE: a RENAME_TABLE marker for each captured table renamed and a snapshot of
        each captured table renamed into place; a cut-over of gh-ost or pt-osc is the table
        altered in place (its copy's ALTER tells whether its rows must be read again)."""
        captures = self.session.app.filter.captures
        for (odb, otable), (ndb, ntable) in renames:
            if captures(odb, otable):
                self.session.write_marker(table_ddl_marker(RENAME_TABLE, odb, otable, item.position, to_db=ndb,
                                                           to_table=ntable))
            if captures(ndb, ntable):  # its rows are there without row events
                self._snapshot_after_ddl(ndb, ntable, f"the table renamed from {odb}.{otable}")
        for cut in cut_overs:
            if not captures(cut.db, cut.table):
                continue
            reason = cut.snapshot_reason()
            log.info("%s's cut-over of %s.%s at %s: the table's new schema from its next event; %s", cut.tool,
                     cut.db, cut.table, item.position.encode(),
                     f"snapshotting it ({reason})" if reason else "its copy changed no row's values: no snapshot")
            if reason:
                self._snapshot_after_ddl(cut.db, cut.table, reason)

    def _blocking_read_crossed(self, tables: list[tuple[str, str]], item: SchemaChange) -> None:
        """DDL that leaves ``tables`` (a cut-over's table, an ALTERed one) inside the span of a
        blocking snapshot's read of them (:class:`~producer.snapshot.blocking.ReadSpans`): the
        read may have found another table under the name, as it was at the pause point (gh-ost's
        copy, still being filled), so the table is snapshotted again, rows the sinks hold and it
        lacks deleted."""
        at = BinlogPosition.from_binlog(item.file, item.pos)
        spans = self.session.coord.blocking.spans
        for db, table in tables:
            if self.session.app.filter.captures(db, table) and spans.crossed(f"{db}.{table}", (at.file_index, at.pos)):
                self._snapshot_after_ddl(db, table, f"DDL at {item.position.encode()} came while a blocking snapshot "
                                         "read the table (it may have read another table under its name)",
                                         delete_missing=True)

    def _truncate(self, db: str, table: str, item: SchemaChange, source: dict) -> None:
        """TRUNCATE TABLE: Debezium's truncate event (``producer.emit_truncate``) and a
        TRUNCATE marker, by which the sinks delete every row written before it."""
        session = self.session
        routed = session.outbox is not None and session.outbox.routes(db, table)  # (no change topic: producer.outbox)
        settings = session.cfg.producer
        if settings.emit_truncate and "t" not in settings.skipped_operations and not routed:
            conn = read_session(session.cfg.source)
            try:
                table_def = read_table_def(conn, db, table)
            finally:
                conn.close()
            if table_def is not None:  # (gone already: a later DDL dropped it)
                session.writer.produce(*session.builder.truncate_record(table_def, source, item.position.encode(),
                                                                        session.encoder))
                session.batch_events += 1
        session.write_marker(table_ddl_marker(TRUNCATE, db, table, item.position))
        log.info("TRUNCATE of %s.%s at %s: the sinks delete its rows written before it", db, table,
                 item.position.encode())

    def _snapshot_after_ddl(self, db: str, table: str, reason: str, *, delete_missing: bool = False) -> None:
        """DDL changed rows of ``db.table`` without row events: snapshot the table (unless
        ``snapshot.after_ddl`` is off), so the sinks get the rows as they are now."""
        if not self.session.cfg.snapshot.after_ddl:
            log.warning("%s on %s.%s changed its rows without row events; snapshot.after_ddl is off: the sinks "
                        "get them when they change again, or by a snapshot (cdc snapshot)", reason, db, table)
            return
        name = f"{db}.{table}"
        outbox = self.session.outbox
        if outbox is not None and outbox.routes(db, table):  # (its rows are events, routed once)
            log.info("%s on the outbox table %s: not snapshotted (its rows would be routed again)", reason, name)
            return
        log.info("%s on %s: the table's rows changed without row events; snapshotting it", reason, name)
        try:
            self.session.coord.add_tables([name], f"ddl-{int(time.time() * 1000)}", skippable={name}, reason=reason,
                                          delete_missing=delete_missing)
        except BadSignal as exc:  # gone already (dropped by a later DDL): nothing to snapshot
            log.warning("cannot snapshot %s after DDL: %s", name, exc.reason)
