"""A MySQL/MariaDB client-protocol connection of the project's own, over a socket.

What the binlog client (:mod:`producer.binlog.binlog_stream`) needs of the protocol, and no
more: the v10 handshake; login with ``mysql_native_password`` or ``caching_sha2_password``
(its fast path; its full path in clear text over TLS, or over plain TCP with the password
encrypted by the server's RSA public key), an authentication switch included; TLS as the
``source.ssl`` settings say (:class:`common.sql.tls.TlsSettings`: an SSLRequest, then the
socket wrapped by its ``ssl.SSLContext``); packet framing (a 3-byte length and a sequence id,
payloads of 16 MiB - 1 or more split and joined); ``COM_QUERY`` answered by an OK packet
(:class:`OkResult`) or a small text result set (:class:`ResultSet`: column names, rows of
bytes or None), or a result set as it came (:meth:`Connection.query_raw`: its columns'
definitions and its rows' payloads, for a reader that parses them itself, the table reads
of :mod:`common.sql.row_reads`; or unbuffered, a batch at a time: :meth:`Connection.query_batches`);
``COM_QUIT`` on close.

An ERR packet is a :class:`~common.errors.ServerError` (code, SQL state, message); a server
that closes or resets the connection, or does not answer within the timeout, is
:class:`~common.errors.ServerGone`; what the protocol does not allow is
:class:`~common.errors.WireProtocolError`.  A TLS refusal is the same
:class:`~common.errors.TlsError`, naming the setting, as :func:`common.sql.tls.connect_mysql`
raises.  The functions above :class:`Connection` are the protocol's pure parts, used by it and
tested without a server.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Iterator

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from common.errors import ServerError, ServerGone, WireProtocolError
from common.sql.tls import TlsSettings, tls_not_offered, tls_problem

#: Capability flags (the client's and the server's: CLIENT_*).
LONG_PASSWORD, LONG_FLAG, CONNECT_WITH_DB, PROTOCOL_41 = 0x1, 0x4, 0x8, 0x200
SSL, TRANSACTIONS, SECURE_CONNECTION = 0x800, 0x2000, 0x8000
PLUGIN_AUTH, PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x80000, 0x200000
#: Commands.
COM_QUIT, COM_QUERY = 0x01, 0x03
#: The server status flag of a session whose string literals take no backslash escapes (sql_mode).
NO_BACKSLASH_ESCAPES = 0x200
#: The largest payload of one frame; a longer one goes on in the next (an exact multiple: an empty one ends it).
MAX_FRAME = 0xFFFFFF
UTF8MB4_GENERAL_CI = 45
NATIVE, CACHING_SHA2 = "mysql_native_password", "caching_sha2_password"
PLUGINS = (NATIVE, CACHING_SHA2)
#: (no MULTI_RESULTS nor MULTI_STATEMENTS: a statement answers with one OK, ERR or result set)
_CLIENT_CAPABILITIES = LONG_PASSWORD | LONG_FLAG | PROTOCOL_41 | TRANSACTIONS | SECURE_CONNECTION | PLUGIN_AUTH \
    | PLUGIN_AUTH_LENENC_CLIENT_DATA
_FAST_AUTH_OK, _FULL_AUTH, _PUBLIC_KEY_REQUEST = 3, 4, b"\x02"


# --- the pure parts ------------------------------------------------------------------------

def frame(payload: bytes, seq: int) -> tuple[bytes, int]:
    """``payload`` as the frames that carry it from sequence id ``seq`` on, and the next
    sequence id: 16 MiB - 1 bytes a frame at most, an empty frame after a full last one."""
    out = bytearray()
    start = 0
    while True:
        part = payload[start:start + MAX_FRAME]
        out += len(part).to_bytes(3, "little")
        out.append(seq)
        out += part
        seq = (seq + 1) & 0xFF
        start += MAX_FRAME
        if len(part) < MAX_FRAME:
            return bytes(out), seq


def lenenc_int(data: bytes, pos: int) -> tuple[int | None, int]:
    """The length-encoded integer at ``pos`` (None for 0xFB, NULL in a row) and the position after it."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    if first == 0xFB:
        return None, pos + 1
    if first == 0xFC:
        return data[pos + 1] | data[pos + 2] << 8, pos + 3
    if first == 0xFD:
        return int.from_bytes(data[pos + 1:pos + 4], "little"), pos + 4
    if first == 0xFE:
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    raise WireProtocolError(f"0x{first:02x} does not start a length-encoded integer")


