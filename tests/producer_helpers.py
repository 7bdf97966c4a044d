"""Helpers for producer tests: run it, read back decoded events, apply them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.config import CDCConfig, dump_config
from common.kafka.topic_reader import read_topic
from contract.codecs.serde import RecordDecoder
from contract.position import CopyFilter
from contract.schema_store import SchemaStore
from producer.app import ProducerApp
from producer.binlog.server import current_position
from producer.binlog.server import start_at_current as binlog_start_at_current
from producer.offset_store import OffsetStore

ROOT = Path(__file__).resolve().parents[1]


class ProducerThread:
    """The producer in a background thread of the test process."""

    def __init__(self, cfg: CDCConfig) -> None:
        self.app = ProducerApp(cfg)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.app.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> "ProducerThread":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def state(self) -> str:
        """Whether the producer thread runs, its error, and its status file (position,
        rate, lag, snapshot progress): for a test's timeout message."""
        try:
            status = self.app.status_file.read_text()
        except OSError as exc:
            status = f"no status file ({exc.strerror})"
        return f"producer thread alive={self.thread.is_alive()} error={self.error!r} status={status}"

    def stop(self) -> None:
        self.app.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "producer did not stop"
        if self.error is not None:
            raise self.error


def run_sql(stack, db: str | None, *statements: str) -> None:
    """Run ``statements`` in ``db`` of the stack's source, as its admin."""
    with stack.admin(db) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)


def run_until_caught_up(cfg: CDCConfig, idle_s: float = 1.5) -> None:
    """Run the producer until it has been idle ``idle_s`` seconds, then return."""
    ProducerApp(cfg).run(idle_exit_s=idle_s)


def start_at_current(cfg: CDCConfig) -> None:
    """Make ``cfg`` start at the binlog's current end (deterministic: no race with 'latest')."""
    binlog_start_at_current(cfg)


def stream_all_types(stack, cfg: CDCConfig, db: str, statements: list[str]) -> bool:
    """The all-types table (tests.all_types) created in ``db``, the producer placed after
    it, its rows inserted and ``statements`` run, all streamed into Kafka; returns whether
    the server is MariaDB (its extra types are in)."""
    from tests.all_types import create_all_types, insert_all_types

    mariadb = stack.mysql.get("flavor", "mariadb") == "mariadb"
    with stack.admin(db) as conn:
        create_all_types(conn, mariadb, rows=False)
    start_at_current(cfg)
    with stack.admin(db) as conn:
        insert_all_types(conn, mariadb)
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    run_until_caught_up(cfg)
    return mariadb


def decoder(cfg: CDCConfig) -> RecordDecoder:
    """Records as written (each with its writer schema)."""
    return RecordDecoder(SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix).get)


def resolving_decoder(cfg: CDCConfig) -> RecordDecoder:
    """Records read with their table's newest schema, as the merge job and verify read them."""
    return RecordDecoder.resolving(SchemaStore(cfg.kafka.bootstrap_servers, cfg.kafka.topic_prefix))


def read_events(cfg: CDCConfig, topic: str, dec: RecordDecoder | None = None) -> list[tuple[int, dict | None, dict]]:
    """Every record of a topic as ``(partition, key, value)``, in offset order per partition."""
    dec = dec or decoder(cfg)
    return [(m.partition(), dec.decode(m.key()), dec.decode(m.value()))
            for m in read_topic(cfg.kafka.bootstrap_servers, topic, client_config=cfg.kafka.client)]


def dedupe_by_position(events: list[tuple[int, dict | None, dict]]) -> tuple[list, int]:
    """Drop copies: a record whose position is not above the highest seen in its partition."""
    copies = CopyFilter()
    kept = [(part, key, value) for part, key, value in events if copies.keep(part, value["position"])]
    return kept, copies.copies


def apply_changelog(events) -> dict:
    """Replay c/u/d/r events in order: {key tuple: after row}."""
    table: dict = {}
    for _, key, value in sorted(events, key=lambda e: e[2]["position"]):
        k = tuple(sorted(key.items())) if key else None
        if value["op"] == "d":
            table.pop(k, None)
        else:
            table[k] = value["after"]
    return table


