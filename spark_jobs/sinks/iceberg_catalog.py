"""The Iceberg sink's catalog: pyiceberg's ``SqlCatalog`` on the catalog database (PostgreSQL or
SQLite), opened once per sink object and shared by its users (the merge job's lake committer,
the driver's table operations): pyiceberg creates its catalog tables when it opens a catalog,
and two threads doing so at once collide in the database (``UniqueViolation`` on PostgreSQL's
type names), so it is opened under a lock, before the merge queries start
(:meth:`~spark_jobs.sinks.lake_sink.LakeSink.prepare`).  It pickles without its connection
(the merge tasks never open it), and errors name no password."""

from __future__ import annotations

import os
import threading
from typing import Any

from spark_jobs.errors import SinkUnavailable

__all__ = ["IcebergCatalog", "catalog_errors", "no_secret", "warehouse_uri"]

_LOCK = threading.RLock()


def catalog_errors() -> dict[str, Any]:
    """pyiceberg's and SQLAlchemy's errors by what they mean to the sink."""
    from pyiceberg import exceptions as e
    from sqlalchemy.exc import DBAPIError, OperationalError
    # a conflict: another writer's commit came first (pyiceberg retries its own commit, then a
    # commit whose files another snapshot touched meanwhile fails its validation)
    return {"conflict": (e.CommitFailedException, e.ValidationException), "missing": e.NoSuchTableError,
            "exists": e.TableAlreadyExistsError, "down": (OperationalError, DBAPIError)}


def no_secret(exc: Exception) -> str:
    """An SQLAlchemy error's first line without its statement and parameters (no DSN, no password)."""
    orig = getattr(exc, "orig", None)
    return str(orig if orig is not None else exc).splitlines()[0][:300]


def warehouse_uri(warehouse: str) -> str:
    """A warehouse as a URI (a local directory as an absolute ``file://`` one)."""
    return warehouse if "://" in warehouse else "file://" + os.path.abspath(warehouse)


class IcebergCatalog:
    """The catalog of ``uri`` (SQLAlchemy's form) named ``name``, its warehouse ``warehouse``,
    pyiceberg's FileIO ``properties``."""

    def __init__(self, uri: str, warehouse: str, name: str, properties: dict[str, str]) -> None:
        self.uri, self.warehouse, self.name, self.properties = uri, warehouse, name, properties
        self._catalog: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_catalog": None}

    def get(self) -> Any:
        """The open catalog (opened now if it is not)."""
        with _LOCK:
            if self._catalog is None:
                from pyiceberg.catalog.sql import SqlCatalog
                try:
                    self._catalog = SqlCatalog(self.name, uri=self.uri, warehouse=warehouse_uri(self.warehouse),
                                               **self.properties)
                except catalog_errors()["down"] as exc:
                    raise SinkUnavailable(f"the Iceberg catalog database cannot be reached: {no_secret(exc)}") from exc
            return self._catalog

    def close(self) -> None:
        """Let go of its connections (opened again on next use)."""
        catalog, self._catalog = self._catalog, None
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
