"""The bodies of the binlog events the reader needs, parsed: pure functions over bytes.

:class:`~producer.binlog.binlog_stream.BinlogStream` gives each event as its header's fields
and its body (checksum left off); the functions here read the bodies the binlog reader acts
on -- GTID of both servers, XID, QUERY, HEARTBEAT (and MySQL's v2), TABLE_MAP with the
optional metadata of ``binlog_row_metadata=FULL``, and the rows events' headers (v1 and v2)
-- MySQL's compressed transactions (TRANSACTION_PAYLOAD: :func:`payload_events`, the events
inside) -- and :func:`refusal` names the events the reader cannot read (an encrypted MariaDB
binlog, MariaDB's compressed events, MySQL's partial JSON updates) with the setting that makes
them.  Every other event type is skipped by the reader.

A TABLE_MAP's columns are :class:`Column` objects with the attributes, and the values,
python-mysql-replication's ``Column`` has for the same event (``type``, ``name``,
``unsigned``, ``character_set_name``, ``collation_name``, ``enum_values``, ``set_values``,
``max_length``, ``length_size``, ``precision``, ``decimals``, ``fsp``, ``bits``,
``bytes``, ``size``, ...): ``row_decoder``, ``table_map`` and the image encoders read them
(``tests/integration/producer/test_binlog_events.py`` holds the two to each other over the
type matrix).  Charset and collation names come from python-mysql-replication's public
collation table (``pymysqlreplication.constants.CHARSET``), as the library's own do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import zstandard
from pymysqlreplication.constants import CHARSET
from pymysqlreplication.constants import FIELD_TYPE as T

from common.errors import WireProtocolError
from common.sql.wire import lenenc_int

# Event types (MySQL's and MariaDB's log_event.h).
QUERY_EVENT, XID_EVENT, TABLE_MAP_EVENT, HEARTBEAT_EVENT = 2, 16, 19, 27
ROWS_QUERY_EVENT, GTID_EVENT, ANONYMOUS_GTID_EVENT, PREVIOUS_GTIDS_EVENT = 29, 33, 34, 35
PARTIAL_UPDATE_ROWS_EVENT, TRANSACTION_PAYLOAD_EVENT, HEARTBEAT_EVENT_V2, GTID_TAGGED_LOG_EVENT = 39, 40, 41, 42
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
#: MySQL 9's VECTOR column type (``MYSQL_TYPE_VECTOR``; python-mysql-replication 1.0 lacks it):
#: in a TABLE_MAP its metadata is one byte, the value's length prefix in bytes (as a BLOB's);
#: its value the little-endian float32s.
VECTOR = 242
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
MARIADB_ANNOTATE_ROWS, MARIADB_BINLOG_CHECKPOINT, MARIADB_GTID_EVENT, MARIADB_GTID_LIST = 160, 161, 162, 163
MARIADB_START_ENCRYPTION = 164
MARIADB_COMPRESSED = frozenset(range(165, 173))  # QUERY_COMPRESSED and the compressed rows events
#: A rows event's kind by its type.
ROWS_KINDS = {WRITE_ROWS_V1: "insert", WRITE_ROWS_V2: "insert", UPDATE_ROWS_V1: "update",
              UPDATE_ROWS_V2: "update", DELETE_ROWS_V1: "delete", DELETE_ROWS_V2: "delete"}
UPDATE_TYPES = frozenset({UPDATE_ROWS_V1, UPDATE_ROWS_V2})

_NUMERIC = frozenset({T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG, T.NEWDECIMAL, T.FLOAT, T.DOUBLE, T.YEAR})
_CHARACTER = frozenset({T.STRING, T.VAR_STRING, T.VARCHAR, T.BLOB})
_ENUM_SET = frozenset({T.ENUM, T.SET})
_MARIADB_GTID = struct.Struct("<QI")  # sequence number, domain id


def refusal(event_type: int) -> str | None:
    """Why the reader cannot read events of ``event_type`` (None: it can, or skips them)."""
    if event_type == MARIADB_START_ENCRYPTION:
        return ("the binlog is encrypted (START_ENCRYPTION_EVENT): encrypt_binlog=ON is not supported; "
                "the reader cannot decrypt it")
    if event_type in MARIADB_COMPRESSED:
        return (f"the binlog holds MariaDB's compressed events (type {event_type}): log_bin_compress=ON is "
                f"not supported; set it OFF on the source")
    if event_type == PARTIAL_UPDATE_ROWS_EVENT:
        return ("the binlog holds partial JSON updates (PARTIAL_UPDATE_ROWS_EVENT): "
                "binlog_row_value_options=PARTIAL_JSON is not supported; set it to '' on the source")
    return None


# --- compressed transactions -------------------------------------------------------------

#: TRANSACTION_PAYLOAD's header fields (MySQL's ``Transaction_payload`` codec: "on the wire"
#: field types) and compression types.
PAYLOAD_END_MARK, PAYLOAD_SIZE, PAYLOAD_COMPRESSION, PAYLOAD_UNCOMPRESSED_SIZE = 0, 1, 2, 3
PAYLOAD_ZSTD, PAYLOAD_NONE = 0, 255
_INNER_HEADER = struct.Struct("<IBIIIH")


class InnerEvent(NamedTuple):
    """An event inside a compressed transaction: its header's fields and its body.  (MySQL
    writes them without checksum and with ``log_pos`` 0: they have no place in the file of
    their own, only the payload event has.)"""

    timestamp: int
    type: int
    server_id: int
    event_size: int
    log_pos: int
    flags: int
    body: bytes


def payload(body: bytes) -> bytes:
    """The events of a TRANSACTION_PAYLOAD body, uncompressed.  The body is header fields (each
    its type, its length and its value, length-encoded integers), the end mark, then the
    payload: zstd frames (``binlog_transaction_compression=ON``), or the events as they are
    (compression type NONE)."""
    p, size, kind, uncompressed = 0, None, PAYLOAD_ZSTD, None
    while True:
        if p >= len(body):
            raise WireProtocolError("a TRANSACTION_PAYLOAD event ends inside its header")
        field_type, p = lenenc_int(body, p)
        if field_type == PAYLOAD_END_MARK:
            break
        length, p = lenenc_int(body, p)
        value = lenenc_int(body, p)[0] if length else 0
        p += length
        if field_type == PAYLOAD_SIZE:
            size = value
        elif field_type == PAYLOAD_COMPRESSION:
            kind = value
        elif field_type == PAYLOAD_UNCOMPRESSED_SIZE:
            uncompressed = value
        # (other fields: appended by later servers, skipped by their length)
    data = body[p:] if size is None else body[p:p + size]
    if size is not None and len(data) != size:
        raise WireProtocolError(f"a TRANSACTION_PAYLOAD event holds {len(data)} bytes of payload, its header says "
                                f"{size}")
    if kind == PAYLOAD_NONE:
        out = bytes(data)
    elif kind == PAYLOAD_ZSTD:
        out = _zstd(data)
    else:
        raise WireProtocolError(f"a TRANSACTION_PAYLOAD event compressed with type {kind}: only zstd (0) and none "
                                f"(255) are known")
    if uncompressed is not None and len(out) != uncompressed:
        raise WireProtocolError(f"a TRANSACTION_PAYLOAD event uncompressed to {len(out)} bytes, its header says "
                                f"{uncompressed}")
    return out


def _zstd(data: bytes) -> bytes:
    """Every zstd frame of ``data``, decompressed and joined."""
    parts = []
    while data:
        d = zstandard.ZstdDecompressor().decompressobj()
        try:
            parts.append(d.decompress(data))
        except zstandard.ZstdError as exc:
            raise WireProtocolError(f"a TRANSACTION_PAYLOAD event's zstd payload does not decompress: {exc}") from None
        if not d.eof:
            raise WireProtocolError("a TRANSACTION_PAYLOAD event's zstd payload ends inside a frame")
        data = d.unused_data
    return b"".join(parts)


def payload_events(body: bytes) -> list[InnerEvent]:
    """The events inside a TRANSACTION_PAYLOAD body (:func:`payload`), in order."""
    data = payload(body)
    events, p, n = [], 0, len(data)
    while p < n:
        if p + _INNER_HEADER.size > n:
            raise WireProtocolError(f"a compressed transaction's payload ends inside an event header (byte {p} of {n})")
        ts, etype, server_id, size, log_pos, flags = _INNER_HEADER.unpack_from(data, p)
        if size < _INNER_HEADER.size or p + size > n:
            raise WireProtocolError(f"a compressed transaction's event of type {etype} declares {size} bytes at byte "
                                    f"{p} of a payload of {n}")
        events.append(InnerEvent(ts, etype, server_id, size, log_pos, flags, data[p + _INNER_HEADER.size:p + size]))
        p += size
    return events


# --- small events ----------------------------------------------------------------------

def mysql_gtid(body: bytes) -> str:
    """A MySQL GTID_LOG_EVENT's GTID as ``uuid:gno`` (flags, the source's UUID, the number)."""
    h = body[1:17].hex()
    gno = int.from_bytes(body[17:25], "little")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}:{gno}"


def mysql_commit_ms(body: bytes) -> int | None:
    """The commit time (milliseconds since the epoch) a MySQL GTID_LOG_EVENT (or an anonymous
    one) carries since MySQL 8.0.1: after the 42 bytes of flags, GTID and logical clock, the
    immediate commit timestamp in 7 bytes (microseconds; its top bit set: the original commit
    timestamp follows, in 7 more), the original one being the source's on a replica.  The
    original, as Debezium's ``source.ts_ms`` on MySQL; None where the event has none."""
    if len(body) < 49:
        return None
    immediate = int.from_bytes(body[42:49], "little")
    original = immediate
    if immediate & 1 << 55:
        if len(body) < 56:
            return None
        original = int.from_bytes(body[49:56], "little")
    return original // 1000


