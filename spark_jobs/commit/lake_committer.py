"""The lake tables' committer: lake commits on a cadence of their own, off the micro-batch's
path, one committer per table (docs/lake.md, "Commit cadence").

A micro-batch stages each lake table's changes (the merge tasks' parts, after the DBLog rule),
writes the table's staged batch into the sink's journal
(:class:`~spark_jobs.sinks.lake_journal.LakeJournal`) and hands it to the sink's
:class:`LakeCommitter`; then it is done.  The committer's thread merges every batch staged for
a table since its last commit in **one** commit (per key the change with the highest position
wins across them, deletes included) every ``commit_interval_s``, sooner when ``commit_rows``
changes wait for a table.  Each commit carries the committer's application id and a commit
number, and its intent (the merge queries' last batches it holds) is written before it, so
that after a crash every staged batch is committed once.

One committer per lake sink and process: the queries of every source of a merge job (routes,
shards into one table) hand their batches to the same committer, which commits a table's
batches of every source together; no query commits a lake table itself, so none fails on
another's commit.  The driver's table operations (TRUNCATE, delete-missing, DROP, RENAME) run
after the table's staged batches are committed (:func:`settled`), as they did after the
batch's commit.

Staging is bounded: while ``max_staged_rows`` changes wait uncommitted in a sink's tables (a
slow or unavailable lake), :meth:`LakeCommitter.stage` holds the stream back, with a warning
in the log, the status file and the metrics.  ``commit_interval_s: 0`` commits every batch on
its path, as before the cadence.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from spark_jobs.errors import LakeCommitConflict, SinkError, SinkUnavailable
from spark_jobs.sinks.lake_sink import BATCHES_HELD, LakeSink
from spark_jobs.sinks.lake_journal import (
    LakeJournal,
    StagedBatch,
    commit_marks,
    commit_runs,
    covered,
    same_shape,
    split_committed,
)

log = logging.getLogger(__name__)

__all__ = ["LakeCommitter", "LakeCommitters", "settled", "committer_app", "REQUEST_FILE", "STATUS_FILE"]

#: ``cdc lake commit`` asks the running merge job for a commit now by writing this file.
REQUEST_FILE = "lake-commit-request"
#: The committers' figures, for ``cdc status`` and ``cdc lake commit``.
STATUS_FILE = "lake-status.json"
#: How long the committer's thread sleeps between looks (a request, a table over its rows).
TICK_S = 0.25


#: The interpreter's switch interval while a lake commit runs (CPython's default: 5 ms).  The
#: committers run Python (the lake libraries' bookkeeping) beside the stream's batch thread, whose
#: every answer from PostgreSQL or Kafka needs the GIL back: it waits up to the switch interval
#: each time (docs/lake.md, "The stream during a lake commit").
COMMIT_SWITCH_INTERVAL_S = 0.0005


class SwitchInterval:
    """The switch interval lowered while any committer of the process commits, restored after
    the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._saved = 0.0

    @contextmanager
    def lowered(self, seconds: float) -> Iterator[None]:
        with self._lock:
            if self._inside == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(min(seconds, self._saved))
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    sys.setswitchinterval(self._saved)


_SWITCH_INTERVAL = SwitchInterval()


def committer_app(owner: str) -> str:
    """The application id of the lake committer's commits (one per pipeline and table)."""
    return f"{owner}/lake"


@dataclass
class TableCommits:
    """One lake table's state in its committer: the batches waiting, the table's last commit
    number and marks (per merge query's application id, its last batch the table holds)."""

    db: str
    table: str
    pending: list[StagedBatch] = field(default_factory=list)
    loaded: bool = False
    commit: int | None = None
    marks: dict[str, int] = field(default_factory=dict)
    legacy_checked: set = field(default_factory=set)
    commits: int = 0
    last_commit_at: float | None = None
    position: str = ""

    def rows(self) -> int:
        return sum(b.rows for b in self.pending)

    def oldest(self) -> float | None:
        return min((b.staged_at for b in self.pending), default=None)


