"""Random write loads on tables with single, composite and string primary keys.

Used by the chaos run, the tests and anyone who wants a realistic mix of changes:
inserts, updates, deletes, primary-key changes and a delete and re-insert of the same key
in one transaction.  Seeded: the same seed gives the same sequence of statements.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import pymysql

# Table shapes by key kind: DDL body, key columns, a key maker.
#: MySQL's and MariaDB's error of a statement on a table that does not exist.
ER_NO_SUCH_TABLE = 1146

KEY_KINDS = {
    "single": ("id INT PRIMARY KEY, v VARCHAR(40), n INT", ["id"], lambda i: (i,)),
    "composite": ("a INT, b VARCHAR(20), v VARCHAR(40), n INT, PRIMARY KEY (a, b)", ["a", "b"],
                  lambda i: (i // 7, f"b-{i % 7}")),
    "string": ("k VARCHAR(40) PRIMARY KEY, v VARCHAR(40), n INT", ["k"],
               lambda i: (f"Kéy-{i:06d}" if i % 3 else f"kéy-{i:06d}-ü",)),
}


class BackgroundWriter:
    """Writes to a database in a thread until stopped: subclasses implement :meth:`_run`,
    which returns when ``self._stop`` is set; an error it raises is raised by :meth:`stop`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self.error: BaseException | None = None

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # raised by stop()
            self.error = exc

    def _run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> "BackgroundWriter":
        self._thread.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def halt(self) -> None:
        """Ask the thread to end, without waiting for it (or for its error)."""
        self._stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        self.halt()
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error


def create_table(conn, db: str, table: str, kind: str, rows: int) -> list[str]:
    body, keys, make = KEY_KINDS[kind]
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`{table}` ({body}) CHARACTER SET utf8mb4")
        values = [(*make(i), f"v{i}", i) for i in range(rows)]
        cols = ", ".join(f"`{c}`" for c in [*keys, "v", "n"])
        marks = ", ".join(["%s"] * (len(keys) + 2))
        for start in range(0, len(values), 1000):
            cur.executemany(f"INSERT INTO `{db}`.`{table}` ({cols}) VALUES ({marks})", values[start:start + 1000])
    conn.commit()
    return keys


@dataclass
class WriteLoad(BackgroundWriter):
    """Random inserts, updates, deletes, primary-key changes and delete + re-insert of the
    same key (in one transaction) against a table, in a thread, until stopped.  A table
    missing for a moment (gh-ost's two-step cut-over renames it aside, then its copy into
    place) fails those statements, counted in ``missing`` (not in ``ops``); missing for ``MISSING_TABLE_S``
    ends the load with the error."""

    #: How long the table may be missing before the load gives up.
    MISSING_TABLE_S = 60.0

    conn_factory: object
    db: str
    table: str
    kind: str
    key_space: int
    seed: int = 1
    pause_s: float = 0.0  # between statements (0: as fast as the server takes them)
    ops: dict = field(default_factory=dict)
    missing: int = 0  # statements that found the table missing
    error: BaseException | None = None

    def __post_init__(self) -> None:
        BackgroundWriter.__init__(self)

    def _run(self) -> None:
        rnd = random.Random(self.seed)
        _, keys, make = KEY_KINDS[self.kind]
        t = f"`{self.db}`.`{self.table}`"
        where = " AND ".join(f"`{k}` = %s" for k in keys)
        cols = ", ".join(f"`{c}`" for c in [*keys, "v", "n"])
        marks = ", ".join(["%s"] * (len(keys) + 2))
        conn = None
        missing_since: float | None = None
        try:
            while not self._stop.is_set():
                if conn is None:
                    try:
                        conn = self.conn_factory()
                    except pymysql.err.OperationalError:  # the server is restarting
                        self.ops["reconnects"] = self.ops.get("reconnects", 0) + 1
                        time.sleep(0.5)
                        continue
                op = rnd.choice(["insert", "update", "update", "delete", "reinsert", "pk_change"])
                key = make(rnd.randrange(self.key_space))
                n = rnd.randrange(10**6)
                try:
                    with conn.cursor() as cur:
                        if op == "insert":
                            cur.execute(f"INSERT INTO {t} ({cols}) VALUES ({marks}) ON DUPLICATE KEY UPDATE n = n + 1",
                                        (*key, f"ins{n}", n))
                        elif op == "update":
                            cur.execute(f"UPDATE {t} SET v = %s, n = %s WHERE {where}", (f"upd{n}", n, *key))
                        elif op == "delete":
                            cur.execute(f"DELETE FROM {t} WHERE {where}", key)
                        elif op == "reinsert":
                            cur.execute(f"DELETE FROM {t} WHERE {where}", key)
                            cur.execute(f"INSERT INTO {t} ({cols}) VALUES ({marks})", (*key, f"re{n}", n))
                        else:
                            new = make(self.key_space + rnd.randrange(self.key_space))
                            sets = ", ".join(f"`{k}` = %s" for k in keys)
                            cur.execute(f"UPDATE {t} SET {sets} WHERE {where}", (*new, *key))
                    conn.commit()
                    self.ops[op] = self.ops.get(op, 0) + 1
                except pymysql.err.IntegrityError:
                    pending = "rollback"
                except pymysql.err.ProgrammingError as exc:
                    if exc.args[0] != ER_NO_SUCH_TABLE:
                        raise
                    missing_since = missing_since or time.monotonic()
                    if time.monotonic() - missing_since > self.MISSING_TABLE_S:
                        raise
                    self.missing += 1
                    pending = "rollback"
                except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                    pending = "reconnect"
                else:
                    pending, missing_since = None, None
                if pending == "rollback":
                    try:
                        conn.rollback()
                    except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                        pending = "reconnect"  # the server went away between the error and the rollback
                if pending == "reconnect":
                    # The server went away mid-statement: whether it committed is unknown,
                    # which is fine (the source is the truth the sinks are compared with).
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001 - already closed
                        pass
                    conn = None
                if self.pause_s:
                    time.sleep(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            if conn is not None:
                conn.close()
