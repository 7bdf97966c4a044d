"""gh-ost and pt-online-schema-change under a write load, end to end: the real tools alter
captured tables while rows change; every sink (PostgreSQL, MySQL, Delta, Iceberg) and the clean
changelog end equal to the source under the new schema, no row of a helper table reaches a
topic, and a cut-over snapshots the table only when the tool's copy rewrote its rows.

gh-ost (``make gh-ost``: the release in scripts/gh-ost.version, built from its Go module) runs
on MySQL 9.7; pt-online-schema-change (Debian's percona-toolkit 3.2.1) on MariaDB and MySQL.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from cdc.verify import verify
from common.kafka.clients import base_config
from contract.topics import table_topic
from spark_jobs.merge_job import MergeJob
from tests.producer_helpers import ProducerThread, read_events, start_at_current, wait_caught_up, wait_for
from tests.snapshot_helpers import create_table, has_notification, notifications, signal, snapshot, write_loads

ROOT = Path(__file__).resolve().parents[3]
GH_OST_VERSION = (ROOT / "scripts" / "gh-ost.version").read_text().strip()
ROWS = 4000  # per table: the tools copy them in 40 chunks of 100 while the writes go on
HELPER = re.compile(r"_(gho|ghc|ghk|del|new|old)$")


def gh_ost_binary() -> Path:
    """``make gh-ost``'s binary (CDC_GH_OST_DIR as the script reads it)."""
    path = Path(os.environ.get("CDC_GH_OST_DIR", "/var/cache/gh-ost-cdc")) / GH_OST_VERSION / "gh-ost"
    assert path.is_file(), f"gh-ost {GH_OST_VERSION} is not built at {path}: run `make gh-ost`"
    return path


def gh_ost(server: dict, db: str, table: str, alter: str, workdir: Path) -> list[str]:
    """gh-ost's command on the primary itself, as docs/operations.md gives it."""
    return [str(gh_ost_binary()), f"--host={server['host']}", f"--port={server['port']}",
            f"--user={server['admin_user']}", f"--password={server['admin_password']}", f"--database={db}",
            f"--table={table}", f"--alter={alter}", "--allow-on-master", "--chunk-size=100",
            "--initially-drop-ghost-table", "--initially-drop-old-table", "--ok-to-drop-table",
            f"--serve-socket-file={workdir / f'gh-ost.{table}.sock'}",
            f"--throttle-additional-flag-file={workdir / 'gh-ost.throttle'}", "--default-retries=120",
            "--verbose", "--execute"]


def pt_osc(server: dict, db: str, table: str, alter: str, workdir: Path) -> list[str]:
    """pt-online-schema-change's command, as docs/operations.md gives it (``--recursion-method=none``:
    3.2.1 looks for replicas with ``SHOW SLAVE HOSTS``, which MySQL 8.4+ no longer has)."""
    dsn = (f"h={server['host']},P={server['port']},u={server['admin_user']},p={server['admin_password']},"
           f"D={db},t={table}")
    return ["pt-online-schema-change", f"--alter={alter}", dsn, "--recursion-method=none", "--chunk-size=100",
            "--chunk-time=0", "--execute"]


def _topics(cfg) -> set[str]:
    return set(AdminClient(base_config(cfg.kafka)).list_topics(timeout=30).topics)


def _snapshot_reasons(cfg) -> dict[str, str]:
    """The snapshots the producer started by itself: table -> reason."""
    out = {}
    for n in notifications(cfg):
        data = n.get("additionalData") or {}
        if n["type"] == "STARTED" and data.get("reason"):
            for t in data.get("tables") or []:
                out[t.split(".", 1)[1]] = data["reason"]
    return out


def _snapshots_done(cfg) -> bool:
    started = {n["id"] for n in notifications(cfg) if n["type"] == "STARTED"}
    return started <= {n["id"] for n in notifications(cfg) if n["type"] == "COMPLETED"}


