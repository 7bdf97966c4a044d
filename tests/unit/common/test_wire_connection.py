""":class:`common.sql.wire.Connection` against a scripted server (tests/wire_helpers.py): MySQL
8's ``caching_sha2_password`` logins (fast; full with the RSA key asked of the server or given,
or in clear text over TLS; an auth switch to it), a plugin it does not speak, a 16 MiB result row joined from its frames,
and a server that closes the connection, stops answering or breaks the packet sequence."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cdc.stack.certs import CertificateAuthority
from common.errors import ServerError, ServerGone, WireProtocolError
from common.sql import wire
from common.sql.tls import TlsSettings
from tests.wire_helpers import (
    MYSQL8_CAPABILITIES,
    NONCE,
    RSA_PEM,
    ScriptedServer,
    err_packet,
    handshake_v10,
    native_ok,
    ok_packet,
    rsa_decrypted,
    sha2_fast_ok,
)

PLAIN = TlsSettings("disabled")
SECRET = b"s3cret-\xc3\xa9"  # (a password is sent as UTF-8)


def _connect(server: ScriptedServer, password: str = SECRET.decode(), **kw) -> wire.Connection:
    return wire.connect("127.0.0.1", server.port, "cdc", password, tls=PLAIN, connect_timeout=60, **kw)


def _full_login(side, *, key_asked: bool) -> None:
    """caching_sha2_password's full login over plain TCP, as MySQL 8 runs it (cache empty)."""
    side.write(b"\x01\x04")  # perform full authentication
    data = side.read()
    if key_asked:
        assert data == b"\x02"  # the public key request
        side.write(b"\x01" + RSA_PEM)
        data = side.read()
    if rsa_decrypted(data) == SECRET + b"\0":
        side.write(ok_packet())
    else:
        side.write(err_packet(1045, "28000", "Access denied for user 'cdc'@'localhost' (using password: YES)"))


def test_caching_sha2_fast_login_then_a_query():
    def script(side):
        side.write(handshake_v10())
        user, auth, plugin = side.read_login()
        assert (user, plugin) == ("cdc", "caching_sha2_password") and sha2_fast_ok(auth, SECRET)
        side.write(b"\x01\x03")  # fast authentication success
        side.write(ok_packet())
        side.seq = 0
        assert side.read() == b"\x03SELECT 1"
        side.write(b"\x01")
        side.write(b"\x00" * 4 + b"\x011" + b"\x00" * 8)  # (a column definition: empty strings, name "1")
        side.write(b"\xfe\x00\x00\x02\x00")
        side.write(b"\x011")
        side.write(b"\xfe\x00\x00\x02\x00")
        side.seq = 0
        assert side.read() == b"\x01"  # COM_QUIT

    server = ScriptedServer(script)
    conn = _connect(server)
    assert conn.plugin == "caching_sha2_password" and not conn.secure and conn.server_version == "8.4.3"
    assert conn.query("SELECT 1") == wire.ResultSet(["1"], [(b"1",)])
    conn.close()
    server.join()


@pytest.mark.parametrize("key_given", [False, True])
def test_caching_sha2_full_login_over_plain_tcp_encrypts_with_the_servers_key(key_given):
    def script(side):
        side.write(handshake_v10())
        side.read_login()
        _full_login(side, key_asked=not key_given)

    server = ScriptedServer(script)
    conn = _connect(server, server_public_key=RSA_PEM if key_given else None)
    assert conn.plugin == "caching_sha2_password"
    conn.close()
    server.join()


def test_caching_sha2_full_login_over_tls_sends_the_password_in_clear_text(tmp_path):
    ca = CertificateAuthority(tmp_path / "certs")
    cert = ca.issue("server", ("localhost",))

    def script(side):
        side.write(handshake_v10(capabilities=MYSQL8_CAPABILITIES | wire.SSL))
        side.start_tls(cert.cert, cert.key)
        side.read_login()
        side.write(b"\x01\x04")  # perform full authentication
        assert side.read() == SECRET + b"\0"
        side.write(ok_packet())

    server = ScriptedServer(script)
    conn = wire.connect("localhost", server.port, "cdc", SECRET.decode(), connect_timeout=60,
                        tls=TlsSettings("verify_identity", ca.ca, setting="source.ssl"))
    assert conn.secure and conn.plugin == "caching_sha2_password"
    conn.close()
    server.join()


