"""The verify run: each source table's chunks against every target, counted, checksummed
and compared row by row where they differ.

Consistency: the source is read chunk by chunk in autocommit (no long transaction, no
lock) and the sinks after it, so verify a drained pipeline (producer caught up, merge job
done); a change landing while verify runs can show up as a difference.  A chunk whose
checksum differs but whose rows compare equal on the second read is reported in the notes.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from cdc.errors import TargetMissing, TargetUnusable, VerifyError
from cdc.verify.changelog import ChangelogTarget
from cdc.verify.checksum import checksum
from cdc.verify.diff import Diffs, compare_rows
from cdc.verify.discovery import source_tables
from cdc.verify.report import SinkResult, TableReport, VerifyReport
from cdc.verify.source import SourceTable
from cdc.verify.spec import KeylessTable, MissingTable, TableSpec, table_spec
from cdc.verify.targets import DBTarget, MySQLTarget, PostgresTarget, Target
from common.sql.sessions import read_session
from contract.envelope import record_names
from contract.schema_resolution import row_fields
from contract.schema_store import SchemaStore
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.postgres import PostgresSink


def build_targets(cfg, changelog: bool) -> list[Target]:
    """A target per enabled sink, and the clean changelog when asked for."""
    out: list[Target] = []
    for _, sink in build_sinks(cfg.sinks):
        out.append(PostgresTarget(sink) if isinstance(sink, PostgresSink) else MySQLTarget(sink))
    if changelog:
        out.append(ChangelogTarget(cfg))
    return out


def _verify_table(src_conn, spec: TableSpec, targets: list[Target], chunk_size: int, samples: int,
                  report: TableReport, progress: Callable[[str], None] | None) -> None:
    source = SourceTable(src_conn, spec)
    live: list[tuple[Target, Diffs]] = []
    absent: list[SinkResult] = []  # no sink table or topic: every source row is missing
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
        if progress is not None:
            progress(f"{spec.name}: chunk {chunk.index + 1}, {report.source_rows:,} rows")
        for t, diffs in list(live):
            res = diffs.result
            try:
                got = checksum(t.chunk_rows(chunk))
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
    for res in report.results:
        res.source_rows = report.source_rows
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
    store = SchemaStore(k.bootstrap_servers, k.topic_prefix, k.client or None)
    store.known()
    first = store.first(record_names(k.topic_prefix, spec.db, spec.table)[2])
    if first is None:
        return spec, []
    fields = {f["name"] for f in row_fields(first[1]) or []}
    kept = [c for c in spec.columns if c.field in fields or c.name in spec.key]
    left_out = [c.name for c in spec.columns if c not in kept]
    return (TableSpec(spec.db, spec.table, kept, spec.key) if left_out else spec), left_out


def verify(cfg, tables: Sequence[str] | None = None, *, changelog: bool = False, chunk_size: int = 10_000,
           samples: int = 5, progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Compare every captured source table (or ``tables``: ``db.table`` names or regular
    expressions) with each enabled sink table and, with ``changelog``, its clean changelog
    topic.  See the package docstring for how; ``report.equal`` says whether all are equal.

    Memory: the database comparisons hold one chunk (``chunk_size`` rows) per side plus
    ``samples`` rows per kind of difference; the changelog replay holds the whole table.
    """
    if chunk_size < 1:
        raise VerifyError("chunk_size must be at least 1")
    targets = build_targets(cfg, changelog)
    if not targets:
        raise VerifyError("nothing to compare with: no sink is enabled (sinks.postgres / sinks.mysql) "
                          "and the changelog was not asked for")
    t0 = time.monotonic()
    try:
        conn = read_session(cfg.source, binary_prefix=True)
    except Exception as exc:  # noqa: BLE001 - shown to the user
        raise VerifyError(f"cannot connect to the source {cfg.source.host}:{cfg.source.port} "
                          f"as {cfg.source.user}: {exc}") from None
    report = VerifyReport(targets=[t.sink for t in targets], chunk_size=chunk_size)
    try:
        todo, unknown = source_tables(conn, cfg, tables)
        for name in unknown:
            report.tables.append(TableReport(name, error="no source table matches this name"))
        for db, table in todo:
            started = time.monotonic()
            spec = table_spec(conn, cfg, db, table)
            if isinstance(spec, MissingTable):
                report.tables.append(TableReport(f"{db}.{table}", error=spec.reason))
                continue
            if isinstance(spec, KeylessTable):
                report.tables.append(TableReport(f"{db}.{table}", skipped=spec.reason))
                continue
            spec, left_out = _as_policy_keeps(cfg, spec)
            tr = TableReport(spec.name, key=list(spec.key), mode=spec.mode)
            report.tables.append(tr)
            try:
                _verify_table(conn, spec, targets, chunk_size, samples, tr, progress)
                for res in tr.results if left_out else []:
                    res.notes.append(f"sinks.schema_changes says 'columns: ignore' for the table: column(s) "
                                     f"{', '.join(left_out)}, added since it was first captured, not compared")
            except Exception as exc:  # noqa: BLE001 - the source failed for this table
                tr.error = f"{type(exc).__name__}: {exc}"
            tr.seconds = time.monotonic() - started
    finally:
        for t in targets:
            t.close()
        conn.close()
    report.seconds = time.monotonic() - t0
    return report
