"""``cdc lake``: the lake tables' maintenance and a look at them.

The maintenance is each sink engine's: delta-rs's and pyiceberg's for the ``driver`` engine,
Spark's own for the ``spark`` engine, run in a Spark session of the command (``spark.master``,
the connectors from ``make jars``):

* ``cdc lake optimize`` compacts each table (Delta: OPTIMIZE, small files bin-packed and, with
  Spark, the files with deletion vectors written again without the deleted rows; Iceberg:
  small files rewritten, with Spark ``rewrite_data_files`` with the position deletes folded
  back and ``rewrite_position_delete_files``);
* ``cdc lake vacuum`` removes the Delta files no version within the retention references
  (VACUUM) and the lake sinks' staged parts left by failed tasks;
* ``cdc lake expire`` expires the Iceberg snapshots older than the retention and deletes the
  files no snapshot left needs (with Spark: ``expire_snapshots``, ``remove_orphan_files``);
* ``cdc lake files`` shows the data files per table;
* ``cdc lake commit`` commits what the lake sinks hold staged now (docs/lake.md, "Commit
  cadence"): the running merge job's committers are asked (``lake-commit-request`` in the state
  directory), or, with no merge job running, the command commits the journal's staged batches
  itself;
* ``cdc lake sql "SELECT ..."`` runs DuckDB over the tables (``delta.<db>.<table>`` and
  ``iceberg.<db>.<table>`` as views), with the delta, iceberg and avro extensions of the
  ``duckdb-extension-*`` packages (the ``lake-query`` extra: no download at run time).

Each takes ``DB.TABLE`` names or regular expressions (default: every lake table).
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from cdc.errors import CommandError
from common.config import CDCConfig
from spark_jobs.commit.batch_commit import owner_of
from spark_jobs.commit.lake_committer import REQUEST_FILE, STATUS_FILE, LakeCommitters
from spark_jobs.sinks.configured import build_sinks, lake_conf
from spark_jobs.sinks.lake_sink import LakeSink

__all__ = ["lake_sinks", "maintain", "file_counts", "duckdb_connection", "lake_sql", "commit_lakes"]


def lake_sinks(cfg: CDCConfig) -> list[tuple[str, LakeSink]]:
    """The enabled lake sinks of the configuration, by name."""
    sinks = [(name, s) for name, s in build_sinks(cfg.sinks) if isinstance(s, LakeSink)]
    if not sinks:
        raise CommandError("no lake sink is enabled (sinks.delta or sinks.iceberg in the configuration)")
    return sinks


def _selected(sink: LakeSink, patterns: Sequence[str]) -> Iterator[tuple[str, str]]:
    for db, table in sink.tables():
        if not patterns or any(re.fullmatch(p, f"{db}.{table}") for p in patterns):
            yield db, table


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr meanwhile: a process started meanwhile (Spark's
    JVM) writes what it prints there ("Deleted 14 files ..." of Delta's VACUUM), and this
    command's own output (``--json``) stays alone on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def maintain(cfg: CDCConfig, action: str, patterns: Sequence[str] = (), *, retention_hours: float = 168.0,
             progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run ``action`` (``optimize``, ``vacuum``, ``expire``) on every selected lake table;
    one result per table and sink."""
    sinks = lake_sinks(cfg)
    conf = lake_conf(cfg.sinks)
    if conf:  # a lake sink of the spark engine: its maintenance is Spark's
        from spark_jobs.spark_session import build_session
        with _stdout_to_stderr():  # (the JVM starts here: its own prints, VACUUM's, go to stderr)
            build_session(cfg.spark.master, app_name="cdc-lake", conf=conf)
    results = []
    for name, sink in sinks:
        engine = sink.engine  # (vacuum: Delta's engines; expire: Iceberg's)
        step = {"optimize": lambda d, t: sink.compact(d, t),
                "vacuum": lambda d, t: getattr(engine, "vacuum", None) and engine.vacuum(d, t, retention_hours),
                "expire": lambda d, t: getattr(engine, "expire", None) and engine.expire(d, t, retention_hours)}[action]
        for db, table in _selected(sink, patterns):
            if progress:
                progress(f"{name} {db}.{table}")
            before = sink.file_count(db, table)
            done = step(db, table) or {}
            results.append({"sink": name, "table": f"{db}.{table}", "files_before": before,
                            "files_after": sink.file_count(db, table), **done})
        if action == "vacuum":
            results.append({"sink": name, "table": "(staged parts)",
                            "removed": sink.staging.remove_stale(retention_hours)})
        sink.close()
    return results


