"""A MySQL-protocol server of one connection on loopback whose side a test writes
(:class:`ScriptedServer`), for :mod:`common.sql.wire` and the binlog stream where no real
server can show it: MySQL 8's ``caching_sha2_password`` (the machine's server is MariaDB),
frames of 16 MiB, a server that stops answering or sends a packet out of sequence.  The
server side is written from the protocol's documentation, not from the client's code: the
handshake and the packets are built here with ``struct``, the logins checked as a server
checks them."""

from __future__ import annotations

import hashlib
import socket
import ssl
import struct
import threading
from typing import Callable

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

NONCE = bytes(range(1, 21))  # (no NUL: a server's nonce has none)
#: CLIENT_LONG_PASSWORD .. CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, as MySQL 8 offers them (no TLS).
MYSQL8_CAPABILITIES = 0x01 | 0x04 | 0x08 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000 | 0x200000
#: The scripted server's RSA key pair (caching_sha2_password's full login over plain TCP).
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_PEM = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def rsa_decrypted(blob: bytes, nonce: bytes = NONCE) -> bytes:
    """What the server reads of an RSA-encrypted password: decrypted (OAEP, SHA-1), the nonce XORed off."""
    plain = RSA_KEY.decrypt(blob, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None))
    return bytes(b ^ nonce[i % len(nonce)] for i, b in enumerate(plain))


def handshake_v10(plugin: str = "caching_sha2_password", capabilities: int = MYSQL8_CAPABILITIES,
                  version: str = "8.4.3", nonce: bytes = NONCE, connection_id: int = 7) -> bytes:
    """A v10 initial handshake as a server sends it."""
    return (b"\x0a" + version.encode() + b"\0" + struct.pack("<I", connection_id) + nonce[:8] + b"\0"
            + struct.pack("<HBHHB", capabilities & 0xFFFF, 255, 2, capabilities >> 16, len(nonce) + 1)
            + b"\0" * 10 + nonce[8:] + b"\0" + plugin.encode() + b"\0")


def ok_packet(affected: int = 0, status: int = 2) -> bytes:
    return b"\x00" + bytes((affected, 0)) + struct.pack("<HH", status, 0)


def err_packet(code: int, sqlstate: str, message: str) -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + sqlstate.encode() + message.encode()


def sha2_fast_ok(scramble: bytes, password: bytes, nonce: bytes = NONCE) -> bool:
    """caching_sha2_password's check of a fast answer, as the server makes it from its cache
    (SHA256(SHA256(password))): SHA256(answer XOR SHA256(cached + nonce)) == cached."""
    cached = hashlib.sha256(hashlib.sha256(password).digest()).digest()
    mask = hashlib.sha256(cached + nonce).digest()
    return len(scramble) == 32 and hashlib.sha256(bytes(a ^ b for a, b in zip(scramble, mask))).digest() == cached


def native_ok(scramble: bytes, password: bytes, nonce: bytes = NONCE) -> bool:
    """mysql_native_password's check, from what the server stores (SHA1(SHA1(password)))."""
    stored = hashlib.sha1(hashlib.sha1(password).digest()).digest()
    mask = hashlib.sha1(nonce + stored).digest()
    return len(scramble) == 20 and hashlib.sha1(bytes(a ^ b for a, b in zip(scramble, mask))).digest() == stored


class ServerSide:
    """The server's end of the one connection: packets read and written with their sequence ids."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.seq = 0

    def read(self) -> bytes:
        head = self.rfile.read(4)
        assert len(head) == 4, "the client closed the connection"
        n = int.from_bytes(head[:3], "little")
        assert head[3] == self.seq, (head[3], self.seq)
        self.seq = (head[3] + 1) & 0xFF
        return self.rfile.read(n)

    def write(self, payload: bytes, seq: int | None = None) -> None:
        seq = self.seq if seq is None else seq
        self.sock.sendall(len(payload).to_bytes(3, "little") + bytes((seq,)) + payload)
        self.seq = (seq + 1) & 0xFF

    def _recv_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the client closed the connection"
            out += chunk
        return out

    def start_tls(self, certfile: str, keyfile: str) -> None:
        """The client's SSLRequest read, then the server's side of the TLS handshake.  The request
        is read from the socket byte-exactly, not through the buffered ``rfile``: the client sends
        its TLS ClientHello right after it, and a buffered read can take that too and lose it with
        the file (both ends then wait for the other's hello until the timeout)."""
        head = self._recv_exactly(4)
        assert head[3] == self.seq, (head[3], self.seq)
        self.seq = (head[3] + 1) & 0xFF
        request = self._recv_exactly(int.from_bytes(head[:3], "little"))
        assert len(request) == 32 and int.from_bytes(request[:4], "little") & 0x800  # CLIENT_SSL
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile, keyfile)
        self.rfile.close()
        self.sock = context.wrap_socket(self.sock, server_side=True)
        self.rfile = self.sock.makefile("rb")

    def read_login(self) -> tuple[str, bytes, str]:
        """The client's handshake response: (user, auth response, plugin)."""
        data = self.read()
        caps = int.from_bytes(data[:4], "little")
        p = 32
        end = data.index(b"\0", p)
        user = data[p:end].decode()
        p = end + 1
        n = data[p]  # (a length-encoded integer below 251: one byte)
        auth = data[p + 1:p + 1 + n]
        p += 1 + n
        if caps & 0x08:  # CONNECT_WITH_DB
            p = data.index(b"\0", p) + 1
        plugin = data[p:data.index(b"\0", p)].decode()
        return user, auth, plugin


class ScriptedServer:
    """Listens on a free loopback port; the first connection runs ``script(ServerSide)`` in a
    thread.  ``join()`` waits for it and raises what the script raised (its asserts)."""

    def __init__(self, script: Callable[[ServerSide], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(script,), daemon=True)
        self.thread.start()

    def _run(self, script) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                script(ServerSide(conn))
        except BaseException as exc:  # noqa: BLE001 - re-raised by join
            self.error = exc
        finally:
            self.listener.close()

    def join(self, timeout: float = 10) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the scripted server did not finish"
        if self.error is not None:
            raise self.error
