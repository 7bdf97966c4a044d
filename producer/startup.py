"""Where a producer starts: its stored position, or ``producer.startup`` when none is stored;
what it does when the server no longer has the stored position's binlog (purged): stop, or
stream from the current position and snapshot again (``producer.startup.when_needed``);
and what it does when Kafka lost its history (a position kept in the state directory that
Kafka does not hold): stop, or recover as told (``producer.lost_history`` / ``--recover``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from common.config import CDCConfig
from contract.gtid import GtidSet
from contract.position import BinlogPosition
from producer.binlog import server as src
from producer.binlog.reader import ResumePoint
from producer.errors import BinlogPurgedError, KafkaHistoryLost, ProducerStopped
from producer.kafka_writer import settle_last_transaction
from producer.offset_store import LocalOffsetCopy, OffsetStore, lost_history
from producer.snapshot_mode import snapshot_mode

log = logging.getLogger(__name__)

#: The offset record's note that the schemas topic holds this producer's writer schemas
#: (producer.session_start: an empty schemas topic then stops the producer, or is rebuilt).
SCHEMAS_KEPT = "schemas"

#: How a producer recovers when Kafka lost its history (producer.lost_history).
RECOVERY_MODES = ("stop", "resume", "snapshot")


@dataclass
class ProducerState:
    """Where a run starts: ``resume``, the last change already out, and what is stored with
    the position (the running snapshot's state, the initial snapshot's progress)."""

    resume: ResumePoint
    stored_last: BinlogPosition | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the GTIDs passed at ``resume`` (as far as known: MySQL reports none for a file/pos)
    gtids: GtidSet = field(default_factory=GtidSet)
    #: whether ``resume`` is a stored position (False: the start's own, stored at the first commit,
    #: so a start that saw no change still resumes there next time, as Debezium's offsets do)
    stored: bool = True

    @property
    def file_base(self) -> int:
        """Added to binlog file indexes in positions (:func:`producer.binlog.reader.based`)."""
        return int(self.extra.get("file_base", 0))


class Startup:
    def __init__(self, cfg: CDCConfig, store: OffsetStore, local: LocalOffsetCopy) -> None:
        self.cfg = cfg
        self.store = store
        self.local = local
        #: ``snapshot.mode`` (Debezium's) or ``producer.startup``: what a start does
        self.mode = snapshot_mode(cfg)
        #: whether this process planned its start (a reconnect after a lost connection plans again:
        #: ``snapshot.mode: always`` snapshots once a process, not once a reconnect)
        self.planned = False

    def plan(self, conn, info: src.ServerInfo, stored: dict | None, recover: str | None = None) -> ProducerState:
        """The start of this run, given the position ``stored`` in Kafka (``recover``: the
        recovery asked for on the command line), with the GTIDs passed there and the server
        it is on recorded (so a later start on another server resumes by GTID)."""
        state = self._plan(conn, info, stored, recover)
        if self.mode.snapshot_every_start and not self.planned and state.extra.get("initial_snapshot") != "pending":
            # (a snapshot of the last start still running is continued: its tables are not added twice)
            log.info("%s: snapshotting every captured table on this start too, streaming from %s", self.mode.setting,
                     state.resume.gtid_set or f"{state.resume.file}:{state.resume.pos}")
            state.extra["initial_snapshot"] = "pending"
        self.planned = True
        flavor = info.flavor
        known = state.extra.get("gtid")
        if known and state.extra.get("server_id") in (None, info.server_id):  # ("": none known)
            state.gtids = GtidSet.parse(known, flavor)
        elif state.resume.gtid_set:
            state.gtids = GtidSet.parse(state.resume.gtid_set, flavor)
        elif state.resume.file:
            state.gtids = src.gtids_at(conn, info, state.resume.file, state.resume.pos) or GtidSet(flavor)
        else:
            state.gtids = GtidSet(flavor)
        state.extra["server_id"] = info.server_id
        state.extra["gtid"] = str(state.gtids)
        return state

    def _failover(self, conn, info: src.ServerInfo, stored: dict) -> ProducerState:
        """The stored position was taken on another server (``server_id`` differs): resume
        from its GTID set, if this server's history holds it, with positions above every
        one written before (a new file base)."""
        flavor = info.flavor
        was = stored.get("server_id")
        text = stored.get("gtid") or ""
        if not text:
            raise ProducerStopped(
                f"the stored position {stored['resume']['file']}:{stored['resume']['pos']} was taken on server_id "
                f"{was}, but this server is server_id {info.server_id} and no GTID set was stored with the position: "
                "a binlog file/pos of one server means nothing on another. Point the producer back at the server "
                "it was reading, or start anew (cdc produce --reset-offsets, startup.mode=initial)")
        mine = src.executed_gtids(conn, info.is_mariadb)
        wanted = GtidSet.parse(text, flavor)
        if not mine.covers(wanted):
            raise ProducerStopped(
                f"failover refused: the stored position was taken on server_id {was} at GTID set {wanted}, but this "
                f"server (server_id {info.server_id}) has executed {mine or 'no GTIDs'}: its history does not hold "
                f"the stored position ({'; '.join(mine.missing(wanted))}). Is it of the same replication topology, "
                "and has it caught up? Point the producer at a server that has applied every stored transaction")
        r = stored["resume"]
        base = int(stored.get("file_base", 0))
        last = BinlogPosition.decode(r["last"]) if r.get("last") else None
        top = max(last.file_index if last else 0, BinlogPosition.from_binlog(r["file"], int(r["pos"])).file_index + base)
        extra = {k: v for k, v in stored.items() if k not in ("resume", "ts_ms")}
        extra["file_base"] = top + 1
        gone = self._purged_gtids(conn, info, wanted)
        if gone:
            what = (f"failover: this server (server_id {info.server_id}) holds the stored GTID set {wanted} in its "
                    f"history, but its binlogs no longer hold the transactions right after it ({gone}): they were "
                    "purged here")
            if self.mode.startup.when_needed == "snapshot":
                log.error("%s. %s: streaming from the current position and snapshotting every captured table again "
                          "(delete-missing)", what, self._when_needed_setting())
                return _from_current(conn, _snapshot_everything(extra))
            raise BinlogPurgedError(f"{what}. Point the producer at a server of the topology that still has them, or "
                                    f"{self.mode.purged_hint()} to snapshot every captured table again")
        log.warning("the stored position was taken on server_id %s; this server is server_id %s: failover, resuming "
                    "after GTID set %s (positions continue above binlog file #%d)", was, info.server_id, wanted, top)
        return ProducerState(ResumePoint("", 4, gtid_set=str(wanted)), None, extra)

    @staticmethod
    def _purged_gtids(conn, info: src.ServerInfo, wanted: GtidSet) -> str:
        """The domains whose transactions after ``wanted`` this server's binlogs no longer
        begin with (its oldest binlog starts further on), as text; "" when none (MariaDB:
        ``BINLOG_GTID_POS`` of the oldest binlog's start; MySQL: ``@@gtid_purged``, the
        transactions no binlog holds any more, reaching past ``wanted`` for a source)."""
        if not info.is_mariadb:
            purged = src.purged_gtids(conn)
            return ", ".join(
                f"source {uuid}: purged up to {purged.item(uuid)}, the stored set "
                f"{'reaches ' + wanted.item(uuid) if uuid in wanted.last else 'has none of it'}"
                for uuid, (_, n) in sorted(purged.last.items()) if n > wanted.last.get(uuid, ("", 0))[1])
        start = src.gtids_at(conn, info, src.earliest_position(conn)[0], 4)
        if start is None:
            return ""
        return ", ".join(f"domain {d}: the oldest binlog starts after {start.item(d)}"
                         for d, (_, n) in sorted(wanted.last.items()) if d in start.last and start.last[d][1] > n)

    def _plan(self, conn, info: src.ServerInfo, stored: dict | None, recover: str | None) -> ProducerState:
        if stored and stored.get("resume") and stored.get("server_id") not in (None, info.server_id):
            return self._failover(conn, info, stored)
        local = self.local.load()
        problem = lost_history(stored, local)
        if problem is not None and self.cfg.kafka.transactions and \
                settle_last_transaction(self.cfg.kafka, self.cfg.producer.name):
            stored = self.store.load()  # (its last transaction's records visible now, if Kafka has them)
            problem = lost_history(stored, local)
            if problem is None:
                log.info("producer %r: its last transaction was not complete in Kafka yet (a node stopped with it); "
                         "it is now", self.cfg.producer.name)
        if problem is not None:
            return self._recover(conn, problem, local, recover)
        if local is not None and recover and recover != "stop":
            log.info("--recover %s: Kafka holds this producer's history, nothing to recover", recover)
        if stored and stored.get("resume"):
            r = stored["resume"]
            carried = {k: v for k, v in stored.items() if k not in ("resume", "ts_ms")}
            if r.get("gtid_set") and not r.get("file"):  # started by GTID; no event read before it stopped
                log.info("resuming from stored GTID set %s", r["gtid_set"])
                return ProducerState(ResumePoint("", 4, gtid_set=r["gtid_set"]), None, carried)
            try:
                src.check_position_available(conn, r["file"])
            except BinlogPurgedError as exc:
                return self._purged(conn, r, carried, exc)
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            log.info("resuming from stored position %s:%s (last change %s)", r["file"], r["pos"], r.get("last"))
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last, carried)
        st = self.mode.startup
        extra: dict[str, Any] = {}
        if st.mode in ("latest", "initial"):
            file, pos = src.current_position(conn)
            if st.mode == "initial":
                extra["initial_snapshot"] = "pending"
                log.info("%s: streaming from %s:%s; the captured tables' snapshot is handed to the snapshot "
                         "coordinator", self._initial_setting(), file, pos)
            resume = ResumePoint(file, pos)
        elif st.mode == "earliest":
            file, pos = src.earliest_position(conn)
            resume = ResumePoint(file, pos)
        elif st.mode == "position":
            if not st.file or st.pos is None:
                raise ProducerStopped("startup.mode=position needs startup.file and startup.pos")
            src.check_position_available(conn, st.file)
            resume = ResumePoint(st.file, int(st.pos))
        elif st.mode == "gtid":
            if not st.gtid_set:
                raise ProducerStopped("startup.mode=gtid needs startup.gtid_set")
            resume = ResumePoint("", 4, gtid_set=src.validate_gtid_set(st.gtid_set, info))
        elif st.mode == "timestamp":
            if not st.timestamp:
                raise ProducerStopped("startup.mode=timestamp needs startup.timestamp")
            file, pos = src.earliest_position(conn)
            resume = ResumePoint(file, pos, skip_to_timestamp=src.parse_timestamp(st.timestamp))
        else:  # pragma: no cover - validated by the config model
            raise ProducerStopped(f"unknown startup mode {st.mode}")
        log.info("no stored position: starting at %s (startup.mode=%s%s)",
                 resume.gtid_set or f"{resume.file}:{resume.pos}", st.mode,
                 f", from {self.mode.setting}" if self.mode.debezium else "")
        return ProducerState(resume, None, extra, stored=False)

    def _purged(self, conn, r: dict, extra: dict[str, Any], exc: BinlogPurgedError) -> ProducerState:
        """The stored position ``r`` is in a binlog file the server no longer has: stop, or
        (``producer.startup.when_needed: snapshot``) stream from the current position and
        snapshot every captured table again."""
        kept = f"{r['file']}:{r['pos']}" + (f", last change {r['last']}" if r.get("last") else "")
        what = (f"the binlog file {r['file']} holding the stored position of producer '{self.cfg.producer.name}' "
                f"({kept}) is no longer on the server {self.cfg.source.host}:{self.cfg.source.port}; its oldest "
                f"binlog is {exc.oldest or 'none'}. The changes logged between the stored position and "
                f"{exc.oldest or 'the current position'} were purged before the producer read them: they are "
                f"missing from Kafka")
        if self.mode.startup.when_needed == "snapshot":
            state = _from_current(conn, _snapshot_everything(extra))
            log.error("%s. %s: streaming from the current position %s:%s and snapshotting every captured table "
                      "again (delete-missing: the sinks also drop rows deleted meanwhile)", what,
                      self._when_needed_setting(), state.resume.file, state.resume.pos)
            return state
        raise BinlogPurgedError(
            f"{what}.\nTo carry on, {self.mode.purged_hint()}: the producer then streams from the current position and "
            f"snapshots every captured table again (delete-missing: the sinks also drop rows deleted meanwhile). "
            f"Or forget the position ('cdc produce --reset-offsets') and start as producer.startup.mode says. To "
            f"avoid this, keep binlogs longer than a producer may be down (binlog_expire_logs_seconds / "
            f"expire_logs_days)", r["file"], exc.oldest)

    def _when_needed_setting(self) -> str:
        return self.mode.setting if self.mode.debezium else "producer.startup.when_needed=snapshot"

    def _initial_setting(self) -> str:
        return self.mode.setting if self.mode.debezium else "startup mode 'initial'"

    def _recover(self, conn, problem: str, local: dict, recover: str | None) -> ProducerState:
        """Kafka lost this producer's history (``problem``): stop, or recover as asked."""
        r = local["resume"]
        requested = (local.get("recover") or {}).get("mode")
        mode = recover or requested or self.cfg.producer.lost_history
        kept = f"{r['file']}:{r['pos']}" + (f" (last change {r['last']})" if r.get("last") else "")
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(local.get("ts_ms", 0) / 1000))
        what = (f"Kafka lost the history of producer '{self.cfg.producer.name}': {problem} in "
                f"{self.store.topic} on {self.cfg.kafka.bootstrap_servers}, but the position it committed last, "
                f"{kept} at {when}, is kept in {self.local.path}. The broker was emptied or the topic deleted, or "
                f"this is another Kafka cluster. The change events written before that position are gone from "
                f"Kafka: consumers that had not read them lost them")
        try:
            src.check_position_available(conn, r["file"])
            in_binlog = True
        except BinlogPurgedError:
            in_binlog = False
        if mode == "stop":
            resume_hint = (f"re-publish from {r['file']}:{r['pos']} (the binlog still has it); changes before it that "
                           "a consumer had not read stay lost to it" if in_binlog else
                           f"not possible: the binlog no longer has {r['file']}")
            raise KafkaHistoryLost(
                f"{what}.\nRecover with one of:\n"
                f"  cdc produce --recover resume     {resume_hint}\n"
                f"  cdc produce --recover snapshot   stream from {'there' if in_binlog else 'the current position'} "
                f"and snapshot every captured table again (delete-missing: the sinks also drop rows deleted "
                f"meanwhile), so the sinks and the clean changelog are whole again\n"
                f"(producer.lost_history: resume|snapshot does the same on every start; cdc produce --reset-offsets "
                f"forgets both positions and starts as producer.startup says)", local, self.local.path)
        # (the schemas topic went with the rest of Kafka's history: the records re-published from
        # here publish their writer schemas again, as on a first start)
        extra = {k: v for k, v in local.items() if k not in ("resume", "ts_ms", "recover", SCHEMAS_KEPT)}
        if mode == "resume":
            if not in_binlog:
                raise ProducerStopped(f"{what}.\nRecovery by resume is not possible: the binlog no longer has "
                                      f"{r['file']}. Use: cdc produce --recover snapshot")
            log.error("%s. Recovering (%s): re-publishing from %s; changes before it that a consumer had not read "
                      "stay lost to it (the merge job stops and names them)", what, mode, kept)
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last, extra)
        # snapshot: stream on from the kept position when the binlog has it, and read every
        # captured table again; delete-missing removes from the sinks what was deleted meanwhile
        extra = _snapshot_everything(extra)
        if in_binlog:
            log.error("%s. Recovering (%s): streaming from %s and snapshotting every captured table again "
                      "(delete-missing)", what, mode, kept)
            last = BinlogPosition.decode(r["last"]) if r.get("last") else None
            return ProducerState(ResumePoint(r["file"], r["pos"], r.get("last")), last, extra)
        state = _from_current(conn, extra)
        log.error("%s. The binlog no longer has %s either. Recovering (%s): streaming from the current position "
                  "%s:%s and snapshotting every captured table again (delete-missing)", what, r["file"], mode,
                  state.resume.file, state.resume.pos)
        return state


def _snapshot_everything(extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` of a start that snapshots every captured table again with delete-missing
    (a running snapshot's state is dropped: its windows lie in the history that is gone)."""
    extra.pop("snapshot", None)
    extra["initial_snapshot"] = "pending"
    extra["initial_delete_missing"] = True
    return extra


def _from_current(conn, extra: dict[str, Any]) -> ProducerState:
    """A start at the binlog's current end instead of the stored position: the GTID set
    stored with that position does not hold here (:meth:`Startup.plan` reads the one of the
    current position instead)."""
    extra.pop("gtid", None)
    file, pos = src.current_position(conn)
    return ProducerState(ResumePoint(file, pos), None, extra)
