"""The own client's binlog reader against a scripted server: a server that goes silent is a lost
connection after the read timeout (a few heartbeat periods), not a hang, and the reader tries
to read again for up to the connect timeout; a compressed transaction's events are read from its payload, at positions
of the payload's own; a column it does not decode stops it, named with its table."""

from __future__ import annotations

import struct
import time

import pytest
import zstandard

from common.config import SourceConfig
from common.errors import ServerGone, UnsupportedType
from common.sql.wire import encode_lenenc_int
from producer.binlog import reader as reader_module
from producer.binlog.binlog_events import (
    QUERY_EVENT,
    TABLE_MAP_EVENT,
    TRANSACTION_PAYLOAD_EVENT,
    WRITE_ROWS_V2,
    XID_EVENT,
)
from producer.binlog.binlog_stream import FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT
from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges, TransactionEnd
from tests.unit.producer.binlog.test_binlog_stream import ROTATE, _answer_queries, event, fde_body
from tests.wire_helpers import ScriptedServer, handshake_v10, ok_packet

QUERIES = ["SELECT @@global.binlog_checksum", "SET @master_binlog_checksum = @@global.binlog_checksum",
           "SET @master_heartbeat_period = 100000000", "SET @mariadb_slave_capability = 4"]


def _server(events: list[bytes], silent_s: float) -> ScriptedServer:
    def script(side):
        side.write(handshake_v10("mysql_native_password", version="5.5.5-10.11.19-MariaDB-log"))
        side.read_login()
        side.write(ok_packet())
        _answer_queries(side, QUERIES)
        side.seq = 0
        side.read()  # (the dump)
        for data in events:
            side.write(b"\x00" + data)
        time.sleep(silent_s)

    return ScriptedServer(script)


def _reader(server: ScriptedServer) -> BinlogReader:
    cfg = SourceConfig(host="127.0.0.1", port=server.port, user="cdc", password="pw", ssl={"mode": "disabled"},
                       connect_timeout_s=2)
    return BinlogReader(cfg, ResumePoint("mysql-bin.000002", 4), is_mariadb=True, heartbeat_s=0.1)


def test_a_silent_server_is_a_lost_connection_after_the_read_timeout(monkeypatch):
    monkeypatch.setattr(reader_module, "MIN_READ_TIMEOUT_S", 0.5)  # (5 heartbeats of 0.1 s: 0.5 s)
    server = _server([event(ROTATE_EVENT, ROTATE, 0, ts=0), event(FORMAT_DESCRIPTION_EVENT, fde_body(1), 0)], 5)
    reader = _reader(server)
    t = time.monotonic()
    with pytest.raises(ServerGone):
        # (then read again after 0.25 s: the scripted server answers no second connection, which
        # is gone after the connect timeout, 2 s, the time given to reconnecting: raised then)
        list(reader)
    assert 0.5 + 0.25 + 2 <= time.monotonic() - t < 4  # (the server stays silent for 5 s)
    assert reader.reconnects == 1
    reader.close()
    server.join()


def _compressed(inner: list[bytes], *, zstd: bool = True) -> bytes:
    """A TRANSACTION_PAYLOAD body holding ``inner`` (events without checksums, log_pos 0): the
    compression type, the uncompressed and the payload sizes (each a field of its type, its
    length and its length-encoded value), the end mark, the payload."""
    raw = b"".join(inner)
    data = zstandard.ZstdCompressor().compress(raw) if zstd else raw

    def field(ftype: int, value: int) -> bytes:
        v = encode_lenenc_int(value)
        return bytes([ftype, len(v)]) + v
    return field(2, 0 if zstd else 255) + field(3, len(raw)) + field(1, len(data)) + b"\x00" + data


BEGIN = struct.pack("<IIBHH", 1, 0, 0, 0, 0) + b"\x00BEGIN"  # thread 1, no database, no status variables


@pytest.mark.parametrize("zstd", [True, False])
def test_a_compressed_transactions_rows_come_at_positions_inside_the_payload(zstd):
    """BEGIN, a table map, a rows event of two rows and the XID inside one payload event that ends
    at 2000: the rows at the payload body's first byte plus the rows event's index (2), the
    commit at its XID's (3), the next transaction read from the payload event's end."""
    table_map, rows = (e[19:-4] for e in _table_and_rows(3)[2:])  # (their bodies: header and checksum off)
    rows += b"\x00" + (9).to_bytes(4, "little") + (10).to_bytes(4, "little")  # a second row
    inner = [event(QUERY_EVENT, BEGIN, 0, crc=False), event(TABLE_MAP_EVENT, table_map, 0, crc=False),
             event(WRITE_ROWS_V2, rows, 0, crc=False), event(XID_EVENT, (77).to_bytes(8, "little"), 0, crc=False)]
    body = _compressed(inner, zstd=zstd)
    server = _server([event(ROTATE_EVENT, ROTATE, 0, ts=0), event(FORMAT_DESCRIPTION_EVENT, fde_body(1), 0),
                      event(TRANSACTION_PAYLOAD_EVENT, body, 2000)], 0)
    reader = _reader(server)
    items = []
    for item in reader:
        if isinstance(item, (RowChanges, TransactionEnd)):
            items.append(item)
        if isinstance(item, TransactionEnd):
            break
    reader.close()
    server.join()
    first = 2000 - len(body)  # (where the reader places any event: its end less its body)
    changes, end = items
    assert (changes.kind, changes.db, changes.table, changes.first, len(changes.rows)) == ("insert", "shop", "odd", 0, 2)
    assert changes.base.pos == first + 2 and changes.pos == 2000 - (19 + len(body) + 4)
    assert [changes.position(2 * i) for i in range(2)] == [f"0000000002{first + 2:010d}{2 * i:010d}" for i in range(2)]
    assert end.position.pos == first + 3 and (end.resume.file, end.resume.pos) == ("mysql-bin.000002", 2000)


def _table_and_rows(column_type: int) -> list[bytes]:
    """The events of a table ``shop.odd`` (id INT, d of ``column_type``) and a row of it."""
    names = b"\x02id\x01d"
    table_map_body = ((7).to_bytes(6, "little") + b"\x01\x00" + b"\x04shop\x00" + b"\x03odd\x00" + b"\x02"
                      + bytes([3, column_type]) + b"\x00" + b"\x00" + bytes([4, len(names)]) + names)
    rows_body = (7).to_bytes(6, "little") + b"\x00\x00" + b"\x02\x00" + b"\x02" + b"\x03" + b"\x00" + bytes(8)
    return [event(ROTATE_EVENT, ROTATE, 0, ts=0), event(FORMAT_DESCRIPTION_EVENT, fde_body(1), 0),
            event(TABLE_MAP_EVENT, table_map_body, 300), event(WRITE_ROWS_V2, rows_body, 350)]


@pytest.mark.parametrize("column_type, message", [
    (14, r"rows of shop\.odd are not decoded.*column 'd' \(binlog type 14\).*CDC_BINLOG_CLIENT=library"),  # NEWDATE
    (0, r"table shop\.odd: column 'd' has binlog type code 0"),  # the old DECIMAL: no table definition either
])
def test_a_column_the_own_client_does_not_decode_stops_it_naming_the_table_and_column(column_type, message):
    server = _server(_table_and_rows(column_type), 0)
    reader = _reader(server)
    with pytest.raises(UnsupportedType, match=message):
        list(reader)
    reader.close()
    server.join()
