"""A primary with replicas of its own for one test (the ``replicated`` and ``own_mysql``
fixtures; MariaDB, or MySQL with ``flavor="mysql"``), started by :mod:`cdc.stack.replication`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pymysql

from cdc.stack.mysql_server import EmbeddedMySQL
from cdc.stack.replication import promote, remove_server, start_replicas, stop_server, wait_caught_up
from common.config import CDCConfig


class Topology:
    """A primary and ``replicas`` replicas under ``state_dir``; ``servers`` lists every
    server started (a stopped one stays listed, so :meth:`close` removes it too)."""

    def __init__(self, state_dir: Path, replicas: int = 2, flavor: str = "mariadb") -> None:
        self.state_dir = state_dir
        self.flavor = flavor
        self.count = replicas
        self.primary: dict[str, Any] = {}
        self.replicas: list[dict[str, Any]] = []
        self.replication: dict[str, str] = {}
        self.servers: list[dict[str, Any]] = []

    def start(self) -> "Topology":
        try:
            self.primary = EmbeddedMySQL(self.state_dir, flavor=self.flavor).start().to_json()
            self.servers.append(self.primary)
            started = start_replicas(self.state_dir, self.primary, self.count)
            self.replicas = started.get("replicas", [])
            self.replication = started.get("replication", {})
            self.servers += self.replicas
        except BaseException:
            self.close()
            raise
        return self

    # -- connections -----------------------------------------------------------------------
    def admin(self, server: dict[str, Any] | None = None, database: str | None = None) -> pymysql.connections.Connection:
        s = server or self.primary
        return pymysql.connect(host=s["host"], port=s["port"], user=s["admin_user"], password=s["admin_password"],
                               database=database, autocommit=True, charset="utf8mb4")

    def cdc(self, server: dict[str, Any] | None = None, database: str | None = None) -> pymysql.connections.Connection:
        s = server or self.primary
        return pymysql.connect(host=s["host"], port=s["port"], user=s["cdc_user"], password=s["cdc_password"],
                               database=database, autocommit=True, charset="utf8mb4")

    def point(self, cfg: CDCConfig, server: dict[str, Any] | None = None) -> CDCConfig:
        """``cfg`` reading from ``server`` (the primary by default) as its CDC user."""
        s = server or self.primary
        cfg.source.host, cfg.source.port = s["host"], s["port"]
        cfg.source.user, cfg.source.password = s["cdc_user"], s["cdc_password"]
        cfg.source.signal_table = s["signal_table"]
        return cfg

    # -- topology changes --------------------------------------------------------------------
    def wait_caught_up(self, replica: dict[str, Any], source: dict[str, Any] | None = None,
                       timeout: float = 60.0) -> str:
        return wait_caught_up(source or self.primary, replica, timeout)

    def stop(self, server: dict[str, Any], *, kill: bool = False) -> None:
        """The server dies (SIGTERM, or SIGKILL with ``kill``)."""
        stop_server(server, kill=kill)

    def promote(self, replica: dict[str, Any]) -> None:
        """``replica`` becomes the primary; the other replicas follow it."""
        others = [r for r in self.replicas if r is not replica]
        promote(replica, others, self.replication)
        self.primary = replica
        self.replicas = others

    def close(self) -> None:
        """Stop every server and delete the state directory: the replicas first (a MySQL
        primary's shutdown waits about 10 s for the dump threads of replicas still connected)."""
        for server in reversed(self.servers):
            remove_server(server)
        shutil.rmtree(self.state_dir, ignore_errors=True)


def table_rows(topology: Topology, server: dict, db: str) -> list[tuple]:
    """``db.t``'s rows on ``server``, by id."""
    with topology.admin(server, db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        return list(cur.fetchall())


def write(topology: Topology, server: dict, db: str, *statements: str) -> str:
    """Run ``statements`` on ``server`` (autocommitted, a transaction each); the GTID of the last
    one in the server's own form (MariaDB ``domain-server-seq``, MySQL ``uuid:N``)."""
    with topology.admin(server, db) as conn, conn.cursor() as cur:
        for stmt in statements:
            cur.execute(stmt)
        if topology.flavor != "mysql":
            cur.execute("SELECT @@last_gtid")
            return cur.fetchone()[0]
        cur.execute("SELECT @@server_uuid, @@gtid_executed")
        uuid, executed = cur.fetchone()
    last = re.search(rf"{uuid}:(?:\d+-)?(\d+)", executed.replace("\n", ""))
    return f"{uuid}:{last.group(1)}"


def create_shop_table(topology: Topology) -> None:
    """``shop.t`` (id, v) on the primary."""
    with topology.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(40))")
