"""A MySQL 9.7 primary with replicas (``make mysql-server``'s server): replication by GTID
(``SOURCE_AUTO_POSITION=1``, over TLS, the replication user on caching_sha2_password),
failover by promotion (a promotion that first copies what another replica received: test_replication.py, on both
servers), the replicas logging what they apply under the primary's GTIDs, and
``cdc stack up --flavor mysql --replicas``.  (MariaDB's: test_replication.py.)"""

from __future__ import annotations

from typing import Iterator

import pymysql
import pytest

from cdc.stack.manager import read_stack, stack_down, stack_status
from cdc.stack.process import pid_alive
from tests.replication_helpers import Topology, create_shop_table, table_rows, write


@pytest.fixture
def replicated_mysql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    """A MySQL primary with two replicas of this test's own; removed afterwards."""
    topology = Topology(tmp_path_factory.mktemp("mrepl"), replicas=2, flavor="mysql").start()
    try:
        yield topology
    finally:
        topology.close()


def test_mysql_replicas_follow_the_primary_and_the_promoted_one_feeds_the_other(replicated_mysql):
    """A row written on the primary reaches both replicas (read-only, logging what they apply,
    replicating by GTID over TLS); the primary dies, replica 1 is promoted, replica 2 follows
    it and gets what is written there under replica 1's own server uuid."""
    topo = replicated_mysql
    create_shop_table(topo)
    gtid = write(topo, topo.primary, "shop", "INSERT INTO t VALUES (1, 'on the primary')")
    uuids = set()
    for replica in topo.replicas:
        topo.wait_caught_up(replica)
        assert table_rows(topo, replica, "shop") == [(1, "on the primary")]
    for server in (topo.primary, *topo.replicas):
        with topo.admin(server) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@server_uuid, @@read_only, @@log_replica_updates, @@gtid_mode, @@binlog_row_image, "
                        "@@gtid_executed, @@version")
            uuid, read_only, log_updates, gtid_mode, image, executed, version = cur.fetchone()
        uuids.add(uuid)
        assert (read_only, log_updates, gtid_mode, image) == (int(server is not topo.primary), 1, "ON", "FULL")
        assert gtid.split(":")[0] in executed and version.startswith("9.")
    assert len(uuids) == 3
    for replica in topo.replicas:
        with topo.admin(replica) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW REPLICA STATUS")
            status = cur.fetchone()
        assert (status["Source_Port"], status["Auto_Position"], status["Source_SSL_Allowed"]) == \
            (topo.primary["port"], 1, "Yes")
        assert status["Replica_IO_Running"] == status["Replica_SQL_Running"] == "Yes"
        # The CDC user came with the binlog, with caching_sha2_password; the replica refuses its writes.
        with topo.cdc(replica) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM shop.t")
            assert cur.fetchone() == (1,)
            with pytest.raises(pymysql.err.OperationalError) as err:
                cur.execute(f"INSERT INTO {replica['signal_table']} (id, type) VALUES ('x', 'log')")
            assert err.value.args[0] == 1290  # --read-only

    old_primary = topo.primary
    replica1, replica2 = topo.replicas
    topo.stop(old_primary, kill=True)
    assert not pid_alive(old_primary["pid"])
    topo.promote(replica1)
    assert topo.primary is replica1 and topo.replicas == [replica2]
    gtid = write(topo, replica1, "shop", "INSERT INTO t VALUES (2, 'after')", "UPDATE t SET v = 'kept' WHERE id = 1")
    with topo.admin(replica1) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_uuid, @@read_only")
        uuid, read_only = cur.fetchone()
        cur.execute("SHOW REPLICA STATUS")
        assert cur.fetchone() is None and read_only == 0
    assert gtid.startswith(f"{uuid}:")  # written on the new primary under its own server uuid
    topo.wait_caught_up(replica2, source=replica1)
    assert table_rows(topo, replica2, "shop") == [(1, "kept"), (2, "after")]
    with topo.admin(replica2) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW REPLICA STATUS")
        status = cur.fetchone()
    assert (status["Source_Port"], status["Auto_Position"]) == (replica1["port"], 1)


def test_stack_up_with_mysql_replicas(stack, tmp_path_factory):
    """``cdc stack up --flavor mysql --replicas 1`` (Kafka and PostgreSQL of the session stack):
    stack.json records the MySQL replica, ``status`` reports it replicating, ``down`` stops it."""
    state = tmp_path_factory.mktemp("stack-mrepl")
    out = stack.stack_up_beside(state, "--flavor", "mysql", "--replicas", "1")
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "mysql 9." in out.stdout and "replica1" in out.stdout
        data = read_stack(state)
        [replica] = data["replicas"]
        assert (data["mysql"]["flavor"], replica["flavor"], replica["role"]) == ("mysql", "mysql", "replica")
        report = stack_status(state)
        assert report["replica1"][0], report["replica1"]
        assert f"127.0.0.1:{data['mysql']['port']}" in report["replica1"][1]
    finally:
        stopped = stack_down(state)
    assert sorted(stopped) == ["mysql", "replica1"]
