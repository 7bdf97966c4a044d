"""The signal actions, as Debezium has them: one small class per signal type.

A signal row (``contract.signals``) is acted on by the action of its type, given the
:class:`~producer.snapshot.coordinator.SnapshotCoordinator`.  A signal that cannot be acted
on raises :class:`~contract.errors.BadSignal`; the coordinator reports it (a SKIPPED
notification and a log line) and the producer keeps streaming.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Mapping, Protocol

from contract.errors import BadSignal
from contract.notifications import Notification
from contract.signals import Signal
from producer.errors import ColumnControlsError, FilterRefused
from producer.snapshot.filter import validate_filter
from producer.snapshot.select_overrides import SETTING as OVERRIDES, OverrideError, combined
from producer.snapshot.state import TableJob
from producer.snapshot.table_reader import list_tables, read_table_def
from producer.table_schema import TableDef

log = logging.getLogger(__name__)


class SnapshotControl(Protocol):
    """What the actions use of the coordinator (:class:`~producer.snapshot.coordinator.SnapshotCoordinator`)."""

    snapshot_id: str | None
    jobs: list[TableJob]
    paused: bool
    captures: Callable[[str, str], bool]
    notify: Callable[[Notification], None]

    def conn(self) -> Any: ...

    def add_tables(self, tables: list[str], signal_id: str, **options: Any) -> None: ...

    def stop_tables(self, drop: set[str]) -> None: ...

    blocking: Any  # producer.snapshot.blocking.BlockingQueue
    resolve: Callable[[TableDef], TableDef]
    overrides: Mapping[str, str] | None


class SignalAction(Protocol):
    def run(self, coord: SnapshotControl, sig: Signal) -> None: ...


def resolve_tables(conn, captures: Callable[[str, str], bool], sig: Signal) -> tuple[list[str], set[str]]:
    """The captured tables a signal names, and those of them named only by a regular
    expression (not by their own name)."""
    known = [f"{d}.{t}" for d, t in list_tables(conn) if captures(d, t)]
    out: list[str] = []
    for pattern in sig.data_collections:
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise BadSignal(sig.id, f"data collection {pattern!r} is not a valid regular expression: {exc}") from None
        hits = [t for t in known if t == pattern or rx.fullmatch(t)]
        if not hits:
            raise BadSignal(sig.id, f"table {pattern!r} is unknown or not captured")
        out += [h for h in hits if h not in out]
    named = set(sig.data_collections)
    return out, {t for t in out if t not in named}


def jobs_kept(running: list[TableJob], added: list[TableJob], *, after_ddl: bool,
              delete_missing: bool) -> list[TableJob]:
    """The running snapshot's jobs that stay when ``added`` join it: all of them, but those of
    a table in ``added`` when the producer adds it after DDL (what was read of it may predate
    the DDL: read again from its start, keeping delete-missing when the old job had it), or
    when ``added`` reads with delete-missing what a plain job was reading."""
    tables = {j.table for j in added}
    if after_ddl:
        for old in running:
            if old.table in tables and old.delete_missing:
                for j in added:
                    if j.table == old.table:
                        j.delete_missing = True
        return [j for j in running if j.table not in tables]
    if delete_missing:
        return [j for j in running if j.table not in tables or j.delete_missing]
    return list(running)


def table_jobs(conn, tables: list[str], signal_id: str, *, resolve: Callable[[TableDef], TableDef] | None = None,
               conditions: dict[str, str] | None = None,
               surrogate_key: str | None = None, skippable: set[str] | frozenset = frozenset(),
               delete_missing: bool = False, keyless: bool = False,
               overrides: Mapping[str, str] | None = None) -> tuple[list[TableJob], list[tuple[str, str]]]:
    """The snapshot jobs of ``tables`` (``db.table``), and those skipped with the reason.

    A table that cannot be snapshotted (no primary key and no surrogate key, the surrogate
    key not one of its columns) refuses the whole signal, except one in ``skippable``
    (matched by a regular expression, as Debezium does): that one alone is skipped.
    ``keyless``: a table without a key is snapshotted too (a blocking snapshot reads it whole,
    :mod:`producer.snapshot.blocking`; an incremental one needs a key to cut chunks).  The key
    is the events' (``resolve``: the table as the column controls give it, its primary key
    from ``source.message_key_columns`` where set); a filter may name any column, and ANDs in the
    table's ``overrides`` condition (:mod:`producer.snapshot.select_overrides`)."""
    conds = conditions or {}
    unknown = set(conds) - set(tables)
    if unknown:
        raise BadSignal(signal_id, f"additional-conditions name tables not in the snapshot: {sorted(unknown)}")
    jobs = []
    skipped: list[tuple[str, str]] = []
    for name in tables:
        db, table = name.split(".", 1)
        tdef = read_table_def(conn, db, table)
        if tdef is None:
            raise BadSignal(signal_id, f"table {name} does not exist")
        problem = None
        try:
            captured = resolve(tdef) if resolve is not None else tdef
        except ColumnControlsError as exc:
            raise BadSignal(signal_id, f"table {name}: {exc}") from None
        keys = [surrogate_key] if surrogate_key else captured.primary_key
        if not keys and not keyless:
            problem = f"table {name} has no primary key: give a 'surrogate-key'"
        else:
            for k in keys:
                if k not in tdef.column_names:
                    problem = f"surrogate key {k!r} is not a column of {name}"
                elif k not in captured.column_names:
                    problem = f"surrogate key {k!r} is a column of {name} its events leave out (source.column_*_list)"
        if problem is not None:
            if name not in skippable:
                raise BadSignal(signal_id, problem)
            skipped.append((name, problem))
            continue
        condition = None
        try:
            text = combined(name, overrides or {}, conds.get(name), delete_missing)
        except OverrideError as exc:
            raise BadSignal(signal_id, str(exc)) from None
        if text is not None:
            try:
                condition = validate_filter(text, tdef.column_names)
            except FilterRefused as exc:
                setting = f" (with {OVERRIDES}[{name!r}])" if name in (overrides or {}) else ""
                raise BadSignal(signal_id, f"filter for {name}{setting} refused: {exc}") from None
        jobs.append(TableJob(name, condition, surrogate_key, delete_missing=delete_missing, keyless=not keys))
    if not jobs:
        raise BadSignal(signal_id, "; ".join(reason for _, reason in skipped) or "no table to snapshot")
    return jobs, skipped


