"""PostgreSQL for the sinks: an existing server by DSN, or a private cluster
initialised into the state directory from the machine's binaries."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cdc.errors import StackError
from cdc.stack.process import free_port, pid_alive, spawn, stop_pid, wait_until

SERVICE_USER = "postgres"
#: Who may connect how: trusted on loopback (plain), or TLS with a password only (secure).
HBA_TRUST = ("local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
             "local replication all trust\nhost replication all 127.0.0.1/32 trust\n")
HBA_TLS_ONLY = ("local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n"
                "hostssl all all ::1/128 scram-sha-256\n")


@dataclass(frozen=True)
class PostgresTls:
    """A TLS-only cluster: its certificate and key, the CA that signed them (the clients'
    ``sslrootcert``), the file holding the ``postgres`` user's password and the libpq
    password file (``passfile``) the DSN names, so that no DSN holds the password."""

    ca: str
    cert: str
    key: str
    password_file: str
    passfile: str

    def password(self) -> str:
        return Path(self.password_file).read_text().rstrip("\r\n")

    def write_passfile(self, port: int) -> None:
        fd = os.open(self.passfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"127.0.0.1:{port}:*:postgres:{self.password()}\n")


def find_pg_bindir() -> Path:
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.access(os.path.join(cand, "postgres"), os.X_OK):
            return Path(cand)
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(os.path.realpath(pg_ctl)).parent
    raise StackError("no PostgreSQL server binaries found: install them with "
                     "'sudo apt-get install -y postgresql' (make demo/test do this), or pass --postgres-dsn")


def _traversable_by(user: str, path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--",
                          "test", "-x", str(path.resolve())],
                         capture_output=True)
    return res.returncode == 0


def _ready(dsn: str) -> bool:
    import psycopg
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


#: Beside the state dir's cluster kept in the temp dir: the state dir's path.
OWNER_FILE = "state_dir"


def prune_orphaned_clusters(tmp: Path) -> list[Path]:
    """The clusters kept in ``tmp`` for a state dir that no longer exists (removed with its
    stack, e.g. a test's temporary dir) and not running: removed; returned."""
    removed = []
    for root in tmp.glob("cdc-postgres-*"):
        try:
            owner = Path((root / OWNER_FILE).read_text())
            pid_file = root / "data" / "postmaster.pid"
            pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        except (OSError, ValueError, IndexError):
            continue  # not ours to judge
        if not owner.exists() and not pid_alive(pid):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed


class EmbeddedPostgres:
    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "postgres"
        self.owner: Path | None = None
        if os.geteuid() == 0 and not _traversable_by(SERVICE_USER, state_dir):
            # The service account cannot reach the state dir (e.g. a checkout under /root):
            # keep the cluster in a private directory of its own, named after the state dir
            # and naming it (a cluster whose state dir is gone is removed by the next start).
            self.owner = state_dir.resolve()
            digest = hashlib.sha1(str(self.owner).encode()).hexdigest()[:12]
            self.root = Path(tempfile.gettempdir()) / f"cdc-postgres-{digest}"
        self.datadir = self.root / "data"
        self.log = self.root / "postgres.log"

    def _run_as(self) -> str | None:
        # PostgreSQL refuses to run as root: use the service account when we are root.
        return SERVICE_USER if os.geteuid() == 0 else None

    def start(self, previous: dict | None = None, *, tls: PostgresTls | None = None) -> dict:
        """Start the cluster, or find it running.  ``tls``: TLS only (``hostssl`` with a
        password), else trusted plain-text connections on loopback."""
        if previous and pid_alive(previous.get("pid")) and bool(previous.get("secure")) == bool(tls) \
                and _ready(previous["dsn"]):
            return previous
        if previous and pid_alive(previous.get("pid")):  # running with the other security: started again
            self.stop(previous)
        bindir = find_pg_bindir()
        port = previous["port"] if previous else free_port()
        user = self._run_as()
        if self.owner is not None:
            prune_orphaned_clusters(self.root.parent)
        self.root.mkdir(parents=True, exist_ok=True)
        if self.owner is not None:
            (self.root / OWNER_FILE).write_text(str(self.owner))
        if user:
            shutil.chown(self.root, user=user)
        if not (self.datadir / "PG_VERSION").exists():
            argv = [str(bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres", "--auth=trust",
                    "-E", "UTF8", "--locale=C.UTF-8"]
            if user:
                argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode != 0:
                raise StackError(f"initdb failed:\n{res.stdout}\n{res.stderr}")
        sockdir = self.root
        # (wal_init_zero=off: the cluster is new, so every WAL segment it writes is a new
        # file, which PostgreSQL would first fill with 16 MB of zeros: 6% of the machine's
        # CPU samples in the merge benchmark's steady batches.  A server that has run a while
        # recycles its segments instead.)
        argv = [str(bindir / "postgres"), "-D", str(self.datadir), "-p", str(port), "-h", "127.0.0.1",
                "-k", str(sockdir), "-c", "fsync=off", "-c", "wal_init_zero=off", "-c", "max_connections=200"]
        hba = self.datadir / "pg_hba.conf"
        hba.write_text(HBA_TLS_ONLY if tls else HBA_TRUST)
        if user:
            shutil.chown(hba, user=user)
        if tls:
            argv += self._tls_args(tls, user)
        log = self.log
        if user and not log.exists():
            log.touch()
            shutil.chown(log, user=user)
        pid = spawn(argv, log, user=user)
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        if tls:  # the password is set over the local socket (trusted), then TCP takes TLS and it only
            local = f"host={sockdir} port={port} user=postgres dbname=postgres"
            wait_until(lambda: _ready(local), 60, f"PostgreSQL on port {port}", pid=pid, log_path=log)
            import psycopg
            from psycopg import sql
            with psycopg.connect(local, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER USER postgres PASSWORD {}").format(sql.Literal(tls.password())))
            dsn += f"?sslmode=verify-full&sslrootcert={tls.ca}&passfile={tls.passfile}"
            tls.write_passfile(port)
        wait_until(lambda: _ready(dsn), 60, f"PostgreSQL on port {port}", pid=pid, log_path=log)
        return {"embedded": True, "dsn": dsn, "port": port, "pid": pid, "datadir": str(self.datadir),
                "log": str(log), "secure": bool(tls)}

    def _tls_args(self, tls: PostgresTls, user: str | None) -> list[str]:
        """The server's certificate and key, copied where the service account reads them (its
        key: owned by it, 0600, as PostgreSQL demands)."""
        where = self.root / "tls"
        where.mkdir(exist_ok=True)
        cert, key = where / "server.crt", where / "server.key"
        shutil.copyfile(tls.cert, cert)
        shutil.copyfile(tls.key, key)
        key.chmod(0o600)
        if user:
            for path in (where, cert, key):
                shutil.chown(path, user=user)
        return ["-c", "ssl=on", "-c", f"ssl_cert_file={cert}", "-c", f"ssl_key_file={key}"]

    def stop(self, info: dict) -> bool:
        # SIGINT = fast shutdown (SIGTERM would wait for every client to disconnect).
        return stop_pid(info.get("pid"), str(self.datadir), timeout=30, sig=signal.SIGINT)


def external_postgres(dsn: str) -> dict:
    if not _ready(dsn):
        raise StackError("the PostgreSQL server given by --postgres-dsn is not reachable")
    return {"embedded": False, "dsn": dsn, "pid": None}