class ProducerProcess:
    """``cdc produce`` as a real process (for kill -9 tests).  One still running when its test
    ends (a failed assertion before its stop) is killed then (:meth:`kill_leftovers`, an
    autouse fixture), so it does not load the machine for the tests after it."""

    started: list["ProducerProcess"] = []

    def __init__(self, cfg: CDCConfig, workdir: Path, source: str | None = None) -> None:
        """``source``: run ``cdc produce --source NAME`` (a ``sources`` entry's producer)."""
        self.path = workdir / "producer.yaml"
        self.path.write_text(dump_config(cfg))
        self.log = workdir / (f"producer-{source}.log" if source else "producer.log")
        self.args = ["--source", source] if source else []
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "cdc.cli", "-c", str(self.path), "produce", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        ProducerProcess.started.append(self)

    @classmethod
    def kill_leftovers(cls) -> None:
        for p in cls.started:
            if p.alive():
                p.kill9()
        cls.started.clear()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait_for(check, timeout: float = 60.0, interval: float = 0.2, what: str = "condition",
             state=None) -> None:
    """Poll ``check`` until it is true; on timeout fail naming ``what`` and, when given,
    what ``state()`` tells then (for a failure seen only in CI: where things stood)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    told = ""
    if state is not None:
        try:
            told = f"; {state()}"
        except Exception as exc:  # noqa: BLE001 - the diagnosis must not hide the timeout
            told = f"; (state unavailable: {exc!r})"
    raise AssertionError(f"timed out waiting for {what}{told}")


def wait_caught_up(cfg: CDCConfig, conn, timeout: float = 180.0) -> None:
    """Wait until the running producer's committed resume point has reached the binlog's end
    as it is now (``conn``: an admin connection): every statement committed before the call,
    DDL included, has been read, and whatever it started (a snapshot after DDL) has begun."""
    end = current_position(conn)

    def reached() -> bool:
        stored = OffsetStore(cfg.kafka, cfg.producer.name).load()
        resume = (stored or {}).get("resume") or {}
        return bool(resume) and (resume["file"], resume["pos"]) >= end

    wait_for(reached, timeout=timeout, what=f"the producer's resume point at the binlog end {end}")


def shop_table(source, cfg: CDCConfig, rows: int = 40) -> None:
    """``shop.t (id, v)`` with ``rows`` rows on ``source`` (a server of its own: a test's purges
    must not pull binlogs from under other tests), ``cfg`` pointed at it, capturing ``shop`` only."""
    source.point(cfg)
    cfg.source.include_databases = ["shop"]
    with source.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.executemany("INSERT INTO shop.t VALUES (%s, %s)", [(i, f"old{i}") for i in range(rows)])


def change_and_purge(source, updated: tuple[int, ...], deleted: tuple[int, ...]) -> tuple[str, str]:
    """While a producer of :func:`shop_table`'s table is down: rows 80 to 99 inserted, ``updated``
    changed, ``deleted`` deleted, then the binlogs that hold it purged (:func:`purge_binlogs`)."""
    with source.admin(database="shop") as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"while down{i}") for i in range(80, 100)])
        cur.execute(f"UPDATE t SET v = 'changed while down' WHERE id IN ({', '.join(map(str, updated))})")
        cur.execute(f"DELETE FROM t WHERE id IN ({', '.join(map(str, deleted))})")
    with source.admin() as admin:
        return purge_binlogs(admin)


def purge_binlogs(conn) -> tuple[str, str]:
    """``FLUSH BINARY LOGS``, then ``PURGE BINARY LOGS TO`` the newest file until it is the
    only one (``conn``: an admin connection).  PURGE silently keeps a file a replication
    connection still reads: a dump thread a stopped producer left (the server drops them
    lazily) is killed and the purge repeated.  Returns (oldest file before, newest)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        oldest = cur.fetchall()[0][0]
        cur.execute("FLUSH BINARY LOGS")
        status = "SHOW MASTER STATUS" if "mariadb" in conn.get_server_info().lower() else "SHOW BINARY LOG STATUS"
        for _ in range(50):
            cur.execute(status)
            newest = cur.fetchone()[0]
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if [row[0] for row in cur.fetchall()] == [newest]:
                return oldest, newest
            cur.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
            for (thread_id,) in cur.fetchall():
                try:
                    cur.execute(f"KILL {int(thread_id)}")
                except Exception:  # noqa: BLE001 - the thread ended by itself meanwhile
                    pass
            time.sleep(0.2)
    raise AssertionError("the old binlogs could not be purged")
