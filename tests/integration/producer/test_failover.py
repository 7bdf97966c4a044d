"""Capture from a replica, and failover by GTID, on a real MariaDB primary with two replicas,
and on a real MySQL 9.7 one (the ``replicated`` fixture's parameter).

The producer reads replica 1 (read-only snapshots: a replica cannot take marker rows) while
the primary takes the writes and a snapshot runs.  The producer is killed, the primary dies,
replica 1 is promoted and replica 2 follows it; the producer is pointed at replica 2, a
server it never read: it resumes from the GTID set stored with its position, positions go
on rising (a new file base), the snapshot goes on from its stored frontier.  After the load
stops and everything drains, the table topic replayed by the DBLog rule, and the sinks the
Spark merge job fills from it, equal the new primary's table.  A server whose GTID history
does not hold the stored position is refused with both sets named.
"""

from __future__ import annotations

import time

import pytest

from cdc.verify import verify
from common.errors import CDCError
from contract.signals import execute_snapshot_data, send_signal
from producer.app import ProducerApp
from spark_jobs.merge_job import MergeJob
from tests.producer_helpers import (
    ProducerProcess,
    purge_binlogs,
    read_events,
    run_until_caught_up,
    start_at_current,
    wait_for,
)
from tests.snapshot_helpers import WriteLoad, create_table, dblog_replay, has_notification, source_rows


def _chunk_rows(cfg, topic) -> int:
    try:
        return sum(1 for _, _, v in read_events(cfg, topic) if v["op"] == "r")
    except Exception:  # noqa: BLE001 - no topic yet
        return 0


def _on_replica1(topo, cfg, db: str, kind: str, rows: int) -> list[str]:
    """``cfg`` reading replica 1 with read-only snapshots; ``db.t`` made on the primary
    with ``rows`` rows and replicated to both replicas; returns its key columns."""
    topo.point(cfg, topo.replicas[0])
    cfg.snapshot.read_only = True
    cfg.source.include_databases = [db]
    with topo.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        keys = create_table(conn, db, "t", kind, rows)
    for replica in topo.replicas:
        topo.wait_caught_up(replica)
    return keys


@pytest.mark.parametrize("replicated", ["mariadb", "mysql"], indirect=True)
def test_failover_mid_snapshot_to_another_replica_loses_nothing(replicated, merge_config, unique, tmp_path):
    topo, cfg, db, rows = replicated, merge_config, unique("shop"), 20000
    cfg.snapshot.chunk_size, cfg.snapshot.parallelism = 50, 2
    cfg.sinks.postgres.enabled = True
    keys = _on_replica1(topo, cfg, db, "composite", rows)
    with topo.admin(topo.replicas[0]) as conn, conn.cursor() as cur:
        for _ in range(3):  # replica 1's binlog files are numbered ahead of replica 2's
            cur.execute("FLUSH BINARY LOGS")
    start_at_current(cfg)
    topic = f"{cfg.kafka.topic_prefix}.{db}.t"
    proc = ProducerProcess(cfg, tmp_path)
    proc.start()
    # the writes go to whichever server is the primary (the load reconnects after the failover)
    with WriteLoad(lambda: topo.admin(), db, "t", "composite", key_space=rows + 500, seed=21, pause_s=0.002) as load:
        time.sleep(2.0)
        with topo.admin() as conn:
            sid = send_signal(conn, cfg.source.signal_table, "execute-snapshot", execute_snapshot_data([f"{db}.t"]))
        wait_for(lambda: _chunk_rows(cfg, topic) >= 400, timeout=120, what="400 chunk rows")
        proc.kill9()
        old_primary = topo.primary
        topo.stop(old_primary, kill=True)
        topo.promote(topo.replicas[0])  # replica 1 is the primary now; replica 2 follows it
        assert not has_notification(cfg, "COMPLETED", id=sid), "the snapshot ended before the failover"
        new_primary, replica2 = topo.primary, topo.replicas[0]
        topo.point(cfg, replica2)  # a server this producer never read
        proc = ProducerProcess(cfg, tmp_path)
        proc.start()
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=240, what="snapshot completed")
        load.stop()
    assert load.ops.get("reconnects"), "the write load never saw the failover"
    assert proc.stop() == 0
    topo.wait_caught_up(replica2, new_primary)
    run_until_caught_up(cfg)
    log = (tmp_path / "producer.log").read_text()
    assert "failover" in log and "server_id 2" in log, log[-3000:]

    with topo.admin(new_primary) as conn:
        expected = source_rows(conn, db, "t", keys)
    result = dblog_replay(cfg, topic)
    assert result.table == expected
    assert result.chunk_rows < rows * 2
    # Positions rise across the servers: the records read from replica 2 sit above the others.
    events = read_events(cfg, topic)
    highest = {}
    for part, _, value in events:
        if value["source"]["server_id"] == replica2["server_id"]:
            assert value["position"] > highest.get(part, "")
        else:
            highest[part] = max(highest.get(part, ""), value["position"])
    assert any(v["source"]["server_id"] == replica2["server_id"] for _, _, v in events)

    MergeJob(cfg).run(available_now=True)
    report = verify(cfg, [f"{db}.t"], changelog=True)
    assert report.equal, report


