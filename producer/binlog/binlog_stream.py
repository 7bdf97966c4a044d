"""The binlog stream of a MySQL/MariaDB server, read over a connection of the project's own.

:class:`BinlogStream` asks a server (a :class:`common.sql.wire.Connection`, logged in as a
user with REPLICATION SLAVE) for its binlog as a replica does: it tells the server that it
understands its checksums (``@master_binlog_checksum``), the heartbeat period it wants, on
MariaDB its replica capability (4: GTID events) and, to start from a MariaDB GTID position,
the connect state; then ``COM_BINLOG_DUMP`` from a file and position, or MySQL's
``COM_BINLOG_DUMP_GTID`` with a GTID set.  Blocking, the stream waits for new events (the
server's heartbeats between them); non-blocking, it ends at the binlog's end.

Each event comes as a :class:`BinlogEvent`: the 19-byte header's fields and the body
without the checksum (verified when asked: CRC32).  The stream parses the events it needs
itself: the FORMAT_DESCRIPTION (the checksum algorithm of the events after it, the post-header
lengths: :attr:`BinlogStream.format`) and the ROTATE (the file and position:
:attr:`BinlogStream.file`, :attr:`BinlogStream.position`); every other event's body is the
caller's to parse (docs/binlog-client.md).  An ERR packet is raised as
:class:`~common.errors.ServerError`, a lost connection as :class:`~common.errors.ServerGone`.

The pure parts -- the header, the dump commands, the GTID set's encoding, the
FORMAT_DESCRIPTION and ROTATE bodies, the checksum -- are functions, tested without a server.
"""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from common.errors import ServerError, WireProtocolError
from common.sql.wire import Connection, parse_error

ROTATE_EVENT, FORMAT_DESCRIPTION_EVENT, HEARTBEAT_LOG_EVENT = 4, 15, 27
COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID = 0x12, 0x1E
#: COM_BINLOG_DUMP's flags: an EOF packet at the binlog's end instead of waiting; MariaDB's
#: ANNOTATE_ROWS events (the statement of a rows event); MySQL's start by GTID set.
BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT, BINLOG_THROUGH_GTID = 0x01, 0x02, 0x04
#: An event's header: timestamp, type, server id, event size (header and checksum included),
#: the position of the next event, flags.
HEADER = struct.Struct("<IBIIIH")
HEADER_SIZE = 19
#: The checksum algorithms of a FORMAT_DESCRIPTION (``binlog_checksum``).
CHECKSUM_OFF, CHECKSUM_CRC32 = 0, 1
#: MariaDB's replica capability that has the server send its GTID events (MARIA_SLAVE_CAPABILITY_GTID).
MARIADB_CAPABILITY_GTID = 4
_MAX_HEARTBEAT_S = 4294967  # (the server's limit, in seconds)
_MARIADB_GTID_STATE = re.compile(r"^\s*(\d+-\d+-\d+\s*(,\s*\d+-\d+-\d+\s*)*)?$")


class BinlogEvent(NamedTuple):
    """One event of the stream: its header's fields and its body (the bytes after the header,
    without the checksum)."""

    timestamp: int
    type: int
    server_id: int
    event_size: int  # of the whole event in the binlog: header, body and checksum
    log_pos: int  # where the next event starts (0: an event the server made up for the stream)
    flags: int
    body: bytes


_new = tuple.__new__  # (a BinlogEvent from its fields, without the named tuple's Python-level __new__)


def parse_header(data: bytes, offset: int = 0) -> tuple[int, int, int, int, int, int]:
    """The header fields of the event at ``offset``: (timestamp, type, server_id, event_size, log_pos, flags)."""
    return HEADER.unpack_from(data, offset)


def checksum_ok(event: bytes) -> bool:
    """Whether a whole event's last four bytes are the CRC32 of the bytes before them."""
    return len(event) >= 4 and zlib.crc32(event[:-4]) == int.from_bytes(event[-4:], "little")


@dataclass(frozen=True)
class FormatDescription:
    """A FORMAT_DESCRIPTION event: how the events after it are written."""

    binlog_version: int
    server_version: str
    created: int
    header_length: int
    post_header_lengths: bytes  # (index: event type - 1)
    checksum_alg: int  # CHECKSUM_OFF or CHECKSUM_CRC32 (the events after it carry 4 bytes of checksum)

    def post_header_length(self, event_type: int) -> int | None:
        """The post-header length declared for ``event_type`` (None: not declared)."""
        i = event_type - 1
        return self.post_header_lengths[i] if 0 <= i < len(self.post_header_lengths) else None


def parse_format_description(body: bytes) -> FormatDescription:
    """A FORMAT_DESCRIPTION body, its checksum algorithm's byte last (the checksum itself left
    off): every server that writes checksums writes that byte, whether checksums are on or off."""
    version, server, created, header_length = struct.unpack_from("<H50sIB", body)
    return FormatDescription(version, server.rstrip(b"\0").decode("ascii", "replace"), created, header_length,
                             bytes(body[57:-1]), body[-1])