def encode_lenenc_int(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a length-encoded integer."""
    if value < 0xFB:
        return bytes((value,))
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def native_password_scramble(password: bytes, nonce: bytes) -> bytes:
    """``mysql_native_password``'s answer: SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password)))."""
    if not password:
        return b""
    stage1 = hashlib.sha1(password).digest()
    return _xor(stage1, hashlib.sha1(nonce[:20] + hashlib.sha1(stage1).digest()).digest())


def caching_sha2_scramble(password: bytes, nonce: bytes) -> bytes:
    """``caching_sha2_password``'s fast answer: SHA256(password) XOR SHA256(SHA256(SHA256(password)) + nonce)."""
    if not password:
        return b""
    stage1 = hashlib.sha256(password).digest()
    return _xor(stage1, hashlib.sha256(hashlib.sha256(stage1).digest() + nonce[:20]).digest())


def rsa_encrypted_password(password: bytes, nonce: bytes, public_key_pem: bytes) -> bytes:
    """``caching_sha2_password``'s full answer over plain TCP: the password and a NUL, XORed
    with the nonce (repeated), encrypted with the server's RSA key (OAEP, SHA-1)."""
    plain = password + b"\0"
    mask = (nonce[:20] * (len(plain) // 20 + 1))[:len(plain)]
    key = serialization.load_pem_public_key(public_key_pem)
    return key.encrypt(_xor(plain, mask), padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(),
                                                       label=None))


def auth_response(plugin: str, password: bytes, nonce: bytes) -> bytes:
    """The first answer of ``plugin`` to the server's ``nonce``."""
    if plugin == NATIVE:
        return native_password_scramble(password, nonce)
    if plugin == CACHING_SHA2:
        return caching_sha2_scramble(password, nonce)
    raise WireProtocolError(f"the server asks for the authentication plugin {plugin!r}, which this client does not "
                            f"speak (it speaks {', '.join(PLUGINS)}): give the user one of those")


@dataclass(frozen=True)
class Handshake:
    """The server's initial handshake (protocol v10)."""

    server_version: str
    connection_id: int
    capabilities: int
    charset: int
    status: int
    nonce: bytes  # the authentication data (20 bytes)
    plugin: str  # the authentication plugin it names ("" before PLUGIN_AUTH)

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


def _cstring(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\0", pos)
    if end < 0:
        return data[pos:], len(data)
    return data[pos:end], end + 1


def parse_handshake(data: bytes) -> Handshake:
    """The server's first packet: a v10 handshake (an ERR packet is raised as :class:`ServerError`)."""
    if data[:1] == b"\xff":
        raise parse_error(data)
    if data[:1] != b"\x0a":
        raise WireProtocolError(f"the server speaks protocol version {data[0] if data else None}, not 10")
    version, p = _cstring(data, 1)
    connection_id = int.from_bytes(data[p:p + 4], "little")
    nonce = data[p + 4:p + 12]
    p += 13  # (and a filler)
    capabilities = int.from_bytes(data[p:p + 2], "little")
    charset = status = 0
    plugin = b""
    if len(data) > p + 2:
        charset, status, upper, auth_len = struct.unpack_from("<BHHB", data, p + 2)
        capabilities |= upper << 16
        p += 2 + 6 + 10
        if capabilities & SECURE_CONNECTION:
            rest = max(13, auth_len - 8)
            nonce += data[p:p + rest].rstrip(b"\0")
            p += rest
        if capabilities & PLUGIN_AUTH:
            plugin, p = _cstring(data, p)
    if len(nonce) < 20 or not capabilities & PROTOCOL_41:
        raise WireProtocolError(f"the server ({version.decode(errors='replace')}) does not speak protocol 4.1's login")
    return Handshake(version.decode("utf-8", "replace"), connection_id, capabilities, charset, status, nonce[:20],
                     plugin.decode("ascii", "replace"))


def client_capabilities(server: int, *, database: bool, tls: bool) -> int:
    """The capabilities the client asks for of a server with ``server``'s."""
    caps = _CLIENT_CAPABILITIES & (server | ~(PLUGIN_AUTH | PLUGIN_AUTH_LENENC_CLIENT_DATA))
    return caps | (CONNECT_WITH_DB if database else 0) | (SSL if tls else 0)


def ssl_request(capabilities: int, charset: int = UTF8MB4_GENERAL_CI) -> bytes:
    """The SSLRequest packet's payload: the handshake response's first 32 bytes."""
    return struct.pack("<IIB23x", capabilities, MAX_FRAME, charset)


def handshake_response(capabilities: int, user: str, auth: bytes, plugin: str, database: str | None = None,
                       charset: int = UTF8MB4_GENERAL_CI) -> bytes:
    """The HandshakeResponse41 payload."""
    out = bytearray(ssl_request(capabilities, charset))
    out += user.encode() + b"\0"
    if capabilities & PLUGIN_AUTH_LENENC_CLIENT_DATA:
        out += encode_lenenc_int(len(auth)) + auth
    else:
        out += bytes((len(auth),)) + auth
    if capabilities & CONNECT_WITH_DB:
        out += (database or "").encode() + b"\0"
    if capabilities & PLUGIN_AUTH:
        out += plugin.encode() + b"\0"
    return bytes(out)


def parse_error(data: bytes) -> ServerError:
    """An ERR packet as a :class:`ServerError`."""
    code = int.from_bytes(data[1:3], "little")
    if data[3:4] == b"#":
        return ServerError(code, data[4:9].decode("ascii", "replace"), data[9:].decode("utf-8", "replace"))
    return ServerError(code, "", data[3:].decode("utf-8", "replace"))


@dataclass(frozen=True)
class OkResult:
    """An OK packet: what a statement without a result set did."""

    affected_rows: int
    last_insert_id: int
    status: int
    warnings: int
    info: bytes = b""


def parse_ok(data: bytes) -> OkResult:
    """An OK packet (its first byte 0x00, or 0xFE ending a result set)."""
    affected, p = lenenc_int(data, 1)
    insert_id, p = lenenc_int(data, p)
    status, warnings = struct.unpack_from("<HH", data, p) if len(data) >= p + 4 else (0, 0)
    return OkResult(affected or 0, insert_id or 0, status, warnings, bytes(data[p + 4:]))


@dataclass(frozen=True)
class ResultSet:
    """A text result set: its column names and rows (each value the server's text as bytes, or None)."""

    columns: list[str]
    rows: list[tuple[bytes | None, ...]]


@dataclass(frozen=True)
class Column:
    """A result column's definition (ColumnDefinition41), what its values are read by: its
    name, character set (a collation id, 63 for binary), field type (``MYSQL_TYPE_*``) and flags."""

    name: str
    charset: int
    type: int
    flags: int


def parse_column(data: bytes) -> Column:
    """A column definition (ColumnDefinition41: catalog, schema, table, org_table, name,
    org_name, then the fixed fields' length, character set, length, type, flags, decimals)."""
    p = 0
    for _ in range(4):
        n, p = lenenc_int(data, p)
        p += n or 0
    n, p = lenenc_int(data, p)
    name = data[p:p + (n or 0)].decode("utf-8", "replace")
    p += n or 0
    n, p = lenenc_int(data, p)  # org_name
    p += n or 0
    _, p = lenenc_int(data, p)  # (0x0c)
    if len(data) < p + 9:
        raise WireProtocolError("a column definition shorter than its fixed fields")
    charset, _, type_, flags = struct.unpack_from("<HIBH", data, p)
    return Column(name, charset, type_, flags)


@dataclass(frozen=True)
class RawResult:
    """A text result set as it came: its columns' definitions and its rows' payloads (each
    row's values, length-coded, for :func:`parse_text_row` or a parser of the reader's own)."""

    columns: list[Column]
    rows: list[bytes]


def column_name(data: bytes) -> str:
    """The name of a column definition (ColumnDefinition41: after catalog, schema, table, org_table)."""
    p = 0
    for _ in range(4):
        n, p = lenenc_int(data, p)
        p += n or 0
    n, p = lenenc_int(data, p)
    return data[p:p + (n or 0)].decode("utf-8", "replace")


def parse_text_row(data: bytes, columns: int) -> tuple[bytes | None, ...]:
    """A text result set's row of ``columns`` values."""
    out = []
    p = 0
    for _ in range(columns):
        n, p = lenenc_int(data, p)
        if n is None:
            out.append(None)
        else:
            out.append(bytes(data[p:p + n]))
            p += n
    return tuple(out)


def is_eof(data: bytes) -> bool:
    """Whether a packet is an EOF packet (0xFE, shorter than 9 bytes: not a row)."""
    return data[:1] == b"\xfe" and len(data) < 9


# --- the connection ------------------------------------------------------------------------

class Connection:
    """One client connection to a MySQL/MariaDB server (see the module): made by :meth:`open`
    (or :func:`connect`), then :meth:`query`, or :meth:`command` and :meth:`read_packet` for a
    command of one's own (the binlog dump); :meth:`close` says COM_QUIT.

    ``tls``: the ``source.ssl``-style settings (None: ``preferred``); ``auth_plugin``: the
    plugin of the first answer (None: the one the server names, where this client speaks it);
    ``server_public_key``: the server's RSA public key (PEM) for ``caching_sha2_password``'s
    full login over plain TCP (None: asked of the server); ``read_timeout``: seconds a read may
    wait once logged in (None: for ever, as a blocking binlog stream with heartbeats does).
    The password goes as UTF-8, the session's character set (utf8mb4), as a password set over
    such a session was hashed (pymysql sends a ``str`` password as Latin-1)."""

    def __init__(self, host: str, port: int, user: str, password: str, *, database: str | None = None,
                 tls: TlsSettings | None = None, connect_timeout: float = 10.0, read_timeout: float | None = None,
                 auth_plugin: str | None = None, server_public_key: bytes | None = None) -> None:
        self.host, self.port, self.user, self.database = host, port, user, database
        self._password = password.encode()
        self.tls = tls or TlsSettings()
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.auth_plugin, self.server_public_key = auth_plugin, server_public_key
        self.handshake: Handshake | None = None
        self.plugin = ""  # the plugin the login ended with
        self.secure = False  # over TLS
        self._sock: socket.socket | None = None
        self._rfile = None
        self._read = None  # the buffered socket's read(n)
        self._seq = 0
        self.status = 0  # the server status of the last OK or EOF packet (NO_BACKSLASH_ESCAPES...)
        self.streaming = False  # a result set's rows left on the socket (query_batches)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def server_version(self) -> str:
        return self.handshake.server_version if self.handshake else ""

    @property
    def is_mariadb(self) -> bool:
        return bool(self.handshake and self.handshake.is_mariadb)

    def open(self) -> "Connection":
        """Connect, agree on TLS and log in (a failure closes the socket)."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise ServerGone(f"cannot connect to the server at {self.where}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._attach(sock)
        hs = None
        try:
            hs = self.handshake = parse_handshake(self.read_packet())
            use_tls = self._wants_tls(hs)
            caps = client_capabilities(hs.capabilities, database=self.database is not None, tls=use_tls)
            if use_tls:
                self.write(ssl_request(caps))
                self._start_tls()
            plugin = self.auth_plugin or (hs.plugin if hs.plugin in PLUGINS else NATIVE)
            self.write(handshake_response(caps, self.user, auth_response(plugin, self._password, hs.nonce), plugin,
                                          self.database))
            self.plugin = login_exchange(self, self._password, plugin, hs.nonce, self.server_public_key)
        except ServerError as exc:
            self._drop()
            problem = tls_problem(exc, self.tls, self.where, offered=bool(hs and hs.capabilities & SSL))
            if problem is not None:
                raise problem from None
            raise
        except BaseException:
            self._drop()
            raise
        self._sock.settimeout(self.read_timeout)  # (the TLS socket, if TLS wraps the first)
        return self

    def _attach(self, sock: socket.socket) -> None:
        self._sock = sock
        self._rfile = sock.makefile("rb", buffering=256 * 1024)
        self._read = self._rfile.read

    def _wants_tls(self, hs: Handshake) -> bool:
        mode = self.tls.mode
        if mode == "disabled":
            return False
        if hs.capabilities & SSL:
            return True
        if mode == "preferred" and not self.tls.cert:
            return False
        raise tls_not_offered(self.tls, self.where)

    def _start_tls(self) -> None:
        context = self.tls.context()
        self._rfile.close()  # (nothing buffered: the server waits for the TLS handshake)
        try:
            sock = context.wrap_socket(self._sock, server_hostname=self.host)
        except ssl.SSLError as exc:
            err = ServerGone(f"TLS with the server at {self.where} failed: {exc}")
            err.__cause__ = exc
            raise tls_problem(err, self.tls, self.where) or err from None
        except OSError as exc:
            raise self._gone(exc) from None
        self._attach(sock)
        self.secure = True

    # -- packets ---------------------------------------------------------------------
    def read_packet(self) -> bytes:
        """The next packet's payload (frames of 16 MiB - 1 joined)."""
        try:
            read = self._read
            head = read(4)
            n = head[0] | head[1] << 8 | head[2] << 16
            seq = head[3]
            data = read(n)
        except (OSError, IndexError, ValueError, TypeError) as exc:
            raise self._gone(exc) from None
        if len(data) != n:
            raise self._gone(None)
        if seq != self._seq:
            raise WireProtocolError(f"the server at {self.where} sent packet {seq}, not {self._seq}")
        self._seq = (self._seq + 1) & 0xFF
        if n == MAX_FRAME:
            return data + self.read_packet()
        return data

    def write(self, payload: bytes) -> None:
        """Send ``payload`` as the next packet(s) of the exchange."""
        out, self._seq = frame(payload, self._seq)
        try:
            self._sock.sendall(out)
        except (OSError, AttributeError) as exc:
            raise self._gone(exc) from None

    def command(self, command: int, payload: bytes = b"") -> None:
        """Start an exchange: ``command`` and its ``payload`` as packet 0."""
        self._seq = 0
        self.write(bytes((command,)) + payload)

    def _gone(self, exc: BaseException | None) -> ServerGone:
        if isinstance(exc, (TimeoutError, socket.timeout)):
            why = "did not answer in time"
        elif exc is None or isinstance(exc, (IndexError, ValueError, TypeError, AttributeError)):
            why = "closed the connection"
        else:
            why = f"dropped the connection ({exc})"
        self._drop()
        return ServerGone(f"the server at {self.where} {why}")

    # -- statements ------------------------------------------------------------------
    def query(self, sql: str | bytes) -> OkResult | ResultSet:
        """Run ``sql``: its OK, or its text result set (an ERR raised as :class:`ServerError`)."""
        result = self.query_raw(sql, parse=False)
        if isinstance(result, OkResult):
            return result
        count = len(result.columns)
        return ResultSet([c.name for c in result.columns], [parse_text_row(row, count) for row in result.rows])

    def query_raw(self, sql: str | bytes, *, parse: bool = True) -> OkResult | RawResult:
        """Run ``sql`` (a str goes as UTF-8): its OK, or its result set as it came (an ERR
        raised as :class:`ServerError`); ``parse``: the columns' definitions read
        (:func:`parse_column`), else only their names (types and flags 0)."""
        head = self._result_head(sql, parse)
        return head if isinstance(head, OkResult) else RawResult(head, self._rows())

    def query_batches(self, sql: str | bytes, rows: int) -> tuple[list[Column], Iterator[list[bytes]]]:
        """Run the SELECT ``sql`` unbuffered: its columns' definitions, and its rows' payloads
        ``rows`` at a time, each batch read off the socket only when asked for (the server
        sends as the client reads: the client holds one batch, whatever the result's size).
        Until the last batch is read the connection takes no other statement
        (:class:`WireProtocolError`); closed then, it is dropped without COM_QUIT."""
        if rows < 1:
            raise ValueError("a batch holds one row or more")
        head = self._result_head(sql, True)
        if isinstance(head, OkResult):
            raise WireProtocolError(f"{sql!r} returned no result set")
        self.streaming = True

        def batches() -> Iterator[list[bytes]]:
            while self.streaming:
                batch = self._rows(rows)
                if batch:  # (not the EOF alone, after a full batch)
                    yield batch
        return head, batches()

    def _result_head(self, sql: str | bytes, parse: bool) -> OkResult | list[Column]:
        """Send ``sql``: its OK, or its result set's columns (the rows left to read)."""
        if self.streaming:
            raise WireProtocolError(f"a statement sent to {self.where} before the rows of the last one were read")
        self.command(COM_QUERY, sql.encode() if isinstance(sql, str) else sql)
        data = self.read_packet()
        first = data[0]
        if first == 0x00:
            ok = parse_ok(data)
            self.status = ok.status
            return ok
        if first == 0xFF:
            raise parse_error(data)
        if first == 0xFB:
            raise WireProtocolError("the server asks for a local file (LOAD DATA LOCAL), which this client does not send")
        count, _ = lenenc_int(data, 0)
        columns = [parse_column(self.read_packet()) if parse else Column(column_name(self.read_packet()), 0, 0, 0)
                   for _ in range(count or 0)]
        if not is_eof(self.read_packet()):
            raise WireProtocolError(f"the server at {self.where} sent no EOF after a result set's columns")
        return columns

    def _rows(self, limit: int = -1) -> list[bytes]:
        """A result set's rows, their payloads as read, up to its EOF (the session's status
        taken from it; :attr:`streaming` cleared); an ERR in their place raised.  ``limit``:
        at most that many, the rest left on the socket (:meth:`query_batches`).  One loop over
        the socket's buffer, no call a row but its two reads: a table read's chunk is
        thousands of rows."""
        read, seq, rows = self._read, self._seq, []
        append = rows.append
        while True:
            try:
                head = read(4)
                n = head[0] | head[1] << 8 | head[2] << 16
                data = read(n)
            except (OSError, IndexError, ValueError, TypeError) as exc:
                raise self._gone(exc) from None
            if len(data) != n:
                raise self._gone(None)
            if head[3] != seq:
                raise WireProtocolError(f"the server at {self.where} sent packet {head[3]}, not {seq}")
            seq = (seq + 1) & 0xFF
            if n == MAX_FRAME:  # (a row of 16 MiB - 1 bytes or more: its other frames)
                self._seq = seq
                data += self.read_packet()
                seq = self._seq
            first = data[0] if data else 0
            if first == 0xFE and n < 9:  # the EOF
                self._seq, self.streaming = seq, False
                if n >= 5:
                    self.status = data[3] | data[4] << 8
                return rows
            if first == 0xFF:
                self._seq, self.streaming = seq, False
                raise parse_error(data)
            append(data)
            if len(rows) == limit:
                self._seq = seq
                return rows

    def value(self, sql: str) -> bytes | None:
        """The first column of the first row of ``sql``'s result set (None: no row, or NULL)."""
        result = self.query(sql)
        if not isinstance(result, ResultSet):
            raise WireProtocolError(f"{sql!r} returned no result set")
        return result.rows[0][0] if result.rows else None

    # -- the end ---------------------------------------------------------------------
    def close(self) -> None:
        """Say COM_QUIT (when the connection still stands, and no result set's rows are left
        on it) and close the socket."""
        if self._sock is not None and not self.streaming:
            try:
                self.command(COM_QUIT)
            except ServerGone:
                pass
        self._drop()

    def _drop(self) -> None:
        sock, rfile, self._sock, self._rfile, self._read = self._sock, self._rfile, None, None, None
        self.streaming = False
        for it in (rfile, sock):
            if it is not None:
                try:
                    it.close()
                except OSError:
                    pass

    @property
    def closed(self) -> bool:
        return self._sock is None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



def login_exchange(conn: "Connection", password: bytes, plugin: str, nonce: bytes,
                   server_public_key: bytes | None) -> str:
    """The server's answers to a login (``conn``'s handshake response sent), to its OK: an
    authentication switch, caching_sha2_password's rounds (its full login: the password in
    clear text over TLS, else encrypted with the server's RSA public key, given or asked of
    the server); an ERR raised.  The plugin the login ended with."""
    while True:
        data = conn.read_packet()
        first = data[0]
        if first == 0x00:
            return plugin
        if first == 0xFF:
            raise parse_error(data)
        if first == 0xFE:  # an authentication switch request
            name, p = _cstring(data, 1)
            plugin, nonce = name.decode("ascii", "replace"), data[p:].rstrip(b"\0")
            conn.write(auth_response(plugin, password, nonce))
        elif first == 0x01 and plugin == CACHING_SHA2 and len(data) == 2 and data[1] == _FAST_AUTH_OK:
            continue  # (the OK follows)
        elif first == 0x01 and plugin == CACHING_SHA2 and len(data) == 2 and data[1] == _FULL_AUTH:
            if conn.secure:
                conn.write(password + b"\0")
                continue
            key = server_public_key
            if key is None:
                conn.write(_PUBLIC_KEY_REQUEST)
                data = conn.read_packet()
                if data[:1] == b"\xff":
                    raise parse_error(data)
                key = data[1:]
            conn.write(rsa_encrypted_password(password, nonce, key))
        else:
            raise WireProtocolError(f"the server at {conn.where} answered the login ({plugin}) with a packet "
                                    f"this client does not expect (0x{first:02x})")

def connect(host: str, port: int, user: str, password: str, **kw) -> Connection:
    """An open :class:`Connection` (``kw``: its keyword settings)."""
    return Connection(host, port, user, password, **kw).open()
