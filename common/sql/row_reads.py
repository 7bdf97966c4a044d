"""Table reads over the project's own connection: a SELECT's rows as their payloads, and their values.

The snapshot's chunk reads (a SELECT of a primary-key range, thousands of rows) are most of
a read session's work, and a client's time goes into parsing the rows.  A :class:`RowSession`
runs them on a :class:`common.sql.wire.Connection` (opened by
:func:`common.sql.sessions.row_session`: TLS and login as the source's sessions have them,
read timeouts, UTC, READ COMMITTED, autocommit) and hands back each row's payload as the server
sent it (:meth:`RowSession.rows`): the select encoder (``producer/events/select_encoder.py``)
turns those bytes straight into Avro, :func:`common.sql.row_parser.values_reader` into values.

The values are pymysql's, the library the project's other sessions use: per column the same
``(encoding, converter)`` pymysql chooses for its type (:func:`readings`, from pymysql's public
``FIELD_TYPE`` constants and converters), and the statement's parameters are written as
pymysql writes them (:meth:`RowSession.literal`).  Nothing of pymysql's is reached into: the
packets are read by the project's own client; differential tests against pymysql's public API
(the same SELECT on the real server) hold the values to pymysql's.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

from pymysql.constants import FIELD_TYPE
from pymysql.converters import escape_item, escape_string, through

from common.errors import WireProtocolError
from common.sql import wire
from common.sql.row_parser import values_reader

Reading = tuple[str | None, Callable | None]

#: The session's character set (utf8mb4) as Python names its codec: pymysql's ``encoding`` of it.
ENCODING = "utf8"
_BINARY = 63  # the binary character set's id: a string column of bytes
VECTOR = 242  # MySQL 9's VECTOR (pymysql's FIELD_TYPE lacks it): its float32s, in the binary character set
#: The field types whose text is a string in the column's character set (bytes in the binary one).
_TEXT_TYPES = frozenset({FIELD_TYPE.BIT, FIELD_TYPE.BLOB, FIELD_TYPE.LONG_BLOB, FIELD_TYPE.MEDIUM_BLOB,
                         FIELD_TYPE.STRING, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR,
                         FIELD_TYPE.GEOMETRY, VECTOR})


def reading(column: wire.Column, decoders: Mapping[int, Callable]) -> Reading:
    """How pymysql reads a column's values (with ``use_unicode``, its default): JSON decoded in
    the session's character set, a string type in it (bytes for the binary character set),
    every other type as ASCII; then the type's converter in ``decoders`` (none for ``through``)."""
    if column.type == FIELD_TYPE.JSON:
        encoding: str | None = ENCODING
    elif column.type in _TEXT_TYPES:
        encoding = None if column.charset == _BINARY else ENCODING
    else:
        encoding = "ascii"
    converter = decoders.get(column.type)
    return encoding, None if converter is through else converter


def readings(columns: Sequence[wire.Column], decoders: Mapping[int, Callable]) -> list[Reading]:
    """:func:`reading` of each column."""
    return [reading(c, decoders) for c in columns]


class RowSession:
    """A session reading tables' rows (see the module) on ``conn``, an open connection logged in,
    its values by ``decoders`` (field type -> converter, pymysql's ``conv`` of the session's
    integer keys)."""

    def __init__(self, conn: wire.Connection, decoders: Mapping[int, Callable]) -> None:
        self.conn = conn
        self.decoders = dict(decoders)

    @property
    def is_mariadb(self) -> bool:
        return self.conn.is_mariadb

    def literal(self, value: Any) -> str:
        """``value`` as pymysql writes a parameter: a string quoted and escaped (only its quotes
        doubled where the session's sql_mode has NO_BACKSLASH_ESCAPES), bytes as a hex literal
        (a binary string), a sequence as a parenthesised list, any other value by pymysql's
        public encoders (``pymysql.converters.escape_item``)."""
        if isinstance(value, str):
            if self.conn.status & wire.NO_BACKSLASH_ESCAPES:
                return "'" + value.replace("'", "''") + "'"
            return "'" + escape_string(value) + "'"
        if isinstance(value, (bytes, bytearray)):
            return f"X'{value.hex()}'"
        if type(value) in (tuple, list, set, frozenset):
            return "(" + ",".join(self.literal(v) for v in value) + ")"
        return escape_item(value, ENCODING)

    def statement(self, sql: str, params: Sequence[Any] | None = None) -> bytes:
        """``sql`` with its ``%s`` parameters written in (as pymysql's ``Cursor.execute``: without
        parameters the text as it is, ``%%`` included), as the bytes sent."""
        if params is not None:
            sql = sql % tuple(self.literal(v) for v in params)
        return sql.encode(ENCODING)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> wire.OkResult:
        """Run a statement without a result set (SET...)."""
        result = self.conn.query_raw(self.statement(sql, params))
        if not isinstance(result, wire.OkResult):
            raise WireProtocolError(f"{sql!r} returned a result set")
        return result

    def rows(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[bytes], list[Reading]]:
        """The rows of a SELECT as their payloads (each row's values, length-coded), and how
        pymysql reads each of its columns (:func:`readings`, for :func:`values_reader`)."""
        result = self.conn.query_raw(self.statement(sql, params))
        if isinstance(result, wire.OkResult):
            return [], []
        return result.rows, readings(result.columns, self.decoders)

    def values(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """The rows of a SELECT as tuples of values, pymysql's."""
        payloads, columns = self.rows(sql, params)
        values = values_reader(columns)
        return [values(p) for p in payloads]

    def value_batches(self, sql: str, params: Sequence[Any] | None, rows: int) -> Iterator[list[tuple]]:
        """The rows of a SELECT as tuples of values, ``rows`` at a time, read off the connection
        as they are asked for (:meth:`common.sql.wire.Connection.query_batches`: memory bounded
        by ``rows``, not by the result)."""
        columns, batches = self.conn.query_batches(self.statement(sql, params), rows)
        values = values_reader(readings(columns, self.decoders))
        for payloads in batches:
            yield [values(p) for p in payloads]

    @property
    def streaming(self) -> bool:
        """Rows of :meth:`value_batches` left unread: the session takes no other statement."""
        return self.conn.streaming

    def close(self) -> None:
        self.conn.close()

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def __enter__(self) -> "RowSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
