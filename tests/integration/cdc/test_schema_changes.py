"""Schema changes end to end: DDL of every kind, mid-stream and mid-snapshot, under a write
load; the sinks and the clean changelog follow with no snapshot started by hand, and
``cdc verify --changelog`` finds them equal to the source."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from cdc.verify import verify
from common.config import SchemaChangeRule
from contract.envelope import TRUNCATE_OP
from contract.markers import TRUNCATE
from contract.topics import clean_topic, table_topic
from spark_jobs.errors import SchemaChangeStopped
from spark_jobs.merge_job import MergeJob
from spark_jobs.sinks.postgres import PostgresSink
from tests.producer_helpers import (
    ProducerThread,
    decoder,
    read_events,
    resolving_decoder,
    run_until_caught_up,
    start_at_current,
    wait_caught_up,
    wait_for,
)
from tests.sink_helpers import apply_clean, mysql_sink_rows, pg_sink_rows
from tests.snapshot_helpers import (
    create_table,
    has_notification,
    markers,
    notifications,
    snapshot,
    source_rows,
    write_loads,
)


def _verified_equal(cfg, tables: list[str]) -> None:
    report = verify(cfg, tables, changelog=True, chunk_size=97)
    for t in report.tables:
        for r in t.results:
            assert r.equal, f"{t.table} {r.sink}: {r}"
        assert {r.sink for r in t.results} == {"postgres", "mysql", "changelog"}, t


def _ddl(stack, *statements: str) -> None:
    with stack.admin() as conn, conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt)
        conn.commit()


def _snapshots_after_ddl(cfg) -> list[dict]:
    return [n for n in notifications(cfg) if n["type"] == "STARTED" and (n.get("additionalData") or {}).get("reason")]


def _snapshots_done(cfg) -> bool:
    """Every snapshot the producer started completed (none is running)."""
    started = {n["id"] for n in notifications(cfg) if n["type"] == "STARTED"}
    done = {n["id"] for n in notifications(cfg) if n["type"] == "COMPLETED"}
    return started <= done


def _run(stack, cfg, test_db, tables: dict[str, str], rows: int, ddl_during_snapshot, ddl_after=()):
    """Tables loaded, the producer streaming, a write load on each, a snapshot of all;
    ``ddl_during_snapshot`` run once the snapshot is under way, ``ddl_after`` once it
    completed; then the load stops, the producer finishes every snapshot it started by
    itself, and the merge job runs."""
    with stack.admin() as conn:
        for table, kind in tables.items():
            create_table(conn, test_db, table, kind, rows)
    cfg.source.include_databases = [test_db]
    cfg.snapshot.chunk_size = 100
    start_at_current(cfg)
    with ProducerThread(cfg) as producer:
        with write_loads(stack, test_db, tables, rows + 50, pause_s=0.002) as loads:
            sid = snapshot(cfg, [f"{test_db}.{t}" for t in tables])

            def state() -> str:
                told = [(n["type"], (n.get("additionalData") or {}).get("table")) for n in notifications(cfg)
                        if n.get("id") == sid]
                return (f"notifications of {sid}: {told[-12:]}; {producer.state()}; "
                        f"writes: {[dict(ld.ops) for ld in loads]}")

            wait_for(lambda: has_notification(cfg, "IN_PROGRESS", id=sid), timeout=60, what="snapshot under way",
                     state=state)
            ddl_during_snapshot()
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=180, what="snapshot completed",
                     state=state)
            for stmt in ddl_after:
                _ddl(stack, stmt)
        with stack.admin() as conn:  # the DDL read, the snapshots it started begun
            wait_caught_up(cfg, conn)
        wait_for(lambda: _snapshots_done(cfg), timeout=180, what="the snapshots started after DDL completed",
                 state=producer.state)
        time.sleep(2)  # the producer writes what the last chunks released
    assert MergeJob(cfg).run(available_now=True) == 0


def test_a_column_added_while_a_snapshot_runs_passes_verify_changelog(stack, merge_config, test_db):
    """The issue's scenario: a nullable column added to three tables under a write load
    while a snapshot runs, then rows updated to set it."""
    cfg = merge_config
    tables = {"t_single": "single", "t_composite": "composite", "t_string": "string"}

    def add_column():
        for t in tables:
            _ddl(stack, f"ALTER TABLE `{test_db}`.`{t}` ADD COLUMN extra INT NULL")
        time.sleep(0.5)
        for i, t in enumerate(tables):
            _ddl(stack, f"UPDATE `{test_db}`.`{t}` SET extra = n % 97 + {i} WHERE n % 3 = 0")

    _run(stack, cfg, test_db, tables, 400, add_column)
    # A nullable column without a default changes no row: no snapshot was needed.
    assert not _snapshots_after_ddl(cfg)
    _verified_equal(cfg, [f"{test_db}.{t}" for t in tables])
    # Records written before the column existed read it as null (the table's newest schema).
    events = read_events(cfg, table_topic(cfg.kafka.topic_prefix, test_db, "t_single"), resolving_decoder(cfg))
    assert events and all("extra" in (v.get("after") or v.get("before")) for _, _, v in events if v)


def test_every_kind_of_ddl_mid_stream_and_mid_snapshot(stack, merge_config, test_db):
    """DDL that changes rows without row events (a column added with a default, NOT NULL,
    a generated column, a column renamed, a column retyped, the primary key changed) makes
    the producer snapshot the table by itself (the sinks rebuild a table whose key changed); TRUNCATE reaches the sinks as a position-guarded delete and the clean
    changelog as Debezium's ``op: t``; the sinks and the changelog end equal to the source."""
    cfg = merge_config
    tables = {"t_default": "single", "t_notnull": "composite", "t_generated": "string", "t_renamed": "single",
              "t_truncated": "single", "t_later": "string", "t_rekey": "single"}
    d = f"`{test_db}`"

    def during():
        _ddl(stack,
             f"ALTER TABLE {d}.t_default ADD COLUMN currency CHAR(3) DEFAULT 'EUR'",
             f"ALTER TABLE {d}.t_notnull ADD COLUMN qty INT NOT NULL",
             f"ALTER TABLE {d}.t_generated ADD COLUMN n2 BIGINT AS (n * 2) STORED",
             f"ALTER TABLE {d}.t_renamed ADD COLUMN note VARCHAR(20) NULL",
             f"UPDATE {d}.t_renamed SET note = CONCAT('note-', id) WHERE id % 4 = 0",
             f"ALTER TABLE {d}.t_renamed RENAME COLUMN note TO remark",
             f"TRUNCATE TABLE {d}.t_truncated",
             f"ALTER TABLE {d}.t_rekey DROP PRIMARY KEY, ADD PRIMARY KEY (id, n)")

    after = [f"ALTER TABLE {d}.t_later MODIFY COLUMN n BIGINT",
             f"ALTER TABLE {d}.t_later ADD COLUMN flag TINYINT NOT NULL DEFAULT 1"]
    _run(stack, cfg, test_db, tables, 300, during, after)

    healed = {t.split(".", 1)[1] for n in _snapshots_after_ddl(cfg) for t in n["additionalData"]["tables"]}
    assert healed == {"t_default", "t_notnull", "t_generated", "t_renamed", "t_later", "t_rekey"}, healed
    assert [m for m in markers(cfg) if m["kind"] == TRUNCATE and m["table"] == "t_truncated"]
    truncates = [v for _, _, v in read_events(cfg, table_topic(cfg.kafka.topic_prefix, test_db, "t_truncated"),
                                              decoder(cfg)) if v and v["op"] == TRUNCATE_OP]
    assert len(truncates) == 1 and truncates[0]["before"] is None and truncates[0]["after"] is None
    _verified_equal(cfg, [f"{test_db}.{t}" for t in tables])