def mysql_tagged_gtid(body: bytes) -> str:
    """A MySQL GTID_TAGGED_LOG_EVENT's GTID as ``uuid:tag:gno`` (MySQL 8.3+, ``SET gtid_next =
    'AUTOMATIC:tag'``).  Its body is MySQL's serialization format: the format version, the
    serialized size and the last non-ignorable field's id, then fields, each its id and its
    value, in id order: 0 the flags, 1 the source's UUID (16 bytes, each a variable-length
    integer), 2 the transaction number (signed), 3 the tag (its length, then its bytes),
    then the commit timestamps, lengths and versions (not needed here)."""
    p = 0
    for _ in range(3):  # version, size, last non-ignorable field id
        _, p = varlen_uint(body, p)
    sid, gno, tag = b"", None, ""
    while p < len(body):
        field_id, p = varlen_uint(body, p)
        if field_id == 0:
            _, p = varlen_uint(body, p)
        elif field_id == 1:
            out = bytearray()
            for _ in range(16):
                byte, p = varlen_uint(body, p)
                out.append(byte)
            sid = bytes(out)
        elif field_id == 2:
            gno, p = varlen_int(body, p)
        elif field_id == 3:
            n, p = varlen_uint(body, p)
            tag, p = body[p:p + n].decode("ascii", "replace"), p + n
        else:
            break  # (the fields after the tag)
    if len(sid) != 16 or gno is None:
        raise WireProtocolError(f"a GTID_TAGGED_LOG_EVENT without its source UUID or number ({body.hex()})")
    h = sid.hex()
    uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return f"{uuid}:{tag}:{gno}" if tag else f"{uuid}:{gno}"


