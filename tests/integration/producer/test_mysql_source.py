"""The producer on a real MySQL 9.7 (``mysql_stack``: ``cdc stack up --flavor mysql``, the
server of ``make mysql-server``): what only MySQL has.  MySQL's GTIDs (``uuid:N``) in the
events and positions, binary JSON, ``SHOW BINARY LOG STATUS``, caching_sha2_password over
TLS and over plain TCP.  The tests that run on both servers carry
``@pytest.mark.servers("mariadb", "mysql")`` in their own files (docs/mysql.md)."""

from __future__ import annotations

import json
import re

import pymysql
import pytest

from common.sql.sessions import connect
from producer.binlog.server import current_position
from tests.producer_helpers import ProducerThread, read_events, run_sql, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import (
    WriteLoad,
    create_table,
    dblog_replay,
    has_notification,
    snapshot,
    source_rows,
)

pytestmark = pytest.mark.servers("mysql")


def _topic(cfg, db, table):
    return f"{cfg.kafka.topic_prefix}.{db}.{table}"


def _server_uuid(stack) -> str:
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid")
        return cur.fetchone()[0]


def test_the_server_is_mysql_with_the_binlog_settings_capture_needs(source_stack):
    assert source_stack.mysql["flavor"] == "mysql"
    with source_stack.cdc() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@version, @@version_comment, @@gtid_mode, @@enforce_gtid_consistency, @@binlog_format, "
                    "@@binlog_row_image, @@binlog_row_metadata, @@log_bin")
        version, comment, gtid_mode, enforce, fmt, image, metadata, log_bin = cur.fetchone()
        assert "mariadb" not in (version + comment).lower()
        assert int(version.split(".")[0]) >= 9
        assert (gtid_mode, enforce, fmt, image, metadata, log_bin) == ("ON", "ON", "ROW", "FULL", "FULL", 1)
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0] for r in cur.fetchall())
        for privilege in ("SELECT", "RELOAD", "SHOW DATABASES", "REPLICATION SLAVE", "REPLICATION CLIENT"):
            assert privilege in grants
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT plugin FROM mysql.user WHERE user = %s", (source_stack.mysql["cdc_user"],))
        assert cur.fetchone()[0] == "caching_sha2_password"


def test_a_server_committing_out_of_the_binlogs_order_is_refused_naming_the_setting(source_stack, config):
    """``binlog_order_commits = OFF`` lets MySQL commit a transaction of a commit group after a
    later one: a snapshot window's open marker could commit (and its chunk be read) before a
    change written ahead of it in the binlog.  The producer refuses to start, saying how to fix it."""
    from common.errors import SourceError
    from producer.app import ProducerApp

    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_order_commits = OFF")
        try:
            with pytest.raises(SourceError, match=r"binlog_order_commits is OFF.*SET GLOBAL binlog_order_commits = ON"):
                ProducerApp(config).run(idle_exit_s=1.0)
        finally:
            cur.execute("SET GLOBAL binlog_order_commits = ON")


def test_caching_sha2_full_login_over_tls_and_over_plain_tcp(source_stack):
    """A user's first login after the server starts is caching_sha2_password's full
    authentication: over TLS the password goes in the clear inside TLS, over plain TCP it is
    encrypted with the server's RSA public key.  Both work for the CDC user."""
    m = source_stack.mysql
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")  # empties the fast-authentication cache: the next logins are full ones
    tls = pymysql.connect(host=m["host"], port=m["port"], user=m["cdc_user"], password=m["cdc_password"],
                          ssl={"ca": None}, ssl_verify_cert=False)
    with tls.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1]
    tls.close()
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")
    plain = pymysql.connect(host=m["host"], port=m["port"], user=m["cdc_user"], password=m["cdc_password"],
                            ssl_disabled=True)  # (PyMySQL 2 tries TLS by default)
    with plain.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1] == ""
    plain.close()


@pytest.mark.parametrize("tls", [True, False])
def test_the_own_clients_caching_sha2_full_login(source_stack, tls):
    """The project's own client (the binlog stream's and the chunk reads' connection) logs in
    with caching_sha2_password's full authentication: the password inside TLS, or over plain
    TCP encrypted with the RSA public key it asks the server for."""
    from common.sql import wire
    from common.sql.tls import TlsSettings

    m = source_stack.mysql
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")  # (the fast-authentication cache emptied: a full login next)
    conn = wire.connect(m["host"], m["port"], m["cdc_user"], m["cdc_password"],
                        tls=TlsSettings("required" if tls else "disabled"))
    try:
        assert conn.secure is tls
        assert conn.value("SELECT CURRENT_USER()").startswith(m["cdc_user"].encode() + b"@")
    finally:
        conn.close()


