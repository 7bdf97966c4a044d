"""The connection's lifecycle of a table sink: one connection, opened on first use and again
after it was closed or lost; a sink pickles without it (its constructor's arguments only).

Every statement runs in a transaction (:meth:`SinkConnection._transaction`): committed when
the block ends, rolled back when it raises, and a connection the error broke is dropped (the
next call opens a new one).  The driver's errors of a database out of reach leave the sink
as :class:`~spark_jobs.errors.SinkUnavailable`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from spark_jobs.errors import SinkUnavailable


class SinkConnection:
    """A table sink's connection: opened on first use, every statement in a transaction.
    A database's own (:class:`~spark_jobs.sinks.postgres.PostgresConnection`,
    :class:`~spark_jobs.sinks.mysql.MySQLConnection`) sets ``DRIVER_ERROR`` and
    ``UNAVAILABLE_ERRORS`` and gives :meth:`connect`, :meth:`is_open`, :meth:`drop_broken`
    and :meth:`transaction_cursor`."""

    #: The sink it connects, in messages (``PostgresSink``).
    WHAT: str = "sink"
    #: The driver's base exception (``close`` ignores it: the connection is dropped anyway).
    DRIVER_ERROR: type[Exception] = Exception
    #: The driver's exceptions of a database out of reach: raised as :class:`SinkUnavailable`.
    UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self._conn: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_conn": None}

    @property
    def held(self) -> Any:
        """The connection held now, or None (not opened: :meth:`connection` opens one)."""
        return self._conn

    def connection(self) -> Any:
        """The connection, opened when there is none or it was closed."""
        if self._conn is None or not self.is_open(self._conn):
            try:
                self._conn = self.connect()
            except self.UNAVAILABLE_ERRORS as exc:
                if not self.out_of_reach(exc):
                    raise
                raise self.unavailable(exc) from exc
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except self.DRIVER_ERROR:
                pass
            finally:
                self._conn = None

    def out_of_reach(self, exc: Exception) -> bool:
        """Whether ``exc`` (one of ``UNAVAILABLE_ERRORS``) says the database is out of reach
        (retry the batch) rather than that it refuses this data (dead-letter the record)."""
        return True

    def unavailable(self, exc: Exception) -> SinkUnavailable:
        """The sink's error of a database out of reach."""
        return SinkUnavailable(f"{self.WHAT}: {type(exc).__name__}: {exc}")

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Drop the connection when the block broke it; a database out of reach raises
        :class:`SinkUnavailable`."""
        try:
            yield
        except self.UNAVAILABLE_ERRORS as exc:
            self.drop_broken()
            if not self.out_of_reach(exc):
                raise
            raise self.unavailable(exc) from exc
        except BaseException:
            self.drop_broken()
            raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A cursor in a transaction: committed when the block ends, rolled back (and a
        broken connection dropped) when it raises."""
        conn = self.connection()
        with self.guarded(), self.transaction_cursor(conn) as cur:
            yield cur

    def connect(self) -> Any:  # pragma: no cover - abstract
        """A new connection, set up for the sink's statements."""
        raise NotImplementedError

    def is_open(self, conn: Any) -> bool:  # pragma: no cover - abstract
        """Whether ``conn`` is still open."""
        raise NotImplementedError

    def drop_broken(self) -> None:  # pragma: no cover - abstract
        """After an error: end the transaction, and close the connection when it is broken."""
        raise NotImplementedError

    def transaction_cursor(self, conn: Any) -> contextlib.AbstractContextManager:  # pragma: no cover - abstract
        """A context manager: a cursor in a new transaction of ``conn``, committed on exit
        without an error."""
        raise NotImplementedError
