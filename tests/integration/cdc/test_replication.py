"""A MariaDB primary with replicas from the machine's binaries: replication by GTID,
failover by promotion, ``log_slave_updates``, and ``cdc stack up --replicas/--read-only``."""

from __future__ import annotations

import json
from pathlib import Path

import pymysql
import pytest

from cdc.stack.manager import read_stack, stack_down, stack_status, stack_up
from cdc.stack.process import pid_alive
from common.config import load_config
from tests.replication_helpers import create_shop_table, table_rows, write


def test_a_row_written_on_the_primary_reaches_both_replicas(replicated):
    topo = replicated
    create_shop_table(topo)
    write(topo, topo.primary, "shop", "INSERT INTO t VALUES (1, 'on the primary')")
    for replica in topo.replicas:
        topo.wait_caught_up(replica)
        assert table_rows(topo, replica, "shop") == [(1, "on the primary")]
    ids = set()
    for server in (topo.primary, *topo.replicas):
        with topo.admin(server) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@server_id, @@read_only, @@log_slave_updates, @@gtid_strict_mode, @@binlog_format, "
                        "@@binlog_row_image")
            server_id, read_only, log_slave_updates, strict, fmt, image = cur.fetchone()
        ids.add(server_id)
        assert (read_only, log_slave_updates, strict, fmt, image) == \
            (int(server is not topo.primary), 1, 1, "ROW", "FULL")
    assert len(ids) == 3
    # The CDC user exists on every server (it came with the binlog) and reads there; a
    # replica refuses its writes (read-only), the primary takes them.
    for replica in topo.replicas:
        with topo.cdc(replica) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM shop.t")
            assert cur.fetchone() == (1,)
            cur.execute("SHOW MASTER STATUS")
            assert cur.fetchone()[0].startswith("mysql-bin.")
            with pytest.raises(pymysql.err.OperationalError) as err:
                cur.execute(f"INSERT INTO {replica['signal_table']} (id, type) VALUES ('x', 'log')")
            assert err.value.args[0] == 1290  # --read-only
    with topo.cdc() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {topo.primary['signal_table']} (id, type) VALUES ('x', 'log')")


def test_after_the_primary_dies_the_promoted_replica_feeds_the_other(replicated):
    topo = replicated
    create_shop_table(topo)
    write(topo, topo.primary, "shop", "INSERT INTO t VALUES (1, 'before')")
    for replica in topo.replicas:
        topo.wait_caught_up(replica)
    old_primary = topo.primary
    replica1, replica2 = topo.replicas
    topo.stop(old_primary, kill=True)
    assert not pid_alive(old_primary["pid"])
    topo.promote(replica1)
    assert topo.primary is replica1 and topo.replicas == [replica2]
    gtid = write(topo, replica1, "shop", "INSERT INTO t VALUES (2, 'after')", "UPDATE t SET v = 'kept' WHERE id = 1")
    assert gtid.startswith(f"0-{replica1['server_id']}-")  # written on the new primary under its own id
    topo.wait_caught_up(replica2, source=replica1)
    assert table_rows(topo, replica2, "shop") == [(1, "kept"), (2, "after")]
    with topo.admin(replica1) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@read_only")
        assert cur.fetchone() == (0,)
        cur.execute("SHOW SLAVE STATUS")
        assert cur.fetchone() is None
    with topo.admin(replica2) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW SLAVE STATUS")
        status = cur.fetchone()
    assert (status["Master_Port"], status["Using_Gtid"]) == (replica1["port"], "Slave_Pos")


@pytest.mark.parametrize("replicated", ["mariadb", "mysql"], indirect=True)
def test_the_promoted_replica_first_gets_what_another_replica_received_and_it_did_not(replicated):
    """(MariaDB and MySQL.) The primary dies after one replica received transactions the other did not (the
    race of a crash under writes, made certain here by stopping replica 1's IO thread):
    promoting replica 1 copies them from replica 2 first, and replica 2 then follows it."""
    topo = replicated
    create_shop_table(topo)
    write(topo, topo.primary, "shop", "INSERT INTO t VALUES (1, 'both')")
    for replica in topo.replicas:
        topo.wait_caught_up(replica)
    replica1, replica2 = topo.replicas
    with topo.admin(replica1) as conn, conn.cursor() as cur:
        cur.execute("STOP REPLICA IO_THREAD")
    write(topo, topo.primary, "shop", "INSERT INTO t VALUES (2, 'only replica 2')",
           "UPDATE t SET v = 'new' WHERE id = 1")
    topo.wait_caught_up(replica2)
    assert table_rows(topo, replica1, "shop") == [(1, "both")]
    topo.stop(topo.primary, kill=True)
    topo.promote(replica1)
    assert table_rows(topo, replica1, "shop") == [(1, "new"), (2, "only replica 2")]
    write(topo, replica1, "shop", "INSERT INTO t VALUES (3, 'after')")
    topo.wait_caught_up(replica2, source=replica1)
    assert table_rows(topo, replica2, "shop") == [(1, "new"), (2, "only replica 2"), (3, "after")]
    with topo.admin(replica1) as conn, conn.cursor() as cur:
        cur.execute("SHOW REPLICA STATUS")
        assert cur.fetchone() is None  # (it replicates nobody once promoted)


