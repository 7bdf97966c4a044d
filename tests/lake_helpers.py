"""The lake sinks in the tests: built per test (a Delta directory, an Iceberg catalog on the
stack's PostgreSQL or a SQLite file), batches staged and committed as the merge job does,
tables read back, their commits counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.naming import POSITION_COLUMN

LAKE_KINDS = ["delta", "iceberg"]


def iceberg_catalog_uri(pg_dsn: str) -> str:
    """The SQLAlchemy URL of the stack's PostgreSQL (a libpq key=value DSN or a URL)."""
    from cdc.stack.manager import sqlalchemy_url
    return sqlalchemy_url(pg_dsn)


def make_lake_sink(kind: str, tmp: Path, pg_dsn: str | None, name: str, **kw: Any):
    """A sink of ``kind`` in its own place: a Delta directory, or an Iceberg catalog named
    ``name`` (its tables apart from every other test's) on PostgreSQL, or SQLite without a DSN."""
    if kind == "delta":
        return DeltaSink(str(tmp / "delta"), **kw)
    uri = iceberg_catalog_uri(pg_dsn) if pg_dsn else f"sqlite:///{tmp}/catalog.db"
    return IcebergSink(uri, str(tmp / "warehouse"), catalog_name=name, **kw)


def commit_batch(sink, db: str, table: str, schema: Any, key: list[str], partitions: Sequence[Sequence[Any]],
                 batch_id: int, app: str = "app-1", owner: str = "cdc-merge:test"):
    """Stage each partition's changes as a merge task does and commit the batch (the driver)."""
    parts = [sink.stage(db, table, schema, key, list(changes), batch_id=batch_id, partition=p, app=app)
             for p, changes in enumerate(partitions) if changes]
    return sink.commit(db, table, parts, batch_id=batch_id, app=app, owner=owner)


def lake_rows(sink, db: str, table: str, key: list[str], *, position: bool = False) -> dict[tuple, dict]:
    """The lake table's rows by key (without the position unless asked)."""
    handle = sink._load(db, table)
    if handle is None:
        return {}
    data = handle.to_pyarrow_table() if isinstance(sink, DeltaSink) else handle.scan().to_arrow()
    out = {}
    for r in data.to_pylist():
        if not position:
            r.pop(POSITION_COLUMN, None)
        out[tuple(r[k] for k in key)] = r
    return out


def lake_commits(sink, db: str, table: str) -> list[tuple[str, int]]:
    """``(app, batch)`` of every commit the merge job made to the table, oldest first."""
    return sink.commits(db, table)

