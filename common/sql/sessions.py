"""Sessions with the source server, as the CDC user: the one place that opens them.

:func:`connect` is a plain session (autocommit, utf8mb4), with connection failures told
apart: :class:`~common.errors.SourceError` when retrying cannot help (access denied, an
unknown database), :class:`~common.errors.SourceUnavailable` when it may.  :func:`read_session`
is the session that reads tables (snapshot chunks, ``cdc verify``; its rows parsed faster, with
pymysql's values: :func:`datetime_from_text`, :mod:`common.sql.row_parser`): UTC, READ COMMITTED,
each SELECT its own statement in autocommit (no long transaction, no lock), and read/write
timeouts so that a server that stops answering fails the read instead of hanging it.
"""

from __future__ import annotations

import datetime as dt

import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.converters import convert_datetime

from common.config import SourceConfig
from common.errors import SourceError, SourceUnavailable
from common.sql import row_parser
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
        where = f"cannot connect to the source {cfg.host}:{cfg.port} as '{cfg.user}': {exc.args[-1]}"
        if exc.args and exc.args[0] in (1045, 1044, 1049):  # access denied / unknown database: not transient
            raise SourceError(where) from exc
        raise SourceUnavailable(where) from exc


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


def read_session(cfg: SourceConfig, *, binary_prefix: bool = False) -> pymysql.connections.Connection:
    """A session for reading tables: TIMESTAMP values as UTC wall clock, READ COMMITTED;
    ``binary_prefix``: binary strings sent as ``_binary'..'`` (key values compared byte for byte)."""
    conn = connect(cfg, read_timeout=READ_TIMEOUT_S, write_timeout=READ_TIMEOUT_S, binary_prefix=binary_prefix)
    conn.decoders = {**conn.decoders, FIELD_TYPE.DATETIME: datetime_from_text, FIELD_TYPE.TIMESTAMP: datetime_from_text}
    row_parser.install(conn)  # rows parsed by generated code (the same values)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    except BaseException:
        conn.close()
        raise
    return conn