def test_the_replica_binlog_holds_the_primary_transactions_under_their_gtids(replicated):
    topo = replicated
    create_shop_table(topo)
    gtid = write(topo, topo.primary, "shop", "INSERT INTO t VALUES (7, 'seven')")
    assert gtid.startswith("0-1-")
    replica = topo.replicas[0]
    topo.wait_caught_up(replica)
    files = sorted(p.name for p in Path(replica["datadir"]).glob("mysql-bin.[0-9]*"))
    assert files, "the replica writes no binlog"
    events = []
    with topo.admin(replica) as conn, conn.cursor() as cur:
        for name in files:
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
            events += cur.fetchall()  # (Log_name, Pos, Event_type, Server_id, End_log_pos, Info)
    begin = [i for i, e in enumerate(events) if e[2] == "Gtid" and e[5].endswith(f"GTID {gtid}")]
    assert len(begin) == 1, f"GTID {gtid} not in the replica's binlog {files}"
    assert events[begin[0]][3] == 1  # logged with the primary's server id
    following = [e[2] for e in events[begin[0]:begin[0] + 5]]
    assert "Write_rows_v1" in following and "Table_map" in following
    # Every transaction of the primary is in the replica's binlog, under the same GTIDs.
    with topo.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        primary_pos = cur.fetchone()[0]
    with topo.admin(replica) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        assert cur.fetchone()[0] == primary_pos == gtid


def test_stack_up_with_replicas_and_a_read_only_cdc_user(stack, tmp_path_factory):
    """``cdc stack up --replicas 1 --read-only`` (Kafka and PostgreSQL of the session stack):
    stack.json records the replica, cdc.yaml says snapshot.read_only, the CDC user writes
    nothing, ``status`` reports the replica, ``up`` again keeps it, ``down`` stops it."""
    state = tmp_path_factory.mktemp("stack-repl")
    out = stack.stack_up_beside(state, "--replicas", "1", "--read-only")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "replica1" in out.stdout and "read-only" in out.stdout
        data = read_stack(state)
        [replica] = data["replicas"]
        assert pid_alive(replica["pid"]) and replica["role"] == "replica" and replica["server_id"] == 2
        assert Path(replica["datadir"]).is_relative_to(state) and replica["port"] != data["mysql"]["port"]
        assert data["mysql"]["cdc_read_only"] is True
        assert load_config(state / "cdc.yaml").snapshot.read_only is True
        m = data["mysql"]
        with pymysql.connect(host=m["host"], port=m["port"], user=m["cdc_user"], password=m["cdc_password"]) as conn, \
                conn.cursor() as cur:
            cur.execute("SHOW GRANTS")
            grants = " ".join(r[0] for r in cur.fetchall())
            assert "REPLICATION SLAVE" in grants and "SELECT" in grants
            assert "INSERT" not in grants and "DELETE" not in grants
            with pytest.raises(pymysql.err.OperationalError) as err:
                cur.execute(f"INSERT INTO {m['signal_table']} (id, type) VALUES ('x', 'log')")
            assert err.value.args[0] == 1142  # command denied
        report = stack_status(state)
        assert report["replica1"][0], report["replica1"]
        assert f"127.0.0.1:{m['port']}" in report["replica1"][1]

        again = stack_up(state, kafka_bootstrap=stack.bootstrap, postgres_dsn=stack.pg_dsn)  # as recorded
        assert [r["pid"] for r in again.replicas] == [replica["pid"]] and again.mysql["cdc_read_only"] is True
        writable = stack_up(state, kafka_bootstrap=stack.bootstrap, postgres_dsn=stack.pg_dsn, read_only=False)
        assert load_config(state / "cdc.yaml").snapshot.read_only is False and writable.mysql["pid"] == m["pid"]
        with pymysql.connect(host=m["host"], port=m["port"], user=m["cdc_user"], password=m["cdc_password"],
                             autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {m['signal_table']} (id, type) VALUES ('x', 'log')")
    finally:
        stopped = stack_down(state)
    assert sorted(stopped) == ["mysql", "replica1"]  # Kafka and PostgreSQL are not the stack's own
    assert not pid_alive(replica["pid"]) and not pid_alive(m["pid"])
    assert json.loads((state / "stack.json").read_text())["replicas"][0]["port"] == replica["port"]