def _migrate(source_stack, cfg, db: str, alters: dict[str, str], command, workdir: Path) -> dict[str, str]:
    """The tables created, loaded and captured (``include_databases``: the helper tables match
    it), the producer streaming, a write load on each table, a snapshot of them started and
    paused; ``command`` run for each table in turn while the writes go on, and more writes after
    its cut-over; the snapshot resumed (it reads the altered tables); then the load stops, the
    producer reads to the end and finishes what it started, and the merge job runs.  Returns
    each table's tool output."""
    cfg.source.include_databases = [db]
    cfg.snapshot.chunk_size = 500
    start_at_current(cfg)  # (the tables' rows streamed as they are inserted)
    with source_stack.admin() as conn:
        for table in alters:
            create_table(conn, db, table, "single", ROWS)
    server = source_stack.mysql
    outputs = {}
    with ProducerThread(cfg) as producer:
        with write_loads(source_stack, db, {t: "single" for t in alters}, ROWS + 100, pause_s=0.002) as loads:
            # an incremental snapshot of the tables, paused from its first chunks until every
            # cut-over is done: it reads the tables before and after their cut-overs
            sid = snapshot(cfg, [f"{db}.{t}" for t in alters])
            signal(cfg, "pause-snapshot", {"type": "incremental"})
            wait_for(lambda: has_notification(cfg, "PAUSED", id=sid), timeout=60, what="the snapshot paused")
            for (table, alter), load in zip(alters.items(), loads):
                run = subprocess.run(command(server, db, table, alter, workdir), capture_output=True, text=True,
                                     timeout=600)
                assert run.returncode == 0, \
                    f"{command.__name__} on {db}.{table}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
                outputs[table] = run.stdout + run.stderr
                done = sum(load.ops.values())
                wait_for(lambda load=load, done=done: sum(load.ops.values()) > done + 50,
                         what=f"writes to {table} after its cut-over")
            assert not has_notification(cfg, "COMPLETED", id=sid)
            signal(cfg, "resume-snapshot", {"type": "incremental"})
        _caught_up_and_snapshotted(source_stack, cfg, producer)
    assert MergeJob(cfg).run(available_now=True) == 0
    return outputs


def _caught_up_and_snapshotted(source_stack, cfg, producer) -> None:
    """The running producer caught up with the source, every snapshot a cut-over started
    completed, and caught up again (the writes made meanwhile)."""
    with source_stack.admin() as conn:
        wait_caught_up(cfg, conn)
    wait_for(lambda: _snapshots_done(cfg), timeout=180, what="the snapshots started after a cut-over completed",
             state=producer.state)
    with source_stack.admin() as conn:
        wait_caught_up(cfg, conn)


def _assert_followed(source_stack, cfg, db: str, alters: dict[str, str]) -> None:
    """Every sink and the changelog equal to the source, whose tables have the new columns; no
    topic of a helper table, and the tables' topics hold the tables' own events only."""
    prefix = cfg.kafka.topic_prefix
    helpers = sorted(t for t in _topics(cfg) if t.startswith(f"{prefix}.{db}.") and HELPER.search(t))
    assert not helpers, f"topics of the tools' helper tables: {helpers}"
    for table in alters:
        events = read_events(cfg, table_topic(prefix, db, table))
        tables = {v["source"]["table"] for _, _, v in events if v}
        assert tables == {table}, (table, tables)
    with source_stack.admin() as conn, conn.cursor() as cur:
        for table in alters:
            cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s", (db, table))
            assert "extra" in {r[0] for r in cur.fetchall()}, f"{db}.{table} was not altered"
            cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
            assert cur.fetchone()[0] == len(alters), "a helper table was left behind"
    report = verify(cfg, [f"{db}.{t}" for t in alters], changelog=True, chunk_size=500)
    for t in report.tables:
        assert {r.sink for r in t.results} == {"postgres", "mysql", "delta", "iceberg", "changelog"}, t
        for r in t.results:
            assert r.equal, f"{t.table} {r.sink}: {r}"


