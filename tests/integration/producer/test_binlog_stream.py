""":class:`producer.binlog.binlog_stream.BinlogStream` on the real server, event for event
against python-mysql-replication's public ``BinLogStreamReader`` over the same binlog range:
single-row and multi-row inserts, updates and deletes, a transaction of several statements, a
rolled back one, DDL, a large row, a rotate (FLUSH BINARY LOGS).  Both give the same events:
types, timestamps, server ids, flags, log positions, sizes, and the body the library's packet
holds.  And from a MariaDB GTID position, blocking with the server's heartbeats, a file that
does not exist (the server's ERR), a dump thread killed (the connection gone)."""

from __future__ import annotations

import pytest
from pymysqlreplication import BinLogStreamReader

from common.errors import ServerError, ServerGone
from common.sql import wire
from producer.binlog import binlog_stream as bs
from producer.binlog.server import current_position

ROWS_EVENTS = {23, 24, 25, 30, 31, 32}  # WRITE/UPDATE/DELETE_ROWS v1, v2
TABLE_MAP = 19


def _conn(config, **kw) -> wire.Connection:
    s = config.source
    return wire.connect(s.host, s.port, s.user, s.password.get_secret_value(), connect_timeout=10,
                        read_timeout=kw.pop("read_timeout", 30), **kw)


def _ours(config, end: tuple[str, int], **start) -> list[tuple]:
    """The events up to ``end`` (file, position) as our stream gives them."""
    stream = bs.BinlogStream(_conn(config), server_id=config.source.server_id + 11, blocking=False,
                             verify_checksum=True, **start)
    out, file = [], stream.file
    try:
        for e in stream:  # (a ROTATE has moved stream.file on: the event is of the file before)
            out.append((file, e.type, e.timestamp, e.server_id, e.flags, e.log_pos, e.event_size, e.body))
            if file == end[0] and e.log_pos >= end[1]:
                break
            file = stream.file
    finally:
        stream.close()
    assert stream.format is not None and stream.format.checksum_alg == bs.CHECKSUM_CRC32
    return out


def _librarys(config, end: tuple[str, int], **start) -> list[tuple]:
    """The same from python-mysql-replication's stream (its public attributes)."""
    s = config.source
    reader = BinLogStreamReader(connection_settings={"host": s.host, "port": s.port, "user": s.user,
                                                     "password": s.password.get_secret_value()},
                                server_id=s.server_id + 12, blocking=False, **start)
    out, file = [], start.get("log_file", "")
    try:
        for ev in reader:
            p = ev.packet
            body = p.packet.get_all_data()[20:20 + ev.event_size]
            out.append((file, ev.event_type, ev.timestamp, p.server_id, p.flags, p.log_pos, p.event_size, body))
            if file == end[0] and p.log_pos >= end[1]:
                break
            if ev.event_type == bs.ROTATE_EVENT:
                file = ev.next_binlog
    finally:
        reader.close()
    return out


def _workload(stack, test_db) -> None:
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(64), qty INT, doc LONGBLOB)")
        for i in range(1, 21):
            cur.execute("INSERT INTO items VALUES (%s, %s, %s, NULL)", (i, f"item-{i}", i))
        cur.execute("UPDATE items SET qty = qty + 1 WHERE id = 3")
        cur.execute("DELETE FROM items WHERE id = 4")
        cur.execute("INSERT INTO items VALUES " + ",".join(f"({i}, 'm', {i}, NULL)" for i in range(100, 400)))
        cur.execute("UPDATE items SET qty = 0 WHERE id >= 100")
        cur.execute("INSERT INTO items VALUES (5000, 'large', 1, %s)", (bytes(range(256)) * 8192,))  # 2 MiB
        conn.begin()
        cur.execute("UPDATE items SET name = 'in-txn' WHERE id = 2")
        cur.execute("DELETE FROM items WHERE id BETWEEN 300 AND 320")
        conn.commit()
        conn.begin()
        cur.execute("UPDATE items SET name = 'rolled back' WHERE id = 3")
        conn.rollback()
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("ALTER TABLE items ADD COLUMN added VARCHAR(20) NULL DEFAULT 'new'")
        for i in range(21, 31):
            cur.execute("INSERT INTO items (id, name, qty) VALUES (%s, 'after', 1)", (i,))
        cur.execute("DELETE FROM items WHERE id >= 100")


