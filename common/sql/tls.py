"""TLS of the connections to MySQL/MariaDB servers (``source.ssl``, ``sinks.mysql.ssl``).

:class:`TlsSettings` is a section's settings as plain values (picklable: the binlog reader's
child process and the Spark executors make their connections from it); :func:`connect_mysql`
opens a pymysql connection with them, Debezium's modes:

* ``disabled``: plain text;
* ``preferred``: TLS without verifying the server when it offers TLS, plain text otherwise
  (a client certificate, when given, makes it ``required``);
* ``required``: TLS or no connection, the server not verified;
* ``verify_ca``: and the server's certificate signed by ``ca`` (the system's CAs without one);
* ``verify_identity``: and that certificate naming the host connected to.

A connection TLS refuses fails with :class:`~common.errors.TlsError`, whose message names the
setting to look at (the server's certificate not signed by the CA, not naming the host, a
server without TLS, a server that requires it): retrying cannot help.  The server is never
sent the password before TLS is up when a mode above ``preferred`` is asked for.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from common.errors import ServerError, TlsError

MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")

#: The client errors and server errors that mean TLS was refused or is required.
_CR_SSL_CONNECTION_ERROR = 2026
_SECURE_TRANSPORT_REQUIRED = (3159, 4036)  # MySQL 8, MariaDB (ER_SECURE_TRANSPORT_REQUIRED)
_ACCESS_DENIED = 1045
#: OpenSSL's verify code of a certificate for another host (``X509_V_ERR_HOSTNAME_MISMATCH``, IP: 64).
_NAME_MISMATCH = (62, 64)


@dataclass(frozen=True)
class TlsSettings:
    """One section's TLS settings (``setting``: its name in the configuration, for messages)."""

    mode: str = "preferred"
    ca: str = ""
    cert: str = ""
    key: str = ""
    setting: str = "ssl"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TlsError(f"{self.setting}.mode must be one of {', '.join(MODES)}, not {self.mode!r}")

    @classmethod
    def of(cls, section: Any, setting: str) -> "TlsSettings":
        """The settings of a ``TlsConfig`` section (``source.ssl``), or of nothing (``None``: preferred)."""
        if section is None:
            return cls(setting=setting)
        return cls(section.mode, section.ca, section.cert, section.key, setting)

    @property
    def verifies(self) -> bool:
        return self.mode in ("verify_ca", "verify_identity")

    def context(self) -> ssl.SSLContext:
        """The client's TLS context for the modes that use one."""
        if bool(self.cert) != bool(self.key):
            raise TlsError(f"{self.setting}.cert and {self.setting}.key go together: give both or neither")
        try:
            ctx = ssl.create_default_context(cafile=self.ca or None)
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key or None)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"{self.setting}: cannot load the CA, certificate or key "
                           f"({self.setting}.ca / .cert / .key): {exc}") from None
        ctx.check_hostname = self.mode == "verify_identity"
        if not self.verifies:
            ctx.verify_mode = ssl.CERT_NONE
        # Python 3.13's strict X.509 checks refuse the certificates servers make for themselves.
        ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
        return ctx

    def pymysql_options(self) -> dict[str, Any]:
        """pymysql's connection options for these settings."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self.mode == "preferred" and not self.cert:
            return {}  # pymysql's own preferred mode (2.2.8+): TLS when offered, unverified
        return {"ssl": self.context()}  # a context: TLS required before the password is sent


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    seen = exc
    for _ in range(5):
        seen = getattr(seen, "original_exception", None) or seen.__cause__ or seen.__context__
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return seen
    return None


def tls_problem(exc: BaseException, tls: TlsSettings, where: str, *, offered: bool = False) -> TlsError | None:
    """The :class:`TlsError` a failed connection to ``where`` (``host:port``) means, or None
    when its failure is not about TLS (``offered``: the server offered TLS before it failed)."""
    cause = _ssl_cause(exc)
    if isinstance(cause, ssl.SSLCertVerificationError):
        if cause.verify_code in _NAME_MISMATCH:
            return TlsError(f"TLS: the certificate of the server at {where} does not name the host connected to "
                            f"({cause.verify_message}); {tls.setting}.mode 'verify_identity' checks it: connect by "
                            f"a name the certificate holds, or use 'verify_ca'")
        ca = f"the CA of {tls.setting}.ca ({tls.ca})" if tls.ca else f"a CA this system trusts ({tls.setting}.ca unset)"
        return TlsError(f"TLS: the certificate of the server at {where} is not signed by {ca}: "
                        f"{cause.verify_message}")
    if cause is not None:
        return TlsError(f"TLS with the server at {where} failed ({tls.setting}.mode {tls.mode!r}): {cause}")
    code = exc.code if isinstance(exc, ServerError) else \
        exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    if code == _CR_SSL_CONNECTION_ERROR:
        return tls_not_offered(tls, where)
    if code in _SECURE_TRANSPORT_REQUIRED:
        return TlsError(f"TLS: the server at {where} accepts TLS connections only, and {tls.setting}.mode is "
                        f"{tls.mode!r}: use 'required' or stronger")
    if code == _ACCESS_DENIED and offered and tls.mode == "disabled":
        # MariaDB answers a plain connection under require_secure_transport so.
        said = exc.message if isinstance(exc, ServerError) else exc.args[-1]
        return TlsError(f"the server at {where} refused a plain-text login ({said}), and it offers TLS, which "
                        f"{tls.setting}.mode is 'disabled' does not use: a server that accepts TLS connections only "
                        f"(require_secure_transport) needs 'required' or stronger; else the user or password is wrong")
    return None


def tls_not_offered(tls: TlsSettings, where: str) -> TlsError:
    """The refusal of a server at ``where`` that does not offer TLS, which ``tls`` requires."""
    return TlsError(f"TLS: the server at {where} does not offer TLS, which {tls.setting}.mode {tls.mode!r} "
                    f"requires (set it up on the server, or use 'preferred')")


def connect_mysql(tls: TlsSettings, **kw: Any) -> pymysql.connections.Connection:
    """``pymysql.connect(**kw)`` with ``tls``; a TLS refusal is a :class:`TlsError`, any other
    failure pymysql's own error."""
    conn = pymysql.connections.Connection(**kw, **tls.pymysql_options(), defer_connect=True)
    try:
        conn.connect()
        return conn
    except pymysql.err.MySQLError as exc:
        offered = bool(getattr(conn, "server_capabilities", 0) & CLIENT.SSL)
        problem = tls_problem(exc, tls, f"{kw.get('host')}:{kw.get('port', 3306)}", offered=offered)
        if problem is not None:
            raise problem from None
        raise


def is_secure(conn: pymysql.connections.Connection) -> bool:
    """Whether ``conn`` runs over TLS, as the server tells (its session's ``Ssl_cipher``)."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    return bool(row and row[1])