def test_logical_type_changes_are_schema_changes(stack, merge_config, test_db):
    """DATETIME(3) -> DATETIME(6), DECIMAL(10,2) -> DECIMAL(12,4), INT -> BIGINT UNSIGNED mid-
    stream: the first two keep the Avro type (long, bytes) and change only its logical type,
    so their writer schemas must differ all the same (a reader of the millisecond schema
    would read microseconds as milliseconds, a reader of scale 2 would misplace the decimal
    point); the sinks and the clean changelog end equal to the source, values written under
    the new types (microseconds, four decimals, above 2**63) included, and the rows last
    written under the old types (no snapshot after the DDL) read as they were written."""
    cfg = merge_config
    cfg.snapshot.after_ddl = False  # (a snapshot after each DDL would write every row again)
    d = f"`{test_db}`"
    _ddl(stack, f"CREATE TABLE {d}.t_types (id INT PRIMARY KEY, ts DATETIME(3) NULL, amt DECIMAL(10,2) NULL, "
                f"big INT NULL)",
         f"INSERT INTO {d}.t_types VALUES (1, '2024-01-02 03:04:05.123', 12345678.91, 7), "
         f"(2, '2024-05-06 07:08:09.456', 0.5, 3)")
    cfg.source.include_databases = [test_db]
    start_at_current(cfg)
    with ProducerThread(cfg):
        _ddl(stack, f"UPDATE {d}.t_types SET ts = '2025-01-01 00:00:00.789', amt = 1.25 WHERE id = 2",
             f"INSERT INTO {d}.t_types VALUES (3, '2023-03-03 03:03:03.003', 99.99, 42)")
        with stack.admin() as conn:
            wait_caught_up(cfg, conn)
        # one change at a time: each is the table's only schema change at its point
        _ddl(stack, f"ALTER TABLE {d}.t_types MODIFY ts DATETIME(6) NULL",
             f"UPDATE {d}.t_types SET ts = '2024-01-02 03:04:05.123456' WHERE id = 1")
        _ddl(stack, f"ALTER TABLE {d}.t_types MODIFY amt DECIMAL(12,4) NULL",
             f"UPDATE {d}.t_types SET amt = 12345678.9123 WHERE id = 1")
        _ddl(stack, f"ALTER TABLE {d}.t_types MODIFY big BIGINT UNSIGNED NULL",
             f"UPDATE {d}.t_types SET big = 18446744073709551615 WHERE id = 1",
             f"INSERT INTO {d}.t_types VALUES (4, '1999-12-31 23:59:59.999999', 0.0001, 9223372036854775808)")
        with stack.admin() as conn:
            wait_caught_up(cfg, conn)
        time.sleep(1)
    assert not _snapshots_after_ddl(cfg)
    assert MergeJob(cfg).run(available_now=True) == 0
    events = [v for _, _, v in read_events(cfg, table_topic(cfg.kafka.topic_prefix, test_db, "t_types"), decoder(cfg))
              if v and v.get("after")]
    # each record read with its own writer schema reads what was written: id 2's first change
    # in milliseconds and at scale 2, id 1's last in microseconds, at scale 4, above 2**63
    first = next(v["after"] for v in events if v["after"]["id"] == 2)
    assert (first["ts"], first["amt"], first["big"]) == (1735689600789, Decimal("1.25"), 3)
    last = [v["after"] for v in events if v["after"]["id"] == 1][-1]
    assert (last["ts"], last["amt"], last["big"]) == (1704164645123456, Decimal("12345678.9123"), 2**64 - 1)
    assert any(v["after"]["id"] == 4 and v["after"]["big"] == 2**63 for v in events)
    _verified_equal(cfg, [f"{test_db}.t_types"])