def parse_rotate(body: bytes) -> tuple[str, int]:
    """A ROTATE body: the next file and the position in it."""
    return body[8:].decode("utf-8", "replace"), int.from_bytes(body[:8], "little")


def parse_gtid_set(text: str) -> list[tuple[bytes, list[tuple[int, int]]]]:
    """A MySQL GTID set (``uuid:1-5:7,uuid2:3``, spaces and new lines allowed) as its source ids
    (16 bytes) and their intervals ``[start, stop)``, sorted and merged, in the order given
    (a source id given twice merged into its first place)."""
    sids: dict[bytes, list[tuple[int, int]]] = {}
    for part in text.replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        sid, *ranges = part.split(":")
        try:
            key = uuid.UUID(sid.strip()).bytes
        except ValueError:
            raise ValueError(f"{sid!r} is not the server UUID of a MySQL GTID set ({text!r})") from None
        if not ranges or any(not re.fullmatch(r"\s*\d+(-\d+)?\s*", r) for r in ranges):
            raise ValueError(f"{part!r} is not a server UUID and its transaction ranges (tagged GTIDs are not "
                             f"supported)")
        out = sids.setdefault(key, [])
        for r in ranges:
            first, _, last = r.strip().partition("-")
            start, stop = int(first), int(last or first) + 1
            if not 0 < start < stop:
                raise ValueError(f"{r!r} is not a transaction range (1 <= first <= last) in {part!r}")
            out.append((start, stop))
    return [(sid, _merged(intervals)) for sid, intervals in sids.items()]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, stop in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def encode_gtid_set(text: str) -> bytes:
    """A MySQL GTID set as COM_BINLOG_DUMP_GTID sends it: the number of source ids (8 bytes),
    and for each its UUID (16), its number of intervals (8) and each interval's start and
    stop (8 each, the stop past the last transaction), little-endian."""
    sids = parse_gtid_set(text)
    out = bytearray(struct.pack("<Q", len(sids)))
    for sid, intervals in sids:
        out += sid + struct.pack("<Q", len(intervals))
        for start, stop in intervals:
            out += struct.pack("<QQ", start, stop)
    return bytes(out)


