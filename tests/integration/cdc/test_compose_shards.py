"""The compose profile ``shards`` seeds its two source servers with the shards of
``make demo-shards`` (docker/mysql/shards/*.sql): the scripts run on a real server (the
session MariaDB; the databases renamed per test) and create what the profile's route merges.
tests/test_compose.py checks the rest of the profile without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.demo_shards import SHARDS, shards_route
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from tests.snapshot_helpers import source_rows

SCRIPTS = Path(__file__).resolve().parents[3] / "docker" / "mysql" / "shards"


@pytest.mark.parametrize("source", sorted(SHARDS))
def test_a_shard_servers_init_script_creates_its_shards(stack, unique, source):
    prefix = unique("s")
    text = (SCRIPTS / f"{source}.sql").read_text()
    renamed = {db: f"{prefix}_{db}" for db in SHARDS[source]}
    for db, name in renamed.items():
        text = text.replace(f"`{db}`", f"`{name}`")
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    statements = [s for s in (part.strip() for part in text.split(";")) if s]
    try:
        with stack.admin() as conn, conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
            conn.commit()
            for db, name in renamed.items():
                rows = source_rows(conn, name, "orders", ["id"])
                assert sorted(k[0] for k in rows) == list(range(1000))
                assert rows[(7,)] == {"id": 7, "v": "v7", "n": 7}
                route = Router([shards_route()]).route_of(source, db, "orders")
                assert route.values(ShardId(source, db, "orders"))["shard"] == db[-2:]
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            for name in renamed.values():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