def test_schema_change_policies(stack, merge_config, test_db):
    """``sinks.schema_changes``: a table whose columns are ignored keeps its sink columns
    and its changelog schema; DROP TABLE drops or keeps the sink tables; RENAME TABLE
    renames them (and the producer snapshots the renamed table); ``columns: stop`` stops
    the merge job with a message naming the table and the change."""
    cfg = merge_config
    db = test_db
    cfg.sinks.schema_changes = [
        SchemaChangeRule(tables=f"{db}\\.t_frozen", columns="ignore"),
        SchemaChangeRule(tables=f"{db}\\.t_gone", drop_table="drop"),
    ]
    tables = {"t_frozen": "single", "t_gone": "single", "t_kept": "single", "t_old": "string"}
    with stack.admin() as conn:
        for table, kind in tables.items():
            create_table(conn, db, table, kind, 120)
    cfg.source.include_databases = [db]
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{db}.{t}" for t in tables])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        time.sleep(1)
    assert MergeJob(cfg).run(available_now=True) == 0
    pg = PostgresSink(cfg.sinks.postgres.dsn.get_secret_value(), cfg.sinks.postgres.schema_name)
    assert {(d, t) for _, d, t in pg.registered_tables()} >= {(db, t) for t in tables}

    with ProducerThread(cfg):
        _ddl(stack,
             f"ALTER TABLE `{db}`.t_frozen ADD COLUMN extra INT NULL",
             f"UPDATE `{db}`.t_frozen SET extra = id, v = CONCAT('x', id) WHERE id < 30",
             f"DROP TABLE `{db}`.t_gone",
             f"DROP TABLE `{db}`.t_kept",
             f"RENAME TABLE `{db}`.t_old TO `{db}`.t_new",
             f"UPDATE `{db}`.t_new SET n = n + 1 WHERE n < 10")
        wait_for(lambda: _snapshots_after_ddl(cfg) and _snapshots_done(cfg), timeout=120,
                 what="the renamed table snapshotted")
        time.sleep(1)
    assert MergeJob(cfg).run(available_now=True) == 0

    registered = {(d, t) for _, d, t in pg.registered_tables()}
    assert (db, "t_gone") not in registered and (db, "t_kept") in registered
    assert (db, "t_old") not in registered and (db, "t_new") in registered
    assert not _topic_exists(cfg, clean_topic(cfg.kafka.topic_prefix, db, "t_gone"))
    # t_frozen: the sinks and the changelog keep the columns it had; the values follow.
    with stack.admin() as conn:
        source = {k: {c: v for c, v in r.items() if c != "extra"}
                  for k, r in source_rows(conn, db, "t_frozen", ["id"]).items()}
    assert pg_sink_rows(cfg, db, "t_frozen", ["id"]) == source
    assert mysql_sink_rows(stack, cfg, db, "t_frozen", ["id"]) == source
    # (the records as written: a resolving reader reads them with the table's newest schema)
    clean = read_events(cfg, clean_topic(cfg.kafka.topic_prefix, db, "t_frozen"), decoder(cfg))
    assert clean and all("extra" not in v["after"] for _, _, v in clean if v and v.get("after"))
    assert apply_clean(cfg, clean_topic(cfg.kafka.topic_prefix, db, "t_frozen")) == source
    _verified_equal(cfg, [f"{db}.t_new", f"{db}.t_frozen"])  # (t_frozen: its first columns compared)

    # columns: stop
    cfg.sinks.schema_changes.insert(0, SchemaChangeRule(tables=f"{db}\\.t_new", columns="stop"))
    _ddl(stack, f"ALTER TABLE `{db}`.t_new ADD COLUMN z INT NULL", f"UPDATE `{db}`.t_new SET z = 1")
    run_until_caught_up(cfg)
    with pytest.raises(SchemaChangeStopped, match=rf"{db}\.t_new changed .*added: z.*columns: stop"):
        MergeJob(cfg).run(available_now=True)


