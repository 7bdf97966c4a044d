"""TLS and SASL in front of the embedded broker (``cdc stack up --secure``).

The embedded Tansu 0.6.0 cannot do either itself (measured, and read in its source):
``--cert`` and ``--key`` are declared in one exclusive argument group, so both cannot be
given ("the argument '--cert <CERT>' cannot be used with '--key <KEY>'"), and its accept
loop never uses the TLS acceptor it builds (``let _acceptor = ...``: plain text with either
flag); ``--authentication`` offers SCRAM only (PLAIN: ``NoSharedMechanism``), and its only
storage engine here (``dynostore``: ``memory://``) keeps no SCRAM credentials
(``upsert_user_scram_credential`` does nothing, ``user_scram_credential`` answers none),
so no client can ever log in.

This guard is the broker's front door instead: it accepts TLS (a certificate of the
stack's CA) and Kafka's SASL handshake (``SaslHandshake`` v0-1, ``SaslAuthenticate`` v0-2;
mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 as RFC 5802 and KIP-84 describe them) on
the address the broker advertises, answers them itself, and once a client has logged in
relays its bytes to the broker, which listens on loopback only.  ``ApiVersions`` before the
login goes to the broker (its answer lists the SASL APIs); any other request before it
closes the connection, as Kafka does.  A failed login is answered with
``SASL_AUTHENTICATION_FAILED`` and the connection closed.  Passwords are read from files
and never logged.

Run as ``python -m cdc.stack.kafka_guard --listen HOST:PORT --upstream HOST:PORT [--cert
PEM --key PEM] [--user NAME=PASSWORD_FILE ...]`` (by :mod:`cdc.stack.kafka_broker`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import logging
import os
import secrets
import ssl
import struct
from dataclasses import dataclass
from pathlib import Path

from cdc.errors import LoginRefused

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_ITERATIONS = 4096
_MAX_FRAME = 100 * 1024 * 1024


# -- Kafka framing -----------------------------------------------------------------------------

@dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    body: bytes  # what follows the request header
    raw: bytes  # the whole frame, size prefix included


def _uvarint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _put_uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _skip_tags(data: bytes, i: int) -> int:
    count, i = _uvarint(data, i)
    for _ in range(count):
        _, i = _uvarint(data, i)
        size, i = _uvarint(data, i)
        i += size
    return i


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    (size,) = struct.unpack(">i", head)
    if not 0 <= size <= _MAX_FRAME:
        raise ConnectionError(f"frame of {size} bytes")
    return head + await reader.readexactly(size)


def parse_request(frame: bytes) -> Request:
    api_key, api_version, correlation_id = struct.unpack(">hhi", frame[4:12])
    (client_len,) = struct.unpack(">h", frame[12:14])
    i = 14 + max(client_len, 0)
    if _flexible(api_key, api_version):
        i = _skip_tags(frame, i)
    return Request(api_key, api_version, correlation_id, frame[i:], frame)


def _flexible(api_key: int, api_version: int) -> bool:
    """Whether a request uses the flexible (compact, tagged) encoding: the ones answered here."""
    return (api_key == SASL_AUTHENTICATE and api_version >= 2) or (api_key == API_VERSIONS and api_version >= 3)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def handshake_mechanism(req: Request) -> str:
    (n,) = struct.unpack(">h", req.body[:2])
    return req.body[2:2 + n].decode()


def handshake_response(req: Request, error: int, mechanisms: tuple[str, ...]) -> bytes:
    body = struct.pack(">ih", req.correlation_id, error) + struct.pack(">i", len(mechanisms))
    for m in mechanisms:
        body += struct.pack(">h", len(m)) + m.encode()
    return _frame(body)


def authenticate_bytes(req: Request) -> bytes:
    if req.api_version >= 2:
        n, i = _uvarint(req.body, 0)
        return req.body[i:i + n - 1]
    (n,) = struct.unpack(">i", req.body[:4])
    return req.body[4:4 + n]


def authenticate_response(req: Request, error: int, message: str | None, token: bytes) -> bytes:
    msg = None if message is None else message.encode()
    if req.api_version >= 2:
        body = struct.pack(">i", req.correlation_id) + b"\x00" + struct.pack(">h", error)
        body += b"\x00" if msg is None else _put_uvarint(len(msg) + 1) + msg
        body += _put_uvarint(len(token) + 1) + token + struct.pack(">q", 0) + b"\x00"
        return _frame(body)
    body = struct.pack(">ih", req.correlation_id, error)
    body += struct.pack(">h", -1) if msg is None else struct.pack(">h", len(msg)) + msg
    body += struct.pack(">i", len(token)) + token
    if req.api_version >= 1:
        body += struct.pack(">q", 0)  # session_lifetime_ms: no re-authentication asked
    return _frame(body)


# -- SASL mechanisms -----------------------------------------------------------------------------

def plain_login(token: bytes, users: dict[str, str]) -> str:
    """The user a PLAIN token logs in (``authzid NUL authcid NUL password``)."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise LoginRefused("malformed PLAIN token")
    authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    if authzid and authzid != user:
        raise LoginRefused("PLAIN: authorization id differs from the user")
    wanted = users.get(user)
    if wanted is None or not hmac.compare_digest(wanted.encode(), password.encode()):
        raise LoginRefused("Authentication failed: invalid username or password (PLAIN)")
    return user


def _attrs(message: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in message.split(",") if "=" in part)


