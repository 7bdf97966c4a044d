"""A primary with replicas, MariaDB or MySQL (``cdc stack up --replicas N``, and the tests'
``replicated`` fixture).

Each replica is an :class:`~cdc.stack.mysql_server.EmbeddedMySQL` of its own under
``<state>/replica<i>`` (own datadir, free port, ``--server-id`` 1 + i, ``--read-only=ON``,
``--log-slave-updates=ON``, the primary's binlog settings), replicating the primary by GTID
(MariaDB's ``MASTER_USE_GTID=slave_pos``, MySQL's ``SOURCE_AUTO_POSITION=1``) as the replication
user ``repl``, created on the primary.  A
new replica replays the primary's binlog from its first transaction, so it gets the admin and
CDC users, the signal table and every row: the primary's binlog must still begin there.

Failover: :func:`stop_server` (the primary dies), :func:`promote` (a replica becomes the
primary, the others follow it by GTID), :func:`wait_caught_up` (a replica has applied all a
primary logged: its ``@@gtid_slave_pos`` covers the primary's ``@@gtid_binlog_pos``; on MySQL
both are ``@@gtid_executed``).
"""

from __future__ import annotations

import secrets
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pymysql

from cdc.errors import StackError
from cdc.stack.mysql_server import (
    EmbeddedMySQL,
    ReplicationSource,
    change_master_sql,
    end_dump_threads,
    identified_by,
    is_mariadb,
    replication_sql,
)
from cdc.stack.process import pid_alive, stop_pid
from contract.errors import GtidError
from contract.gtid import GtidSet

REPLICATION_USER = "repl"
MAX_REPLICAS = 2


def replica_name(index: int) -> str:
    """The state directory (and stack.json) name of replica ``index`` (1-based)."""
    return f"replica{index}"


def admin_connection(info: dict[str, Any], **kw: Any) -> pymysql.connections.Connection:
    return pymysql.connect(host=info["host"], port=info["port"], user=info["admin_user"],
                           password=info["admin_password"], autocommit=True, charset="utf8mb4",
                           connect_timeout=kw.pop("connect_timeout", 5), **kw)


def _source(info: dict[str, Any], replication: dict[str, str]) -> ReplicationSource:
    return ReplicationSource(info["host"], int(info["port"]), replication["user"], replication["password"])


# -- GTID positions ----------------------------------------------------------------------

def _gtids(text: str | None, flavor: str = "mariadb") -> GtidSet:
    """A MariaDB GTID position (``0-1-42,1-3-7``), or a MySQL GTID set (``flavor`` mysql)."""
    try:
        return GtidSet.parse((text or "").replace("\n", ""), flavor)
    except GtidError:
        raise StackError(f"not a {flavor} GTID {'position' if flavor == 'mariadb' else 'set'}: {text!r}") from None


def _flavor(conn: pymysql.connections.Connection) -> str:
    return "mariadb" if is_mariadb(conn) else "mysql"


def _logged(conn: pymysql.connections.Connection) -> str:
    """What a server logged: MariaDB ``@@gtid_binlog_pos``, MySQL ``@@gtid_executed``."""
    return _variable(conn, "gtid_binlog_pos" if is_mariadb(conn) else "gtid_executed")


def _applied(conn: pymysql.connections.Connection) -> str:
    """What a replica applied: MariaDB ``@@gtid_slave_pos``, MySQL ``@@gtid_executed`` (a
    read-only replica executes nothing of its own)."""
    return _variable(conn, "gtid_slave_pos" if is_mariadb(conn) else "gtid_executed")


def _variable(conn: pymysql.connections.Connection, name: str) -> str:
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        return cur.fetchone()[0] or ""


def binlog_pos(info: dict[str, Any]) -> str:
    """What a server logged: ``@@gtid_binlog_pos`` (the last GTID of each domain), on MySQL
    ``@@gtid_executed``."""
    with admin_connection(info) as conn:
        return _logged(conn)


#: MySQL's column names of SHOW REPLICA STATUS, as MariaDB's SHOW SLAVE STATUS names them.
_MYSQL_STATUS_NAMES = {"Retrieved_Gtid_Set": "Gtid_IO_Pos"}