def varlen_uint(data: bytes, p: int) -> tuple[int, int]:
    """MySQL's serialization format's unsigned integer at ``p`` and the position after it: the
    first byte's trailing one bits say how many bytes follow (eight: a whole 64-bit value
    follows), the value is the bytes, little-endian, shifted right by that count plus one."""
    if p >= len(data):
        raise WireProtocolError("a variable-length integer past the end of its event")
    first = data[p]
    extra = (~first & (first + 1)).bit_length() - 1  # (the trailing ones)
    if extra >= 8:
        return int.from_bytes(data[p + 1:p + 9], "little"), p + 9
    if p + extra >= len(data):
        raise WireProtocolError("a variable-length integer past the end of its event")
    return int.from_bytes(data[p:p + extra + 1], "little") >> (extra + 1), p + extra + 1


def varlen_int(data: bytes, p: int) -> tuple[int, int]:
    """A signed :func:`varlen_uint` (zigzag: 0, -1, 1, -2 as 0, 1, 2, 3)."""
    u, p = varlen_uint(data, p)
    return (u >> 1) ^ -(u & 1), p


def mariadb_gtid(body: bytes, server_id: int) -> str:
    """A MariaDB GTID_EVENT's GTID as ``domain-server-sequence`` (the server id is the header's)."""
    seq, domain = _MARIADB_GTID.unpack_from(body)
    return f"{domain}-{server_id}-{seq}"