def test_the_producer_streams_over_plain_tcp_with_the_servers_rsa_key(source_stack, config, test_db):
    """source.ssl.mode disabled: every connection of the producer logs in over plain TCP
    (caching_sha2_password's RSA exchange where the cache is cold) and streams."""
    config.source.ssl.mode = "disabled"
    run_sql(source_stack, test_db, "CREATE TABLE t (id INT PRIMARY KEY)")
    start_at_current(config)
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("FLUSH PRIVILEGES")
    run_sql(source_stack, test_db, "INSERT INTO t VALUES (1), (2)")
    run_until_caught_up(config)
    assert [v["after"] for _, _, v in read_events(config, _topic(config, test_db, "t"))] == [{"id": 1}, {"id": 2}]


def test_current_position_reads_show_binary_log_status_and_gtid_executed(source_stack, config):
    run_sql(source_stack, None, "CREATE DATABASE IF NOT EXISTS cdc_probe", "DROP DATABASE cdc_probe")
    conn = connect(config.source)
    try:
        pos = current_position(conn)
    finally:
        conn.close()
    with source_stack.admin() as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOG STATUS")
        file, offset, _, _, executed = cur.fetchone()
    text = repr(pos)
    assert file in text and str(offset) in text, text
    assert _server_uuid(source_stack) in executed


def test_stream_carries_mysql_gtids_in_transaction_order(source_stack, config, test_db):
    run_sql(source_stack, test_db, "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), qty INT)")
    start_at_current(config)
    run_sql(source_stack, test_db, "INSERT INTO items VALUES (1, 'apple', 3), (2, 'pear', 5)",
            "UPDATE items SET qty = 4 WHERE id = 1", "DELETE FROM items WHERE id = 2")
    run_until_caught_up(config)
    events = read_events(config, _topic(config, test_db, "items"))
    # (the envelopes themselves: test_producer's test_insert_update_delete_are_debezium_envelopes, on both servers)
    assert [(k, v["op"]) for _, k, v in events] == [({"id": 1}, "c"), ({"id": 2}, "c"), ({"id": 1}, "u"),
                                                     ({"id": 2}, "d")]
    uuid = _server_uuid(source_stack)
    gtids = [v["source"]["gtid"] for _, _, v in events]
    for gtid in gtids:
        assert re.fullmatch(rf"{uuid}:\d+", gtid), gtid
    numbers = [int(g.rsplit(":", 1)[1]) for g in gtids]
    assert numbers[0] == numbers[1] and numbers[1] < numbers[2] < numbers[3]  # one transaction, then one each
    assert numbers[2] == numbers[1] + 1 and numbers[3] == numbers[2] + 1  # autocommit: consecutive transactions
    positions = [v["position"] for _, _, v in events]
    assert positions == sorted(positions) and len(set(positions)) == 4
    assert all(v["source"]["connector"] == "mysql" and v["source"]["file"].startswith("mysql-bin.")
               for _, _, v in events)


JSON_VALUES = [
    {"c": {"d": [True, None, 1.5]}},
    [1, "two", {"three": [3.25, -4]}, [], {}],
    {"unicode": "grüße, 東京, 🎉", "quote": "a\"b\\c"},
    {"big": 18446744073709551615, "neg": -9223372036854775808, "small": 1e-300, "f": 0.1},
    "a string",
    12345,
    True,
    None,
    {"nested": {"k" + str(i): list(range(i)) for i in range(30)}},
]