def slave_status(conn: pymysql.connections.Connection) -> dict[str, Any]:
    """``SHOW SLAVE STATUS`` as a dict (empty when the server replicates from nobody); on MySQL
    ``SHOW REPLICA STATUS`` under MariaDB's column names (``Slave_IO_Running``,
    ``Master_Host``, ``Seconds_Behind_Master``, ``Gtid_IO_Pos`` for the GTIDs received...)."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(replication_sql(conn, "SHOW SLAVE STATUS"))
        row = cur.fetchone() or {}
    if row and not is_mariadb(conn):
        row = {_MYSQL_STATUS_NAMES.get(k, k.replace("Replica", "Slave").replace("Source", "Master")): v
               for k, v in row.items()}
    return row


def _replication_error(status: dict[str, Any]) -> str | None:
    for kind in ("IO", "SQL"):
        if status.get(f"Last_{kind}_Errno"):
            return f"{kind} thread error {status[f'Last_{kind}_Errno']}: {status.get(f'Last_{kind}_Error')}"
    return None


def wait_caught_up(primary: dict[str, Any], replica: dict[str, Any], timeout: float = 60.0) -> str:
    """Wait until ``replica`` has applied every transaction ``primary`` logged so far (its
    ``@@gtid_slave_pos`` covers the primary's ``@@gtid_binlog_pos``); returns that position.
    A replication error on the replica fails at once, with the server's message."""
    target_text = binlog_pos(primary)
    deadline = time.monotonic() + timeout
    slave_pos, status = "", {}
    with admin_connection(replica) as conn:
        flavor = _flavor(conn)
        target = _gtids(target_text, flavor)
        while True:
            slave_pos = _applied(conn)
            if _gtids(slave_pos, flavor).covers(target):
                return target_text
            status = slave_status(conn)
            error = _replication_error(status)
            if error:
                raise StackError(f"replica on port {replica['port']} cannot replicate from port {primary['port']}: "
                                 f"{error}. Its position is {slave_pos or 'empty'}, the primary's {target_text}")
            if time.monotonic() > deadline:
                raise StackError(
                    f"replica on port {replica['port']} did not catch up with port {primary['port']} within "
                    f"{timeout:.0f}s: it applied {slave_pos or 'nothing'}, the primary logged {target_text} "
                    f"(replica threads: IO {status.get('Slave_IO_Running', 'not configured')}, "
                    f"SQL {status.get('Slave_SQL_Running', 'not configured')})")
            time.sleep(0.1)


# -- starting and stopping ---------------------------------------------------------------

def ensure_replication_user(primary: dict[str, Any], previous: dict[str, str] | None = None) -> dict[str, str]:
    """The replication user on ``primary`` (created, or its password set again); it
    reaches the replicas by replication, so a promoted replica accepts the others too."""
    password = (previous or {}).get("password") or secrets.token_hex(16)
    with admin_connection(primary) as conn, conn.cursor() as cur:
        u = f"{conn.escape(REPLICATION_USER)}@'%'"
        cur.execute(f"CREATE USER IF NOT EXISTS {u} {identified_by(conn, password)}")
        cur.execute(f"ALTER USER {u} {identified_by(conn, password)}")
        cur.execute(f"GRANT REPLICATION SLAVE ON *.* TO {u}")
    return {"user": REPLICATION_USER, "password": password}


def _check_binlog_is_whole(primary: dict[str, Any]) -> None:
    """A new replica replays the primary's binlog from the first transaction: refuse when
    the oldest binlog file begins later (files purged)."""
    with admin_connection(primary) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        if not files:
            raise StackError(f"the server on port {primary['port']} has no binary log: replicas need one")
        if is_mariadb(conn):
            cur.execute(f"SHOW BINLOG EVENTS IN {conn.escape(files[0])} LIMIT 4")
            before = [r[5] for r in cur.fetchall() if r[2] == "Gtid_list"]
        else:  # (MySQL: the GTIDs no binlog holds any more)
            before = [_variable(conn, "gtid_purged")]
    if before and before[0].strip() not in ("[]", ""):
        raise StackError(
            f"the primary on port {primary['port']} no longer has its whole binary log: its oldest file "
            f"{files[0]} begins after GTIDs {before[0]}, and a new replica is built by replaying the binlog from "
            f"the first transaction. Start the stack with --replicas in a new state directory (--state-dir)")


def replica_server(state_dir: Path, index: int, primary: dict[str, Any], replication: dict[str, str]) -> EmbeddedMySQL:
    """The server of replica ``index`` (1..2), replicating ``primary``."""
    return EmbeddedMySQL(state_dir, primary["signal_table"], name=replica_name(index), server_id=1 + index,
                         replica_of=_source(primary, replication), cdc_read_only=bool(primary.get("cdc_read_only")),
                         flavor=primary.get("flavor"))


def start_replicas(state_dir: Path, primary: dict[str, Any], count: int, *,
                   previous: list[dict[str, Any]] | None = None,
                   replication: dict[str, str] | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """Start (or find running) ``count`` replicas of ``primary`` and wait until each has
    caught up.  Returns ``{"replication": {user, password}, "replicas": [record, ...]}``
    for stack.json; recorded replicas beyond ``count`` are stopped (their data is kept)."""
    if not 0 <= count <= MAX_REPLICAS:
        raise StackError(f"the number of replicas must be between 0 and {MAX_REPLICAS}, not {count}")
    previous = list(previous or [])
    for old in previous[count:]:
        stop_server(old)
    if count == 0:
        return {}
    if primary.get("flavor") not in ("mariadb", "mysql"):
        raise StackError(f"replicas are started on MariaDB and MySQL only, not on {primary.get('flavor')} "
                         f"{primary.get('version', '')}: start the stack without --replicas")
    replication = ensure_replication_user(primary, replication)
    replicas: list[dict[str, Any]] = []
    try:
        for index in range(1, count + 1):
            server = replica_server(state_dir, index, primary, replication)
            if not server.initialised:
                _check_binlog_is_whole(primary)
            seed = previous[index - 1] if index <= len(previous) else {
                "admin_password": primary["admin_password"], "cdc_password": primary["cdc_password"],
                "cdc_read_only": primary.get("cdc_read_only", False)}
            replicas.append(server.start(seed).to_json())
            wait_caught_up(primary, replicas[-1], timeout)
    except BaseException:
        for info in replicas:  # nothing left running that no record names
            stop_server(info)
        raise
    return {"replication": replication, "replicas": replicas}


def stop_server(info: dict[str, Any], *, kill: bool = False, timeout: float = 60.0) -> bool:
    """Stop one server of the topology (SIGTERM; ``kill``: SIGKILL, a crash); True if it ran."""
    if not kill and info.get("flavor") == "mysql" and pid_alive(info.get("pid")):
        end_dump_threads(info)
    return stop_pid(info.get("pid"), str(info["datadir"]), timeout=timeout,
                    sig=signal.SIGKILL if kill else signal.SIGTERM)


def remove_server(info: dict[str, Any]) -> None:
    """Stop a server and delete its directory (datadir, socket, logs)."""
    stop_server(info)
    root = Path(info["datadir"]).parent
    if root.is_dir():
        shutil.rmtree(root, ignore_errors=True)


# -- failover ----------------------------------------------------------------------------

def _wait_relay_applied(conn: pymysql.connections.Connection, port: int, timeout: float) -> None:
    """Wait until the SQL thread applied every transaction the IO thread received."""
    deadline = time.monotonic() + timeout
    flavor = _flavor(conn)
    while True:
        received = _gtids(slave_status(conn).get("Gtid_IO_Pos"), flavor)
        applied = _applied(conn)
        if _gtids(applied, flavor).covers(received):
            return
        if time.monotonic() > deadline:
            raise StackError(f"replica on port {port} did not apply its relay log within {timeout:.0f}s "
                             f"(received {received}, applied {applied})")
        time.sleep(0.1)


def _copy_missing(conn: pymysql.connections.Connection, port: int, source: dict[str, Any],
                  replication: dict[str, str], until: str, timeout: float) -> None:
    """The replica of ``conn`` (on ``port``, its replication stopped) replicates ``source``
    until it has applied GTID position ``until``, then stops again."""
    flavor = _flavor(conn)
    with conn.cursor() as cur:
        cur.execute(change_master_sql(conn, _source(source, replication)))
        cur.execute(replication_sql(conn, "START SLAVE"))
        deadline = time.monotonic() + timeout
        while not _gtids(_applied(conn), flavor).covers(_gtids(until, flavor)):
            if time.monotonic() > deadline:
                raise StackError(f"replica on port {port} did not get {until} from the replica on port "
                                 f"{source['port']} within {timeout:.0f}s")
            time.sleep(0.1)
        cur.execute(replication_sql(conn, "STOP SLAVE"))


def point_at(replica: dict[str, Any], source: dict[str, Any], replication: dict[str, str]) -> None:
    """Make ``replica`` replicate ``source`` by GTID from what it has applied."""
    with admin_connection(replica) as conn, conn.cursor() as cur:
        cur.execute(replication_sql(conn, "STOP SLAVE"))
        cur.execute(change_master_sql(conn, _source(source, replication)))
        cur.execute(replication_sql(conn, "START SLAVE"))


def promote(new_primary: dict[str, Any], others: list[dict[str, Any]], replication: dict[str, str],
            timeout: float = 60.0) -> None:
    """Make replica ``new_primary`` the primary: it applies what it received, stops
    replicating and becomes writable; each of ``others`` then replicates it by GTID.

    Replicas of a primary that died under writes may have received different amounts of its
    binlog: each of ``others`` applies what it received first, and the transactions one of
    them has and ``new_primary`` lacks are copied to ``new_primary`` from it (as MHA applies
    the differences; the replicas log what they apply, ``--log-slave-updates``), so every
    replica can follow it.  A replica that still applied transactions ``new_primary`` has
    not is refused.  ``new_primary`` and ``others`` are updated (``role``)."""
    with admin_connection(new_primary) as conn, conn.cursor() as cur:
        flavor = _flavor(conn)
        cur.execute(replication_sql(conn, "STOP SLAVE IO_THREAD"))
        _wait_relay_applied(conn, new_primary["port"], timeout)
        cur.execute(replication_sql(conn, "STOP SLAVE"))
        for other in others:
            with admin_connection(other) as other_conn, other_conn.cursor() as other_cur:
                other_cur.execute(replication_sql(other_conn, "STOP SLAVE IO_THREAD"))
                _wait_relay_applied(other_conn, other["port"], timeout)
                ahead = _applied(other_conn)
            if not _gtids(_applied(conn), flavor).covers(_gtids(ahead, flavor)):
                _copy_missing(conn, new_primary["port"], other, replication, ahead, timeout)
        cur.execute(replication_sql(conn, "RESET SLAVE ALL"))
        cur.execute("SET GLOBAL read_only = OFF")
        new_pos = _logged(conn)
    new_primary["role"] = "primary"
    for other in others:
        with admin_connection(other) as conn:
            applied = _applied(conn)
        if not _gtids(new_pos, flavor).covers(_gtids(applied, flavor)):
            raise StackError(
                f"replica on port {other['port']} applied transactions the new primary on port "
                f"{new_primary['port']} does not have ({applied} against {new_pos}): it cannot follow it. "
                f"Promote the most advanced replica instead")
        point_at(other, new_primary, replication)
        other["role"] = "replica"


def replica_status(info: dict[str, Any]) -> tuple[bool, str]:
    """Health of a replica for ``cdc stack status``: its threads, position and lag."""
    try:
        conn = admin_connection(info, connect_timeout=3)
    except pymysql.err.MySQLError as exc:
        return False, f"unreachable: {exc}"
    with conn:
        status = slave_status(conn)
        applied = _applied(conn)
    if not status:
        return True, f"port {info['port']}, replicates from nobody (promoted?), applied {applied or 'nothing'}"
    error = _replication_error(status)
    running = status.get("Slave_IO_Running") == "Yes" and status.get("Slave_SQL_Running") == "Yes"
    detail = (f"port {info['port']} replicating {status.get('Master_Host')}:{status.get('Master_Port')} by GTID, "
              f"applied {applied or 'nothing'}, {status.get('Seconds_Behind_Master')}s behind")
    if error:
        return False, f"{detail}; {error}"
    return running, detail if running else f"{detail}; replication threads not running"