def xid(body: bytes) -> int:
    """An XID event's transaction id."""
    return int.from_bytes(body[:8], "little")


class Query(NamedTuple):
    """A QUERY event: the connection that ran it, its default database, the statement."""

    thread_id: int  # (python-mysql-replication's slave_proxy_id)
    schema: str
    query: str


def query(body: bytes, post_header_length: int = 13) -> Query:
    """A QUERY body: thread id, exec time, database length, error code and the status
    variables' length in the post-header; the status variables skipped by their length; the
    database and its NUL; the statement (UTF-8, undecodable bytes backslash-escaped, as the
    library does)."""
    thread_id, _exec, schema_len, _err, status_len = struct.unpack_from("<IIBHH", body)
    p = post_header_length + status_len
    if p + schema_len + 1 > len(body):
        raise WireProtocolError(f"a QUERY event of {len(body)} bytes declares {status_len} bytes of status "
                               f"variables and a database name of {schema_len}")
    schema = body[p:p + schema_len].decode("utf-8", "backslashreplace")
    return Query(thread_id, schema, body[p + schema_len + 1:].decode("utf-8", "backslashreplace"))


def heartbeat_file(event_type: int, body: bytes) -> tuple[str, int | None]:
    """A heartbeat's binlog file and, for MySQL's HEARTBEAT_V2, its position (v1 carries the
    position in the header's ``log_pos``: None here).  v2's body is fields of a type byte,
    a length-encoded length and the value: 0 the file name, 1 the position (length-encoded)."""
    if event_type == HEARTBEAT_EVENT:
        return body.decode("utf-8", "replace"), None
    name, pos, p = "", None, 0
    while p < len(body):
        tag = body[p]
        length, p = lenenc_int(body, p + 1)
        value = body[p:p + length]
        p += length
        if tag == 0:
            name = value.decode("utf-8", "replace")
        elif tag == 1:
            pos = lenenc_int(value, 0)[0]
    return name, pos


def table_id(body: bytes, post_header_length: int) -> int:
    """The table id a TABLE_MAP or rows event starts with: 6 bytes, 4 where the post-header is 6."""
    return int.from_bytes(body[:4] if post_header_length == 6 else body[:6], "little")


# --- rows events -----------------------------------------------------------------------

class RowsHeader(NamedTuple):
    """A rows event up to its row images."""

    table_id: int
    flags: int
    columns: int  # the table's column count
    present: bytes  # the columns present in the (before) images
    present_after: bytes | None  # an update's columns present in the after images
    data: int  # the offset of the row images in the body


def rows_header(event_type: int, body: bytes, post_header_length: int = 10) -> RowsHeader:
    """A rows event's (v1: 23-25; v2: 30-32) header: the table id and flags, v2's extra data
    (its length counts itself; NDB and partition data skipped), the column count, the
    present-columns bitmaps (two for an update)."""
    tid = table_id(body, post_header_length)
    p = post_header_length
    flags = int.from_bytes(body[p - 4 if event_type >= WRITE_ROWS_V2 else p - 2:][:2], "little")
    if event_type >= WRITE_ROWS_V2:
        extra = int.from_bytes(body[p - 2:p], "little")
        if extra < 2:
            raise WireProtocolError(f"a rows event declares {extra} bytes of extra data")
        p += extra - 2
    columns, p = lenenc_int(body, p)
    width = (columns + 7) >> 3
    present = body[p:p + width]
    p += width
    after = None
    if event_type in UPDATE_TYPES:
        after = body[p:p + width]
        p += width
    if p > len(body):
        raise WireProtocolError(f"a rows event of {len(body)} bytes is shorter than its bitmaps")
    return RowsHeader(tid, flags, columns, present, after, p)