def test_a_wrong_password_in_a_full_login_is_the_servers_error():
    def script(side):
        side.write(handshake_v10())
        side.read_login()
        _full_login(side, key_asked=True)

    server = ScriptedServer(script)
    with pytest.raises(ServerError) as err:
        _connect(server, password="wrong")
    assert err.value.code == 1045 and "Access denied for user 'cdc'" in err.value.message
    server.join()


def test_an_auth_switch_to_caching_sha2_is_followed():
    def script(side):
        side.write(handshake_v10("mysql_native_password"))
        _, auth, plugin = side.read_login()
        assert plugin == "mysql_native_password" and native_ok(auth, SECRET)
        other = bytes(range(40, 60))
        side.write(b"\xfecaching_sha2_password\0" + other + b"\0")
        assert sha2_fast_ok(side.read(), SECRET, other)
        side.write(b"\x01\x03")
        side.write(ok_packet())

    server = ScriptedServer(script)
    conn = _connect(server)
    assert conn.plugin == "caching_sha2_password"
    conn.close()
    server.join()


def test_a_plugin_it_does_not_speak_is_named():
    def script(side):
        side.write(handshake_v10("mysql_native_password"))
        side.read_login()
        side.write(b"\xfeclient_ed25519\0" + NONCE + b"\0")

    server = ScriptedServer(script)
    with pytest.raises(WireProtocolError, match="client_ed25519"):
        _connect(server)
    server.join()


def _logged_in_then(after):
    def script(side):
        side.write(handshake_v10("mysql_native_password"))
        side.read_login()
        side.write(ok_packet())
        side.seq = 0
        side.read()
        after(side)
    return script


def test_a_row_of_more_than_16_mib_is_joined_from_its_frames():
    value = b"v" * (wire.MAX_FRAME + 10)

    def result(side):
        side.write(b"\x01")
        side.write(b"\x00" * 4 + b"\x01v" + b"\x00" * 8)
        side.write(b"\xfe\x00\x00\x02\x00")
        row = wire.encode_lenenc_int(len(value)) + value
        side.write(row[:wire.MAX_FRAME])
        side.write(row[wire.MAX_FRAME:])
        side.write(b"\xfe\x00\x00\x02\x00")

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server)
    assert conn.query("SELECT v").rows == [(value,)]
    server.join()
    conn.close()


def test_a_server_that_closes_the_connection_mid_packet_is_gone():
    server = ScriptedServer(_logged_in_then(lambda side: side.sock.sendall(b"\x10\x00\x00\x01abc")))
    conn = _connect(server)
    with pytest.raises(ServerGone, match="closed the connection"):
        conn.query("SELECT 1")
    assert conn.closed
    server.join()


def test_a_server_that_stops_answering_is_gone_after_the_read_timeout():
    server = ScriptedServer(_logged_in_then(lambda side: time.sleep(1.5)))
    conn = _connect(server, read_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ServerGone, match="did not answer in time"):
        conn.query("SELECT 1")
    assert time.monotonic() - started < 1.2
    server.join()


def test_a_packet_out_of_sequence_is_a_protocol_error():
    server = ScriptedServer(_logged_in_then(lambda side: side.write(ok_packet(), seq=5)))
    conn = _connect(server)
    with pytest.raises(WireProtocolError, match="sent packet 5, not 1"):
        conn.query("DO 1")
    conn.close()
    server.join()


def test_an_unreachable_server_is_gone_naming_it():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # (free once closed: nothing listens there)
    with pytest.raises(ServerGone, match=f"cannot connect to the server at 127.0.0.1:{port}"):
        wire.connect("127.0.0.1", port, "cdc", "x", tls=PLAIN, connect_timeout=2)


def test_a_server_that_sends_no_handshake_is_gone_after_the_connect_timeout():
    server = ScriptedServer(lambda side: time.sleep(1.5))
    started = time.monotonic()
    with pytest.raises(ServerGone, match="did not answer in time"):
        wire.connect("127.0.0.1", server.port, "cdc", "x", tls=PLAIN, connect_timeout=0.3, read_timeout=None)
    assert time.monotonic() - started < 1.2
    server.join()


def _column(name: bytes, charset: int, type_: int) -> bytes:
    return b"".join(wire.encode_lenenc_int(len(s)) + s for s in (b"def", b"d", b"t", b"t", name, name)) \
        + b"\x0c" + charset.to_bytes(2, "little") + bytes(4) + bytes((type_,)) + bytes(5)


