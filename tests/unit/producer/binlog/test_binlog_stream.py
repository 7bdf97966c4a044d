"""The binlog stream's pure parts (:mod:`producer.binlog.binlog_stream`): the event header,
the checksum, the GTID set as COM_BINLOG_DUMP_GTID sends it (held to python-mysql-replication's
public ``GtidSet``), the dump commands' layouts (MySQL's documentation), the FORMAT_DESCRIPTION
and ROTATE bodies; and :class:`BinlogStream` against a scripted server: the statements it says
before the dump, the events it yields, a checksum that fails, an ERR packet and the stream's end."""

from __future__ import annotations

import random
import struct
import uuid
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.gtid import GtidSet

from common.errors import ServerError, WireProtocolError
from common.sql import wire
from common.sql.tls import TlsSettings
from producer.binlog import binlog_stream as bs
from tests.wire_helpers import ScriptedServer, err_packet, handshake_v10, ok_packet


def event(etype: int, body: bytes, log_pos: int, *, ts: int = 1700000000, server_id: int = 1, flags: int = 0,
          crc: bool = True) -> bytes:
    """A whole event as a server writes it: the header, the body, the CRC32 (when ``crc``)."""
    size = 19 + len(body) + (4 if crc else 0)
    data = struct.pack("<IBIIIH", ts, etype, server_id, size, log_pos, flags) + body
    return data + struct.pack("<I", zlib.crc32(data)) if crc else data


def fde_body(alg: int, lengths: bytes = bytes([56, 13, 0, 8, 0, 18, 0, 4, 4, 4, 4, 18])) -> bytes:
    return struct.pack("<H50sIB", 4, b"10.11.19-MariaDB-log", 0, 19) + lengths + bytes((alg,))


def test_the_header_is_read():
    data = event(30, b"body", 1234, ts=5, server_id=77, flags=0x21)
    assert bs.parse_header(data) == (5, 30, 77, 19 + 4 + 4, 1234, 0x21)
    assert bs.parse_header(b"\x00" + data, 1) == bs.parse_header(data)


@given(st.binary(max_size=200), st.integers(0, 2**32 - 1))
def test_a_checksum_is_checked(body, flip):
    data = event(2, body, 100)
    assert bs.checksum_ok(data)
    i = flip % len(data)
    broken = data[:i] + bytes((data[i] ^ 1 << (flip % 8),)) + data[i + 1:]
    assert not bs.checksum_ok(broken)


@st.composite
def gtid_sets(draw):
    """Distinct server UUIDs, each with disjoint, non-adjacent ranges, in any order (as the
    library accepts them: it refuses overlaps)."""
    out = []
    for sid in draw(st.lists(st.uuids(), min_size=1, max_size=4, unique=True)):
        points = sorted(draw(st.sets(st.integers(1, 10**12), min_size=2, max_size=10)))
        ranges = [(a, a if draw(st.booleans()) else b) for a, b in zip(points[::2], points[1::2])]
        ranges = [r for i, r in enumerate(ranges) if i == 0 or r[0] > ranges[i - 1][1] + 1]
        random.Random(draw(st.integers(0, 99))).shuffle(ranges)
        text = ":".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)
        out.append(f"{str(sid).upper() if draw(st.booleans()) else sid}:{text}")
    return ",\n".join(out)


@given(gtid_sets())
def test_a_gtid_set_is_encoded_as_python_mysql_replication_encodes_it(text):
    assert bs.encode_gtid_set(text) == GtidSet(text).encoded()


def test_a_gtid_set_is_merged_and_checked():
    sid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    encoded = bs.encode_gtid_set(f"{sid}:5-9:1-3:4, {sid}:20")
    assert encoded == struct.pack("<Q", 1) + uuid.UUID(sid).bytes + struct.pack("<QQQQQ", 2, 1, 10, 20, 21)
    assert bs.encode_gtid_set("") == bytes(8)
    for bad, why in ((f"{sid}:tag:1-5", "tagged"), ("nope:1-2", "server UUID"), (f"{sid}:3-1", "transaction range"),
                     (f"{sid}", "ranges")):
        with pytest.raises(ValueError, match=why):
            bs.encode_gtid_set(bad)


