"""A row session's rows (the project's own connection, the generated row parser, DATETIME by
fromisoformat) and a read session's (pymysql, DATETIME by fromisoformat) are pymysql's own, on
the real server: every type at its edges, NULLs, long values, many rows."""

import pytest

from common.sql.sessions import read_session, row_session
from tests.all_types import create_all_types


def _rows(conn, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(sql)
        return list(cur.fetchall())


@pytest.mark.servers("mariadb", "mysql")
def test_read_session_rows_are_pymysqls(source_stack, config, test_db):
    mariadb = source_stack.mysql.get("flavor", "mariadb") == "mariadb"
    with source_stack.admin(test_db) as conn:
        create_all_types(conn, mariadb)
        with conn.cursor() as cur:  # more rows: long strings (lengths coded in 2 and 3 bytes), zero dates
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("INSERT INTO types (id, tx, bl, vc, dtm0, dt) SELECT 10 + seq, REPEAT('é', 300 + seq * 7), "
                        "REPEAT(0xff00, 40000), CONCAT('v', seq), '0000-00-00 00:00:00', '0000-00-00' "
                        "FROM seq_1_to_200" if mariadb else
                        "INSERT INTO types (id, tx, vc) VALUES (10, REPEAT('é', 300), 'v')")
    cfg = config.model_copy(deep=True)
    cfg.source.user, cfg.source.password = source_stack.mysql["admin_user"], source_stack.mysql["admin_password"]
    session, rows = read_session(cfg.source), row_session(cfg.source)
    try:
        sql = f"SELECT * FROM `{test_db}`.types ORDER BY id"
        with source_stack.admin(test_db) as plain:
            expected = _rows(plain, sql)
        for got in (_rows(session, sql), rows.values(sql)):
            assert len(got) == len(expected) >= 3
            for g, e in zip(got, expected):
                assert g == e and [type(v) for v in g] == [type(v) for v in e], (g[0], [
                    (i, a, b) for i, (a, b) in enumerate(zip(g, e)) if a != b or type(a) is not type(b)])
    finally:
        session.close()
        rows.close()