def test_binary_json_values_come_through_as_their_text(source_stack, config, test_db):
    """MySQL stores JSON in its binary form, and so does its binlog; each value comes out as
    JSON text that parses back to what was written (a JSON null, and SQL NULL, apart)."""
    run_sql(source_stack, test_db, "CREATE TABLE docs (id INT PRIMARY KEY, doc JSON NULL)")
    start_at_current(config)
    with source_stack.admin(test_db) as conn, conn.cursor() as cur:
        for i, value in enumerate(JSON_VALUES):
            cur.execute("INSERT INTO docs VALUES (%s, CAST(%s AS JSON))", (i, json.dumps(value)))
        cur.execute("INSERT INTO docs VALUES (%s, NULL)", (len(JSON_VALUES),))
        cur.execute("UPDATE docs SET doc = JSON_SET(doc, '$.c.e', 'added') WHERE id = 0")
    run_until_caught_up(config)
    events = read_events(config, _topic(config, test_db, "docs"))
    inserted = {v["after"]["id"]: v["after"]["doc"] for _, _, v in events if v["op"] == "c"}
    assert inserted[len(JSON_VALUES)] is None  # SQL NULL
    for i, value in enumerate(JSON_VALUES):
        assert inserted[i] is not None and json.loads(inserted[i]) == value, (i, inserted)
    (update,) = [v for _, _, v in events if v["op"] == "u"]
    assert json.loads(update["before"]["doc"]) == JSON_VALUES[0]
    assert json.loads(update["after"]["doc"]) == {"c": {"d": [True, None, 1.5], "e": "added"}}
    # A snapshot reads the same documents as the same text the stream gave (JSON null too).
    config.source.include_databases = [test_db]
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.docs"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=60, what="snapshot completed")
    streamed = {**inserted, 0: update["after"]["doc"]}
    read = {v["after"]["id"]: v["after"]["doc"]
            for _, _, v in read_events(config, _topic(config, test_db, "docs")) if v["op"] == "r"}
    assert read == streamed


def _snapshot_under_writes(source_stack, config, db: str, kind: str, rows: int, *, chunk: int, seed: int,
                           before_writes=None):
    """Table ``t`` of ``rows`` rows (loaded before the producer starts: they come by the
    snapshot only) snapshotted by a signal while a write load runs on it, the producer caught
    up after: the topic replayed by the DBLog rule, the table's rows, the load's operations and
    what ``before_writes()`` said before the producer started."""
    with source_stack.admin() as conn:
        keys = create_table(conn, db, "t", kind, rows)
    config.source.include_databases = [db]
    config.snapshot.chunk_size = chunk
    start_at_current(config)
    marks = before_writes() if before_writes is not None else None
    with ProducerThread(config), WriteLoad(source_stack.admin, db, "t", kind, key_space=rows + rows // 6,
                                           seed=seed) as load:
        wait_for(lambda: sum(load.ops.values()) > 50, what="writes running")
        sid = snapshot(config, [f"{db}.t"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        load.stop()
    run_until_caught_up(config)
    result = dblog_replay(config, _topic(config, db, "t"))
    with source_stack.admin() as conn:
        expected = source_rows(conn, db, "t", keys)
    return result, expected, sum(load.ops.values()), marks


def test_signal_table_snapshot_under_writes_equals_the_table(source_stack, config, test_db):
    config.snapshot.parallelism = 2
    result, expected, writes, _ = _snapshot_under_writes(source_stack, config, test_db, "composite", 1200,
                                                         chunk=150, seed=11)
    assert result.table == expected
    assert result.chunk_rows >= 1200 * 0.8 and len(result.windows) >= 1200 // 150
    assert writes > 100


# --- binlog_transaction_compression=ON: TRANSACTION_PAYLOAD events, zstd -----------------

def _compressed_transactions(stack, db: str) -> int:
    """How many TRANSACTION_PAYLOAD events the server's binlog holds for ``db``'s tables (from
    performance_schema's compression statistics)."""
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(TRANSACTION_COUNTER), 0) FROM performance_schema.binary_log_transaction_"
                    "compression_stats WHERE LOG_TYPE = 'BINARY' AND COMPRESSION_TYPE = 'ZSTD'")
        return int(cur.fetchone()[0])


def _write_transactions(stack, db: str, compressed: bool) -> None:
    """One multi-statement transaction over two tables (inserts, an update of a large value,
    a primary key change, deletes), then autocommitted single-row ones."""
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute(f"SET SESSION binlog_transaction_compression = {'ON' if compressed else 'OFF'}")
        cur.execute("BEGIN")
        cur.executemany("INSERT INTO a VALUES (%s, %s, %s)", [(i, f"row {i}", "x" * (i * 97 % 3000)) for i in range(200)])
        cur.execute("UPDATE a SET big = REPEAT('yz', 20000) WHERE id < 3")
        cur.execute("INSERT INTO b VALUES (1, CAST('{\"k\": [1, 2]}' AS JSON)), (2, CAST('null' AS JSON))")
        cur.execute("UPDATE a SET id = id + 1000 WHERE id = 7")
        cur.execute("DELETE FROM a WHERE id BETWEEN 10 AND 19")
        cur.execute("COMMIT")
        for i in range(5):
            cur.execute("UPDATE a SET label = %s WHERE id = %s", (f"single {i}", 30 + i))
        cur.execute("DELETE FROM b WHERE id = 1")


