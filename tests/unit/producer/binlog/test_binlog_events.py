"""The binlog event bodies of :mod:`producer.binlog.binlog_events`, built by hand (as a server
lays them out) and parsed; length-encoded integers by hypothesis."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.constants import FIELD_TYPE as T

from common.errors import WireProtocolError
from common.sql.wire import encode_lenenc_int as lenenc_int
from producer.binlog import binlog_events as be


@given(st.uuids(), st.integers(1, 2**63))
def test_a_mysql_gtid_is_its_source_uuid_and_number(sid, gno):
    body = b"\x01" + sid.bytes + struct.pack("<Q", gno) + b"\x02" + bytes(16)
    assert be.mysql_gtid(body) == f"{sid}:{gno}"


def test_a_mariadb_gtid_is_domain_server_sequence():
    body = struct.pack("<QIB", 77, 3, 0x08) + bytes(6)
    assert be.mariadb_gtid(body, 12) == "3-12-77"


def test_xid():
    assert be.xid(struct.pack("<Q", 2**40 + 5)) == 2**40 + 5


def _query_body(thread: int, schema: bytes, status: bytes, text: bytes) -> bytes:
    return struct.pack("<IIBHH", thread, 0, len(schema), 0, len(status)) + status + schema + b"\0" + text


def test_a_query_skips_its_status_variables_by_their_length():
    status = b"\x00\x00\x00\x00\x00\x01" + bytes(8) + b"\x06\x03std\x04\x21\x00\x21\x00\x08\x00"
    q = be.query(_query_body(42, b"shop", status, "ALTER TABLE t ADD c INT -- é".encode()))
    assert q == be.Query(42, "shop", "ALTER TABLE t ADD c INT -- é")
    assert be.query(_query_body(7, b"", b"", b"BEGIN")) == be.Query(7, "", "BEGIN")
    assert be.query(_query_body(7, b"", b"", b"\xff")).query == "\\xff"  # (as the library: backslash-escaped)


def test_a_query_that_claims_more_status_than_it_has_is_refused():
    body = struct.pack("<IIBHH", 1, 0, 4, 0, 500) + b"abc"
    with pytest.raises(WireProtocolError, match="status variables"):
        be.query(body)


def test_heartbeats_v1_and_v2():
    assert be.heartbeat_file(be.HEARTBEAT_EVENT, b"mysql-bin.000003") == ("mysql-bin.000003", None)
    name = b"binlog.000012"
    pos = lenenc_int(123456)
    body = b"\x00" + lenenc_int(len(name)) + name + b"\x01" + lenenc_int(len(pos)) + pos
    assert be.heartbeat_file(be.HEARTBEAT_EVENT_V2, body) == ("binlog.000012", 123456)


@pytest.mark.parametrize("etype, setting", [
    (be.MARIADB_START_ENCRYPTION, "encrypt_binlog"),
    (166, "log_bin_compress"), (be.PARTIAL_UPDATE_ROWS_EVENT, "binlog_row_value_options"),
])
def test_the_events_the_reader_cannot_read_are_refused_by_their_setting(etype, setting):
    assert setting in be.refusal(etype)


@pytest.mark.parametrize("etype", [be.QUERY_EVENT, be.TRANSACTION_PAYLOAD_EVENT, be.MARIADB_ANNOTATE_ROWS, be.MARIADB_GTID_LIST,
                                   be.MARIADB_BINLOG_CHECKPOINT, be.PREVIOUS_GTIDS_EVENT, be.ROWS_QUERY_EVENT])
def test_the_events_skipped_or_read_are_not_refused(etype):
    assert be.refusal(etype) is None


def test_rows_headers_v1_and_v2_with_extra_data():
    tid = (0x0102030405).to_bytes(6, "little")
    v1 = tid + b"\x01\x00" + b"\x03" + b"\x07" + b"ROWS"
    assert be.rows_header(be.WRITE_ROWS_V1, v1, 8) == be.RowsHeader(0x0102030405, 1, 3, b"\x07", None, 10)
    extra = b"\x01\x02\x00\x05"  # (an extra data block of 4 bytes after the length)
    v2 = tid + b"\x00\x00" + struct.pack("<H", 2 + len(extra)) + extra + b"\x09" + b"\xff\x01" + b"\xff\x00" + b"R"
    h = be.rows_header(be.UPDATE_ROWS_V2, v2, 10)
    assert (h.table_id, h.columns, h.present, h.present_after) == (0x0102030405, 9, b"\xff\x01", b"\xff\x00")
    assert v2[h.data:] == b"R"
    with pytest.raises(WireProtocolError, match="shorter than its bitmaps"):
        be.rows_header(be.UPDATE_ROWS_V2, v2[:-3], 10)


def _lenenc_str(b: bytes) -> bytes:
    return lenenc_int(len(b)) + b


def _field(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + lenenc_int(len(value)) + value


def _table_map_body() -> bytes:
    # id INT UNSIGNED, name VARCHAR(300) utf8mb4, e ENUM('a','b'), s SET('x'), price DECIMAL(10,2),
    # t DATETIME(3), g POINT, bits BIT(12), blob BLOB (binary), c CHAR(4) latin1
    types = bytes([T.LONG, T.VARCHAR, T.STRING, T.STRING, T.NEWDECIMAL, T.DATETIME2, T.GEOMETRY, T.BIT, T.BLOB,
                   T.STRING])
    meta = (struct.pack("<H", 1200) + bytes([T.ENUM, 1]) + bytes([T.SET, 1]) + bytes([10, 2]) + b"\x03" + b"\x04"
            + bytes([4, 1]) + b"\x02" + bytes([T.STRING, 4]))
    names = b"".join(_lenenc_str(n) for n in (b"id", b"name", b"e", b"s", b"price", b"t", b"g", b"bits", b"blob", b"c"))
    optional = (_field(1, b"\x80")  # signedness: numeric columns id, price -> id unsigned
                + _field(2, lenenc_int(45) + lenenc_int(1) + lenenc_int(63) + lenenc_int(2) + lenenc_int(8))
                + _field(4, names)
                + _field(5, lenenc_int(1) + _lenenc_str(b"x"))
                + _field(6, lenenc_int(2) + _lenenc_str(b"a") + _lenenc_str(b"b"))
                + _field(7, lenenc_int(1))
                + _field(8, lenenc_int(0))
                + _field(10, lenenc_int(46))
                + _field(12, b"\xff\xc0"))
    return ((77).to_bytes(6, "little") + b"\x01\x00" + b"\x04shop\x00" + b"\x05items\x00" + lenenc_int(len(types))
            + types + lenenc_int(len(meta)) + meta + b"\x02\x01" + optional)


def test_a_table_map_with_full_metadata():
    tm = be.table_map(_table_map_body(), mariadb=False)
    assert (tm.table_id, tm.flags, tm.schema, tm.table, tm.null_bitmask) == (77, 1, "shop", "items", b"\x02\x01")
    assert tm.geometry_types == [1] and tm.simple_primary_key == [0] and tm.key == _table_map_body()[8:]
    c = {col.name: col for col in tm.columns}
    assert c["id"].data() == {"type": T.LONG, "name": "id", "unsigned": True, "is_primary": True, "visibility": True}
    assert (c["name"].max_length, c["name"].character_set_name, c["name"].collation_name) == (
        1200, "utf8", "utf8mb4_general_ci")
    assert (c["e"].type, c["e"].size, c["e"].enum_values, c["e"].collation_name) == (T.ENUM, 1, ["", "a", "b"],
                                                                                      "utf8mb4_bin")
    assert (c["s"].type, c["s"].set_values) == (T.SET, ["x"])
    assert (c["price"].precision, c["price"].decimals, c["price"].unsigned) == (10, 2, False)
    assert c["t"].fsp == 3 and c["g"].length_size == 4 and c["g"].character_set_name is None
    assert (c["bits"].bits, c["bits"].bytes) == (12, 2)
    assert (c["blob"].length_size, c["blob"].character_set_name) == (2, "binary")
    assert (c["c"].type, c["c"].max_length, c["c"].collation_name) == (T.STRING, 4, "latin1_swedish_ci")
    assert [col.visibility for col in tm.columns] == [True] * 10  # (0xffc0: ten bits set)


def test_mariadb_counts_geometry_among_the_columns_with_a_charset():
    tm = be.table_map(_table_map_body(), mariadb=True)
    c = {col.name: col for col in tm.columns}
    # the default charset's exceptions are by index among the charset columns: GEOMETRY is one on MariaDB
    assert c["g"].character_set_name == "binary" and c["bits"].character_set_name is None
    assert c["blob"].collation_name == "latin1_swedish_ci" and c["c"].collation_name == "utf8mb4_general_ci"


def test_a_table_map_without_optional_metadata_has_no_names():
    body = (5).to_bytes(6, "little") + b"\x00\x00\x01d\x00\x01t\x00\x01" + bytes([T.LONG]) + b"\x00" + b"\x00"
    tm = be.table_map(body, mariadb=True)
    assert [col.data() for col in tm.columns] == [{"type": T.LONG, "unsigned": False, "is_primary": False,
                                                   "visibility": False}]


def test_a_uuid_is_hex_grouped_as_mysql_writes_it():
    sid = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
    assert be.mysql_gtid(b"\x00" + sid.bytes + struct.pack("<Q", 23)) == "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"


# --- compressed transactions (TRANSACTION_PAYLOAD) ---------------------------------------

def _inner(etype: int, body: bytes) -> bytes:
    """An event as MySQL writes it inside a payload: no checksum, log_pos 0."""
    return struct.pack("<IBIIIH", 1700000000, etype, 1, 19 + len(body), 0, 0) + body


def _payload_body(data: bytes, raw_size: int, kind: int = be.PAYLOAD_ZSTD, *, size: int | None = None) -> bytes:
    def field(ftype: int, value: int) -> bytes:
        v = lenenc_int(value)
        return lenenc_int(ftype) + lenenc_int(len(v)) + v
    return (field(be.PAYLOAD_COMPRESSION, kind) + field(be.PAYLOAD_UNCOMPRESSED_SIZE, raw_size)
            + field(be.PAYLOAD_SIZE, len(data) if size is None else size) + b"\x00" + data)


INNER = [_inner(be.QUERY_EVENT, b"\x05" * 13 + b"BEGIN"), _inner(be.WRITE_ROWS_V2, b"rows" * 40),
         _inner(be.XID_EVENT, (5).to_bytes(8, "little"))]


@pytest.mark.parametrize("frames", [1, 2])
def test_a_zstd_payload_gives_its_events(frames):
    import zstandard
    raw = b"".join(INNER)
    cut = len(INNER[0]) if frames == 2 else len(raw)  # (MySQL writes one frame; more are read too)
    data = b"".join(zstandard.ZstdCompressor().compress(part) for part in (raw[:cut], raw[cut:]) if part)
    events = be.payload_events(_payload_body(data, len(raw)))
    assert [(e.type, e.log_pos, e.event_size, e.body) for e in events] == [
        (be.QUERY_EVENT, 0, len(INNER[0]), INNER[0][19:]), (be.WRITE_ROWS_V2, 0, len(INNER[1]), b"rows" * 40),
        (be.XID_EVENT, 0, 27, (5).to_bytes(8, "little"))]


def test_an_uncompressed_payload_gives_its_events():
    raw = b"".join(INNER)
    assert [e.type for e in be.payload_events(_payload_body(raw, len(raw), be.PAYLOAD_NONE))] == [2, 30, 16]


def test_the_payload_as_mysql_wrote_it():
    """A payload event of MySQL 9.7.4 (BEGIN; INSERT two rows; UPDATE one; COMMIT): its header
    fields in MySQL's order (compression type, uncompressed size, payload size)."""
    head = bytes.fromhex("0201000303fc330101019f00")
    assert head[:3] == bytes([be.PAYLOAD_COMPRESSION, 1, be.PAYLOAD_ZSTD])
    import zstandard
    raw = b"".join(INNER)
    data = zstandard.ZstdCompressor().compress(raw)
    body = head[:4] + bytes([3, 0xFC]) + len(raw).to_bytes(2, "little") + bytes([1, 1, len(data)]) + b"\x00" + data
    assert len(data) < 251 and [e.type for e in be.payload_events(body)] == [2, 30, 16]