class CommitRequests:
    """``cdc lake commit``'s request file, watched: due once each time it is written after the
    watch began (one written before is not this committer's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = self._written()

    def _written(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    def due(self) -> bool:
        """Whether the file was written since the last look."""
        at = self._written()
        if at > self._seen:
            self._seen = at
            return True
        return False


class LakeCommitter:
    """The committer of one lake sink's tables (``name``: its section, ``sink``: the driver's
    sink object, ``section``: its settings, ``owner``: the pipeline)."""

    def __init__(self, name: str, sink: LakeSink, section: Any, owner: str) -> None:
        self.name, self.sink, self.owner = name, sink, owner
        self.interval_s = float(getattr(section, "commit_interval_s", 0.0))
        self.commit_rows = int(getattr(section, "commit_rows", 500_000))
        self.max_staged_rows = int(getattr(section, "max_staged_rows", 2_000_000))
        self.nice = int(getattr(section, "commit_nice", 0))
        self.app = committer_app(owner)
        self.journal = LakeJournal(sink.staging)
        self._tables: dict[tuple[str, str], TableCommits] = {}
        self._cond = threading.Condition()  # the pending lists
        self._commit_lock = threading.RLock()  # one commit of the sink's tables at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fatal: Exception | None = None
        self.last_error = ""
        self.held_since: float | None = None  # since when the stream waits for the committer
        self.figures = {"commits": 0, "failures": 0, "batches": 0, "upserted": 0, "deleted": 0, "commit_s": 0.0,
                        "held_s": 0.0}
        self.delays: list[float] = []  # seconds from staging to commit of the last batches (bounded)
        self._next_cycle = time.monotonic() + self.interval_s
        self._backoff = 0.0
        #: The longest wait before a failed commit is tried again (the wait doubles from 1 s).
        self.retry_max_s = 60.0
        self.requests: CommitRequests | None = None  # `cdc lake commit`'s, once watched
        self.forced_at = 0.0  # when the last `cdc lake commit` request was served
        self.looks = 0  # the thread's looks at what is due

    # -- the stream's side --------------------------------------------------------------------
    @property
    def inline(self) -> bool:
        """Whether every batch is committed on its path (``commit_interval_s: 0``)."""
        return self.interval_s <= 0

    def stage(self, batches: Sequence[StagedBatch]) -> dict:
        """Hand a micro-batch's staged batches over (their manifests written first); with the
        cadence, returns at once (unless staging is at its bound: then it waits), inline it
        commits them and returns the commits' figures."""
        fatal, self._fatal = self._fatal, None
        if fatal is not None:
            raise fatal
        for b in batches:
            self.journal.record(b)
        with self._cond:
            for b in batches:
                self._table(b.db, b.table).pending.append(b)
            self._cond.notify_all()
        if self.inline:
            return self.commit_now({(b.db, b.table) for b in batches}, raise_errors=True)
        self._wait_below_bound()
        return {}

    def _wait_below_bound(self) -> None:
        started = None
        with self._cond:
            while self.staged_rows() >= self.max_staged_rows and not self._stop.is_set() and self._running():
                if started is None:
                    started = time.time()
                    log.warning("the %s lake holds the stream back: %d changes staged and not committed "
                                "(max_staged_rows %d)%s", self.name, self.staged_rows(), self.max_staged_rows,
                                f"; last commit error: {self.last_error}" if self.last_error else "")
                    self.held_since = started  # (after the warning: whoever sees it held finds it reported)
                self._cond.wait(1.0)
        if started is not None:
            self.figures["held_s"] += time.time() - started
            self.held_since = None
            log.info("the %s lake caught up: the stream goes on after %.1fs", self.name, time.time() - started)

    def _running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def staged_rows(self) -> int:
        return sum(t.rows() for t in list(self._tables.values()))

    def _table(self, db: str, table: str) -> TableCommits:
        t = self._tables.get((db, table))
        if t is None:
            t = self._tables[(db, table)] = TableCommits(db, table)
        return t

    # -- committing -------------------------------------------------------------------------
    def recover(self) -> int:
        """The staged batches the journal holds (a driver that died before committing them),
        queued before any new one; how many."""
        found = self.journal.staged()
        with self._cond:
            for b in found:
                self._table(b.db, b.table).pending.append(b)
        if found:
            log.info("the %s lake committer found %d staged batch(es) of %d table(s) to commit", self.name, len(found),
                     len({(b.db, b.table) for b in found}))
        return len(found)

    def commit_now(self, tables: set[tuple[str, str]] | None = None, *, raise_errors: bool = False) -> dict:
        """Commit what is staged for ``tables`` (None: every table) now; the figures."""
        done = {"upserted": 0, "deleted": 0, "commit_s": 0.0, "sink_rows": {}}
        with self._commit_lock:
            for key in sorted(tables if tables is not None else list(self._tables)):  # (a snapshot: stage() adds)
                t = self._tables.get(key)
                if t is None or not t.pending:
                    continue
                t0 = time.monotonic()
                try:
                    up, dl = self._commit_table(t)
                except Exception as exc:  # noqa: BLE001 - sorted below: retried, or the stream's
                    self._failed(t, exc, stream_told=raise_errors)
                    if raise_errors:
                        raise
                    continue
                finally:
                    done["commit_s"] += time.monotonic() - t0
                    self.figures["commit_s"] += time.monotonic() - t0
                done["upserted"] += up
                done["deleted"] += dl
                done["sink_rows"][f"{self.name}|{t.db}.{t.table}"] = up + dl
        return done

    def _failed(self, t: TableCommits, exc: Exception, *, stream_told: bool) -> None:
        self.figures["failures"] += 1
        self.last_error = f"{t.db}.{t.table}: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
        if stream_told:  # (raised on the stream's path: the query fails with it)
            return
        if isinstance(exc, (SinkUnavailable, LakeCommitConflict, OSError)):
            self._backoff = min(max(self._backoff * 2, 1.0), self.retry_max_s)
            log.warning("the %s lake's commit of %s.%s failed (%s); tried again in %.0fs, the batches stay staged",
                        self.name, t.db, t.table, self.last_error, self._backoff)
        else:  # not a passing trouble: the stream stops with it (the query restarts, the batches stay staged)
            self._fatal = exc
            log.error("the %s lake's commit of %s.%s failed: %s", self.name, t.db, t.table, self.last_error)

    def _load(self, t: TableCommits, apps: set[str]) -> None:
        """The table's last commit number and marks (from the table and the journal), once;
        and, once per application, the batch an earlier release's commit of it holds."""
        if not t.loaded:
            t.commit = self.sink.committed_batch(t.db, t.table, self.app)
            record = self.journal.commit_record(t.db, t.table, t.commit)
            t.marks = commit_marks(record)
            t.position = max(t.position, str(record.get("position") or ""))
            t.last_commit_at = t.last_commit_at or record.get("at")  # (an earlier process's: its intent's time)
            t.loaded = True
        for app in apps - t.legacy_checked:
            older = self.sink.committed_batch(t.db, t.table, app)  # (a commit per micro-batch, before the cadence)
            if older is not None and older > t.marks.get(app, -1):
                t.marks[app] = older
            t.legacy_checked.add(app)

    def _commit_table(self, t: TableCommits) -> tuple[int, int]:
        with self._cond:
            batches = list(t.pending)
        self._load(t, {b.app for b in batches})
        todo, done = split_committed(batches, t.marks)
        upserted = deleted = 0
        for run in commit_runs(todo, same_shape):
            k = (t.commit or 0) + 1
            marks = dict(t.marks)
            for b in run:
                marks[b.app] = max(marks.get(b.app, -1), b.batch)
            position = max([t.position] + [b.max_position for b in run])
            self.journal.intend(t.db, t.table, k, marks, position)
            result = self.sink.commit(t.db, t.table, [p for b in run for p in b.parts], batch_id=k, app=self.app,
                                      owner=self.owner, meta={BATCHES_HELD: json.dumps(covered(t.marks, run))},
                                      keep_staged=True)
            now = time.time()
            t.commit, t.marks, t.commits, t.last_commit_at = k, marks, t.commits + 1, now
            t.position = position
            self.journal.marks(t.db, t.table, k)  # (the intents before it go)
            upserted, deleted = upserted + result.upserted, deleted + result.deleted
            self.figures["commits"] += 1
            self.figures["batches"] += len(run)
            self.delays = (self.delays + [now - b.staged_at for b in run])[-1000:]
            log.debug("the %s lake committed %d batch(es) of %s.%s as commit %d", self.name, len(run), t.db, t.table, k)
        for b in done + todo:
            self.journal.forget(b)
        with self._cond:
            gone = {id(b) for b in batches}
            t.pending = [b for b in t.pending if id(b) not in gone]
            self._cond.notify_all()
        self.figures["upserted"] += upserted
        self.figures["deleted"] += deleted
        self._backoff = 0.0
        self.last_error = ""
        return upserted, deleted

    # -- the committer's thread ---------------------------------------------------------------
    def start(self) -> None:
        """Recover the journal's staged batches and start the thread (once)."""
        if self._running():
            return
        self._stop.clear()
        self.recover()
        if self.inline:  # (no thread: every batch commits on its path; what was recovered, now)
            self.commit_now()
            return
        self._thread = threading.Thread(target=self._loop, name=f"cdc-lake-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, drain: bool = True) -> None:
        """Stop the thread; with ``drain``, commit what is staged first."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if drain:
            self.commit_now()

    def _due(self) -> bool:
        now = time.monotonic()
        if self._backoff and now < self._next_cycle:
            return False
        if now >= self._next_cycle:
            return True
        return any(t.rows() >= self.commit_rows for t in list(self._tables.values()))

    def watch_requests(self, path: Path) -> None:
        """Commit at once when ``path`` (``cdc lake commit``'s request) is written from now on."""
        self.requests = CommitRequests(path)

    def _lower_priority(self) -> None:
        """This thread (the committer's) at :attr:`nice` (Linux: a thread's own nice value)."""
        if not self.nice or not hasattr(os, "setpriority"):
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        except OSError as exc:
            log.warning("the %s lake committer runs at the job's priority (commit_nice %d refused: %s)",
                        self.name, self.nice, exc)

    def _loop(self) -> None:
        self._lower_priority()
        try:
            self.sink.in_commit_thread()
        except Exception as exc:  # noqa: BLE001 - only the scheduling pool is lost
            log.warning("the %s lake committer runs in Spark's default pool: %s", self.name, exc)
        while not self._stop.is_set():
            self.looks += 1
            forced = self.requests is not None and self.requests.due()
            if forced or self._due():
                self._next_cycle = time.monotonic() + max(self.interval_s, self._backoff)
                try:
                    with _SWITCH_INTERVAL.lowered(COMMIT_SWITCH_INTERVAL_S):
                        self.commit_now()
                except Exception as exc:  # noqa: BLE001 - a committer must not die: logged, tried again
                    log.error("the %s lake committer: %s", self.name, exc)
                if forced:
                    self.forced_at = time.time()
            self._load_unseen()
            with self._cond:
                self._cond.wait(TICK_S)

    def _load_unseen(self) -> None:
        """What each table seen for the first time holds already (its last commit, the position,
        when: the status shows them before this process's first commit of it)."""
        for t in [t for t in list(self._tables.values()) if not t.loaded]:
            try:
                with self._commit_lock:
                    self._load(t, set())
            except Exception as exc:  # noqa: BLE001 - only the status waits: the commit loads it again
                log.debug("the %s lake's %s.%s not read yet: %s", self.name, t.db, t.table, exc)

    # -- figures -------------------------------------------------------------------------------
    def status(self) -> dict:
        """Per table: the last commit, the merge queries' batches and the position it holds,
        its age, and what waits."""
        now = time.time()
        tables = {}
        for (db, table), t in sorted(self._tables.copy().items()):
            oldest = t.oldest()
            tables[f"{db}.{table}"] = {
                "commit": t.commit, "batches": dict(t.marks), "position": t.position, "commits": t.commits,
                "last_commit_at": t.last_commit_at, "staged_batches": len(t.pending), "staged_rows": t.rows(),
                "freshness_s": round(now - oldest, 3) if oldest is not None else 0.0}
        delays = sorted(self.delays)

        def delay(q: float) -> float | None:
            return round(delays[min(len(delays) - 1, int(len(delays) * q))], 3) if delays else None
        return {"interval_s": self.interval_s, "staged_rows": self.staged_rows(),
                "max_staged_rows": self.max_staged_rows,
                "oldest_staged_at": min((t.oldest() for t in list(self._tables.values()) if t.pending), default=None),
                "commit_delay_p50_s": delay(0.5), "commit_delay_p99_s": delay(0.99),
                "holding_stream_since": self.held_since, "last_error": self.last_error, "forced_at": self.forced_at,
                **self.figures, "tables": tables}


class LakeCommitters:
    """The process's lake committers (one per lake sink of the configuration), the status file
    they keep (``<state_dir>/lake-status.json``) and the request file ``cdc lake commit`` writes."""

    def __init__(self, sinks: Sequence[tuple[str, Any]], sections: Any, owner: str, state_dir: Path) -> None:
        self.committers = [LakeCommitter(name, sink, getattr(sections, name), owner)
                           for name, sink in sinks if isinstance(sink, LakeSink)]
        self.state_dir = Path(state_dir)
        for c in self.committers:
            c.watch_requests(self.state_dir / REQUEST_FILE)
        self._users = 0  # the jobs that run with them (the committers stop with the last)
        self._lock = threading.Lock()
        self._status_thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Start the committers (recovering the journal's staged batches) for one more job."""
        with self._lock:  # (held until started: another job's first batch waits for the recovery)
            self._users += 1
            if self._users > 1 or not self.committers:
                return
            self._stop.clear()
            for c in self.committers:
                try:
                    c.sink.prepare()  # (the catalog made once, before any query: not by two at a time)
                except SinkUnavailable as exc:  # (the committer tries again at its commits)
                    log.warning("the %s lake is not reachable yet (%s); its commits are tried until it is", c.name, exc)
                c.start()
        self._status_thread = threading.Thread(target=self._write_loop, name="cdc-lake-status", daemon=True)
        self._status_thread.start()

    def stop(self, drain: bool = True) -> bool:
        """One job less; with the last, the committers stop (``drain``: what is staged committed
        first); whether they stopped."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or not self.committers:
                return False
        for c in self.committers:
            c.stop(drain=drain)
        self._stop.set()
        self.write_status()
        return True

    def hand_over(self, stats: list[dict], batch_id: int, app: str) -> dict[str, Any]:
        """A micro-batch's staged parts (its tasks' ``stats``' ``staged`` entries) to the
        committers, a staged batch per table; the figures of the commits made on the batch's
        path (inline committers)."""
        by: dict[tuple[str, str, str], list[dict]] = {}
        for st in stats:
            for name, db, table, part in st.get("staged") or []:
                by.setdefault((name, db, table), []).append(part)
        done: dict[str, Any] = {"upserted": 0, "deleted": 0, "sink_rows": {}, "commit_s": {}}
        unknown = {name for name, _, _ in by} - {c.name for c in self.committers}
        if unknown:
            raise SinkError(f"batch {batch_id}: parts were staged for {sorted(unknown)}, which is not a lake sink of "
                            "the job")
        now = time.time()
        work = {c: [StagedBatch(app, batch_id, db, table, tuple(parts), now)
                    for (name, db, table), parts in sorted(by.items()) if name == c.name] for c in self.committers}
        work = {c: batches for c, batches in work.items() if batches}

        def stage(c: LakeCommitter) -> tuple[dict, float]:
            t0 = time.monotonic()
            return c.stage(work[c]), time.monotonic() - t0
        if len([c for c in work if c.inline]) > 1:  # (inline commits of two sinks side by side, as they wait
            with ThreadPoolExecutor(len(work), thread_name_prefix="lake-commit") as pool:  # on different things)
                outcomes = dict(zip(work, pool.map(stage, work)))
        else:
            outcomes = {c: stage(c) for c in work}
        for c, (figures, seconds) in outcomes.items():
            done["commit_s"][c.name] = round(seconds, 3)
            done["upserted"] += figures.get("upserted", 0)
            done["deleted"] += figures.get("deleted", 0)
            done["sink_rows"].update(figures.get("sink_rows") or {})
        return done if any(c.inline for c in work) else {}

    def status(self) -> dict:
        return {"pid": os.getpid(), "running": self._users > 0, "updated_at": time.time(),
                "sinks": {c.name: c.status() for c in self.committers}}

    def write_status(self) -> None:
        """The status file, replaced whole (best effort)."""
        path = self.state_dir / STATUS_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_text(json.dumps(self.status()))
            os.replace(tmp, path)
        except OSError as exc:
            log.debug("cannot write the lake status file: %s", exc)

    def _write_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.write_status()

    def samples(self) -> list[tuple[str, str, dict[str, str], float]]:
        """The metrics: ``(name, type, labels, value)``."""
        out: list[tuple[str, str, dict[str, str], float]] = []
        for c in self.committers:
            st = c.status()
            base = {"sink": c.name}
            out += [("cdc_lake_commits_total", "counter", base, st["commits"]),
                    ("cdc_lake_commit_failures_total", "counter", base, st["failures"]),
                    ("cdc_lake_staged_rows", "gauge", base, st["staged_rows"]),
                    ("cdc_lake_holding_stream", "gauge", base, 1 if st["holding_stream_since"] else 0),
                    ("cdc_lake_commit_seconds_total", "counter", base, c.figures["commit_s"])]
            for table, ts in st["tables"].items():
                labels = {**base, "table": table}
                out += [("cdc_lake_freshness_seconds", "gauge", labels, ts["freshness_s"]),
                        ("cdc_lake_table_commits_total", "counter", labels, ts["commits"]),
                        ("cdc_lake_table_staged_rows", "gauge", labels, ts["staged_rows"])]
        return out


_GROUPS: dict[tuple, LakeCommitters] = {}
_GROUPS_LOCK = threading.Lock()


def lake_committers(sinks: Sequence[tuple[str, Any]], sections: Any, owner: str, state_dir: Path) -> LakeCommitters:
    """The process's committers of these sink objects (one group per set of sinks: the jobs of
    every source of a merge job share them, and so one committer per table)."""
    key = (tuple(id(s) for _, s in sinks), owner)
    with _GROUPS_LOCK:
        group = _GROUPS.get(key)
        if group is None:
            group = _GROUPS[key] = LakeCommitters(sinks, sections, owner, state_dir)
        return group


def committer_of(sink: Any) -> LakeCommitter | None:
    """The committer of ``sink`` in this process, if one runs."""
    with _GROUPS_LOCK:
        groups = list(_GROUPS.values())
    return next((c for g in groups for c in g.committers if c.sink is sink), None)


@contextmanager
def settled(sink: Any, tables: Sequence[tuple[str, str]]) -> Iterator[None]:
    """A driver's operation on a lake sink's ``tables`` (TRUNCATE, delete-missing, DROP,
    RENAME): the batches staged for them committed first, and no commit of the sink meanwhile.
    Nothing for a sink without a committer."""
    committer = committer_of(sink)
    if committer is None:
        yield
        return
    with committer._commit_lock:
        committer.commit_now({(db, t) for db, t in tables}, raise_errors=True)
        yield