# --- TABLE_MAP -------------------------------------------------------------------------

@dataclass(eq=False)
class Column:
    """One column of a TABLE_MAP: its binlog type and what the type's metadata and the
    optional metadata say (the attribute names and values of python-mysql-replication's
    ``Column``; an attribute a type lacks is None)."""

    type: int
    name: str | None = None
    unsigned: bool = False
    is_primary: bool = False
    character_set_name: str | None = None  # (the Python encoding name, as the library gives it)
    collation_name: str | None = None
    enum_values: list[str] | None = None  # ("" first: index 0 is the empty value)
    set_values: list[str] | None = None
    visibility: bool = False
    max_length: int | None = None  # VARCHAR, CHAR, BINARY
    size: int | None = None  # FLOAT/DOUBLE (its byte size), ENUM/SET (bytes of the value)
    fsp: int | None = None  # TIME2, DATETIME2, TIMESTAMP2
    length_size: int | None = None  # BLOB/TEXT, GEOMETRY, JSON: bytes of the length prefix
    precision: int | None = None  # DECIMAL
    decimals: int | None = None
    bits: int | None = None  # BIT
    bytes: int | None = None

    def data(self) -> dict:
        """The attributes that are set (not None)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _column(column_type: int, meta: bytes, p: int) -> tuple[Column, int]:
    """A column from its type and its metadata at ``meta[p:]`` (as the library reads it)."""
    col = Column(column_type)
    t = column_type
    if t == T.VARCHAR:
        col.max_length = meta[p] | meta[p + 1] << 8
        return col, p + 2
    if t in (T.DOUBLE, T.FLOAT):
        col.size = meta[p]
        return col, p + 1
    if t in (T.TIMESTAMP2, T.DATETIME2, T.TIME2):
        col.fsp = meta[p]
        return col, p + 1
    if t in (T.VAR_STRING, T.STRING):
        m = meta[p] << 8 | meta[p + 1]
        real = m >> 8
        if real in _ENUM_SET:
            col.type, col.size = real, m & 0xFF
        else:
            col.max_length = (((m >> 4) & 0x300) ^ 0x300) + (m & 0xFF)
        return col, p + 2
    if t in (T.BLOB, T.GEOMETRY, T.JSON, VECTOR):
        col.length_size = meta[p]
        return col, p + 1
    if t == T.NEWDECIMAL:
        col.precision, col.decimals = meta[p], meta[p + 1]
        return col, p + 2
    if t == T.BIT:
        col.bits = meta[p + 1] * 8 + meta[p]
        col.bytes = (col.bits + 7) // 8
        return col, p + 2
    return col, p


@dataclass(eq=False)
class TableMap:
    """A TABLE_MAP event: the table id, the table, its columns and what the optional metadata
    adds about the table (``key``: the body after the table id and flags, the same for every
    TABLE_MAP of one table definition)."""

    table_id: int
    flags: int
    schema: str
    table: str
    columns: list[Column]
    null_bitmask: bytes
    geometry_types: list[int] = field(default_factory=list)
    simple_primary_key: list[int] = field(default_factory=list)
    primary_key_with_prefix: dict[int, int] = field(default_factory=dict)
    key: bytes = b""


def table_map(body: bytes, *, mariadb: bool, post_header_length: int = 8) -> TableMap:
    """A TABLE_MAP body: table id and flags, database and table (each with its length and a
    NUL), the column count, types and metadata, the NULL bitmap, then the optional metadata
    (:func:`_optional_metadata`).  ``mariadb``: the server's kind (MariaDB counts GEOMETRY
    among the columns with a charset)."""
    tid = table_id(body, post_header_length)
    flags = int.from_bytes(body[post_header_length - 2:post_header_length], "little")
    p = post_header_length
    n = body[p]
    schema = body[p + 1:p + 1 + n].decode()
    p += n + 2
    n = body[p]
    table = body[p + 1:p + 1 + n].decode()
    p += n + 2
    count, p = lenenc_int(body, p)
    types = body[p:p + count]
    p += count
    meta_len, p = lenenc_int(body, p)
    columns, m = [], p
    for t in types:
        col, m = _column(t, body, m)
        columns.append(col)
    p += meta_len
    null_bytes = (count + 7) >> 3
    out = TableMap(tid, flags, schema, table, columns, body[p:p + null_bytes], key=body[post_header_length:])
    _optional_metadata(out, body, p + null_bytes, mariadb)
    return out


def _optional_metadata(tm: TableMap, body: bytes, p: int, mariadb: bool) -> None:
    """The optional metadata's fields (type byte, length-encoded length, value) applied to
    ``tm``'s columns as python-mysql-replication applies them."""
    fields: dict[int, bytes] = {}
    while p < len(body):
        kind = body[p]
        length, p = lenenc_int(body, p + 1)
        fields[kind] = body[p:p + length]
        p += length
    cols = tm.columns
    numeric = [c for c in cols if c.type in _NUMERIC]
    # (MySQL 9 counts a VECTOR among them, with the binary charset: it is a BLOB underneath)
    character = [c for c in cols if c.type in _CHARACTER or c.type == VECTOR or mariadb and c.type == T.GEOMETRY]
    enum_set = [c for c in cols if c.type in _ENUM_SET]
    if 4 in fields:
        for c, name in zip(cols, _strings(fields[4])):
            c.name = name.decode()
    if 1 in fields:
        for c, flag in zip(numeric, _bits(fields[1], len(numeric))):
            c.unsigned = flag
    _charsets(character, fields.get(2), fields.get(3), mariadb)
    _charsets(enum_set, fields.get(10), fields.get(11), mariadb)
    if 6 in fields:
        for c, values in zip((c for c in cols if c.type == T.ENUM), _value_lists(fields[6])):
            c.enum_values = [""] + values
    if 5 in fields:
        for c, values in zip((c for c in cols if c.type == T.SET), _value_lists(fields[5])):
            c.set_values = values
    if 7 in fields:
        tm.geometry_types = _ints(fields[7])
    if 8 in fields:
        tm.simple_primary_key = _ints(fields[8])
        for i in tm.simple_primary_key:
            if i < len(cols):
                cols[i].is_primary = True
    if 9 in fields:
        ints = _ints(fields[9])
        tm.primary_key_with_prefix = dict(zip(ints[::2], ints[1::2]))
    if 12 in fields:
        for c, flag in zip(cols, _bits(fields[12], len(cols))):
            c.visibility = flag