def test_a_raw_result_is_its_columns_and_its_rows_payloads_and_the_eof_gives_the_status():
    rows = [b"\x011\x02ab", b"\x012\xfb", b"\x013" + wire.encode_lenenc_int(300) + b"x" * 300]

    def result(side):
        side.write(b"\x02")
        side.write(_column(b"id", 63, 3))
        side.write(_column(b"s", 45, 253))
        side.write(b"\xfe\x00\x00\x02\x00")
        for row in rows:
            side.write(row)
        side.write(b"\xfe\x00\x00\x02\x02")  # (status: autocommit | NO_BACKSLASH_ESCAPES)
        side.seq = 0
        assert side.read() == b"\x01"

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server)
    got = conn.query_raw("SELECT id, s FROM t")
    assert got == wire.RawResult([wire.Column("id", 63, 3, 0), wire.Column("s", 45, 253, 0)], rows)
    assert conn.status & wire.NO_BACKSLASH_ESCAPES
    conn.close()
    server.join()


def test_an_error_in_place_of_a_row_is_the_servers_error():
    def result(side):
        side.write(b"\x01")
        side.write(_column(b"id", 63, 3))
        side.write(b"\xfe\x00\x00\x02\x00")
        side.write(b"\x011")
        side.write(err_packet(1317, "70100", "Query execution was interrupted"))

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server)
    with pytest.raises(ServerError, match="interrupted") as err:
        conn.query_raw("SELECT id FROM t")
    assert err.value.code == 1317
    server.join()
    conn.close()


def test_a_server_that_stops_sending_rows_is_gone_after_the_read_timeout():
    def result(side):
        side.write(b"\x01")
        side.write(_column(b"id", 63, 3))
        side.write(b"\xfe\x00\x00\x02\x00")
        side.write(b"\x011")
        time.sleep(1.5)

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server, read_timeout=0.3)
    with pytest.raises(ServerGone, match="did not answer in time"):
        conn.query_raw("SELECT id FROM t")
    assert conn.closed
    server.join()


def test_query_batches_reads_the_rows_a_batch_at_a_time_as_they_are_asked_for():
    """Unbuffered: the first batch is handed over while the server still holds the rest back
    (it sends them only once the test has that batch: a client reading the whole result first
    would wait for ever); a statement before the last row is read is refused; once the EOF is
    read the connection takes statements again."""
    rows = [b"\x01" + str(i).encode() for i in range(5)]
    first_batch = threading.Event()

    def result(side):
        side.write(b"\x01")
        side.write(_column(b"id", 63, 3))
        side.write(b"\xfe\x00\x00\x02\x00")
        for row in rows[:2]:
            side.write(row)
        assert first_batch.wait(5), "the client did not hand over the first batch before the rest came"
        for row in rows[2:]:
            side.write(row)
        side.write(b"\xfe\x00\x00\x02\x00")
        side.seq = 0
        assert side.read() == b"\x03SELECT 1"
        side.write(ok_packet())
        side.seq = 0
        assert side.read() == b"\x01"  # COM_QUIT

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server, read_timeout=10)
    columns, batches = conn.query_batches("SELECT id FROM t", 2)
    assert columns == [wire.Column("id", 63, 3, 0)]
    got = [next(batches)]
    first_batch.set()
    assert conn.streaming
    with pytest.raises(WireProtocolError, match="before the rows of the last one were read"):
        conn.query_raw("SELECT 2")
    got += list(batches)
    assert got == [rows[:2], rows[2:4], rows[4:]] and not conn.streaming
    assert isinstance(conn.query_raw("SELECT 1"), wire.OkResult)
    conn.close()
    server.join()


def test_a_connection_closed_mid_result_is_dropped_without_com_quit():
    def result(side):
        side.write(b"\x01")
        side.write(_column(b"id", 63, 3))
        side.write(b"\xfe\x00\x00\x02\x00")
        side.write(b"\x011")
        side.write(b"\x012")
        assert side.sock.recv(1) == b""  # (closed: no COM_QUIT in the middle of the rows)

    server = ScriptedServer(_logged_in_then(result))
    conn = _connect(server, read_timeout=10)
    _, batches = conn.query_batches("SELECT id FROM t", 1)
    assert next(batches) == [b"\x011"]
    conn.close()
    assert conn.closed and not conn.streaming
    server.join()