@pytest.mark.servers("mysql")
def test_gh_ost_under_writes_ends_with_every_sink_equal(source_stack, lake_config, test_db, tmp_path):
    """gh-ost adds a nullable column to one table (its copy changes no value: no snapshot) and
    a column with a default to another (the copy wrote the default into every row without
    events of the table: that table alone is snapshotted, the reason naming gh-ost's copy)."""
    alters = {"t_plain": "ADD COLUMN extra INT NULL",
              "t_default": "ADD COLUMN extra CHAR(3) NOT NULL DEFAULT 'EUR'"}

    def cut_over_each_way(server: dict, db: str, table: str, alter: str, workdir: Path) -> list[str]:
        """t_default swapped by gh-ost's two-step cut-over (``RENAME t TO _t_del``, then
        ``RENAME _t_gho TO t``: two statements, t missing between them; the second names the
        copy first), t_plain by the atomic one (both renames in one statement, gh-ost's default)."""
        cmd = gh_ost(server, db, table, alter, workdir)
        if table == "t_default":
            cmd.insert(-1, "--cut-over=two-step")
        return cmd

    outputs = _migrate(source_stack, lake_config, test_db, alters, cut_over_each_way, tmp_path)
    # (gh-ost's log of each way: "Renaming ghost table" only in the two-step's)
    assert "Renaming ghost table" in outputs["t_default"] and "Renaming ghost table" not in outputs["t_plain"]
    reasons = _snapshot_reasons(lake_config)
    assert set(reasons) == {"t_default"}, reasons
    assert reasons["t_default"].startswith("gh-ost's copy _t_default_gho: a column added with a value"), reasons
    _assert_followed(source_stack, lake_config, test_db, alters)


@pytest.mark.servers("mariadb", "mysql")
def test_pt_online_schema_change_under_writes_ends_with_every_sink_equal(source_stack, lake_config, test_db,
                                                                         tmp_path):
    """pt-osc's triggers write t's changes into _t_new in t's own transactions; none of those
    rows, nor the copy's, reach a topic; a nullable column added: no snapshot."""
    alters = {"t_plain": "ADD COLUMN extra INT NULL"}
    _migrate(source_stack, lake_config, test_db, alters, pt_osc, tmp_path)
    assert not _snapshot_reasons(lake_config)
    _assert_followed(source_stack, lake_config, test_db, alters)


