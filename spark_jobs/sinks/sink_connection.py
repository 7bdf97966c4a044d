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
    The sink sets ``SETTINGS``, ``DRIVER_ERROR`` and ``UNAVAILABLE_ERRORS`` and implements
    ``_connect``, ``_is_open``, ``_drop_broken`` and ``_transaction_cursor``."""

    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in self.SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __enter__(self) -> "SinkConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connection(self) -> Any:
        """The sink's connection, opened when there is none or it was closed."""
        if self._conn is None or not self._is_open(self._conn):
            try:
                self._conn = self._connect()
            except self.UNAVAILABLE_ERRORS as exc:
                if not self.out_of_reach(exc):
                    raise
                raise self._unavailable(exc) from exc
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

    def _unavailable(self, exc: Exception) -> SinkUnavailable:
        return SinkUnavailable(f"{type(self).__name__}: {type(exc).__name__}: {exc}")

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Drop the connection when the block broke it; a database out of reach raises
        :class:`SinkUnavailable`."""
        try:
            yield
        except self.UNAVAILABLE_ERRORS as exc:
            self._drop_broken()
            if not self.out_of_reach(exc):
                raise
            raise self._unavailable(exc) from exc
        except BaseException:
            self._drop_broken()
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor in a transaction: committed when the block ends, rolled back (and a
        broken connection dropped) when it raises."""
        conn = self.connection()
        with self._guarded(), self._transaction_cursor(conn) as cur:
            yield cur

    def _connect(self) -> Any:  # pragma: no cover - abstract
        """A new connection, set up for the sink's statements."""
        raise NotImplementedError

    def _is_open(self, conn: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _drop_broken(self) -> None:  # pragma: no cover - abstract
        """After an error: end the transaction, and close the connection when it is broken."""
        raise NotImplementedError

    def _transaction_cursor(self, conn: Any) -> contextlib.AbstractContextManager:  # pragma: no cover - abstract
        """A context manager: a cursor in a new transaction of ``conn``, committed on exit
        without an error."""
        raise NotImplementedError