def binlog_dump(server_id: int, file: str, pos: int, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP's payload after the command byte: from ``pos`` of ``file`` ("" and 4 for
    MariaDB's start by ``@slave_connect_state``)."""
    return struct.pack("<IHI", pos, flags, server_id) + file.encode()


def binlog_dump_gtid(server_id: int, gtid_set: bytes, flags: int = 0) -> bytes:
    """COM_BINLOG_DUMP_GTID's payload after the command byte: no file name, position 4, and
    the encoded GTID set of the transactions the replica has (:func:`encode_gtid_set`)."""
    flags |= BINLOG_THROUGH_GTID
    return struct.pack("<HIIQI", flags, server_id, 0, 4, len(gtid_set)) + gtid_set


def mariadb_gtid_state(text: str) -> str:
    """A MariaDB GTID position (``domain-server-seq`` list), checked: the value of ``@slave_connect_state``."""
    if not _MARIADB_GTID_STATE.match(text):
        raise ValueError(f"{text!r} is not a MariaDB GTID position (domain-server-sequence, comma-separated)")
    return ",".join(p.strip() for p in text.split(",") if p.strip())


class BinlogStream:
    """A server's binlog as :class:`BinlogEvent` items (see the module), on ``conn``.

    Start from ``file`` and ``pos``, from a MySQL GTID set (``gtid_set``: the transactions
    already had) or from a MariaDB GTID position (``mariadb_gtid``); ``server_id``: the replica
    id it asks as (distinct from every other replica's); ``blocking``: wait for new events
    (else end at the binlog's end); ``heartbeat_s``: the server's heartbeat period while it has
    nothing to send (None: the server's default); ``verify_checksum``: check each event's CRC32
    (a mismatch is a :class:`~common.errors.WireProtocolError`); ``annotate_rows``: MariaDB's
    ANNOTATE_ROWS events too."""

    def __init__(self, conn: Connection, *, server_id: int, file: str = "", pos: int = 4,
                 gtid_set: str | None = None, mariadb_gtid: str | None = None, blocking: bool = True,
                 heartbeat_s: float | None = None, verify_checksum: bool = False, annotate_rows: bool = False) -> None:
        if not (file or gtid_set is not None or mariadb_gtid is not None):
            raise ValueError("a binlog stream starts from a file and position, a GTID set or a MariaDB GTID position")
        if mariadb_gtid is not None and not conn.is_mariadb:
            raise ValueError(f"a MariaDB GTID position ({mariadb_gtid!r}) given for a MySQL server")
        if gtid_set is not None and conn.is_mariadb:
            raise ValueError(f"a MySQL GTID set ({gtid_set!r}) given for a MariaDB server")
        self.conn = conn
        self.server_id, self.blocking, self.heartbeat_s = server_id, blocking, heartbeat_s
        self.gtid_set, self.mariadb_gtid = gtid_set, mariadb_gtid
        self.verify_checksum, self.annotate_rows = verify_checksum, annotate_rows
        self.file, self.position = file, pos  # where the next event starts (updated as events come)
        self.format: FormatDescription | None = None  # the last FORMAT_DESCRIPTION
        self.checksum = 0  # the bytes of checksum after each event's body (0 or 4)
        self.started = False

    def start(self) -> "BinlogStream":
        """Tell the server what the stream understands, and ask for the binlog."""
        conn = self.conn
        try:
            alg = conn.value("SELECT @@global.binlog_checksum")
        except ServerError as exc:
            if exc.code != 1193:  # (ER_UNKNOWN_SYSTEM_VARIABLE: a server without checksums)
                raise
            alg = None
        if alg and alg.upper() != b"NONE":
            conn.query("SET @master_binlog_checksum = @@global.binlog_checksum")
            self.checksum = 4
        if self.heartbeat_s is not None:
            ns = int(min(max(self.heartbeat_s, 0.001), _MAX_HEARTBEAT_S) * 1_000_000_000)
            conn.query(f"SET @master_heartbeat_period = {ns}")
        flags = 0 if self.blocking else BINLOG_DUMP_NON_BLOCK
        if conn.is_mariadb:
            conn.query(f"SET @mariadb_slave_capability = {MARIADB_CAPABILITY_GTID}")
            if self.annotate_rows:
                flags |= BINLOG_SEND_ANNOTATE_ROWS_EVENT
        if self.mariadb_gtid is not None:
            conn.query(f"SET @slave_connect_state = '{mariadb_gtid_state(self.mariadb_gtid)}'")
            conn.query("SET @slave_gtid_strict_mode = 0")
            conn.query("SET @slave_gtid_ignore_duplicates = 0")
            conn.command(COM_BINLOG_DUMP, binlog_dump(self.server_id, "", 4, flags))
        elif self.gtid_set is not None:
            conn.command(COM_BINLOG_DUMP_GTID, binlog_dump_gtid(self.server_id, encode_gtid_set(self.gtid_set),
                                                                flags & BINLOG_DUMP_NON_BLOCK))
        else:
            conn.command(COM_BINLOG_DUMP, binlog_dump(self.server_id, self.file, self.position, flags))
        self.started = True
        return self

    def __iter__(self) -> Iterator[BinlogEvent]:
        """The events, until the binlog's end (non-blocking) or for ever (blocking)."""
        if not self.started:
            self.start()
        read = self.conn.read_packet
        unpack = HEADER.unpack_from
        own = _OWN_EVENTS
        while True:
            data = read()
            if data[0]:
                if data[0] == 0xFE and len(data) < 9:
                    return  # (the end of a non-blocking stream)
                raise self._not_an_event(data)
            ts, etype, server_id, size, log_pos, flags = unpack(data, 1)
            if len(data) != size + 1:
                raise WireProtocolError(f"a binlog event of {size} bytes came in a packet of {len(data) - 1}")
            if etype in own:
                body = self._own_event(data, etype, log_pos)
            else:
                crc = self.checksum
                if crc and self.verify_checksum and not checksum_ok(data[1:]):
                    raise self._bad_checksum(etype, log_pos)
                body = data[20:size + 1 - crc]
                if log_pos:
                    self.position = log_pos
            yield _new(BinlogEvent, (ts, etype, server_id, size, log_pos, flags, body))

    def _own_event(self, data: bytes, etype: int, log_pos: int) -> bytes:
        """A FORMAT_DESCRIPTION's or ROTATE's body, read for the stream's state."""
        if etype == FORMAT_DESCRIPTION_EVENT:
            # (it always ends with its algorithm's byte and four bytes of checksum, on or off)
            fde = self.format = parse_format_description(data[20:-4])
            if fde.checksum_alg == CHECKSUM_CRC32 and self.verify_checksum and not checksum_ok(data[1:]):
                raise self._bad_checksum(etype, log_pos)
            self.checksum = 4 if fde.checksum_alg == CHECKSUM_CRC32 else 0
            if log_pos:
                self.position = log_pos
            return data[20:-4]
        crc = self.checksum
        if crc and self.verify_checksum and not checksum_ok(data[1:]):
            raise self._bad_checksum(etype, log_pos)
        body = data[20:len(data) - crc]
        self.file, self.position = parse_rotate(body)  # (its log_pos: where it ends in the file before)
        return body

    def _not_an_event(self, data: bytes) -> Exception:
        if data[0] == 0xFF:
            return parse_error(data)
        return WireProtocolError(f"the binlog stream of {self.conn.where} sent a packet that is not an event "
                                 f"(0x{data[0]:02x})")

    def _bad_checksum(self, etype: int, log_pos: int) -> WireProtocolError:
        return WireProtocolError(f"the binlog event of type {etype} ending at {self.file}:{log_pos} from "
                                 f"{self.conn.where} fails its CRC32 checksum")

    def close(self) -> None:
        """Close the connection (the server ends its dump thread)."""
        self.conn.close()


_OWN_EVENTS = frozenset({ROTATE_EVENT, FORMAT_DESCRIPTION_EVENT})