def _gh_ost_status(sock: Path) -> str:
    """gh-ost's answer to ``status`` on its socket (its interactive commands); "" while it has none."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(sock))
            s.sendall(b"status\n")
            return b"".join(iter(lambda: s.recv(65536), b"")).decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.servers("mysql")
def test_a_producer_started_between_the_copy_and_the_cut_over_snapshots_the_table(source_stack, lake_config,
                                                                                    test_db, tmp_path):
    """The producer that read gh-ost's ALTER of the copy stops while gh-ost holds the cut-over
    back (``--postpone-cut-over-flag-file``); the one started next never reads that ALTER, so
    at the cut-over it cannot tell whether the copy rewrote rows, and snapshots the table."""
    cfg, db, table = lake_config, test_db, "t_held"
    cfg.source.include_databases = [db]
    start_at_current(cfg)
    with source_stack.admin() as conn:
        create_table(conn, db, table, "single", ROWS)
    flag = tmp_path / "postpone-cut-over"
    flag.touch()
    cmd = gh_ost(source_stack.mysql, db, table, "ADD COLUMN extra INT NULL", tmp_path)
    cmd.insert(-1, f"--postpone-cut-over-flag-file={flag}")
    sock = tmp_path / f"gh-ost.{table}.sock"
    with write_loads(source_stack, db, {table: "single"}, ROWS + 100, pause_s=0.002) as (load,):
        with ProducerThread(cfg):
            tool = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                wait_for(lambda: "postponing cut-over" in _gh_ost_status(sock), timeout=300,
                         what="gh-ost's copy done, its cut-over held back", state=lambda: _gh_ost_status(sock))
                with source_stack.admin() as conn:
                    wait_caught_up(cfg, conn)  # (this producer read the ALTER of _t_held_gho)
            except BaseException:
                tool.kill()
                raise
        with ProducerThread(cfg) as producer:
            flag.unlink()
            out, _ = tool.communicate(timeout=600)
            assert tool.returncode == 0, out[-3000:]
            done = sum(load.ops.values())
            wait_for(lambda: sum(load.ops.values()) > done + 50, what="writes after the cut-over")
            _caught_up_and_snapshotted(source_stack, cfg, producer)
    with ProducerThread(cfg), source_stack.admin() as conn:
        wait_caught_up(cfg, conn)  # (the load's last writes, made as the second producer stopped)
    assert MergeJob(cfg).run(available_now=True) == 0
    reasons = _snapshot_reasons(cfg)
    assert set(reasons) == {table}, reasons
    assert "whose ALTER of _t_held_gho was not read" in reasons[table], reasons
    _assert_followed(source_stack, cfg, db, {table: "ADD COLUMN extra INT NULL"})


@pytest.mark.servers("mysql")
def test_a_snapshot_across_a_two_step_cut_over_reads_the_table_after_it(source_stack, merge_config, test_db):
    """gh-ost's two-step cut-over leaves a moment without the table (``ALTER TABLE t RENAME
    _t_del``, then ``ALTER TABLE _t_gho RENAME t``); a snapshot whose next chunk falls in that
    moment waits for the table instead of taking it for dropped, and reads the rest of it after
    the cut-over. The moment is held open here (the two statements by hand, seconds apart) and
    the table's rows are older than the stream, so only the snapshot brings them."""
    cfg, db = merge_config, test_db
    cfg.source.include_databases = [db]
    cfg.snapshot.chunk_size = 100
    with source_stack.admin() as conn:
        keys = create_table(conn, db, "t", "single", 2000)
    start_at_current(cfg)
    with ProducerThread(cfg) as producer, source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`_t_gho` LIKE `{db}`.`t`")  # gh-ost's copy, with its ALTER
        cur.execute(f"ALTER TABLE `{db}`.`_t_gho` ADD COLUMN extra INT NULL")
        cur.execute(f"INSERT INTO `{db}`.`_t_gho` (id, v, n) SELECT id, v, n FROM `{db}`.`t`")
        conn.commit()
        sid = snapshot(cfg, [f"{db}.t"])
        signal(cfg, "pause-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(cfg, "PAUSED", id=sid), timeout=60, what="the snapshot paused")
        cur.execute(f"ALTER TABLE `{db}`.`t` RENAME `{db}`.`_t_del`")
        signal(cfg, "resume-snapshot", {"type": "incremental"})
        wait_for(lambda: has_notification(cfg, "RESUMED", id=sid), timeout=60, what="the snapshot resumed")
        time.sleep(3)  # (chunks are due while the table is missing)
        assert not has_notification(cfg, "COMPLETED", id=sid)
        cur.execute(f"ALTER TABLE `{db}`.`_t_gho` RENAME `{db}`.`t`")
        cur.execute(f"DROP TABLE `{db}`.`_t_del`")
        conn.commit()
        _caught_up_and_snapshotted(source_stack, cfg, producer)
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="the snapshot completed")
    scans = [n for n in notifications(cfg) if n.get("id") == sid and n.get("type") == "TABLE_SCAN_COMPLETED"]
    assert scans and not any(n.get("additionalData", {}).get("dropped") for n in scans), scans
    assert MergeJob(cfg).run(available_now=True) == 0
    report = verify(cfg, [f"{db}.t"], chunk_size=500)
    for t in report.tables:
        for r in t.results:
            assert r.equal, f"{t.table} {r.sink}: {r}"
    assert keys == ["id"]


