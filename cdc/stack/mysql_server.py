"""The embedded MySQL-compatible server: the machine's ``mariadbd``/``mysqld`` binary
(flavor ``mariadb``), or MySQL's ``mysqld`` from the root ``make mysql-server`` builds
(flavor ``mysql``, :mod:`cdc.stack.mysql_root`), on a private datadir with the binlog
settings change capture needs.

The same class runs a replica (``replica_of``): its own datadir and port, a distinct
``--server-id``, ``--read-only=ON``; :mod:`cdc.stack.replication` builds a primary with
replicas from it."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pymysql

from cdc.errors import StackError
from cdc.stack.mysql_root import MySQLRoot, root_path
from cdc.stack.process import free_port, pid_alive, spawn, stop_pid, wait_until
from common.errors import TlsError
from common.sql.quoting import quote_ident, quote_table
from common.sql.tls import TlsSettings, connect_mysql

SIGNAL_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " `id` VARCHAR(64) NOT NULL PRIMARY KEY,"
    " `type` VARCHAR(32) NOT NULL,"
    " `data` VARCHAR(2048) NULL"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def find_server_binary() -> str:
    for name in ("mariadbd", "mysqld"):
        path = shutil.which(name) or (f"/usr/sbin/{name}" if os.access(f"/usr/sbin/{name}", os.X_OK) else None)
        if path:
            return path
    raise StackError(
        "no MySQL-compatible server binary (mariadbd or mysqld) on this machine: "
        "install one with 'sudo apt-get install -y mariadb-server' (make demo/test do this)")


def server_flavor(binary: str) -> tuple[str, str]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"Ver\s+([0-9.]+)", out)
    version = m.group(1) if m else "unknown"
    return ("mariadb" if "mariadb" in out.lower() else "mysql"), version


#: The flavors ``cdc stack up --flavor`` offers.
FLAVORS = ("mariadb", "mysql")


@dataclass(frozen=True)
class ServerProgram:
    """How to run one flavor's server: ``argv`` (the binary, behind the root's loader for
    MySQL), the ``options`` that follow ``--no-defaults``, the environment (None: this one's)."""

    flavor: str
    version: str
    binary: str
    argv: tuple[str, ...]
    options: tuple[str, ...] = ()
    env: dict | None = None


def server_program(flavor: str | None = None) -> ServerProgram:
    """The server of ``flavor``: ``mariadb``, the machine's MariaDB; ``mysql``, MySQL from the
    root of ``make mysql-server`` (or the machine's own ``mysqld`` when it is MySQL and no root
    was built); None: the machine's server, whichever it is."""
    if flavor not in (None, *FLAVORS):
        raise StackError(f"the server flavor must be one of {', '.join(FLAVORS)}, not {flavor!r}")
    if flavor == "mysql":
        root = MySQLRoot(root_path())
        if not root.built:
            machine = _machine_binary()
            if machine and server_flavor(machine)[0] == "mysql":
                return ServerProgram("mysql", server_flavor(machine)[1], machine, (machine,))
            root = MySQLRoot.find()  # raises, saying how to build it
        return ServerProgram("mysql", root.version, root.mysqld, tuple(root.server_argv()),
                             tuple(root.server_options()), root.env())
    binary = find_server_binary()
    found, version = server_flavor(binary)
    if flavor == "mariadb" and found != "mariadb":
        raise StackError(f"the machine's server {binary} is {found} {version}, not MariaDB: install mariadb-server, "
                         "or use --flavor mysql")
    return ServerProgram(found, version, binary, (binary,))


def _machine_binary() -> str | None:
    try:
        return find_server_binary()
    except StackError:
        return None


@dataclass
class MySQLServerInfo:
    """What stack.json records about the server."""

    host: str
    port: int
    socket: str
    datadir: str
    binary: str
    flavor: str
    version: str
    admin_user: str
    admin_password: str
    cdc_user: str
    cdc_password: str
    signal_table: str
    server_id: int = 1
    pid: int | None = None
    log: str = ""
    extra: dict = field(default_factory=dict)
    # The CDC user may only read (REPLICATION SLAVE, REPLICATION CLIENT, SELECT): no
    # INSERT/DELETE on the signal table (``cdc stack up --read-only``).
    cdc_read_only: bool = False
    # "primary", or "replica" (started with --read-only=ON, replicating by GTID).
    role: str = "primary"
    # TLS (``cdc stack up --secure``): the CA, certificate and key files the server runs with,
    # every TCP client must use TLS (require_secure_transport); {}: plain text.
    tls: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ReplicationSource:
    """The server a replica replicates from, and the replication user it logs in as."""

    host: str
    port: int
    user: str
    password: str


class EmbeddedMySQL:
    """Initialise (once) and run a private server under ``<state>/<name>`` (``mysql``).

    ``replica_of``: run it as a replica of that server (``--read-only=ON``); a fresh one
    replicates the source's binlog from its first transaction, the users included.
    ``cdc_read_only``: the CDC user's grants (None: as recorded, writable when new).
    ``server_args``: more server options (``--version=5.7.44-log``: a server that tells
    clients it is MySQL 5.7, for a peer that only speaks to MySQL, such as Debezium's
    MySQL connector in the conformance tests).  ``tls``: ``{"ca", "cert", "key"}`` PEM files:
    the server accepts TLS connections only (``--require-secure-transport``), None: as recorded.
    ``flavor``: ``mariadb`` or ``mysql`` (:func:`server_program`); None: as recorded, else the
    machine's server.  MySQL offers TLS on every server (certificates it makes in its datadir)
    and its users log in with ``caching_sha2_password``."""

    def __init__(self, state_dir: Path, signal_table: str = "cdc_control.cdc_signal", *, name: str = "mysql",
                 server_id: int = 1, replica_of: ReplicationSource | None = None,
                 cdc_read_only: bool | None = None, server_args: tuple[str, ...] = (),
                 tls: dict | None = None, flavor: str | None = None) -> None:
        self.name = name
        self.flavor = flavor
        self.tls = tls
        self.server_args = tuple(server_args)
        self.root = state_dir / name
        self.datadir = self.root / "data"
        self.socket = self.root / "mysqld.sock"
        self.pidfile = self.root / "mysqld.pid"
        self.log = self.root / "mysqld.log"
        self.signal_table = signal_table
        self.server_id = server_id
        self.replica_of = replica_of
        self.cdc_read_only = cdc_read_only

    @property
    def initialised(self) -> bool:
        return (self.datadir / "mysql").exists()

    # -- lifecycle ------------------------------------------------------------------
    def start(self, previous: dict | None = None) -> MySQLServerInfo:
        """Start the server, or find it running.  ``previous``: its record in stack.json
        (a replica's first start: the primary's passwords, which replication brings)."""
        previous = previous or {}
        wanted = self.flavor or previous.get("flavor")
        if self.flavor and previous.get("flavor") and self.flavor != previous["flavor"] and self.initialised:
            raise StackError(f"the server {self.name} of this stack is {previous['flavor']} (its datadir "
                             f"{self.datadir}), not {self.flavor}: run 'cdc stack down' and use another state "
                             "directory for a stack on the other server")
        program = server_program(wanted)
        binary, flavor, version = program.binary, program.flavor, program.version
        read_only = bool(previous.get("cdc_read_only")) if self.cdc_read_only is None else self.cdc_read_only
        tls = dict(previous.get("tls") or {}) if self.tls is None else dict(self.tls)
        if pid_alive(previous.get("pid")) and (previous.get("tls") or {}) == tls and self._healthy(previous):
            info = MySQLServerInfo(**previous)
        else:
            info = MySQLServerInfo(
                host="127.0.0.1", port=previous.get("port") or free_port(), socket=str(self.socket),
                datadir=str(self.datadir), binary=binary, flavor=flavor, version=version,
                admin_user="root", admin_password=previous.get("admin_password") or secrets.token_hex(16),
                cdc_user="cdc", cdc_password=previous.get("cdc_password") or secrets.token_hex(16),
                signal_table=self.signal_table, server_id=self.server_id, log=str(self.log),
                cdc_read_only=bool(previous.get("cdc_read_only")),
                role="replica" if self.replica_of else "primary", tls=tls)
            if pid_alive(previous.get("pid")) and (previous.get("tls") or {}) != tls:  # started again with these
                self.stop(previous)
            fresh = not self.initialised
            if fresh:
                self._initialise(program)
            info.pid = self._launch(program, info.port, tls)
            try:
                wait_until(lambda: self._socket_ready(info, fresh), 60,
                           f"{flavor} server {self.name} on port {info.port}", pid=info.pid, log_path=self.log)
            except BaseException:  # (not left running: nothing records its pid yet)
                stop_pid(info.pid, str(self.datadir), timeout=30)
                raise
            if fresh and self.replica_of:
                self._follow(info, self.replica_of)
            elif fresh:
                self._bootstrap(info, read_only)
                info.cdc_read_only = read_only
        if self.replica_of:
            info.cdc_read_only = read_only  # the grants come from the primary, by replication
        elif info.cdc_read_only != read_only:
            self._set_cdc_grants(info, read_only)
            info.cdc_read_only = read_only
        return info

    def stop(self, info: dict) -> bool:
        if info.get("flavor") == "mysql" and pid_alive(info.get("pid")):
            end_dump_threads(info)
        return stop_pid(info.get("pid"), str(self.datadir), timeout=60)

    # -- steps ----------------------------------------------------------------------
    def _user_args(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def _tmpdir(self) -> Path:
        """The server's own directory for temporary files (made here): not the shared /tmp,
        where an initialisation once failed on a temporary table's file gone missing."""
        tmp = self.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def _initialise(self, program: ServerProgram) -> None:
        flavor = program.flavor
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        self.root.mkdir(parents=True, exist_ok=True)
        if flavor == "mariadb":
            installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
            if not installer:
                raise StackError("mariadb-install-db not found: install the mariadb-server package")
            argv = [installer, "--no-defaults", f"--datadir={self.datadir}", "--auth-root-authentication-method=normal",
                    "--skip-test-db", f"--tmpdir={self._tmpdir()}", *self._user_args()]
        else:
            argv = [*program.argv, "--no-defaults", *program.options, "--initialize-insecure",
                    f"--datadir={self.datadir}", f"--tmpdir={self._tmpdir()}", *self._user_args()]
        res = subprocess.run(argv, capture_output=True, text=True, env=program.env)
        if res.returncode != 0:
            raise StackError(f"initialising the {flavor} datadir failed ({' '.join(argv)}):\n{res.stdout}\n{res.stderr}")

    def _launch(self, program: ServerProgram, port: int, tls: dict) -> int:
        flavor = program.flavor
        args = [
            *program.argv, "--no-defaults", *program.options, f"--datadir={self.datadir}", f"--port={port}", "--bind-address=127.0.0.1",
            f"--socket={self.socket}", f"--pid-file={self.pidfile}", f"--log-error={self.log}",
            f"--log-bin={self.datadir / 'mysql-bin'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL", f"--server-id={self.server_id}", "--skip-name-resolve",
            "--character-set-server=utf8mb4", "--innodb-buffer-pool-size=256M", "--max-connections=300",
            "--max-allowed-packet=64M", f"--relay-log={self.datadir / 'relay-bin'}", f"--tmpdir={self._tmpdir()}",
            *self._user_args(),
        ]
        if flavor == "mysql":  # log_replica_updates is on by default
            # (--secure-file-priv=: its default directory, /var/lib/mysql-files, may not exist here)
            args += ["--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--mysqlx=OFF", "--secure-file-priv="]
        else:
            # A server logs what it replicates too, so any server of a topology can feed a
            # producer (or become the primary) with every transaction under its own GTID.
            args += ["--gtid-strict-mode=ON", "--log-slave-updates=ON"]
        if self.replica_of:
            args += ["--read-only=ON"]
        if tls:
            args += [f"--ssl-ca={tls['ca']}", f"--ssl-cert={tls['cert']}", f"--ssl-key={tls['key']}",
                     "--require-secure-transport=ON"]
        args += list(self.server_args)
        return spawn(args, self.root / "mysqld.out", env=program.env)

    def _socket_ready(self, info: MySQLServerInfo, fresh: bool) -> bool:
        try:
            conn = self._connect_admin(info, fresh)
        except pymysql.err.OperationalError:
            return False
        conn.close()
        return True

    def _connect_admin(self, info: MySQLServerInfo, fresh: bool) -> pymysql.connections.Connection:
        if fresh:  # right after initialisation root has no password and only socket access matters
            return pymysql.connect(unix_socket=str(self.socket), user="root", password="", autocommit=True,
                                   connect_timeout=2)
        return server_connect(info.to_json(), autocommit=True, connect_timeout=2)

    def _healthy(self, previous: dict) -> bool:
        try:
            conn = server_connect(previous, connect_timeout=2)
        except (pymysql.err.MySQLError, TlsError):
            return False
        conn.close()
        return True

    def _bootstrap(self, info: MySQLServerInfo, cdc_read_only: bool) -> None:
        conn = self._connect_admin(info, fresh=True)
        apw = identified_by(conn, info.admin_password)
        statements = [
            f"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' {apw}",
            f"ALTER USER 'root'@'127.0.0.1' {apw}",
            "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
            *cdc_user_statements(conn, info.cdc_user, info.cdc_password, self.signal_table,
                                 read_only=cdc_read_only),
            f"ALTER USER 'root'@'localhost' {apw}",
            "FLUSH PRIVILEGES",
        ]
        with conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
        conn.close()

    def _follow(self, info: MySQLServerInfo, source: ReplicationSource) -> None:
        """A fresh replica: replicate ``source`` from its first transaction (nothing is
        written here first: a local GTID would break strict GTID order), then wait for the
        users to arrive (the admin login works once they have)."""
        conn = self._connect_admin(info, fresh=True)
        with conn.cursor() as cur:
            if is_mariadb(conn):
                cur.execute("SET GLOBAL gtid_slave_pos = ''")
            cur.execute(change_master_sql(conn, source))
            cur.execute(replication_sql(conn, "START SLAVE"))
        conn.close()
        wait_until(lambda: self._socket_ready(info, False), 120,
                   f"replica {self.name} to receive the users of its primary on port {source.port}",
                   pid=info.pid, log_path=self.log, interval=0.2)

    def _set_cdc_grants(self, info: MySQLServerInfo, read_only: bool) -> None:
        """Switch the CDC user between read-only and writable (INSERT, DELETE on the signal table)."""
        conn = self._connect_admin(info, fresh=False)
        u = f"{conn.escape(info.cdc_user)}@'%'"
        with conn.cursor() as cur:
            if read_only:
                try:
                    cur.execute(f"REVOKE INSERT, DELETE ON {quote_table(self.signal_table)} FROM {u}")
                except pymysql.err.MySQLError as exc:
                    if exc.args[0] not in (1141, 1147):  # no such grant: nothing to revoke
                        raise
            else:
                cur.execute(f"GRANT INSERT, DELETE ON {quote_table(self.signal_table)} TO {u}")
        conn.close()


def change_master_sql(conn: pymysql.connections.Connection, source: ReplicationSource) -> str:
    """Replicate ``source`` by GTID, retrying a lost connection each second: MariaDB's ``CHANGE
    MASTER TO ... MASTER_USE_GTID=slave_pos``; MySQL's ``CHANGE REPLICATION SOURCE TO ...
    SOURCE_AUTO_POSITION=1`` over TLS (every MySQL server of the stack offers it, and
    caching_sha2_password's login needs TLS or the source's RSA key)."""
    if not is_mariadb(conn):
        return (f"CHANGE REPLICATION SOURCE TO SOURCE_HOST={conn.escape(source.host)}, SOURCE_PORT={int(source.port)}, "
                f"SOURCE_USER={conn.escape(source.user)}, SOURCE_PASSWORD={conn.escape(source.password)}, "
                "SOURCE_CONNECT_RETRY=1, SOURCE_AUTO_POSITION=1, SOURCE_SSL=1")
    return (f"CHANGE MASTER TO MASTER_HOST={conn.escape(source.host)}, MASTER_PORT={int(source.port)}, "
            f"MASTER_USER={conn.escape(source.user)}, MASTER_PASSWORD={conn.escape(source.password)}, "
            "MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos")


#: MySQL's words for MariaDB's replication statements (MySQL 8.4 removed the SLAVE ones).
_MYSQL_REPLICATION = {"START SLAVE": "START REPLICA", "STOP SLAVE": "STOP REPLICA",
                      "STOP SLAVE IO_THREAD": "STOP REPLICA IO_THREAD", "RESET SLAVE ALL": "RESET REPLICA ALL",
                      "SHOW SLAVE STATUS": "SHOW REPLICA STATUS"}


def replication_sql(conn: pymysql.connections.Connection, statement: str) -> str:
    """``statement`` (MariaDB's ``START SLAVE`` and the like) as the server of ``conn`` says it."""
    return statement if is_mariadb(conn) else _MYSQL_REPLICATION[statement]


def is_mariadb(conn: pymysql.connections.Connection) -> bool:
    return "mariadb" in conn.get_server_info().lower()


def identified_by(conn: pymysql.connections.Connection, password: str) -> str:
    """``IDENTIFIED BY ...`` for ``password``: on MariaDB by its hash (``mysql_native_password``),
    so that the binlog, which logs these statements as written, holds no password; on MySQL
    with ``caching_sha2_password`` (its only password plugin since 9.0; MySQL logs the
    statement with the hash, not the password)."""
    if is_mariadb(conn):
        digest = hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()
        return f"IDENTIFIED BY PASSWORD '*{digest}'"
    return f"IDENTIFIED WITH caching_sha2_password BY {conn.escape(password)}"


def cdc_user_statements(conn: pymysql.connections.Connection, user: str, password: str,
                        signal_table: str, *, read_only: bool = False) -> list[str]:
    """SQL creating the least-privilege CDC user and the signal table.

    The user may read the binlog and SELECT; it may only INSERT and DELETE rows of the
    signal table (its snapshot window markers), nothing else.  ``read_only``: not even
    that (read-only snapshots, ``snapshot.read_only``).  On MySQL it has the grants Debezium's
    MySQL connector documents (SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION
    CLIENT), so that the peers run as the same user."""
    u = f"{conn.escape(user)}@'%'"
    privileges = ("REPLICATION SLAVE, REPLICATION CLIENT, SELECT" if is_mariadb(conn) else
                  "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT")
    statements = [
        f"CREATE USER IF NOT EXISTS {u} {identified_by(conn, password)}",
        f"ALTER USER {u} {identified_by(conn, password)}",
        f"GRANT {privileges} ON *.* TO {u}",
        f"CREATE DATABASE IF NOT EXISTS {quote_ident(signal_table.split('.')[0])}",
        SIGNAL_DDL.format(table=quote_table(signal_table)),
    ]
    if not read_only:
        statements.append(f"GRANT INSERT, DELETE ON {quote_table(signal_table)} TO {u}")
    return statements


def server_tls(info: dict) -> TlsSettings:
    """How to reach a server of stack.json: verified TLS when it runs with TLS, else as a
    client does by default."""
    tls = info.get("tls") or {}
    return TlsSettings("verify_ca", tls["ca"], setting="stack TLS") if tls else TlsSettings(setting="stack TLS")


def server_connect(info: dict, *, user: str = "admin", **kw) -> pymysql.connections.Connection:
    """A TCP session with a server of stack.json as its admin (``user="admin"``) or CDC user
    (``"cdc"``), over TLS when the server runs with it (``kw``: more pymysql options)."""
    return connect_mysql(server_tls(info), host=info["host"], port=info["port"], user=info[f"{user}_user"],
                         password=info[f"{user}_password"], **kw)


def end_dump_threads(info: dict) -> None:
    """Kill a MySQL server's binlog dump threads (before it is stopped): one whose replica or
    producer went away waits for the next event (or heartbeat) before it notices, and the
    server's shutdown waits about 10 s for it."""
    try:
        conn = server_connect(info, autocommit=True, connect_timeout=2)
    except (pymysql.err.MySQLError, TlsError, KeyError):
        return  # (not reachable: stopped by its signal alone)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
        for (thread_id,) in cur.fetchall():
            try:
                cur.execute(f"KILL {int(thread_id)}")
            except pymysql.err.MySQLError:
                pass  # (it ended meanwhile)


def server_status(info: dict) -> tuple[bool, str]:
    try:
        conn = server_connect(info, user="cdc", connect_timeout=3)
    except (pymysql.err.MySQLError, TlsError) as exc:
        return False, f"unreachable: {exc}"
    with conn.cursor() as cur:
        cur.execute("SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image")
        version, log_bin, fmt, image = cur.fetchone()
    conn.close()
    tls = ", TLS only" if info.get("tls") else ""
    return True, (f"{version} on {info['host']}:{info['port']}{tls}, log_bin={log_bin} binlog_format={fmt} "
                  f"row_image={image}")
