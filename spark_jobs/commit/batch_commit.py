"""The batch sinks' commits: once every task of a micro-batch is done, the driver commits
each table's staged parts in each batch sink, once per table per batch
(:class:`~spark_jobs.sinks.interface.BatchSink`).

Committed before the batch's state is stored: a driver that dies between the two runs the
batch again, and a batch sink's commit is idempotent by the batch id.  The row sinks were
written by the tasks themselves; they have nothing to commit here.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from spark_jobs.errors import SinkError
from spark_jobs.sinks.lake_sink import app_id

log = logging.getLogger(__name__)


def owner_of(clean_prefix: str) -> str:
    """The pipeline the lake tables belong to: ``cdc-merge:<kafka.topic_prefix>``."""
    return f"cdc-merge:{clean_prefix}"


def query_app_id(query_dir: Path, owner: str, source_name: str) -> str:
    """The batch sinks' application id of the job whose streaming checkpoint is ``query_dir``:
    its owner, its source and the query id Spark keeps in the checkpoint's ``metadata`` (a new
    checkpoint, a new id: its batch ids start again from 0)."""
    try:
        query_id = json.loads((query_dir / "metadata").read_text())["id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SinkError(f"the streaming checkpoint {query_dir} has no query id ({exc}): the batch sinks cannot "
                        "tell a replayed batch") from exc
    return app_id(owner, source_name, query_id)


def commit_staged(sinks: list[tuple[str, Any]], stats: list[dict], batch_id: int, app: str = "",
                  owner: str = "") -> dict[str, Any]:
    """Commit the parts the batch's tasks staged (``stats``' ``staged`` entries: ``[sink
    name, db, table, part]``) in the batch sinks of ``sinks``: each sink's tables one after
    another, the sinks side by side (a thread each when more than one has parts: a Delta and
    an Iceberg commit wait on different things, files, a catalog, Spark jobs of their own).
    The rows upserted and deleted, summed, and per sink and table (figures of the batch
    report); each sink's commit time (``commit_s``).  The first sink error is raised once every
    sink is done (a sink that committed keeps its commit: the batch run again skips it)."""
    parts: dict[str, dict[tuple[str, str], list[dict]]] = {}
    for st in stats:
        for name, db, table, part in st.get("staged") or []:
            parts.setdefault(name, {}).setdefault((db, table), []).append(part)
    if not parts:
        return {}
    by_name = dict(sinks)
    for name in parts:
        sink = by_name.get(name)
        if sink is None or sink.KIND != "batch":
            db, table = next(iter(parts[name]))
            raise SinkError(f"batch {batch_id}: parts of {db}.{table} were staged for {name!r}, which is not a batch "
                            "sink of the job")

    def commit_sink(name: str) -> tuple[list[tuple[str, Any]], float]:
        t0 = time.monotonic()
        results = []
        for (db, table), staged in sorted(parts[name].items()):
            results.append((f"{name}|{db}.{table}",
                            by_name[name].commit(db, table, staged, batch_id=batch_id, app=app, owner=owner)))
            log.debug("batch %d: %s committed %d part(s) of %s.%s", batch_id, name, len(staged), db, table)
        return results, time.monotonic() - t0

    names = sorted(parts)
    if len(names) == 1:
        outcomes = {names[0]: commit_sink(names[0])}
    else:
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="lake-commit") as pool:
            futures = {name: pool.submit(commit_sink, name) for name in names}
            wait(futures.values())
        errors = [f.exception() for f in futures.values() if f.exception() is not None]
        if errors:
            raise errors[0]
        outcomes = {name: f.result() for name, f in futures.items()}
    done: dict = {"upserted": 0, "deleted": 0, "sink_rows": {}, "commit_s": {}}
    for name, (results, seconds) in outcomes.items():
        done["commit_s"][name] = round(seconds, 3)
        for key, result in results:
            done["upserted"] += result.upserted
            done["deleted"] += result.deleted
            done["sink_rows"][key] = result.upserted + result.deleted  # (the metrics' rows per sink)
    return done
