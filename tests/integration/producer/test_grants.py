"""The producer checks its user's grants at start-up and names what is missing, on MariaDB and
on MySQL 9.7."""

from __future__ import annotations

import secrets
from contextlib import contextmanager

import pytest

from common.errors import SourceError
from common.sql.quoting import quote_table
from common.sql.sessions import connect
from producer.app import ProducerApp
from producer.binlog.server import check_grants

pytestmark = pytest.mark.servers("mariadb", "mysql")  # (MySQL: SHOW GRANTS' own form, caching_sha2 users)


@contextmanager
def _user(source_stack, name: str, *grants: str):
    """A user of the session server with only ``grants`` (``... ON x``), dropped afterwards."""
    password = secrets.token_hex(12)
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY {conn.escape(password)}")
        for grant in grants:
            cur.execute(f"GRANT {grant} TO '{name}'@'%'")
    try:
        yield password
    finally:
        with source_stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def test_a_user_without_replication_slave_stops_the_producer_naming_it(source_stack, config, unique):
    name = unique("noslave")[:32]
    signal = quote_table(config.source.signal_table)
    with _user(source_stack, name, "REPLICATION CLIENT, SELECT ON *.*", f"INSERT, DELETE ON {signal}") as password:
        config.source.user, config.source.password = name, password
        with pytest.raises(SourceError) as err:
            ProducerApp(config).run(idle_exit_s=1)
    text = str(err.value)
    assert f"the CDC user '{name}'@'%' lacks" in text
    assert "REPLICATION SLAVE: to read the binlog stream" in text
    assert f"GRANT REPLICATION SLAVE ON *.* TO '{name}'@'%';" in text
    assert "REPLICATION CLIENT:" not in text and "INSERT:" not in text and password not in text


def test_a_read_only_user_passes_only_in_read_only_mode(source_stack, config, unique):
    name = unique("readonly")[:32]
    with _user(source_stack, name, "REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.*") as password:
        config.source.user, config.source.password = name, password
        conn = connect(config.source)
        try:
            check_grants(conn, read_only=True, signal_table=config.source.signal_table)
            with pytest.raises(SourceError) as err:
                check_grants(conn, read_only=False, signal_table=config.source.signal_table)
        finally:
            conn.close()
    text = str(err.value)
    assert "  - INSERT:" in text and "  - DELETE:" in text and "REPLICATION SLAVE:" not in text
    assert f"GRANT INSERT, DELETE ON {quote_table(config.source.signal_table)} TO '{name}'@'%';" in text
    assert "snapshot.read_only: true" in text


def test_the_stack_cdc_user_passes(source_stack, config):
    conn = connect(config.source)
    try:
        check_grants(conn, read_only=False, signal_table=config.source.signal_table)
    finally:
        conn.close()


_EVERY_GRANT = ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT", "INSERT", "DELETE")


def _grants_but(signal: str, missing: str) -> list[str]:
    """Every grant the producer needs (writable snapshots) except ``missing``."""
    on_all = [g for g in ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT") if g != missing]
    on_signal = [g for g in ("INSERT", "DELETE") if g != missing]
    return [f"{', '.join(on_all)} ON *.*", f"{', '.join(on_signal)} ON {signal}"]


def _named_missing(source_stack, config, name: str, grants: list[str], *, read_only: bool) -> tuple[list[str], str]:
    """The grants the check names as missing for a user with only ``grants``, and its message."""
    with _user(source_stack, name, *grants) as password:
        config.source.user, config.source.password = name, password
        conn = connect(config.source)
        try:
            check_grants(conn, read_only=read_only, signal_table=config.source.signal_table)
            return [], ""
        except SourceError as exc:
            return [g for g in _EVERY_GRANT if f"  - {g}:" in str(exc)], str(exc)
        finally:
            conn.close()


@pytest.mark.parametrize("missing", _EVERY_GRANT)
def test_the_grants_check_names_exactly_the_grant_missing(source_stack, config, unique, missing):
    name, signal = unique("lacks")[-30:], quote_table(config.source.signal_table)
    named, text = _named_missing(source_stack, config, name, _grants_but(signal, missing), read_only=False)
    assert named == [missing]
    on = "*.*" if missing in ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT") else signal
    assert f"GRANT {missing} ON {on} TO '{name}'@'%';" in text


@pytest.mark.parametrize("missing", ["INSERT", "DELETE"])
def test_read_only_snapshots_need_no_write_at_all(source_stack, config, unique, missing):
    signal = quote_table(config.source.signal_table)
    assert _named_missing(source_stack, config, unique("rosnap")[-30:], _grants_but(signal, missing), read_only=True) \
        == ([], "")


def test_writes_granted_on_another_table_do_not_cover_the_signal_table(source_stack, config, unique, test_db):
    grants = ["REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.*", f"INSERT, DELETE ON `{test_db}`.*"]
    named, _ = _named_missing(source_stack, config, unique("elsewhere")[-30:], grants, read_only=False)
    assert named == ["INSERT", "DELETE"]
