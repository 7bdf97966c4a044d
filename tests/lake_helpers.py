"""The lake sinks in the tests: built per test (a Delta directory, an Iceberg catalog on the
stack's PostgreSQL or a SQLite file), of either engine (``driver``: delta-rs and pyiceberg;
``spark``: through the process's Spark session, built with the lake connectors by
:func:`lake_session`), batches staged and committed as the merge job does, tables read back,
their commits counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.naming import POSITION_COLUMN

LAKE_KINDS = ["delta", "iceberg"]


def lake_session(master: str = "local[2]"):
    """The process's Spark session with the lake connectors (the ``spark`` engine's commits run
    in it; the tests' Iceberg sinks set their own catalogs in it)."""
    from common.config import SinksConfig
    from spark_jobs.sinks.configured import lake_conf
    from spark_jobs.spark_session import build_session
    cfg = SinksConfig.model_validate({"delta": {"enabled": True, "path": "unused", "engine": "spark"}})
    return build_session(master, app_name="test-lake", conf=lake_conf(cfg))


def iceberg_catalog_uri(pg_dsn: str) -> str:
    """The SQLAlchemy URL of the stack's PostgreSQL (a libpq key=value DSN or a URL)."""
    from cdc.stack.manager import sqlalchemy_url
    return sqlalchemy_url(pg_dsn)


def make_lake_sink(kind: str, tmp: Path, pg_dsn: str | None, name: str, engine: str = "driver", **kw: Any):
    """A sink of ``kind`` and ``engine`` in its own place: a Delta directory, or an Iceberg
    catalog named ``name`` (its tables apart from every other test's) on PostgreSQL, or SQLite
    without a DSN."""
    if kind == "delta":
        return DeltaSink(str(tmp / "delta"), engine=engine, **kw)
    uri = iceberg_catalog_uri(pg_dsn) if pg_dsn else f"sqlite:///{tmp}/catalog.db"
    return IcebergSink(uri, str(tmp / "warehouse"), engine=engine, catalog_name=name, **kw)


def commit_batch(sink, db: str, table: str, schema: Any, key: list[str], partitions: Sequence[Sequence[Any]],
                 batch_id: int, app: str = "app-1", owner: str = "cdc-merge:test"):
    """Stage each partition's changes as a merge task does and commit the batch (the driver)."""
    parts = [sink.stage(db, table, schema, key, list(changes), batch_id=batch_id, partition=p, app=app)
             for p, changes in enumerate(partitions) if changes]
    return sink.commit(db, table, parts, batch_id=batch_id, app=app, owner=owner)


def lake_rows(sink, db: str, table: str, key: list[str], *, position: bool = False) -> dict[tuple, dict]:
    """The lake table's rows by key (without the position unless asked)."""
    batches = sink.read_batches(db, table)
    if batches is None:
        return {}
    out = {}
    for r in (row for b in batches for row in b.to_pylist()):
        if not position:
            r.pop(POSITION_COLUMN, None)
        out[tuple(r[k] for k in key)] = r
    return out


def lake_commits(sink, db: str, table: str) -> list[tuple[str, int]]:
    """``(app, batch)`` of every commit the merge job made to the table, oldest first."""
    return sink.commits(db, table)