def test_the_dump_commands_are_laid_out_as_documented():
    assert bs.binlog_dump(42, "mysql-bin.000007", 1234, bs.BINLOG_DUMP_NON_BLOCK) == \
        struct.pack("<IHI", 1234, 1, 42) + b"mysql-bin.000007"
    data = b"\x01" + bytes(7) + b"S" * 16
    payload = bs.binlog_dump_gtid(42, data, bs.BINLOG_DUMP_NON_BLOCK)
    flags, server_id, name_len, pos, size = struct.unpack_from("<HIIQI", payload)
    assert (flags, server_id, name_len, pos, size) == (bs.BINLOG_DUMP_NON_BLOCK | bs.BINLOG_THROUGH_GTID, 42, 0, 4,
                                                       len(data))
    assert payload[22:] == data


def test_a_format_description_and_a_rotate_are_read():
    fde = bs.parse_format_description(fde_body(bs.CHECKSUM_CRC32))
    assert (fde.binlog_version, fde.server_version, fde.header_length, fde.checksum_alg) == \
        (4, "10.11.19-MariaDB-log", 19, 1)
    assert fde.post_header_length(2) == 13 and fde.post_header_length(4) == 8 and fde.post_header_length(99) is None
    assert bs.parse_rotate(struct.pack("<Q", 4) + b"mysql-bin.000008") == ("mysql-bin.000008", 4)


def test_a_mariadb_gtid_position_is_checked():
    assert bs.mariadb_gtid_state(" 0-1-5, 1-2-30 ") == "0-1-5,1-2-30"
    assert bs.mariadb_gtid_state("") == ""
    with pytest.raises(ValueError, match="not a MariaDB GTID position"):
        bs.mariadb_gtid_state("0-1-5'; DROP TABLE x; --")


# --- the stream against a scripted server ------------------------------------------------------

def _answer_queries(side, expected: list[str], checksum: bytes = b"CRC32") -> None:
    """The server's side of the statements before the dump: each read and answered."""
    for sql in expected:
        side.seq = 0
        assert side.read() == b"\x03" + sql.encode()
        if sql.startswith("SELECT"):
            side.write(b"\x01")
            side.write(b"\x00" * 4 + b"\x01a" + b"\x00" * 8)
            side.write(b"\xfe\x00\x00\x02\x00")
            side.write(wire.encode_lenenc_int(len(checksum)) + checksum)
            side.write(b"\xfe\x00\x00\x02\x00")
        else:
            side.write(ok_packet())


MARIADB_QUERIES = ["SELECT @@global.binlog_checksum", "SET @master_binlog_checksum = @@global.binlog_checksum",
                   "SET @master_heartbeat_period = 250000000", "SET @mariadb_slave_capability = 4"]


def _stream(events: list[bytes], *, version: str = "5.5.5-10.11.19-MariaDB-log", queries=MARIADB_QUERIES,
            dump: bytes | None = None, end: bytes = b"\xfe\x00\x00\x02\x00", **kw) -> tuple[list, bs.BinlogStream]:
    def script(side):
        side.write(handshake_v10("mysql_native_password", version=version))
        side.read_login()
        side.write(ok_packet())
        _answer_queries(side, queries)
        side.seq = 0
        got = side.read()
        if dump is not None:
            assert got == dump
        for data in events:
            side.write(b"\x00" + data)
        side.write(end)

    server = ScriptedServer(script)
    conn = wire.connect("127.0.0.1", server.port, "cdc", "pw", tls=TlsSettings("disabled"), connect_timeout=5,
                        read_timeout=5)
    stream = bs.BinlogStream(conn, server_id=9, heartbeat_s=0.25, **kw)
    try:
        return list(stream), stream
    finally:
        stream.close()
        server.join()