class ExecuteSnapshot:
    """``execute-snapshot``: snapshot the tables, or add them to the running snapshot; a
    blocking one is queued for the session (:mod:`producer.snapshot.blocking`)."""

    def run(self, coord: SnapshotControl, sig: Signal) -> None:
        if sig.blocking:  # Debezium's blocking snapshot: the session pauses the stream for it
            coord.blocking.request(coord.conn(), coord.captures, sig, resolve=coord.resolve, overrides=coord.overrides,
                                   skipped=lambda t, why: coord.notify(Notification("SKIPPED", sig.id,
                                                                                    {"table": t, "reason": why})))
            return
        tables, matched = resolve_tables(coord.conn(), coord.captures, sig)
        coord.add_tables(tables, sig.id, conditions=sig.conditions, surrogate_key=sig.surrogate_key,
                         skippable=matched, delete_missing=sig.delete_missing)


class StopSnapshot:
    """``stop-snapshot``: drop the tables it names (all when it names none)."""

    def run(self, coord: SnapshotControl, sig: Signal) -> None:
        if coord.snapshot_id is None:
            return
        wanted = sig.data_collections
        coord.stop_tables({j.table for j in coord.jobs
                           if not wanted or any(j.table == w or re.fullmatch(w, j.table) for w in wanted)})


class PauseSnapshot:
    """``pause-snapshot``: chunks in flight finish, no new chunk starts."""

    def run(self, coord: SnapshotControl, sig: Signal) -> None:  # noqa: ARG002
        if coord.snapshot_id is not None and not coord.paused:
            coord.paused = True
            coord.notify(Notification("PAUSED", coord.snapshot_id))
            log.info("snapshot %s paused", coord.snapshot_id)


class ResumeSnapshot:
    """``resume-snapshot``: go on from where it paused."""

    def run(self, coord: SnapshotControl, sig: Signal) -> None:  # noqa: ARG002
        if coord.snapshot_id is not None and coord.paused:
            coord.paused = False
            coord.notify(Notification("RESUMED", coord.snapshot_id))
            log.info("snapshot %s resumed", coord.snapshot_id)


class LogMessage:
    """``log``: a log line and a LOG notification."""

    def run(self, coord: SnapshotControl, sig: Signal) -> None:
        log.info("signal %s: %s", sig.id, sig.data.get("message", ""))
        coord.notify(Notification("LOG", sig.id, {"message": str(sig.data.get("message", ""))}))


#: The action of each user signal type.
ACTIONS: dict[str, SignalAction] = {
    "execute-snapshot": ExecuteSnapshot(), "stop-snapshot": StopSnapshot(), "pause-snapshot": PauseSnapshot(),
    "resume-snapshot": ResumeSnapshot(), "log": LogMessage(),
}