def test_the_stream_gives_the_events_python_mysql_replication_gives(stack, config, test_db):
    with stack.cdc() as src:
        start = current_position(src)
    _workload(stack, test_db)
    with stack.cdc() as src:
        end = current_position(src)
    assert end[0] != start[0]  # (a rotate in the range)
    ours = _ours(config, end, file=start[0], pos=start[1])
    library = _librarys(config, end, log_file=start[0], log_pos=start[1], resume_stream=True)
    assert len(ours) == len(library)
    for mine, theirs in zip(ours, library):
        assert mine == theirs
    assert (ours[-1][0], ours[-1][5]) == end  # (the whole range)
    types = [e[1] for e in ours]
    assert types.count(TABLE_MAP) >= 30 and sum(t in ROWS_EVENTS for t in types) >= 30
    assert {30, 31, 32} & set(types) or {23, 24, 25} <= set(types)  # inserts, updates and deletes
    assert max(len(e[7]) for e in ours) > 2 * 1024 * 1024  # the large row's event
    rotates = [e for e in ours if e[1] == bs.ROTATE_EVENT and e[5]]
    assert rotates and bs.parse_rotate(rotates[0][7]) == (end[0], 4)
    assert any(e[1] == 2 and b"ALTER TABLE" in e[7] for e in ours)  # the DDL's QUERY event


def _gtid_pos(stack) -> str:
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0]


def test_a_mariadb_gtid_start_gives_the_transactions_after_it(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE g (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO g VALUES (1)")
    gtid = _gtid_pos(stack)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO g VALUES (2)")
        cur.execute("INSERT INTO g VALUES (3)")
    with stack.cdc() as src:
        end = current_position(src)
    ours = _ours(config, end, mariadb_gtid=gtid)
    library = _librarys(config, end, auto_position=gtid, is_mariadb=True)
    assert [e[1:] for e in ours] == [e[1:] for e in library]
    domain, server, seq = (int(x) for x in gtid.split(",")[0].split("-"))
    gtids = [e for e in ours if e[1] == 162]  # MARIADB_GTID_EVENT: sequence number first in its body
    assert [int.from_bytes(e[7][:8], "little") for e in gtids] == [seq + 1, seq + 2]
    assert sum(e[1] in ROWS_EVENTS for e in ours) == 2


def test_a_blocking_stream_waits_with_heartbeats_and_gives_new_events(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE hb (id INT PRIMARY KEY)")
    with stack.cdc() as src:
        file, pos = current_position(src)
    stream = bs.BinlogStream(_conn(config, read_timeout=10), server_id=config.source.server_id + 13, file=file,
                             pos=pos, heartbeat_s=0.2)
    seen, wrote = [], False
    try:
        for e in stream:
            seen.append(e.type)
            if e.type == bs.HEARTBEAT_LOG_EVENT and not wrote:
                assert e.body.startswith(file.encode()) and e.log_pos == pos
                with stack.admin(test_db) as conn, conn.cursor() as cur:
                    cur.execute("INSERT INTO hb VALUES (1)")
                wrote = True
            if e.type in ROWS_EVENTS:
                break
    finally:
        stream.close()
    assert wrote and seen.index(bs.HEARTBEAT_LOG_EVENT) < seen.index(TABLE_MAP)
    assert stream.position > pos and stream.conn.closed


def test_a_start_of_the_other_servers_kind_is_refused_before_anything_is_sent(config):
    conn = _conn(config)
    with pytest.raises(ValueError, match="MySQL GTID set .* for a MariaDB server"):
        bs.BinlogStream(conn, server_id=1, gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
    assert conn.value("SELECT 1") == b"1"
    conn.close()


def test_a_file_that_does_not_exist_is_the_servers_error(config):
    stream = bs.BinlogStream(_conn(config), server_id=config.source.server_id + 14, file="no-such-bin.000001", pos=4)
    with pytest.raises(ServerError) as err:
        next(iter(stream))
    assert err.value.code == 1236  # ER_MASTER_FATAL_ERROR_READING_BINLOG
    stream.close()


def test_a_dump_thread_killed_is_the_connection_gone(stack, config):
    with stack.cdc() as src:
        file, pos = current_position(src)
    stream = bs.BinlogStream(_conn(config, read_timeout=10), server_id=config.source.server_id + 15, file=file,
                             pos=pos, heartbeat_s=0.2)
    events = iter(stream)
    while next(events).type != bs.HEARTBEAT_LOG_EVENT:
        pass
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"KILL {stream.conn.handshake.connection_id}")
    with pytest.raises(ServerGone, match="closed the connection"):
        for _ in events:
            pass
    stream.close()
