"""The binlog reader's own read of the stream's packets, for the events of every transaction.

On single-row transactions -- a GTID, a TABLE_MAP, one rows event and an XID per row, as
OLTP applications write them -- python-mysql-replication's ``fetchone`` builds a packet
wrapper and an event object for each of the four, which the reader then turns into its own
items: more than half of the binlog reader process's time (docs/performance.md).  With
:class:`PacketLane` the reader (:class:`producer.binlog.reader.BinlogReader`) reads each packet
from the stream's connection itself and handles the common events from their bytes: MariaDB's
GTID, the XID, a table id's repeated TABLE_MAP, and the rows events of the tables whose rows it
encodes where they are read.  Every other packet -- and any of these with something out of
the ordinary -- is given back: the library's ``fetchone`` reads it as its next packet and
does with it all it does without the lane (reconnecting after a lost connection included: a
read's error is given back the same way and raised where the library reads).

The lane keeps the library's stream position (``log_pos``) as ``fetchone`` would for the
events it handles, so a reconnection resumes where it should.  It steps aside (every packet
through the library) while the stream is not connected, where the library's layout is not
the one it knows or its version or pymysql's is not one tested (:mod:`common.tested_versions`),
where checksums are verified, and with ``CDC_PACKET_LANE=0``.
"""

from __future__ import annotations

import os
import struct

from common.tested_versions import tested

#: (the OK byte) timestamp, type, server id, event size, log pos, flags: the 19-byte event header
HEADER = struct.Struct("<xIBIIIH")
_CONNECTED = "_BinLogStreamReader__connected_stream"
_USE_CHECKSUM = "_BinLogStreamReader__use_checksum"
_VERIFY_CHECKSUM = "_BinLogStreamReader__verify_checksum"
_POST_HEADER_LENGTHS = "_BinLogStreamReader__post_header_lengths"
#: Set to 0 to have python-mysql-replication read every packet (the lane's behaviour is the library's).
ENV = "CDC_PACKET_LANE"


class PacketLane:
    """Reads a ``BinLogStreamReader``'s packets for the binlog reader (see the module)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        # The library's private layout as this module knows it (mysql-replication 1.0.x).
        # (``_stream_connection`` comes with the stream's connection: read only when connected)
        self.enabled = os.environ.get(ENV, "1") != "0" and all(
            hasattr(stream, a) for a in (_CONNECTED, _USE_CHECKSUM, _VERIFY_CHECKSUM, _POST_HEADER_LENGTHS, "log_pos",
                                         "table_map", "end_log_pos")) and \
            tested("mysql-replication", "the binlog reader's packet lane") and \
            tested("pymysql", "the binlog reader's packet lane")
        self.taken = 0  # packets handled by the reader from their bytes
        self.given = 0  # packets given back to the library
        self.errors = 0  # errors of a read given back to the library (a lost connection...)

    def packet(self):
        """The stream's next packet (pymysql's ``MysqlPacket``), or None when the library must
        read the next event itself (:meth:`next_event`)."""
        stream = self._stream
        if not self.enabled or not getattr(stream, _CONNECTED) or stream.end_log_pos:
            return None
        conn = stream._stream_connection
        try:
            return conn._read_packet()
        except Exception as exc:  # noqa: BLE001 - the library meets it where it reads (see give_back)
            self._give(conn, exc)
            self.errors += 1
            return None

    def checksum(self) -> int | None:
        """The bytes of checksum after each event's body (0 or 4); None when checksums are
        verified (then the library reads every packet)."""
        stream = self._stream
        if not getattr(stream, _USE_CHECKSUM):
            return 0
        return None if getattr(stream, _VERIFY_CHECKSUM) else 4

    def post_header_length(self, etype: int) -> int | None:
        """The post-header length the server's format description declares for ``etype``
        (None: not declared)."""
        lengths = getattr(self._stream, _POST_HEADER_LENGTHS)
        if not lengths or not 0 <= etype - 1 < len(lengths):
            return None
        return lengths[etype - 1]

    def table(self, table_id: int):
        """The library's table of ``table_id`` (its last TABLE_MAP that its filters let through), or None."""
        return self._stream.table_map.get(table_id)

    def handled(self, log_pos: int) -> None:
        """The reader handled the event that ends at ``log_pos``: the stream's position, as
        ``fetchone`` keeps it for a reconnection."""
        self._stream.log_pos = log_pos
        self.taken += 1

    def give_back(self, packet) -> None:
        """Have the library read ``packet`` as its next one (:meth:`next_event`)."""
        self._give(self._stream._stream_connection, packet)

    def _give(self, conn, packet_or_error) -> None:
        def once(*args, **kwargs):
            del conn._read_packet  # (an attribute of this connection only: the class's method again)
            if isinstance(packet_or_error, BaseException):
                raise packet_or_error
            return packet_or_error

        conn._read_packet = once
        self.given += 1

    def next_event(self):
        """The library's next event (None at the end of a non-blocking stream)."""
        return self._stream.fetchone()