def _logged_gtids(conn) -> str:
    """What the server of ``conn`` logged: MariaDB's ``@@gtid_binlog_pos``, MySQL's ``@@gtid_executed``."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos" if "mariadb" in conn.get_server_info().lower() else
                    "SELECT @@gtid_executed")
        return cur.fetchone()[0].replace("\n", "")


@pytest.mark.parametrize("replicated, own_mysql", [("mariadb", "mariadb"), ("mysql", "mysql")], indirect=True)
def test_a_server_of_another_topology_is_refused_naming_both_gtid_sets(replicated, own_mysql, config, unique):
    topo, cfg, db = replicated, config, unique("shop")
    _on_replica1(topo, cfg, db, "single", 50)
    with topo.admin() as conn, conn.cursor() as cur:
        for i in range(30):  # the topology's history grows past the other server's
            cur.execute(f"UPDATE `{db}`.t SET n = n + 1 WHERE id = %s", (i + 1,))
    topo.wait_caught_up(topo.replicas[0])
    start_at_current(cfg)
    with topo.admin() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{db}`.t SET n = n + 1")
    topo.wait_caught_up(topo.replicas[0])
    run_until_caught_up(cfg)
    with topo.cdc(topo.replicas[0]) as conn:
        stored = _logged_gtids(conn)
    own_mysql.point(cfg, own_mysql.primary)
    with own_mysql.admin() as conn:
        other = _logged_gtids(conn)
    with pytest.raises(CDCError) as err:
        ProducerApp(cfg).run(idle_exit_s=1.0)
    message = str(err.value)
    assert "failover refused" in message and stored in message and other in message, message


@pytest.mark.parametrize("replicated", ["mariadb", "mysql"], indirect=True)
def test_a_failover_target_whose_binlogs_lost_the_next_transactions_stops_or_snapshots(replicated, config, unique):
    """The stored GTID set is in the other replica's history, but it purged the binlogs
    with the transactions after it: stop naming them, or (when_needed: snapshot) stream
    from its current position and snapshot the tables again."""
    topo, cfg, db = replicated, config, unique("shop")
    keys = _on_replica1(topo, cfg, db, "single", 200)
    start_at_current(cfg)
    with topo.admin() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{db}`.t SET n = n + 1 WHERE id = 1")
    topo.wait_caught_up(topo.replicas[0])
    run_until_caught_up(cfg)  # the producer's position: replica 1's end
    with topo.admin() as conn, conn.cursor() as cur:  # written while the producer is away
        cur.execute(f"UPDATE `{db}`.t SET n = n + 1 WHERE id <= 50")
        cur.execute(f"DELETE FROM `{db}`.t WHERE id > 190")
    replica2 = topo.replicas[1]
    topo.wait_caught_up(replica2)
    with topo.admin(replica2) as admin:
        purge_binlogs(admin)
    topo.point(cfg, replica2)
    with pytest.raises(CDCError, match="no longer hold the transactions right after it"):
        ProducerApp(cfg).run(idle_exit_s=1.0)
    cfg.producer.startup.when_needed = "snapshot"
    run_until_caught_up(cfg)
    wait_for(lambda: has_notification(cfg, "COMPLETED"), timeout=60, what="the recovery snapshot")
    run_until_caught_up(cfg)
    with topo.admin() as conn:
        expected = source_rows(conn, db, "t", keys)
    assert dblog_replay(cfg, f"{cfg.kafka.topic_prefix}.{db}.t").table == expected
