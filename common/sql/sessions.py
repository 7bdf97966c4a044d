"""Sessions with the source server, as the CDC user: the one place that opens them.

:func:`connect` is a plain session (autocommit, utf8mb4), with connection failures told
apart: :class:`~common.errors.SourceError` when retrying cannot help (access denied, an
unknown database), :class:`~common.errors.SourceUnavailable` when it may.  :func:`read_session`
is the session that reads about tables (table definitions, keys, the window markers' writes;
DATETIME values parsed faster, the same values: :func:`datetime_from_text`): UTC, READ
COMMITTED, each SELECT its own statement in autocommit (no long transaction, no lock), and
read/write timeouts so that a server that stops answering fails the read instead of hanging
it.  :func:`row_session` is the same session over the project's own connection, for the bulk
row reads (the snapshot's chunk reads, in the chunk read process and in the reader threads,
and ``cdc verify``'s source rows): their rows as the server sent them, parsed by generated
code (:mod:`common.sql.row_reads`), the values pymysql's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions, convert_datetime, decoders

from common.config import SourceConfig
from common.errors import ServerError, ServerGone, SourceError, SourceUnavailable
from common.sql import wire
from common.sql.row_reads import RowSession
from common.sql.tls import TlsSettings, connect_mysql

#: Seconds a table read may wait for the server before it fails (and is retried).
READ_TIMEOUT_S = 600


def source_tls(cfg: SourceConfig) -> TlsSettings:
    """The TLS settings of every connection to the source (``source.ssl``)."""
    return TlsSettings.of(cfg.ssl, "source.ssl")


def connect(cfg: SourceConfig, database: str | None = None, **kw) -> pymysql.connections.Connection:
    """A session with the source server (``kw``: more pymysql options), over TLS as
    ``source.ssl`` says; a TLS refusal is a :class:`~common.errors.TlsError` naming the setting."""
    try:
        return connect_mysql(source_tls(cfg), host=cfg.host, port=cfg.port, user=cfg.user,
                             password=cfg.password.get_secret_value(), database=database, autocommit=True,
                             charset="utf8mb4", connect_timeout=int(cfg.connect_timeout_s), **kw)
    except pymysql.err.OperationalError as exc:
        raise _not_connected(cfg, exc.args[0] if exc.args else None, exc.args[-1] if exc.args else exc) from exc


def _not_connected(cfg: SourceConfig, code: int | None, why: Any) -> SourceError:
    """A refused connection: :class:`SourceError` for access denied or an unknown database
    (retrying cannot help), else :class:`SourceUnavailable`."""
    where = f"cannot connect to the source {cfg.host}:{cfg.port} as '{cfg.user}': {why}"
    return SourceError(where) if code in (1045, 1044, 1049) else SourceUnavailable(where)


def datetime_from_text(text: str | bytes | bytearray) -> dt.datetime | dt.date | str:
    """pymysql's DATETIME/TIMESTAMP converter (``convert_datetime``), the same values, about
    five times faster on what the server sends: ``YYYY-MM-DD hh:mm:ss[.f{1,6}]`` is parsed by
    ``datetime.fromisoformat`` (C); anything else (a zero date, an invalid one) by pymysql."""
    if type(text) is not str:
        text = text.decode("ascii")
    n = len(text)
    if (n == 19 or 21 <= n <= 26 and text[19] == "." and text[20:].isdigit()) and text[10] == " " \
            and text[4] == "-" and text[:4].isdigit():
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:
            pass
    return convert_datetime(text)


#: The converters of a read session's values by field type: pymysql's, DATETIME and TIMESTAMP
#: by :func:`datetime_from_text`.
READ_DECODERS = {**decoders, FIELD_TYPE.DATETIME: datetime_from_text, FIELD_TYPE.TIMESTAMP: datetime_from_text}
#: What a read session sets first (the first two: what pymysql sends when it connects with
#: ``charset="utf8mb4"`` and ``autocommit=True``).
_READ_SETTINGS = ("SET NAMES utf8mb4", "SET autocommit = 1", "SET time_zone = '+00:00'",
                  "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")


def read_session(cfg: SourceConfig, *, binary_prefix: bool = False) -> pymysql.connections.Connection:
    """A session for reading tables: TIMESTAMP values as UTC wall clock, READ COMMITTED;
    ``binary_prefix``: binary strings sent as ``_binary'..'`` (key values compared byte for byte)."""
    conn = connect(cfg, read_timeout=READ_TIMEOUT_S, write_timeout=READ_TIMEOUT_S, binary_prefix=binary_prefix,
                   conv={**conversions, **READ_DECODERS})
    try:
        with conn.cursor() as cur:
            for statement in _READ_SETTINGS[2:]:
                cur.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def row_session(cfg: SourceConfig) -> RowSession:
    """A session for the snapshot's chunk reads on the project's own connection (see the
    module): :func:`read_session`'s settings, TLS as ``source.ssl`` says, the same login and
    timeouts (connecting; each read and write once logged in: :data:`READ_TIMEOUT_S`)."""
    try:
        conn = wire.connect(cfg.host, cfg.port, cfg.user, cfg.password.get_secret_value(), tls=source_tls(cfg),
                            connect_timeout=cfg.connect_timeout_s, read_timeout=READ_TIMEOUT_S)
    except ServerError as exc:
        raise _not_connected(cfg, exc.code, exc.message) from exc
    except ServerGone as exc:
        raise SourceUnavailable(str(exc)) from exc
    session = RowSession(conn, READ_DECODERS)
    try:
        for statement in _READ_SETTINGS:
            session.execute(statement)
    except BaseException:
        session.close()
        raise
    return session
