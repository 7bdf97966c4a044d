"""A real MySQL for the embedded stack (``cdc stack up --flavor mysql``): ``mysqld`` of
Debian's unstable suite, from a Debian unstable root that ``make mysql-server``
(``scripts/ensure-mysql-root.sh``) builds once in a cache outside the checkout.

Debian 12 ships MariaDB only, and unstable's ``mysql-server-core`` (9.7) needs a glibc
newer than Debian 12's.  The server does not run chrooted: it runs through the root's own
dynamic loader with the root's libraries (``<root>/.../ld-linux-x86-64.so.2 --library-path
<root>/usr/lib/x86_64-linux-gnu <root>/usr/sbin/mysqld``) and is told where the root keeps
its data files (``--basedir``, ``--lc-messages-dir``, ``--character-sets-dir``,
``--plugin-dir``).  So its datadir, socket, logs and certificates are the state
directory's own paths, nothing is mounted (a chroot would need the state directory bound
into the root, and /proc: mounts to undo, and root), and the stack's bookkeeping (pids,
command lines naming the datadir) is the same as for MariaDB.  What the root's libraries
read from the machine is kept to nothing they depend on: OpenSSL gets no configuration
file (``OPENSSL_CONF=/dev/null``) and its modules from the root; user names resolve from
the machine's /etc/passwd (glibc's own files backend)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cdc.errors import StackError

#: Where ``make mysql-server`` builds the root (``CDC_MYSQL_ROOT`` overrides it).
DEFAULT_ROOT = Path("/var/cache/mysql-cdc/sid-root")
#: The files the build writes in the root: the stamp of a complete build, the server's version.
STAMP = ".cdc-mysql-root"
VERSION_FILE = "CDC_MYSQL_VERSION"
_LIBDIR = "usr/lib/x86_64-linux-gnu"


def root_path() -> Path:
    return Path(os.environ.get("CDC_MYSQL_ROOT") or DEFAULT_ROOT)


@dataclass(frozen=True)
class MySQLRoot:
    """A built root: how to run its ``mysqld`` and ``mysql`` from this machine."""

    path: Path

    @classmethod
    def find(cls, path: Path | None = None) -> MySQLRoot:
        """The built root (``path``, or ``CDC_MYSQL_ROOT``, or :data:`DEFAULT_ROOT`); a
        :class:`StackError` saying how to build it when it is not there."""
        root = cls(path or root_path())
        if not root.built:
            raise StackError(
                f"no MySQL server root at {root.path} (the MySQL flavor runs mysqld from a Debian unstable root built "
                "once): run 'make mysql-server' as root (scripts/ensure-mysql-root.sh; about a minute and 600 MB), "
                "or set CDC_MYSQL_ROOT to where one was built")
        return root

    @property
    def built(self) -> bool:
        return (self.path / STAMP).is_file() and os.access(self.path / "usr/sbin/mysqld", os.X_OK)

    @property
    def version(self) -> str:
        return (self.path / VERSION_FILE).read_text().strip()

    @property
    def mysqld(self) -> str:
        return str(self.path / "usr/sbin/mysqld")

    def loader(self) -> list[str]:
        """The argv prefix running one of the root's programs on the root's glibc."""
        return [str(self.path / _LIBDIR / "ld-linux-x86-64.so.2"), "--library-path", str(self.path / _LIBDIR)]

    def server_argv(self) -> list[str]:
        """``mysqld`` through the loader; options follow (``--no-defaults`` first)."""
        return [*self.loader(), self.mysqld]

    def server_options(self) -> list[str]:
        """Where the server finds the root's data files (after ``--no-defaults``)."""
        share = self.path / "usr/share/mysql"
        return [f"--basedir={self.path / 'usr'}", f"--lc-messages-dir={share}",
                f"--character-sets-dir={share / 'charsets'}", f"--plugin-dir={self.path / 'usr/lib/mysql/plugin'}"]

    def client_argv(self) -> list[str]:
        """The root's ``mysql`` command-line client through the loader."""
        return [*self.loader(), str(self.path / "usr/bin/mysql"),
                f"--character-sets-dir={self.path / 'usr/share/mysql/charsets'}"]

    def env(self) -> dict[str, str]:
        """The environment of the root's programs: this one's, with OpenSSL kept off the
        machine's configuration and modules (another OpenSSL's)."""
        return {**os.environ, "OPENSSL_CONF": "/dev/null",
                "OPENSSL_MODULES": str(self.path / _LIBDIR / "ossl-modules")}