@pytest.mark.parametrize("body, message", [
    (b"\x02\x01\x00", "ends inside its header"),
    (_payload_body(b"not zstd", 8), "does not decompress"),
    (_payload_body(b"".join(INNER), len(b"".join(INNER)), 7), "compressed with type 7"),
    (_payload_body(b"".join(INNER), 3, be.PAYLOAD_NONE), "uncompressed to"),
    (_payload_body(b"".join(INNER), len(b"".join(INNER)), be.PAYLOAD_NONE, size=5000), "its header says 5000"),
    (_payload_body(INNER[0][:30], 30, be.PAYLOAD_NONE), "declares"),
])
def test_a_broken_payload_is_a_protocol_error(body, message):
    with pytest.raises(WireProtocolError, match=message):
        be.payload_events(body)


# --- tagged GTIDs (MySQL 8.3+) -------------------------------------------------------------

#: GTID_TAGGED_LOG_EVENT bodies MySQL 9.7.4 wrote (server uuid c3ac5846-eb32-11f1-bb14-02fc00000001)
#: for ``SET gtid_next = 'AUTOMATIC:batch'`` and a tag of 27 characters, each the first of its tag.
TAGGED = {
    "c3ac5846-eb32-11f1-bb14-02fc00000001:batch:1":
        "0272000000020d03b102b08cad036422c503ed022804f103000000020404060a626174636808340a380c7ffbad3a785661"
        "061055041283120b",
    "c3ac5846-eb32-11f1-bb14-02fc00000001:abcdefghij_klmnopqrstuvwxyz:1":
        "029e000000020d03b102b08cad036422c503ed022804f10300000002040406366162636465666768696a5f6b6c6d6e6f70"
        "7172737475767778797a08340a3c0c7f4cb13a7856610610ad041283120b",
}