def _charsets(columns: list[Column], default: bytes | None, per_column: bytes | None, mariadb: bool) -> None:
    """The collations of ``columns`` (those with a charset, or the ENUM/SET ones) from a
    DEFAULT_CHARSET field (a default and exceptions by index) or a COLUMN_CHARSET one."""
    if default:
        ints = _ints(default)
        exceptions = dict(zip(ints[1::2], ints[2::2]))
        ids = [exceptions.get(i, ints[0]) for i in range(len(columns))]
    elif per_column:
        ids = _ints(per_column)
    else:
        return
    dbms = "mariadb" if mariadb else "mysql"
    for c, cid in zip(columns, ids):
        cs = CHARSET.charset_by_id(str(cid), dbms)
        c.character_set_name, c.collation_name = ("utf8", None) if cs is None else (cs.encoding, cs.collation)


def _ints(data: bytes) -> list[int]:
    out, p = [], 0
    while p < len(data):
        v, p = lenenc_int(data, p)
        out.append(v)
    return out


def _bits(data: bytes, n: int) -> list[bool]:
    """``n`` flags, most significant bit first."""
    return [bool(data[i >> 3] & (0x80 >> (i & 7))) for i in range(n)]


def _strings(data: bytes) -> list[bytes]:
    """Length-encoded strings, one after another."""
    out, p = [], 0
    while p < len(data):
        n, p = lenenc_int(data, p)
        out.append(data[p:p + n])
        p += n
    return out


def _value_lists(data: bytes) -> list[list[str]]:
    """ENUM/SET members: per column a count and as many strings (undecodable ones ``""``, as
    the library has them)."""
    out, p = [], 0
    while p < len(data):
        count, p = lenenc_int(data, p)
        values = []
        for _ in range(count):
            n, p = lenenc_int(data, p)
            try:
                values.append(data[p:p + n].decode())
            except UnicodeDecodeError:
                values.append("")
            p += n
        out.append(values)
    return out