def _topic_exists(cfg, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers}).list_topics(timeout=15)
    return topic in md.topics


def _turns(cfg) -> dict:
    import json
    from pathlib import Path

    totals = json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())["totals"]
    return {k: totals[k] for k in ("partition_turns", "whole_turns")}


def test_a_primary_key_type_change_gives_the_tables_writers_the_whole_turn(stack, merge_config, test_db):
    """PostgreSQL's turns per Kafka partition hold while a table has one key schema; once a
    primary key column's type changes (``INT`` to ``BIGINT``: new key bytes for every row,
    most likely in another partition) the table's tasks take its whole turn, and the sinks
    still equal the source."""
    cfg = merge_config
    cfg.kafka.partitions = 3
    with stack.admin() as conn:
        create_table(conn, test_db, "t_key", "single", 300)
    cfg.source.include_databases = [test_db]
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{test_db}.t_key"])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        _ddl(stack, f"UPDATE `{test_db}`.t_key SET n = n + 1 WHERE id % 4 = 0",
             f"DELETE FROM `{test_db}`.t_key WHERE id % 9 = 0")
        with stack.admin() as conn:
            wait_caught_up(cfg, conn)
        time.sleep(1)
    assert MergeJob(cfg).run(available_now=True) == 0
    before = _turns(cfg)
    assert before["partition_turns"] > 0, before  # (PostgreSQL; the MySQL sink has whole turns only)

    with ProducerThread(cfg) as producer:
        _ddl(stack, f"ALTER TABLE `{test_db}`.t_key MODIFY COLUMN id BIGINT NOT NULL",
             f"UPDATE `{test_db}`.t_key SET v = CONCAT('w', id) WHERE id % 3 = 0",
             f"DELETE FROM `{test_db}`.t_key WHERE id % 5 = 0",
             f"INSERT INTO `{test_db}`.t_key (id, v, n) VALUES (5000000000, 'big', 1), (301, 'new', 2)")
        with stack.admin() as conn:
            wait_caught_up(cfg, conn)
        wait_for(lambda: _snapshots_done(cfg), timeout=180, what="the snapshots started after DDL completed",
                 state=producer.state)
        time.sleep(1)
    assert MergeJob(cfg).run(available_now=True) == 0
    after = _turns(cfg)
    assert after["partition_turns"] == 0 and after["whole_turns"] > 0, after
    # (the sinks; the clean changelog holds the row under both key encodings, which a
    # reader by key bytes sees as two rows: that is the changelog's, with either turn)
    report = verify(cfg, [f"{test_db}.t_key"], chunk_size=97)
    results = [r for t in report.tables for r in t.results]
    assert {r.sink for r in results} == {"postgres", "mysql"} and all(r.equal for r in results), results