class _WhenBlockingReadBegins(logging.Handler):
    """Runs ``action`` in the producer's thread the moment its blocking snapshot has begun its
    read (its consistent snapshot open at the pause point) and before it reads a table."""

    def __init__(self, action) -> None:
        super().__init__()
        self.action, self.done = action, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if not self.done.is_set() and "the stream pauses at" in record.getMessage():
            self.action()
            self.done.set()


@pytest.mark.servers("mysql")
def test_a_blocking_snapshot_across_a_two_step_cut_over_ends_with_the_table_as_it_is(source_stack, merge_config,
                                                                                   test_db):
    """A blocking snapshot reads its tables as they were at its pause point, but finds them by
    name when it reads them: across gh-ost's two-step cut-over the table is first missing (the
    read waits for it instead of taking it for dropped), then it is the copy, as the copy was at
    the pause point (half filled, and holding a row the table had lost). The stream, reading the
    cut-over inside that read's span, snapshots the table again with delete-missing: every sink
    ends equal to the table. The moment is held by hand; the rows are older than the stream."""
    cfg, db = merge_config, test_db
    cfg.source.include_databases = [db]
    cfg.snapshot.chunk_size = 100
    with source_stack.admin() as conn:
        create_table(conn, db, "t", "single", 2000)
    start_at_current(cfg)
    with source_stack.admin() as conn, conn.cursor() as cur:  # (the producer reads the copy's ALTER: no snapshot)
        cur.execute(f"CREATE TABLE `{db}`.`_t_gho` LIKE `{db}`.`t`")  # gh-ost's copy, half filled
        cur.execute(f"ALTER TABLE `{db}`.`_t_gho` ADD COLUMN extra INT NULL")
        cur.execute(f"INSERT INTO `{db}`.`_t_gho` (id, v, n) SELECT id, v, n FROM `{db}`.`t` WHERE id < 1000")
        cur.execute(f"INSERT INTO `{db}`.`_t_gho` (id, v, n) VALUES (99999, 'gone', 0)")  # deleted from t since
        conn.commit()

    def move_aside() -> None:
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE `{db}`.`t` RENAME `{db}`.`_t_del`")

    hook, logger = _WhenBlockingReadBegins(move_aside), logging.getLogger("producer.session_blocking")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(hook)
    try:
        with ProducerThread(cfg) as producer, source_stack.admin() as conn, conn.cursor() as cur:
            sid = snapshot(cfg, [f"{db}.t"], blocking=True)
            assert hook.done.wait(60), "the blocking snapshot did not begin"
            time.sleep(1)  # (its read waits for the missing table meanwhile)
            # the copy completed after the pause point, then swapped in
            cur.execute(f"INSERT INTO `{db}`.`_t_gho` (id, v, n) SELECT id, v, n FROM `{db}`.`_t_del` "
                        "WHERE id >= 1000")
            cur.execute(f"DELETE FROM `{db}`.`_t_gho` WHERE id = 99999")
            conn.commit()
            cur.execute(f"ALTER TABLE `{db}`.`_t_gho` RENAME `{db}`.`t`")
            cur.execute(f"DROP TABLE `{db}`.`_t_del`")
            conn.commit()
            wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120,
                     what="the blocking snapshot completed", state=producer.state)
            _caught_up_and_snapshotted(source_stack, cfg, producer)
    finally:
        logger.removeHandler(hook)
        logger.setLevel(level)
    scans = [n for n in notifications(cfg) if n.get("id") == sid and n.get("type") == "TABLE_SCAN_COMPLETED"]
    assert scans and not any(n.get("additionalData", {}).get("dropped") for n in scans), scans
    reasons = _snapshot_reasons(cfg)
    assert set(reasons) == {"t"} and "came while a blocking snapshot read the table" in reasons["t"], reasons
    assert MergeJob(cfg).run(available_now=True) == 0
    report = verify(cfg, [f"{db}.t"], chunk_size=500)
    for t in report.tables:
        for r in t.results:
            assert r.equal, f"{t.table} {r.sink}: {r}"