class ScramServer:
    """The server side of one SCRAM exchange (RFC 5802; channel binding: none)."""

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self.hash = _HASHES[mechanism]
        self.mechanism = mechanism
        self.users = users
        self.user = ""
        self.step = 0

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def respond(self, token: bytes) -> tuple[bytes, bool]:
        """The server's answer to ``token`` and whether the exchange is over (logged in)."""
        text = token.decode("utf-8", "replace")
        if self.step == 0:
            return self._first(text), False
        return self._final(text), True

    def _first(self, text: str) -> bytes:
        gs2, _, bare = text.partition(",")
        _, _, bare = bare.partition(",")  # gs2 header: "n,," (or "n,a=authzid,")
        attrs = _attrs(bare)
        if gs2 not in ("n", "y") or "n" not in attrs or "r" not in attrs:
            raise LoginRefused(f"malformed {self.mechanism} client-first message")
        self.user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        password = self.users.get(self.user)
        salt = secrets.token_bytes(16)
        # An unknown user goes through the exchange and fails at its end, like a wrong password.
        self.salted = hashlib.pbkdf2_hmac(self.hash, (password or secrets.token_hex(16)).encode(), salt, _ITERATIONS)
        self.known = password is not None
        self.nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        self.client_first_bare = bare
        self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={_ITERATIONS}"
        self.step = 1
        return self.server_first.encode()

    def _final(self, text: str) -> bytes:
        without_proof, _, proof = text.rpartition(",p=")
        attrs = _attrs(without_proof)
        if attrs.get("r") != self.nonce or not proof:
            raise LoginRefused(f"{self.mechanism}: the nonce does not match")
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        client_key_sent = bytes(a ^ b for a, b in zip(base64.b64decode(proof),
                                                      self._hmac(self._stored_key(), auth_message)))
        if not (self.known and hmac.compare_digest(hashlib.new(self.hash, client_key_sent).digest(),
                                                   self._stored_key())):
            raise LoginRefused(f"Authentication failed during authentication due to invalid credentials with SASL "
                              f"mechanism {self.mechanism}")
        server_key = self._hmac(self.salted, b"Server Key")
        return b"v=" + base64.b64encode(self._hmac(server_key, auth_message))

    def _stored_key(self) -> bytes:
        return hashlib.new(self.hash, self._hmac(self.salted, b"Client Key")).digest()


# -- the guard -----------------------------------------------------------------------------------

class KafkaGuard:
    """Accepts clients on ``listen``, logs them in, relays them to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], users: dict[str, str], *, sasl: bool) -> None:
        self.upstream = upstream
        self.users = users
        self.sasl = sasl

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError as exc:
            log.warning("the broker at %s:%s is not reachable: %s", *self.upstream, exc)
            writer.close()
            return
        try:
            if self.sasl and not await self._login(reader, writer, up_reader, up_writer):
                return
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError) as exc:
            log.debug("connection from %s ended: %s", peer, exc)
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _login(self, reader, writer, up_reader, up_writer) -> bool:
        mechanism = ""
        scram: ScramServer | None = None
        while True:
            req = parse_request(await read_frame(reader))
            if req.api_key == API_VERSIONS:
                up_writer.write(req.raw)
                await up_writer.drain()
                writer.write(await read_frame(up_reader))
            elif req.api_key == SASL_HANDSHAKE:
                mechanism = handshake_mechanism(req)
                known = mechanism in MECHANISMS
                writer.write(handshake_response(req, 0 if known else UNSUPPORTED_SASL_MECHANISM, MECHANISMS))
                if not known or req.api_version < 1:  # v0: unframed tokens, which no client of ours sends
                    await writer.drain()
                    return False
                scram = ScramServer(mechanism, self.users) if mechanism in _HASHES else None
            elif req.api_key == SASL_AUTHENTICATE and mechanism:
                token = authenticate_bytes(req)
                try:
                    if scram is None:
                        user, answer, done = plain_login(token, self.users), b"", True
                    else:
                        answer, done = scram.respond(token)
                        user = scram.user
                except LoginRefused as exc:
                    log.info("login refused (%s): %s", mechanism, exc)
                    writer.write(authenticate_response(req, SASL_AUTHENTICATION_FAILED, str(exc), b""))
                    await writer.drain()
                    return False
                writer.write(authenticate_response(req, 0, None, answer))
                if done:
                    await writer.drain()
                    log.debug("user %s logged in (%s)", user, mechanism)
                    return True
            else:
                log.info("request %s before the SASL login: connection closed", req.api_key)
                return False
            await writer.drain()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _users(specs: list[str]) -> dict[str, str]:
    users = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        users[name] = Path(path).read_text().rstrip("\r\n")
    return users


async def _main(args: argparse.Namespace) -> None:
    context = None
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            context.load_verify_locations(args.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    guard = KafkaGuard(_address(args.upstream), _users(args.user), sasl=bool(args.user))
    host, port = _address(args.listen)
    server = await asyncio.start_server(guard.serve, host, port, ssl=context, reuse_address=True)
    log.info("guarding %s on %s:%s (TLS %s, SASL %s)", args.upstream, host, port, "on" if context else "off",
             ", ".join(MECHANISMS) if args.user else "off")
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m cdc.stack.kafka_guard", description=__doc__.split("\n")[0])
    p.add_argument("--listen", required=True, help="HOST:PORT the clients connect to (the broker's advertised one)")
    p.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
    p.add_argument("--cert", help="server certificate (PEM): TLS")
    p.add_argument("--key", help="its key (PEM)")
    p.add_argument("--client-ca", help="require client certificates signed by this CA")
    p.add_argument("--user", action="append", default=[], metavar="NAME=PASSWORD_FILE",
                   help="a SASL user and the file holding its password (SASL on when given)")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("CDC_GUARD_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