def _changes(config, db):
    return {t: [(k, v["op"], v["before"], v["after"], v["source"]["gtid"]) for _, k, v in
                read_events(config, _topic(config, db, t))] for t in ("a", "b")}


def test_compressed_transactions_are_read_as_the_same_events(source_stack, config, test_db, unique):
    """The same transactions written compressed (binlog_transaction_compression=ON) and not:
    the producer gives the same events from both, in the same order, at positions that rise."""
    ddl = ("CREATE TABLE a (id INT PRIMARY KEY, label VARCHAR(40), big LONGTEXT)",
           "CREATE TABLE b (id INT PRIMARY KEY, doc JSON)")
    other = unique("db")
    run_sql(source_stack, None, f"CREATE DATABASE `{other}`")
    try:
        run_sql(source_stack, test_db, *ddl)
        run_sql(source_stack, other, *ddl)
        before = _compressed_transactions(source_stack, test_db)
        start_at_current(config)
        _write_transactions(source_stack, test_db, compressed=True)
        assert _compressed_transactions(source_stack, test_db) >= before + 7  # (the server did compress them)
        _write_transactions(source_stack, other, compressed=False)
        run_until_caught_up(config)
        compressed, plain = _changes(config, test_db), _changes(config, other)

        def strip(rows):  # (the GTIDs differ)
            return [r[:4] for r in rows]
        assert strip(compressed["a"]) == strip(plain["a"]) and strip(compressed["b"]) == strip(plain["b"])
        assert len(compressed["a"]) == 200 + 3 + 2 + 10 + 5 and len(compressed["b"]) == 3
        assert compressed["b"][1][3] == {"id": 2, "doc": "null"}
        for t in ("a", "b"):
            positions = [v["position"] for _, _, v in read_events(config, _topic(config, test_db, t))]
            assert positions == sorted(positions) and len(set(positions)) == len(positions)
        gtids = [g for *_, g in compressed["a"]]
        assert len(set(gtids[:215])) == 1 and len(set(gtids[215:])) == 5  # one transaction, then five
    finally:
        run_sql(source_stack, None, f"DROP DATABASE IF EXISTS `{other}`")


def test_a_restart_inside_a_compressed_transaction_emits_each_change_once(source_stack, config, test_db):
    """Resumed after any row of a compressed transaction (from its GTID event, skipping what
    is out), the reader gives exactly the rows after it."""
    from producer.binlog.reader import BinlogReader, ResumePoint, RowChanges

    run_sql(source_stack, test_db, "CREATE TABLE a (id INT PRIMARY KEY, label VARCHAR(40), big LONGTEXT)",
            "CREATE TABLE b (id INT PRIMARY KEY, doc JSON)")
    conn = connect(config.source)
    try:
        file, pos = current_position(conn)
    finally:
        conn.close()
    _write_transactions(source_stack, test_db, compressed=True)

    def rows_from(resume):
        reader = BinlogReader(config.source, resume, is_mariadb=False, blocking=False)
        out = []
        for item in reader:
            if isinstance(item, RowChanges) and item.db == test_db:
                out += [(item.position(2 * i), item.resume_after(i)) for i in range(item.first, len(item.rows))]
        reader.close()
        return out

    everything = rows_from(ResumePoint(file, pos))
    assert len(everything) == 200 + 3 + 1 + 10 + 2 + 5 + 1  # (the key change: one row of its event)
    for cut in (0, 57, 199, 203, 214, len(everything) - 2):
        rest = rows_from(everything[cut][1])
        assert [p for p, _ in rest] == [p for p, _ in everything[cut + 1:]], cut


def test_a_snapshot_under_writes_with_compression_on_for_every_session(source_stack, config, test_db):
    """binlog_transaction_compression=ON for the whole server: the writes, and the producer's
    own window markers, come compressed; the snapshot still ends equal to the table."""
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_transaction_compression = ON")
    try:
        result, expected, _, before = _snapshot_under_writes(
            source_stack, config, test_db, "single", 800, chunk=100, seed=5,
            before_writes=lambda: _compressed_transactions(source_stack, test_db))
        assert _compressed_transactions(source_stack, test_db) > before + 50
    finally:
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_transaction_compression = OFF")
    assert result.table == expected
    assert result.chunk_rows >= 800 * 0.8 and len(result.windows) >= 8


