"""The project's error base, and the errors of the shared base.

Every error raised on purpose derives from :class:`CDCError`, and its message says what
went wrong and what to do: the ``cdc`` command prints it without a traceback and exits 1.
Each package keeps its own kinds in an ``errors`` module like this one; code that must tell
kinds apart catches the type, never the message text.
"""

from __future__ import annotations


class CDCError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(CDCError):
    """The configuration file is missing or invalid; the message says what and where."""


class SourceError(CDCError):
    """The source server cannot be used as it is; the message says what to change."""


class SourceUnavailable(SourceError):
    """The source server cannot be reached right now (retried with backoff)."""


class TlsError(CDCError):
    """A TLS connection was refused: a certificate not signed by the configured CA or not
    naming the host, a server without TLS where it is required, a server that requires it
    where it is off.  The message names the setting; retrying cannot help."""


class KafkaAuthError(CDCError):
    """The Kafka brokers refused the client's credentials or its TLS handshake; the message
    names the ``kafka.security`` setting to look at."""


class UnsupportedType(CDCError, ValueError):
    """A column type (of the binlog, of a table definition, of an Avro schema) that is not
    mapped; the message names the column and the type."""


class OffsetLookupError(CDCError):
    """The broker did not answer an offset lookup in time."""


class PartitionStalled(CDCError, TimeoutError):
    """A partition range made no progress for the allowed time; ``position``: the next
    offset it was waiting for."""

    def __init__(self, message: str, position: int = -1) -> None:
        super().__init__(message)
        self.position = position


class ServerError(CDCError):
    """An ERR packet of a MySQL/MariaDB server (:mod:`common.sql.wire`): its error ``code``
    (1045: access denied...), its five-character ``sqlstate`` (empty when the server sent
    none) and its ``message``."""

    def __init__(self, code: int, sqlstate: str, message: str) -> None:
        super().__init__(f"({code}{', ' + sqlstate if sqlstate else ''}) {message}")
        self.code = code
        self.sqlstate = sqlstate
        self.message = message

    def __reduce__(self):
        """Pickled with its fields (the binlog reader's child process sends it to the producer)."""
        return type(self), (self.code, self.sqlstate, self.message), self.__dict__


class ServerGone(CDCError, ConnectionError):
    """A MySQL/MariaDB connection (:mod:`common.sql.wire`) that cannot be used any more: the
    server closed it or reset it, did not answer in time, or could not be reached; the message
    says which and where.  Reconnecting may help."""


class WireProtocolError(CDCError):
    """A MySQL/MariaDB server sent what the client protocol does not allow here (a packet out
    of sequence, a malformed handshake), or asked for what :mod:`common.sql.wire` does not
    speak (an authentication plugin, LOAD DATA LOCAL); the message says which."""