def _running_committers(state_dir: Path) -> dict | None:
    """The lake status of a merge job that runs now (its process alive), else None."""
    try:
        status = json.loads((state_dir / STATUS_FILE).read_text())
        os.kill(int(status["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return status if status.get("running") else None


def commit_lakes(cfg: CDCConfig, wait_s: float = 300.0) -> dict[str, Any]:
    """Commit what the lake sinks hold staged now: the running merge job's committers are asked
    and waited for (until every sink has served the request and holds nothing staged), or, with
    no merge job running, the journal's staged batches are committed here.  What was done."""
    state_dir = Path(cfg.state_dir)
    if _running_committers(state_dir) is not None:
        asked = time.time()
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / REQUEST_FILE).write_text(str(asked))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            status = _running_committers(state_dir)
            if status is None:
                break  # the job stopped meanwhile: it committed what it held (or its journal keeps it)
            sinks = status.get("sinks") or {}
            served = all(s.get("forced_at", 0) >= asked for s in sinks.values())
            if served and all((s.get("oldest_staged_at") or asked + 1) > asked for s in sinks.values()):
                # (every batch staged before the request committed; later ones wait for their turn)
                return {"by": "merge job", "sinks": {n: s.get("commits", 0) for n, s in sinks.items()}}
            failed = [f"{n}: {s['last_error']}" for n, s in sinks.items() if s.get("last_error")]
            if served and failed:
                raise CommandError("the merge job's lake commit failed (the batches stay staged and are committed once "
                                   "the lake takes them): " + "; ".join(failed))
            time.sleep(0.2)
        else:
            raise CommandError(f"the merge job's lake committers did not commit within {wait_s:.0f}s (see its log and "
                               f"{state_dir / STATUS_FILE})")
    sinks = lake_sinks(cfg)
    group = LakeCommitters(sinks, cfg.sinks, owner_of(cfg.kafka.topic_prefix), state_dir)
    done = {}
    for c in group.committers:
        found = c.recover()
        figures = c.commit_now(raise_errors=True)
        done[c.name] = {"staged_batches": found, "upserted": figures["upserted"], "deleted": figures["deleted"]}
    for _, sink in sinks:
        sink.close()
    return {"by": "this command", "sinks": done}


def file_counts(cfg: CDCConfig, patterns: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Data files per lake table."""
    out = []
    for name, sink in lake_sinks(cfg):
        out += [{"sink": name, "table": f"{db}.{table}", "files": sink.file_count(db, table)}
                for db, table in _selected(sink, patterns)]
        sink.close()
    return out


def duckdb_connection() -> Any:
    """A DuckDB connection with the avro, delta and iceberg extensions loaded from their PyPI
    packages (``duckdb-extension-*``, the versions pinned with DuckDB's), nothing downloaded."""
    try:
        import duckdb
    except ImportError as exc:
        raise CommandError("DuckDB is not installed: pip install 'mysql-cdc[lake-query]'") from exc
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false; SET autoload_known_extensions = false")
    for ext in ("avro", "delta", "iceberg"):
        try:
            mod = __import__(f"duckdb_extension_{ext}")
        except ImportError as exc:
            raise CommandError(f"DuckDB's {ext} extension package is not installed: "
                               "pip install 'mysql-cdc[lake-query]'") from exc
        found = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", f"v{duckdb.__version__}",
                                       f"{ext}.duckdb_extension"))
        if not found:
            raise CommandError(f"duckdb-extension-{ext} does not match DuckDB {duckdb.__version__}")
        con.execute(f"LOAD '{found[0]}'")
    return con


def _ident(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def lake_sql(cfg: CDCConfig, sql: str) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` in DuckDB with every lake table as a view ``<sink>.<db>.<table>``."""
    con = duckdb_connection()
    for name, sink in lake_sinks(cfg):
        con.execute(f"ATTACH ':memory:' AS {_ident(name)}")
        for db, table in sink.tables():
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(name, db)}")
            con.execute(f"CREATE VIEW {_ident(name, db, table)} AS SELECT * FROM {sink.duckdb_scan(db, table)}")
        sink.close()
    cur = con.execute(sql)
    columns = [d[0] for d in cur.description or []]
    return columns, cur.fetchall()
