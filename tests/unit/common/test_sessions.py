"""The read sessions' DATETIME/TIMESTAMP converter gives exactly pymysql's values."""

from datetime import datetime

from hypothesis import example, given
from hypothesis import strategies as st
from pymysql.converters import convert_datetime

from common.sql.sessions import datetime_from_text


def _outcome(f, text):
    try:
        value = f(text)
    except Exception as exc:  # noqa: BLE001 - pymysql raises on some garbage: so must we
        return "raises", type(exc)
    return type(value), value


def _same(text: str) -> None:
    theirs = _outcome(convert_datetime, text)
    assert _outcome(datetime_from_text, text) == theirs, text
    assert _outcome(datetime_from_text, text.encode()) == theirs, text


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)),
       st.integers(0, 6))
def test_server_texts_of_every_precision(value, digits):
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if digits:
        text += "." + f"{value.microsecond:06d}"[:digits]
    _same(text)


@given(st.text(alphabet="0123456789-: .T+,Z", min_size=17, max_size=28))
@example("0000-00-00 00:00:00")
@example("2026-02-31 00:00:00")
@example("2026-11-23 12:00:00+01:00")
@example("2026-11-23 12:00:00.1234567")
@example("2026-11-23 12:00:00,123")
@example("2026-11-23T12:00:00")
@example("2026-11-23 24:00:00")
def test_anything_else_as_pymysql_has_it(text):
    _same(text)


def _source(port: int):
    from common.config import SourceConfig
    return SourceConfig(host="127.0.0.1", port=port, user="cdc", password="pw", ssl={"mode": "disabled"})


def test_a_row_session_refused_its_login_is_a_source_error_and_one_not_reached_unavailable():
    import pytest

    from common.errors import SourceError, SourceUnavailable
    from common.sql.sessions import row_session
    from tests.wire_helpers import ScriptedServer, err_packet, handshake_v10

    def refuse(side):
        side.write(handshake_v10("mysql_native_password"))
        side.read_login()
        side.write(err_packet(1045, "28000", "Access denied for user 'cdc'"))

    server = ScriptedServer(refuse)
    with pytest.raises(SourceError, match="Access denied") as err:
        row_session(_source(server.port))
    assert type(err.value) is SourceError
    server.join()
    unused = ScriptedServer(lambda side: None)
    port = unused.port
    unused.listener.close()
    with pytest.raises(SourceUnavailable, match=f"127.0.0.1:{port}"):
        row_session(_source(port))