@pytest.mark.parametrize("gtid, body", TAGGED.items())
def test_a_tagged_gtid_event_as_mysql_wrote_it(gtid, body):
    assert be.mysql_tagged_gtid(bytes.fromhex(body)) == gtid


@pytest.mark.parametrize("data, value, size", [
    (b"\x02", 1, 1), (b"\x72", 57, 1), (b"\x0d\x03", 195, 2), (b"\x83\x12\x0b", 90704, 3),
    (b"\xff" + (2**64 - 1).to_bytes(8, "little"), 2**64 - 1, 9), (b"\x7f" + bytes(6) + b"\x01", 1 << 48, 8),
])
def test_varlen_integers(data, value, size):
    assert be.varlen_uint(data, 0) == (value, size)


@pytest.mark.parametrize("unsigned, signed", [(0, 0), (1, -1), (2, 1), (3, -2), (4, 2)])
def test_signed_varlen_integers_are_zigzag(unsigned, signed):
    assert be.varlen_int(bytes([unsigned << 1]), 0) == (signed, 1)


def test_a_tagged_gtid_event_without_its_uuid_is_a_protocol_error():
    with pytest.raises(WireProtocolError, match="without its source UUID"):
        be.mysql_tagged_gtid(bytes.fromhex("02720000000404"))


