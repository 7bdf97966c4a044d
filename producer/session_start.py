"""The stream session's start, as ``snapshot.mode`` (or ``producer.startup``) says
(:mod:`producer.snapshot_mode`): the captured tables' snapshot of a start that takes one, the
schema snapshot (every captured table's writer schemas published to ``<prefix>._schemas``),
a lost schemas topic told or rebuilt, and the end of a run that does not stream
(``initial_only``, ``configuration_based`` without ``start_stream``).
"""

from __future__ import annotations

import logging
import time

from common.sql.sessions import read_session
from contract.errors import BadSignal
from contract.notifications import Notification
from contract.topics import schemas_topic
from producer.errors import ProducerStopped
from producer.session_services import SessionServices
from producer.snapshot.table_reader import list_tables, read_table_def
from producer.startup import SCHEMAS_KEPT

log = logging.getLogger(__name__)


class SessionStart:
    """What a :class:`~producer.session.StreamSession` (``session``) does before and while it
    streams for the start's snapshot mode."""

    def __init__(self, session: SessionServices) -> None:
        self.session = session

    def _captured_tables(self) -> list[str]:
        conn = read_session(self.session.cfg.source)
        try:
            return [f"{d}.{t}" for d, t in list_tables(conn) if self.session.app.filter.captures(d, t)]
        finally:
            conn.close()

    def initial_snapshot(self) -> None:
        """``startup.mode: initial``: every captured table, by the snapshot coordinator, while
        the stream runs; ``snapshot.mode`` (Debezium's) that snapshots the data: a blocking
        snapshot of them at the start position, as Debezium's initial snapshot (the recovery
        snapshot after purged binlogs stays incremental: it deletes what it does not find)."""
        session = self.session
        coord, state, mode = session.coord, session.state, session.app.startup.mode
        tables = self._captured_tables()
        state.extra["initial_snapshot"] = "started"
        delete_missing = bool(state.extra.pop("initial_delete_missing", False))
        if not tables:
            log.info("%s: no captured table exists yet", mode.setting)
            return
        if mode.debezium and not delete_missing:
            if any(r.snapshot_id.startswith("initial-") for r in coord.blocking.requests):
                return  # (a killed start's own is taken again: not a second one)
            coord.blocking.startup(coord.conn(), tables, f"initial-{int(time.time())}", resolve=coord.resolve,
                                   overrides=coord.overrides,
                                   skipped=lambda t, why: session.notify(Notification(
                                       "SKIPPED", "initial", {"table": t, "reason": why})),
                                   first_start=not state.stored)
            return
        try:
            # A table that cannot be snapshotted (no primary key) is skipped with a
            # notification; the others are snapshotted.
            coord.add_tables(tables, f"{'recovery' if delete_missing else 'initial'}-{int(time.time())}",
                             skippable=set(tables), delete_missing=delete_missing)
        except BadSignal as exc:
            raise ProducerStopped(f"the initial snapshot cannot start: {exc.reason}") from None

    def schemas(self) -> None:
        """The schema snapshot a start takes (``snapshot.mode: recovery``, or
        ``configuration_based`` with ``snapshot_schema``), and the check that the schemas topic
        still holds what this producer published (a schema error stops it, unless the mode
        rebuilds it)."""
        session = self.session
        mode, enc, topic = session.app.startup.mode, session.encoder, schemas_topic(session.prefix)
        lost = enc.keeps_schemas and bool(session.state.extra.get(SCHEMAS_KEPT)) and enc.schemas_known == 0
        if lost and not mode.schemas_on_loss:
            raise ProducerStopped(
                f"the schemas topic {topic} is empty, but producer '{session.cfg.producer.name}' "
                f"published writer schemas there before (its stored position says so): the topic was deleted or "
                f"emptied, and consumers cannot decode the Avro records that use them. To rebuild it from the source "
                f"tables' definitions, {mode.schemas_hint()}: the producer then publishes every captured table's "
                "schemas and streams on from its stored position (records written before a DDL of their table stay "
                "undecodable: their schema is not the table's today)")
        if not (mode.schemas_every_start or lost):
            return
        if enc.fmt != "avro":
            log.info("%s: records of format %s carry no writer schema of the schemas topic: no schema to publish",
                     mode.setting, enc.fmt)
            return
        n = enc.publish_schemas(self._table_schemas())
        session.batch_events += n
        log.log(logging.ERROR if lost else logging.INFO, "%s%s: published %d writer schema(s) of the captured tables "
                "to %s", mode.setting, " (the schemas topic was lost)" if lost else "", n, topic)

    def _table_schemas(self) -> list[tuple[dict | None, str, str]]:
        conn = read_session(self.session.cfg.source)
        out: list[tuple[dict | None, str, str]] = []
        try:
            for name in self._captured_tables():
                tdef = read_table_def(conn, *name.split(".", 1))
                if tdef is None:
                    continue
                te = self.session.builder.read_table_events(tdef)
                out += [(te.key_schema, te.topic, "key"), (te.value_schema, te.topic, "value")]
        finally:
            conn.close()
        return out

    def schemas_kept(self) -> None:
        """Note in the offset record that the schemas topic holds this producer's schemas."""
        if self.session.encoder.keeps_schemas and self.session.encoder.schemas_known:
            self.session.state.extra[SCHEMAS_KEPT] = True

    def streaming_done(self) -> bool:
        """A mode that does not stream (``initial_only``): whether its snapshot is done, so the
        run ends (no snapshot under way, none to start)."""
        session = self.session
        mode = session.app.startup.mode
        if mode.stream or session.state.extra.get("initial_snapshot") == "pending" or session.coord.busy \
                or session.coord.blocking.requests:
            return False
        log.info("%s: the snapshot is done; not streaming (the producer stops)", mode.setting)
        return True
