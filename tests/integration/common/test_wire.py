""":mod:`common.sql.wire` on the real server (the machine's MariaDB): a login and a query's
result set, a wrong password, an authentication switch, statements' OK and ERR, a connection
the server kills; and TLS on a MariaDB that accepts TLS connections only (certificates this
module makes), every mode and refusal as ``source.ssl`` has them."""

from __future__ import annotations

import pytest

from cdc.stack.certs import CertificateAuthority
from cdc.stack.mysql_server import EmbeddedMySQL
from cdc.stack.replication import remove_server
from common.errors import ServerError, ServerGone, TlsError
from common.sql import wire
from common.sql.tls import TlsSettings


def _login(stack, *, user: str = "cdc", password: str | None = None, **kw) -> wire.Connection:
    m = stack.mysql
    password = m[f"{user}_password"] if password is None else password
    return wire.connect(m["host"], m["port"], m[f"{user}_user"], password, connect_timeout=10, read_timeout=30, **kw)


def test_a_login_and_a_querys_result_set(stack):
    with _login(stack) as conn:
        assert conn.is_mariadb and conn.plugin == "mysql_native_password" and conn.handshake.connection_id
        result = conn.query("SELECT CURRENT_USER() AS who, NULL AS nothing, 'é' AS accent, 12345678901234 AS big "
                            "UNION ALL SELECT 'x', NULL, REPEAT('y', 300), -1")
        assert result.columns == ["who", "nothing", "accent", "big"]
        assert result.rows[0][0].startswith(b"cdc@")
        assert result.rows[0][1:] == (None, "é".encode(), b"12345678901234")
        assert result.rows[1] == (b"x", None, b"y" * 300, b"-1")
        assert conn.value("SELECT @@global.log_bin") == b"1"
        assert conn.query("SELECT 1 FROM DUAL WHERE 0").rows == []


def test_statements_answer_ok_with_affected_rows_or_the_servers_error(stack, test_db):
    with _login(stack, user="admin", database=test_db) as conn:
        assert conn.query("CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)") == wire.OkResult(0, 0, 2, 0)
        ok = conn.query("INSERT INTO t (v) VALUES (1), (2), (3)")
        assert (ok.affected_rows, ok.last_insert_id) == (3, 1)
        assert conn.query("UPDATE t SET v = v + 1 WHERE id >= 2").affected_rows == 2
        with pytest.raises(ServerError) as err:
            conn.query("SELECT * FROM no_such_table")
        assert (err.value.code, err.value.sqlstate) == (1146, "42S02") and "no_such_table" in err.value.message
        assert conn.query("SELECT COUNT(*) FROM t").rows == [(b"3",)]  # (the connection goes on after an error)


def test_a_wrong_password_is_the_servers_access_denied(stack):
    with pytest.raises(ServerError) as err:
        _login(stack, password="not-the-password")
    assert err.value.code == 1045 and err.value.sqlstate == "28000"
    assert f"Access denied for user '{stack.mysql['cdc_user']}'" in str(err.value)
    assert "not-the-password" not in str(err.value)


def test_an_authentication_switch_to_the_users_plugin_is_followed(stack):
    """Answered first as MySQL 8 clients do (caching_sha2_password), MariaDB switches the login to the
    user's plugin, mysql_native_password."""
    with _login(stack, auth_plugin=wire.CACHING_SHA2) as conn:
        assert conn.plugin == wire.NATIVE
        assert conn.value("SELECT 1") == b"1"


def test_a_connection_the_server_kills_is_gone(stack):
    conn = _login(stack)
    with stack.admin() as admin, admin.cursor() as cur:
        cur.execute(f"KILL {conn.handshake.connection_id}")
    with pytest.raises((ServerGone, ServerError)) as err:  # (MariaDB may say why before it closes)
        conn.query("SELECT 1")
        conn.query("SELECT 1")
    if isinstance(err.value, ServerError):
        assert err.value.code in (1927, 1053)  # connection killed, server shutdown
    with pytest.raises(ServerGone):
        conn.query("SELECT 1")
    conn.close()


# --- TLS ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A MariaDB of this module's own, TLS only, its certificate for ``localhost`` alone."""
    root = tmp_path_factory.mktemp("wire-tls")
    ca = CertificateAuthority(root / "certs")
    server = ca.issue("server", ("localhost",))
    info = EmbeddedMySQL(root, tls={"ca": ca.ca, "cert": server.cert, "key": server.key}).start().to_json()
    try:
        yield {"info": info, "ca": ca}
    finally:
        remove_server(info)


def _tls_login(tls_server, mode: str, *, host: str = "localhost", ca: str | None = None) -> wire.Connection:
    info = tls_server["info"]
    tls = TlsSettings(mode, tls_server["ca"].ca if ca is None else ca, setting="source.ssl")
    return wire.connect(host, info["port"], info["cdc_user"], info["cdc_password"], tls=tls, connect_timeout=10)


@pytest.mark.parametrize("mode", ["preferred", "required", "verify_ca", "verify_identity"])
def test_every_tls_mode_logs_in_over_tls(tls_server, mode):
    with _tls_login(tls_server, mode) as conn:
        assert conn.secure
        cipher = conn.query("SHOW SESSION STATUS LIKE 'Ssl_cipher'").rows[0][1]
        assert cipher  # the server sees a TLS session too


def test_tls_refusals_name_the_setting(tls_server, tmp_path):
    with pytest.raises(TlsError) as err:
        _tls_login(tls_server, "disabled")
    assert "source.ssl.mode is 'disabled'" in str(err.value) and "accepts TLS connections only" in str(err.value)
    other = CertificateAuthority(tmp_path / "other-ca", name="another CA")
    with pytest.raises(TlsError, match=r"not signed by the CA of source.ssl.ca"):
        _tls_login(tls_server, "verify_ca", ca=other.ca)
    with pytest.raises(TlsError, match="does not name the host connected to"):
        _tls_login(tls_server, "verify_identity", host="127.0.0.1")
    with _tls_login(tls_server, "verify_ca", host="127.0.0.1") as conn:  # the CA alone: accepted
        assert conn.secure


def test_required_refuses_a_server_without_tls_and_preferred_falls_back(stack):
    with pytest.raises(TlsError, match="does not offer TLS, which source.ssl.mode 'required' requires"):
        _login(stack, tls=TlsSettings("required", setting="source.ssl"))
    with _login(stack, tls=TlsSettings("preferred", setting="source.ssl")) as conn:
        assert not conn.secure and conn.value("SELECT 1") == b"1"


def test_a_password_beyond_ascii_is_sent_as_utf8(stack, unique):
    """As set over a utf8mb4 session (pymysql sends a str password as Latin-1, which this one refuses)."""
    user, password = unique("pw")[-20:], "pässwörd-é-€"
    with stack.admin() as admin, admin.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
    try:
        m = stack.mysql
        with wire.connect(m["host"], m["port"], user, password, connect_timeout=10) as conn:
            assert conn.value("SELECT CURRENT_USER()").startswith(user.encode())
        with pytest.raises(ServerError, match="Access denied"):
            wire.connect(m["host"], m["port"], user, password.replace("€", "e"), connect_timeout=10)
    finally:
        with stack.admin() as admin, admin.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'%'")