ROTATE = struct.pack("<Q", 4) + b"mysql-bin.000002"
QUERY = b"\x05" * 13 + b"BEGIN"


def test_the_stream_says_what_it_understands_asks_from_a_position_and_yields_the_events():
    events = [event(bs.ROTATE_EVENT, ROTATE, 0, ts=0), event(bs.FORMAT_DESCRIPTION_EVENT, fde_body(1), 0),
              event(2, QUERY, 300, flags=8), event(bs.ROTATE_EVENT, struct.pack("<Q", 4) + b"mysql-bin.000003", 350)]
    got, stream = _stream(events, file="mysql-bin.000002", pos=256, blocking=False, verify_checksum=True,
                          dump=b"\x12" + bs.binlog_dump(9, "mysql-bin.000002", 256, bs.BINLOG_DUMP_NON_BLOCK))
    assert [(e.type, e.log_pos, e.event_size, e.body) for e in got] == [
        (4, 0, 19 + len(ROTATE) + 4, ROTATE), (15, 0, 19 + len(fde_body(1)) + 4, fde_body(1)),
        (2, 300, 19 + len(QUERY) + 4, QUERY), (4, 350, 19 + 24 + 4, struct.pack("<Q", 4) + b"mysql-bin.000003")]
    assert (got[2].timestamp, got[2].server_id, got[2].flags) == (1700000000, 1, 8)
    assert stream.format.checksum_alg == 1 and stream.checksum == 4
    assert (stream.file, stream.position) == ("mysql-bin.000003", 4)


def test_events_after_a_format_description_without_checksums_have_none():
    events = [event(bs.ROTATE_EVENT, ROTATE, 0, ts=0),
              event(bs.FORMAT_DESCRIPTION_EVENT, fde_body(0), 0)[:-4] + b"\xaa\xbb\xcc\xdd",  # (not computed: OFF)
              event(2, QUERY, 300, crc=False)]
    got, stream = _stream(events, file="mysql-bin.000002", pos=4, blocking=False, verify_checksum=True)
    assert [e.body for e in got] == [ROTATE, fde_body(0), QUERY] and stream.checksum == 0


def test_a_checksum_that_fails_is_raised_when_verified_and_passed_when_not():
    bad = bytearray(event(2, QUERY, 300))
    bad[25] ^= 0xFF
    events = [event(bs.FORMAT_DESCRIPTION_EVENT, fde_body(1), 0), bytes(bad)]
    with pytest.raises(WireProtocolError, match="fails its CRC32 checksum"):
        _stream(events, file="f", verify_checksum=True)
    got, _ = _stream(events, file="f")
    assert got[1].body == bytes(bad)[19:-4]


def test_an_error_in_the_stream_is_the_servers_error():
    with pytest.raises(ServerError) as err:
        _stream([], file="nope.000001", end=err_packet(1236, "HY000", "Could not find first log file name"))
    assert err.value.code == 1236 and "first log file" in err.value.message


def test_a_mariadb_gtid_start_sets_the_connect_state_and_dumps_from_nothing():
    queries = MARIADB_QUERIES + ["SET @slave_connect_state = '0-1-42'", "SET @slave_gtid_strict_mode = 0",
                                 "SET @slave_gtid_ignore_duplicates = 0"]
    got, _ = _stream([event(2, QUERY, 300)], queries=queries, mariadb_gtid="0-1-42", blocking=False,
                     dump=b"\x12" + bs.binlog_dump(9, "", 4, bs.BINLOG_DUMP_NON_BLOCK))
    assert [e.body for e in got] == [QUERY]


def test_a_mysql_gtid_start_sends_the_encoded_set():
    gtids = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77"
    got, _ = _stream([event(2, QUERY, 300)], version="8.4.3", queries=MARIADB_QUERIES[:3], gtid_set=gtids,
                     dump=b"\x1e" + bs.binlog_dump_gtid(9, bs.encode_gtid_set(gtids)))
    assert [e.body for e in got] == [QUERY]
