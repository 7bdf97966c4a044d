"""The verify run: each source table's chunks against every target, counted, checksummed
and compared row by row where they differ.

Consistency: the source is read chunk by chunk in autocommit (no long transaction, no
lock) and the sinks after it, so verify a drained pipeline (producer caught up, merge job
done); a change landing while verify runs can show up as a difference.  A chunk whose
checksum differs but whose rows compare equal on the second read is reported in the notes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from cdc.errors import TargetMissing, TargetUnusable, VerifyError
from cdc.lake import commit_lakes
from cdc.verify.changelog import ChangelogTarget, MergedChangelogTarget
from cdc.verify.checksum import Checksum, checksum
from cdc.verify.diff import Diffs, compare_rows
from cdc.verify.discovery import source_tables
from cdc.verify.lake_target import LakeTarget
from cdc.verify.report import SinkResult, TableReport, VerifyReport
from cdc.verify.shards import indistinct, mapped, shard_spec, stray_rows
from cdc.verify.source import SourceTable
from cdc.verify.spec import KeylessTable, MissingTable, TableSpec, table_spec
from cdc.verify.targets import DBTarget, MySQLTarget, PostgresTarget, Target
from common.sql.row_reads import RowSession
from common.sql.sessions import read_session, row_session
from contract.envelope import record_names
from contract.schema_resolution import row_fields
from contract.schema_store import SchemaStore
from spark_jobs.errors import ColumnMappingMismatch
from spark_jobs.sharding.routes import Route, Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.postgres import PostgresSink


def build_targets(cfg) -> list[Target]:
    """A target per enabled sink (the clean changelog's are per source, in :func:`verify`)."""
    out: list[Target] = []
    for name, sink in build_sinks(cfg.sinks):
        if isinstance(sink, LakeSink):
            out.append(LakeTarget(name, sink))
        else:
            out.append(PostgresTarget(sink) if isinstance(sink, PostgresSink) else MySQLTarget(sink))
    return out


def _verify_table(src_rows: RowSession, spec: TableSpec, targets: list[Target], chunk_size: int, samples: int,
                  report: TableReport, progress: Callable[[str], None] | None) -> None:
    source = SourceTable(src_rows, spec)
    live: list[tuple[Target, Diffs]] = []
    absent: list[SinkResult] = []  # no sink table or topic: every source row is missing
    whole = Checksum()
    sums: dict[int, Checksum] = {}  # id(result) -> the target's rows read so far
    for t in targets:
        res = SinkResult(t.sink, "")
        report.results.append(res)
        try:
            t.open(spec, res)
            live.append((t, Diffs(res, spec, samples)))
        except TargetMissing as exc:
            res.error = str(exc)
            absent.append(res)
        except TargetUnusable as exc:
            res.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported per target
            res.error = f"{type(exc).__name__}: {exc}"
            t.close()
    for chunk in source.chunks(chunk_size):
        report.chunks += 1
        report.source_rows += len(chunk.rows)
        whole.include(chunk.checksum)
        if progress is not None:
            progress(f"{spec.name}: chunk {chunk.index + 1}, {report.source_rows:,} rows")
        for t, diffs in list(live):
            res = diffs.result
            try:
                got = checksum(t.chunk_rows(chunk))
                sums.setdefault(id(res), Checksum()).include(got)
                res.chunks += 1
                if isinstance(t, DBTarget):
                    if spec.mode == "range":
                        res.sink_rows += got.count
                    else:
                        t.matched += got.count
                if (got.count, got.total) == (chunk.checksum.count, chunk.checksum.total):
                    continue
                missing, extra, differing = compare_rows(spec.value_specs, chunk.rows, t.chunk_rows(chunk))
                if not (missing or extra or differing):
                    res.notes.append(f"chunk {chunk.index}: checksums differ but the rows compare equal "
                                     "(FLOAT values within tolerance, or a change landed meanwhile)")
                    continue
                res.chunks_differing += 1
                for k, v in missing:
                    diffs.missing(k, v)
                for k, v in extra:
                    diffs.extra(k, v)
                for k, cols, a, b in differing:
                    diffs.differs(k, cols, a, b)
            except Exception as exc:  # noqa: BLE001 - reported per target
                res.error = f"{type(exc).__name__}: {exc}"
                live.remove((t, diffs))
                t.close()  # a fresh connection for the next table
    for t, diffs in live:
        try:
            t.finish(source, diffs)
        except Exception as exc:  # noqa: BLE001
            diffs.result.error = f"{type(exc).__name__}: {exc}"
            t.close()
    report.checksum = whole.hex
    for res in report.results:
        res.source_rows = report.source_rows
        if res.error is None:
            res.checksum = sums.get(id(res), Checksum()).hex
        if res.missing_columns:
            res.notes.append(f"the sink lacks column(s) {', '.join(res.missing_columns)} (compared as NULL)")
    for res in absent:
        res.missing = report.source_rows


def _as_policy_keeps(cfg, spec: TableSpec) -> tuple[TableSpec, list[str]]:
    """``spec`` without the columns ``sinks.schema_changes`` (``columns: ignore``) keeps out
    of the sinks and the changelog: those the table's first schema lacks; and their names."""
    if cfg.sinks.schema_rule(spec.db, spec.table).columns != "ignore":
        return spec, []
    k = cfg.kafka
    store = SchemaStore(k.bootstrap_servers, k.topic_prefix, k.client_settings() or None)
    store.known()
    first = store.first(record_names(k.topic_prefix, spec.db, spec.table)[2])
    if first is None:
        return spec, []
    fields = {f["name"] for f in row_fields(first[1]) or []}
    kept = [c for c in spec.columns if c.field in fields or c.name in spec.key]
    left_out = [c.name for c in spec.columns if c not in kept]
    return (replace(spec, columns=kept) if left_out else spec), left_out


def verify(cfg, tables: Sequence[str] | None = None, *, changelog: bool = False, chunk_size: int = 10_000,
           samples: int = 5, progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Compare every captured source table (or ``tables``: ``db.table`` names or regular
    expressions, or a route's target ``db.table`` for all its shards) with each enabled sink
    table and, with ``changelog``, its clean changelog topic.  With ``sources``, every
    source's tables (named ``source/db.table``); a table a route merges is compared as a
    shard of the route's target (:mod:`cdc.verify.shards`).  See the package docstring for
    how; ``report.equal`` says whether all are equal.

    Memory: the database comparisons hold one chunk (``chunk_size`` rows) per side plus
    ``samples`` rows per kind of difference; the changelog replay holds the whole table.
    """
    if chunk_size < 1:
        raise VerifyError("chunk_size must be at least 1")
    db_targets = build_targets(cfg)
    if not db_targets and not changelog:
        raise VerifyError("nothing to compare with: no sink is enabled (sinks.postgres / sinks.mysql) "
                          "and the changelog was not asked for")
    if any(isinstance(t, LakeTarget) for t in db_targets):
        commit_lakes(cfg)  # (the lakes commit on a cadence: what they hold staged is committed before comparing)
    t0 = time.monotonic()
    report = VerifyReport(targets=[t.sink for t in db_targets] + (["changelog"] if changelog else []),
                          chunk_size=chunk_size)
    router = Router.from_config(cfg)
    named_targets = {r.name for r in router.routes} & set(tables or [])
    sources: list[_Source] = []
    try:
        for c in cfg.captured_sources():
            view = cfg.for_source(c.name)
            sources.append(_source(c.name, view, changelog))
        plan: list[tuple[_Source, str, str, Route | None]] = []
        unknown: set[str] | None = None
        for src in sources:
            todo, missed = source_tables(src.conn, src.view, tables)
            if named_targets:  # a route's target named: its shards
                every, _ = source_tables(src.conn, src.view, None)
                todo += [dt for dt in every if dt not in todo and
                         getattr(router.route_of(src.name, *dt), "name", None) in named_targets]
            unknown = set(missed) - named_targets if unknown is None else unknown & set(missed)
            plan += [(src, db, table, router.route_of(src.name, db, table)) for db, table in todo]
        for name in tables or []:
            if name in (unknown or set()):
                report.tables.append(TableReport(name, error="no source table matches this name"))
        for src, db, table, route in plan:
            if route is None:
                targets = db_targets + ([src.changelog] if src.changelog is not None else [])
                _verify_one(report, src, db, table, None, targets, chunk_size, samples, progress,
                            label=src.name if cfg.sources else None)
        routes = list(dict.fromkeys(route for *_, route in plan if route is not None))
        for route in routes:
            members = [(src, db, table) for src, db, table, r in plan if r == route]
            merged = [MergedChangelogTarget(cfg)] if changelog and route.columns else []
            try:
                _verify_route(report, route, members, db_targets + merged, chunk_size, samples, progress,
                              whole=not tables or route.name in named_targets)
            finally:
                for t in merged:
                    t.close()
    finally:
        for t in db_targets:
            t.close()
        for src in sources:
            src.close()
    report.seconds = time.monotonic() - t0
    return report


@dataclass
class _Source:
    """A source server as verify reads it: its name, its single-source configuration, its
    sessions, and its clean changelog target (``changelog=True``).  ``conn``: a read session
    (pymysql) for the tables' definitions; ``rows``: a row session (the project's own
    connection, the same login, TLS, timeouts and settings) for the tables' rows, most of
    verify's reading: parsed by generated code, the values pymysql's."""

    name: str
    view: Any
    conn: Any
    rows: RowSession
    changelog: ChangelogTarget | None

    def close(self) -> None:
        if self.changelog is not None:
            self.changelog.close()
        self.rows.close()
        self.conn.close()


def _source(name: str, view, changelog: bool) -> _Source:
    conn = _connect(view, lambda source: read_session(source, binary_prefix=True))
    rows = None
    try:
        rows = _connect(view, row_session)
        return _Source(name, view, conn, rows, ChangelogTarget(view) if changelog else None)
    except BaseException:
        if rows is not None:
            rows.close()
        conn.close()
        raise


def _connect(view, session: Callable[[Any], Any]):
    try:
        return session(view.source)
    except Exception as exc:  # noqa: BLE001 - shown to the user
        of = f" {view.source_name}" if view.source_name else ""
        raise VerifyError(f"cannot connect to the source{of} {view.source.host}:{view.source.port} "
                          f"as {view.source.user}: {exc}") from None


def _verify_one(report: VerifyReport, src: _Source, db: str, table: str, route: Route | None,
                targets: list[Target], chunk_size: int, samples: int, progress: Callable[[str], None] | None,
                label: str | None = None) -> TableReport:
    """One source table against ``targets``: its own sink tables, or (``route``) its rows in
    the route's target.  ``label``: the source name shown before ``db.table``."""
    started = time.monotonic()
    shown = f"{label}/{db}.{table}" if label else f"{db}.{table}"
    target = route.name if route is not None else None
    spec = table_spec(src.conn, src.view, db, table)
    if isinstance(spec, MissingTable):
        tr = TableReport(shown, error=spec.reason, target=target)
    elif isinstance(spec, KeylessTable):
        tr = TableReport(shown, skipped=spec.reason, target=target)
    else:
        spec, left_out = _as_policy_keeps(src.view, spec)
        spec = shard_spec(spec, route, src.name) if route is not None else replace(spec, source=label)
        tr = TableReport(spec.name, key=list(spec.key), mode=spec.mode, target=target,
                         mapped=mapped(route, ShardId(src.name, db, table)) if route is not None else {})
        try:
            _verify_table(src.rows, spec, targets, chunk_size, samples, tr, progress)
            for res in tr.results:  # (the column settings: what is not compared, where the key is from)
                res.notes.extend(spec.notes)
            for res in tr.results if left_out else []:
                res.notes.append(f"sinks.schema_changes says 'columns: ignore' for the table: column(s) "
                                 f"{', '.join(left_out)}, added since it was first captured, not compared")
        except Exception as exc:  # noqa: BLE001 - the source failed for this table
            tr.error = f"{type(exc).__name__}: {exc}"
    tr.seconds = time.monotonic() - started
    report.tables.append(tr)
    return tr


def _verify_route(report: VerifyReport, route: Route, members: list[tuple[_Source, str, str]],
                  targets: list[Target], chunk_size: int, samples: int,
                  progress: Callable[[str], None] | None, whole: bool) -> None:
    """The shards of ``route`` against its target (``targets``: the sinks' tables and, with
    ``--changelog``, the merged clean changelog), then (``whole``: every shard was compared,
    not only those named) the sinks' rows of no shard."""
    shards = [ShardId(src.name, db, table) for src, db, table in members]
    try:
        for shard in shards:
            route.values(shard)
        why = indistinct(route, shards)
    except ColumnMappingMismatch as exc:  # a shard the merge job refuses too
        report.tables.append(TableReport(route.name, target=route.name, error=str(exc)))
        return
    if why is not None:
        report.tables.append(TableReport(route.name, target=route.name, skipped=(
            f"{why}: the target cannot tell its {len(members)} shard(s)' rows apart, so it is not compared per "
            f"shard")))
        return
    for src, db, table in members:
        _verify_one(report, src, db, table, route, targets, chunk_size, samples, progress, label=src.name)
    if not whole:
        return
    tr = TableReport(f"{route.name}: rows of no shard", key=list(route.columns), target=route.name)
    for t in (t for t in targets if isinstance(t, (DBTarget, LakeTarget))):
        res = SinkResult(t.sink, t.qualified(*route.target))
        try:
            counts = t.origin_counts(route.target, list(route.columns))
        except Exception as exc:  # noqa: BLE001 - reported per target
            res.error = f"{type(exc).__name__}: {exc}"
            t.close()
            tr.results.append(res)
            continue
        if counts is None:
            continue  # no target table (or no origin columns): the shards' results say so
        stray = stray_rows(counts, route, shards)
        res.sink_rows = res.extra = sum(stray.values())
        res.notes += [f"{n:,} row(s) from {name}, which is not a shard verified here" for name, n in stray.items()]
        tr.results.append(res)
    report.tables.append(tr)
