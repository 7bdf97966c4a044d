"""TABLE_MAP events parsed by :mod:`producer.binlog.binlog_events` against python-mysql-replication.

The type matrix's table (``tests/all_types.py``) and a table of other charsets, ENUM/SET
collations, unsigned decimals, an invisible column and a primary key with a prefix are
written to the binlog; every TABLE_MAP of the range is read by the project's stream and
parsed here, and by the library's ``BinLogStreamReader`` (public API): the same tables, and
column for column the same attributes with the same values (the library's ``Column.data``,
None left out on both sides), the same NULL bitmaps, geometry types and primary keys.
"""

from __future__ import annotations

import pytest

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import TableMapEvent

from common.sql import wire
from common.sql.sessions import connect, source_tls
from producer.binlog.binlog_events import TABLE_MAP_EVENT, table_map
from producer.binlog.binlog_stream import BinlogStream
from producer.binlog.server import current_position
from tests.all_types import create_all_types

OTHER_CHARSETS = """CREATE TABLE cs (
  id INT NOT NULL, a VARCHAR(10) CHARACTER SET ucs2, b TEXT CHARACTER SET utf16 NOT NULL,
  c CHAR(3) CHARACTER SET latin1 COLLATE latin1_bin, u VARCHAR(300) CHARACTER SET utf32,
  e ENUM('x','y','\u00e9') CHARACTER SET latin1, s SET('p','q') CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
  d DECIMAL(5,0) UNSIGNED, f FLOAT UNSIGNED, y YEAR, v INT INVISIBLE,
  PRIMARY KEY (id, b(4))) DEFAULT CHARSET=latin1"""


def _library_maps(config, start, end) -> list:
    s = config.source
    stream = BinLogStreamReader(
        connection_settings={"host": s.host, "port": s.port, "user": s.user,
                             "password": s.password.get_secret_value()},
        server_id=s.server_id + 7, blocking=False, log_file=start[0], log_pos=start[1], resume_stream=True,
        only_events=[TableMapEvent])
    try:
        out = []
        for ev in stream:
            if (stream.log_file, stream.log_pos) > end:
                break
            meta = ev.optional_metadata
            out.append((ev.table_id, ev.schema, ev.table, bytes(ev.null_bitmask), list(meta.geometry_type_list or []),
                        list(meta.simple_primary_key_list or []), dict(meta.primary_keys_with_prefix or {}),
                        [{k: v for k, v in c.data.items() if v is not None} for c in ev.columns]))
        return out
    finally:
        stream.close()


def _own_maps(config, start, end) -> list:
    s = config.source
    conn = wire.connect(s.host, s.port, s.user, s.password.get_secret_value(), tls=source_tls(s))
    stream = BinlogStream(conn, server_id=s.server_id + 8, file=start[0], pos=start[1], blocking=False)
    try:
        out = []
        for ev in stream:
            if (stream.file, ev.log_pos) > end:
                break
            if ev.type == TABLE_MAP_EVENT:
                tm = table_map(ev.body, mariadb=conn.is_mariadb, post_header_length=stream.format.post_header_length(19))
                if tm.schema in ("mysql",):
                    continue
                out.append((tm.table_id, tm.schema, tm.table, bytes(tm.null_bitmask), tm.geometry_types,
                            tm.simple_primary_key, tm.primary_key_with_prefix, [c.data() for c in tm.columns]))
        return out
    finally:
        stream.close()


@pytest.mark.servers("mariadb", "mysql")
def test_table_maps_parse_as_the_library_parses_them(source_stack, config, test_db):
    with connect(config.source) as src:
        start = current_position(src)
    with source_stack.admin(test_db) as conn:
        create_all_types(conn, mariadb=source_stack.mysql.get("flavor", "mariadb") == "mariadb")
        with conn.cursor() as cur:
            cur.execute(OTHER_CHARSETS)
            # (the UCS-2/UTF-16/UTF-32 values NULL or empty: python-mysql-replication, and the row
            # decoder with it, decodes UTF-16/UTF-32 by Python's codecs of those names, which read
            # bytes without a BOM as little-endian, where the server writes big-endian; a later
            # test reading the whole binlog would stop on them)
            cur.execute("INSERT INTO cs (id, a, b, c, u, e, s, d, f, y, v) VALUES "
                        "(1, NULL, '', 'c', NULL, '\u00e9', 'p,q', 5, 1.5, 2001, 9)")
    with connect(config.source) as src:
        end = current_position(src)
    own = [m for m in _own_maps(config, start, end) if m[1] == test_db]
    library = [m for m in _library_maps(config, start, end) if m[1] == test_db]
    assert {m[2] for m in own} >= {"types", "cs"}
    assert own == library
    cs = next(m for m in own if m[2] == "cs")
    cols = {c["name"]: c for c in cs[7]}
    assert cols["a"]["character_set_name"] == "ucs2" and cols["u"]["character_set_name"] == "utf32"
    assert cols["c"]["collation_name"] == "latin1_bin" and cols["s"]["collation_name"] == "utf8mb4_bin"
    # (a member in latin1 that is not UTF-8 is "", as the library has it: the library's value is kept)
    assert cols["e"]["enum_values"] == ["", "x", "y", ""] and cols["s"]["set_values"] == ["p", "q"]
    assert cols["d"]["unsigned"] and cols["f"]["unsigned"] and cols["v"]["visibility"] is False
    assert cs[6] == {0: 0, 2: 4}  # (the primary key with its prefix)
    types = next(m for m in own if m[2] == "types")
    assert types[4] == [1, 0]  # POINT, GEOMETRY
