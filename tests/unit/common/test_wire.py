"""The client protocol's pure parts (:mod:`common.sql.wire`), and its connection against a
scripted server (tests/wire_helpers.py) where the machine's MariaDB cannot show it: MySQL 8's
``caching_sha2_password`` (fast login, full login with the server's RSA key, an auth switch
to it), frames of 16 MiB joined, a server that stops answering, closes, or breaks the sequence."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import ServerError, WireProtocolError
from common.sql import wire
from tests.wire_helpers import NONCE, RSA_PEM, err_packet, handshake_v10, native_ok, rsa_decrypted, sha2_fast_ok


# --- pure parts ------------------------------------------------------------------------------

@given(st.integers(0, 2**64 - 1), st.binary(max_size=4))
def test_a_length_encoded_integer_reads_back(value, tail):
    data = b"x" + wire.encode_lenenc_int(value) + tail
    assert wire.lenenc_int(data, 1) == (value, len(data) - len(tail))


def test_0xfb_is_null_and_0xff_no_integer():
    assert wire.lenenc_int(b"\xfb", 0) == (None, 1)
    with pytest.raises(WireProtocolError):
        wire.lenenc_int(b"\xff", 0)


def _unframe(data: bytes) -> tuple[bytes, list[int], list[int]]:
    out, seqs, sizes, p = bytearray(), [], [], 0
    while p < len(data):
        n = int.from_bytes(data[p:p + 3], "little")
        seqs.append(data[p + 3])
        sizes.append(n)
        out += data[p + 4:p + 4 + n]
        p += 4 + n
    return bytes(out), seqs, sizes


@given(st.binary(max_size=300), st.integers(0, 255))
def test_a_small_payload_is_one_frame(payload, seq):
    data, nxt = wire.frame(payload, seq)
    assert _unframe(data) == (payload, [seq], [len(payload)])
    assert nxt == (seq + 1) & 0xFF


@pytest.mark.parametrize("size, sizes", [(wire.MAX_FRAME, [wire.MAX_FRAME, 0]),
                                         (wire.MAX_FRAME + 5, [wire.MAX_FRAME, 5]),
                                         (2 * wire.MAX_FRAME, [wire.MAX_FRAME, wire.MAX_FRAME, 0])])
def test_a_payload_of_16_mib_or_more_is_split_and_a_full_last_frame_followed_by_an_empty_one(size, sizes):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    data, nxt = wire.frame(payload, 255)
    joined, seqs, got = _unframe(data)
    assert joined == payload and got == sizes
    assert seqs == [(255 + i) & 0xFF for i in range(len(sizes))] and nxt == (255 + len(sizes)) & 0xFF


@given(st.binary(max_size=40), st.binary(min_size=20, max_size=20))
def test_the_native_scramble_passes_the_servers_check(password, nonce):
    scramble = wire.native_password_scramble(password, nonce)
    assert scramble == b"" if not password else native_ok(scramble, password, nonce)


@given(st.binary(max_size=40), st.binary(min_size=20, max_size=20))
def test_the_caching_sha2_scramble_passes_the_servers_check(password, nonce):
    scramble = wire.caching_sha2_scramble(password, nonce)
    assert scramble == b"" if not password else sha2_fast_ok(scramble, password, nonce)


def test_a_wrong_password_fails_the_servers_check():
    assert not native_ok(wire.native_password_scramble(b"wrong", NONCE), b"right")
    assert not sha2_fast_ok(wire.caching_sha2_scramble(b"wrong", NONCE), b"right")




@given(st.binary(min_size=0, max_size=60))
def test_the_rsa_encrypted_password_is_the_password_and_a_nul_under_the_nonce(password):
    assert rsa_decrypted(wire.rsa_encrypted_password(password, NONCE, RSA_PEM)) == password + b"\0"


def test_a_mysql_handshake_is_read():
    hs = wire.parse_handshake(handshake_v10())
    assert (hs.server_version, hs.connection_id, hs.nonce, hs.plugin) == ("8.4.3", 7, NONCE, "caching_sha2_password")
    assert hs.capabilities & wire.PLUGIN_AUTH and not hs.is_mariadb


def test_a_mariadb_handshake_is_read():
    hs = wire.parse_handshake(handshake_v10("mysql_native_password", version="5.5.5-10.11.19-MariaDB-log"))
    assert hs.is_mariadb and hs.plugin == "mysql_native_password" and hs.nonce == NONCE


def test_a_handshake_refused_is_the_servers_error():
    with pytest.raises(ServerError) as err:
        wire.parse_handshake(b"\xff" + struct.pack("<H", 1040) + b"Too many connections")
    assert (err.value.code, err.value.sqlstate, err.value.message) == (1040, "", "Too many connections")
    with pytest.raises(WireProtocolError, match="protocol version 9"):
        wire.parse_handshake(b"\x09old")


def test_the_handshake_response_holds_what_a_server_reads():
    caps = wire.client_capabilities(wire.parse_handshake(handshake_v10()).capabilities,
                                    database=True, tls=False)
    data = wire.handshake_response(caps, "cdc", b"A" * 32, "caching_sha2_password", "db1")
    got_caps, max_packet, charset = struct.unpack_from("<IIB", data)
    assert got_caps == caps and caps & wire.CONNECT_WITH_DB and not caps & wire.SSL
    assert (max_packet, charset, data[9:32]) == (wire.MAX_FRAME, wire.UTF8MB4_GENERAL_CI, bytes(23))
    assert data[32:] == b"cdc\0" + b"\x20" + b"A" * 32 + b"db1\0" + b"caching_sha2_password\0"
    assert wire.ssl_request(caps | wire.SSL) == data[:32].replace(struct.pack("<I", caps),
                                                                  struct.pack("<I", caps | wire.SSL), 1)


def test_error_ok_and_row_packets_are_read():
    err = wire.parse_error(err_packet(1146, "42S02", "Table 'a.b' doesn't exist"))
    assert (err.code, err.sqlstate, err.message) == (1146, "42S02", "Table 'a.b' doesn't exist")
    assert "1146" in str(err) and "42S02" in str(err)
    ok = wire.parse_ok(b"\x00\xfc\x10\x27\x05\x02\x00\x01\x00")
    assert (ok.affected_rows, ok.last_insert_id, ok.status, ok.warnings) == (10000, 5, 2, 1)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=8))
def test_a_text_row_reads_back(values):
    data = b"".join(b"\xfb" if v is None else wire.encode_lenenc_int(len(v)) + v for v in values)
    assert wire.parse_text_row(data, len(values)) == tuple(values)


def test_a_column_name_is_the_fifth_string_of_its_definition():
    strings = [b"def", b"db", b"t", b"t", b"the name", b"org"]
    data = b"".join(wire.encode_lenenc_int(len(s)) + s for s in strings) + b"\x0c" + bytes(12)
    assert wire.column_name(data) == "the name"
    assert wire.is_eof(b"\xfe\x00\x00\x02\x00") and not wire.is_eof(b"\xfe" + bytes(8))


def test_a_column_definition_gives_its_character_set_type_and_flags():
    strings = [b"def", b"db", b"t", b"t", b"amount", b"amount"]
    fixed = struct.pack("<BHIBHB2x", 0x0C, 63, 14, 246, 0x1001, 2)  # binary, length 14, NEWDECIMAL, NOT NULL|...
    data = b"".join(wire.encode_lenenc_int(len(s)) + s for s in strings) + fixed
    assert wire.parse_column(data) == wire.Column("amount", 63, 246, 0x1001)
    with pytest.raises(WireProtocolError):
        wire.parse_column(data[:-8])