@pytest.mark.parametrize("own_mysql", ["mysql"], indirect=True)
def test_a_gtid_start_the_server_purged_stops_with_the_servers_reason(own_mysql, config, unique):
    """startup.mode=gtid with a set the server's binlogs no longer follow (purged): MySQL
    refuses the dump (ERR 1236), and the producer stops saying so instead of reconnecting for
    ever."""
    from common.errors import CDCError
    from producer.app import ProducerApp
    from tests.producer_helpers import purge_binlogs

    db = unique("db")
    with own_mysql.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid")
        (uuid,) = cur.fetchone()
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
        for i in range(5):
            cur.execute(f"INSERT INTO `{db}`.t VALUES ({i})")
        purge_binlogs(conn)
        cur.execute("SELECT @@gtid_purged")
        assert cur.fetchone()[0]
    own_mysql.point(config, own_mysql.primary)
    config.producer.startup.mode, config.producer.startup.gtid_set = "gtid", f"{uuid}:1-2"
    with pytest.raises(CDCError, match="refused to send its binlog") as err:
        ProducerApp(config).run(idle_exit_s=1.0)
    assert "1236" in str(err.value)


@pytest.mark.parametrize("own_mysql", ["mysql"], indirect=True)
@pytest.mark.parametrize("setting, statement, message", [
    ("binlog_row_value_options", "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
     "binlog_row_value_options=PARTIAL_JSON is not supported"),
    ("binlog_row_image", "SET SESSION binlog_row_image = 'MINIMAL'", "binlog_row_image must be FULL"),
])
def test_what_the_reader_still_refuses_stops_it_naming_the_setting(own_mysql, config, unique, setting, statement,
                                                                    message):
    """Settings MySQL users turn on that the reader does not read yet, each turned on for real
    (a session of a server of the test's own: the refused events stay in its binlog): the
    producer stops naming the setting instead of emitting wrong or partial rows."""
    from common.errors import UnsupportedType
    from producer.app import ProducerApp

    db = unique("db")
    own_mysql.point(config, own_mysql.primary)
    with own_mysql.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, doc JSON, v VARCHAR(10))")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (1, '{{\"a\": 1, \"b\": \"x\"}}', 'v')")
    start_at_current(config)
    with own_mysql.admin(database=db) as conn, conn.cursor() as cur:
        cur.execute(statement)
        cur.execute("UPDATE t SET doc = JSON_SET(doc, '$.a', 2) WHERE id = 1")
    with pytest.raises(UnsupportedType, match=message) as err:
        ProducerApp(config).run(idle_exit_s=2.0)
    assert setting in str(err.value)


@pytest.mark.parametrize("own_mysql", ["mysql"], indirect=True)
def test_tagged_gtids_come_with_their_tag(own_mysql, config, unique):
    """MySQL 8.3+ tagged transactions (``SET gtid_next = 'AUTOMATIC:tag'``): their events carry
    ``uuid:tag:N``, and the server's GTID set with tags reads as a set covering them.  (A server
    of the test's own: a start by a GTID set with tags, COM_BINLOG_DUMP_GTID's tagged form, is
    not written yet, and the session server's set stays untagged.)"""
    from contract.gtid import GtidSet
    from producer.binlog.server import executed_gtids

    tag, test_db = unique("t")[-20:].lower(), unique("db")
    own_mysql.point(config, own_mysql.primary)
    with own_mysql.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{test_db}`")
        cur.execute(f"CREATE TABLE `{test_db}`.t (id INT PRIMARY KEY)")
    start_at_current(config)
    with own_mysql.admin(database=test_db) as conn, conn.cursor() as cur:
        cur.execute(f"SET gtid_next = 'AUTOMATIC:{tag}'")
        cur.execute("INSERT INTO t VALUES (1)")
        cur.execute("INSERT INTO t VALUES (2)")
        cur.execute("SET gtid_next = 'AUTOMATIC'")
        cur.execute("INSERT INTO t VALUES (3)")
    run_until_caught_up(config)
    uuid = _server_uuid(own_mysql)
    gtids = [v["source"]["gtid"] for _, _, v in read_events(config, _topic(config, test_db, "t"))]
    assert [g.rsplit(":", 1)[0] for g in gtids] == [f"{uuid}:{tag}", f"{uuid}:{tag}", uuid]
    assert int(gtids[1].rsplit(":", 1)[1]) == int(gtids[0].rsplit(":", 1)[1]) + 1
    conn = connect(config.source)
    try:
        executed = executed_gtids(conn, False)
    finally:
        conn.close()
    passed = GtidSet("mysql")
    for gtid in gtids:
        passed.add(gtid)
    assert executed.covers(passed) and f"{uuid}:{tag}" in executed.last
