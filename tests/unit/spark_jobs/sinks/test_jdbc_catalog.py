"""The Iceberg spark engine's JDBC catalog settings from ``sinks.iceberg.catalog_uri`` (the
SQLAlchemy URL pyiceberg takes): PostgreSQL's URL, login and TLS settings, a libpq password
file read for the JDBC driver (which has none), SQLite, and the refusals."""

from __future__ import annotations

import pytest

from spark_jobs.errors import SinkError
from spark_jobs.sinks.iceberg_spark import jdbc_catalog, pgpass_password


def test_postgres_url_login_and_tls_settings():
    jdbc, login = jdbc_catalog("postgresql+psycopg://lake:s3cret@db.example:6543/cat?sslmode=verify-full"
                               "&sslrootcert=/etc/ca.pem")
    assert jdbc == "jdbc:postgresql://db.example:6543/cat?sslmode=verify-full&sslrootcert=/etc/ca.pem"
    assert login == {"jdbc.user": "lake", "jdbc.password": "s3cret"}
    assert "s3cret" not in jdbc


def test_the_password_of_a_libpq_passfile_is_read_for_the_jdbc_driver(tmp_path):
    passfile = tmp_path / "pgpass"
    passfile.write_text("# the stack's\nother:5432:*:lake:wrong\n127.0.0.1:28733:*:lake:r1ght\n*:*:*:*:fallback\n")
    jdbc, login = jdbc_catalog(f"postgresql+psycopg://lake@127.0.0.1:28733/postgres?passfile={passfile}"
                               "&sslmode=verify-full")
    assert jdbc == "jdbc:postgresql://127.0.0.1:28733/postgres?sslmode=verify-full"  # (passfile is libpq's alone)
    assert login == {"jdbc.user": "lake", "jdbc.password": "r1ght"}
    with pytest.raises(SinkError, match="cannot read its passfile"):
        jdbc_catalog(f"postgresql+psycopg://lake@h/db?passfile={tmp_path / 'missing'}")


def test_passfile_lines_match_with_wildcards_and_escapes():
    text = "h:5432:db:u\\:x:p\\:ass\\\\w\nh:*:*:u:second\n*:*:*:*:any\n"
    assert pgpass_password(text, "h", 5432, "db", "u:x") == "p:ass\\w"
    assert pgpass_password(text, "h", 1, "other", "u") == "second"
    assert pgpass_password(text, "z", 1, "d", "v") == "any"
    assert pgpass_password("h:5432:db:u\n", "h", 5432, "db", "u") is None  # (four fields: not a line)
    assert pgpass_password("", "h", 5432, "db", "u") is None


def test_sqlite_and_refusals():
    assert jdbc_catalog("sqlite:////data/catalog.db") == ("jdbc:sqlite:/data/catalog.db", {})
    with pytest.raises(SinkError, match="must be a file"):
        jdbc_catalog("sqlite://")
    with pytest.raises(SinkError, match="over TCP"):
        jdbc_catalog("postgresql+psycopg://u@/db?host=/var/run/postgresql")
    with pytest.raises(SinkError, match="PostgreSQL or SQLite, not mysql"):
        jdbc_catalog("mysql+pymysql://u:p@h/db")
