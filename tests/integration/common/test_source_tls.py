"""``source.ssl`` on a real MariaDB, and a real MySQL 9.7, that accepts TLS connections only
(``require_secure_transport=ON``, certificates this module makes): every mode, every
refusal (no TLS, a wrong CA, a wrong host name, no TLS on the server), and the producer's
every connection (start-up checks, the binlog stream, snapshot chunk reads and marker writes)
over TLS end to end.  Every test of the module's own server runs on both servers (its
fixture's parameter); on MySQL the users log in with caching_sha2_password."""

from __future__ import annotations

import pytest

from cdc.stack.certs import CertificateAuthority
from cdc.stack.mysql_server import EmbeddedMySQL, server_connect
from cdc.stack.replication import remove_server
from common.errors import TlsError
from common.sql.sessions import connect, row_session
from common.sql.tls import is_secure
from contract.signals import execute_snapshot_data
from tests.producer_helpers import read_events, run_until_caught_up, start_at_current
from tests.snapshot_helpers import signal


@pytest.fixture(scope="module", params=["mariadb", "mysql"])
def tls_server(tmp_path_factory, request):
    """A server of this module's own (MariaDB, then MySQL), TLS only, its certificate for
    ``localhost`` alone."""
    root = tmp_path_factory.mktemp("tls")
    ca = CertificateAuthority(root / "certs")
    server = ca.issue("server", ("localhost",))
    info = EmbeddedMySQL(root, tls={"ca": ca.ca, "cert": server.cert, "key": server.key},
                         flavor=request.param).start().to_json()
    try:
        yield {"info": info, "ca": ca, "root": root}
    finally:
        remove_server(info)


def _point(config, tls_server, mode: str, *, host: str = "localhost", ca: str | None = None):
    info = tls_server["info"]
    config.source.host, config.source.port = host, info["port"]
    config.source.user, config.source.password = info["cdc_user"], info["cdc_password"]
    config.source.signal_table = info["signal_table"]
    config.source.ssl.mode = mode
    config.source.ssl.ca = tls_server["ca"].ca if ca is None else ca
    return config


@pytest.mark.parametrize("mode", ["preferred", "required", "verify_ca", "verify_identity"])
def test_every_tls_mode_connects_over_tls(tls_server, config, mode):
    conn = connect(_point(config, tls_server, mode).source)
    try:
        assert is_secure(conn)
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            assert cur.fetchone()[1]  # the server sees a TLS session too
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["preferred", "verify_identity"])
def test_a_row_session_reads_over_tls_as_the_source_sessions_do(tls_server, config, mode):
    """The chunk reads' session (the project's own connection): TLS as ``source.ssl`` says."""
    session = row_session(_point(config, tls_server, mode).source)
    try:
        assert session.conn.secure
        assert session.values("SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1]
    finally:
        session.close()
    with pytest.raises(TlsError, match="source.ssl"):
        row_session(_point(config, tls_server, "disabled").source)


def test_disabled_is_refused_by_a_tls_only_server_naming_the_setting(tls_server, config):
    with pytest.raises(TlsError) as err:
        connect(_point(config, tls_server, "disabled").source)
    text = str(err.value)
    assert "source.ssl.mode is 'disabled'" in text and "accepts TLS connections only" in text
    assert config.source.password.get_secret_value() not in text


def test_a_wrong_ca_fails_naming_source_ssl_ca(tls_server, config, tmp_path):
    other = CertificateAuthority(tmp_path / "other-ca", name="another CA")
    with pytest.raises(TlsError) as err:
        connect(_point(config, tls_server, "verify_ca", ca=other.ca).source)
    text = str(err.value)
    assert f"not signed by the CA of source.ssl.ca ({other.ca})" in text
    assert f"localhost:{tls_server['info']['port']}" in text


def test_a_wrong_host_name_fails_under_verify_identity_only(tls_server, config):
    with pytest.raises(TlsError) as err:
        connect(_point(config, tls_server, "verify_identity", host="127.0.0.1").source)
    assert "does not name the host connected to" in str(err.value)
    assert "source.ssl.mode 'verify_identity'" in str(err.value)
    conn = connect(_point(config, tls_server, "verify_ca", host="127.0.0.1").source)  # the CA alone: accepted
    assert is_secure(conn)
    conn.close()


def test_required_refuses_a_server_without_tls_and_preferred_falls_back(stack, config):
    config.source.ssl.mode = "required"
    with pytest.raises(TlsError) as err:
        connect(config.source)
    assert "does not offer TLS, which source.ssl.mode 'required' requires" in str(err.value)
    config.source.ssl.mode = "preferred"
    conn = connect(config.source)
    assert not is_secure(conn)
    conn.close()


def test_a_client_certificate_logs_in_a_user_that_requires_x509(tls_server, config, unique):
    ca, info = tls_server["ca"], tls_server["info"]
    user = unique("x509")[-30:]
    client = ca.issue(user, client=True)
    with server_connect(info, autocommit=True) as admin, admin.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}' REQUIRE X509")
    cfg = _point(config, tls_server, "verify_identity")
    cfg.source.user, cfg.source.password = user, f"pw-{user}"
    with pytest.raises(Exception, match="Access denied"):
        connect(cfg.source)  # TLS, but no certificate
    cfg.source.ssl.cert, cfg.source.ssl.key = client.cert, client.key
    conn = connect(cfg.source)
    assert is_secure(conn)
    conn.close()


def test_the_producer_streams_and_snapshots_over_tls_only(tls_server, config, unique):
    """Every connection the producer makes must be TLS: the server refuses any other."""
    cfg = _point(config, tls_server, "verify_identity")
    info, db = tls_server["info"], unique("tlsdb")
    with server_connect(info, autocommit=True) as admin, admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (1, 'before'), (2, 'before')")
    start_at_current(cfg)
    with server_connect(info, autocommit=True) as admin, admin.cursor() as cur:
        cur.execute(f"INSERT INTO `{db}`.t VALUES (3, 'streamed')")
    signal(cfg, "execute-snapshot", execute_snapshot_data([f"{db}.t"]))
    run_until_caught_up(cfg, idle_s=3)
    events = read_events(cfg, f"{cfg.kafka.topic_prefix}.{db}.t")
    streamed = [v["after"]["id"] for _, _, v in events if v["op"] == "c"]
    snapshot = sorted(v["after"]["id"] for _, _, v in events if v["op"] == "r")
    assert streamed == [3] and snapshot == [1, 2, 3]