def test_a_vector_columns_metadata_is_its_length_prefix():
    """MySQL 9's VECTOR (type 242) has one metadata byte, as a BLOB: read, the next column's
    metadata is its own (a TIME2's fsp here, which would read the VECTOR's byte otherwise)."""
    types, meta = bytes([be.VECTOR, T.TIME2]), b"\x04\x03"
    body = ((9).to_bytes(6, "little") + b"\x00\x00\x01d\x00\x01t\x00" + lenenc_int(2) + types + lenenc_int(2) + meta
            + b"\x03")
    vec, t = be.table_map(body, mariadb=False).columns
    assert (vec.type, vec.length_size) == (242, 4) and (t.type, t.fsp) == (T.TIME2, 3)


def test_mysql_counts_a_vector_among_the_columns_with_a_charset():
    """MySQL 9.7's DEFAULT_CHARSET field counts a VECTOR (binary, an exception at its index) among
    the character columns: the VARCHAR after it takes the default (utf8mb4), not the VECTOR's."""
    types, meta = bytes([be.VECTOR, T.VARCHAR]), b"\x04" + (40).to_bytes(2, "little")
    charsets = lenenc_int(255) + lenenc_int(0) + lenenc_int(63)  # default 255; column 0: 63 (binary)
    body = ((9).to_bytes(6, "little") + b"\x00\x00\x01d\x00\x01t\x00" + lenenc_int(2) + types + lenenc_int(3) + meta
            + b"\x03" + bytes([2]) + lenenc_int(len(charsets)) + charsets)
    vec, vc = be.table_map(body, mariadb=False).columns
    assert vec.character_set_name == "binary" and vc.collation_name == "utf8mb4_0900_ai_ci"


def test_a_mysql_gtid_events_commit_time():
    """MySQL 8.0.1+'s GTID event: the immediate commit timestamp (microseconds) after 42 bytes, its
    top bit set when the original one (a replica's source's) follows: the original, in ms."""
    head = bytes(42)
    same = head + (1_795_884_053_342_123).to_bytes(7, "little")
    assert be.mysql_commit_ms(same) == 1_795_884_053_342
    replicated = head + (2_000_000_000_000_000 | 1 << 55).to_bytes(7, "little") + (1_795_884_053_342_999).to_bytes(
        7, "little")
    assert be.mysql_commit_ms(replicated) == 1_795_884_053_342
    assert be.mysql_commit_ms(head) is None  # (before 8.0.1: no timestamp)
