"""Every MySQL column type through binlog -> producer -> Kafka -> decoded, edge values included."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from tests.producer_helpers import read_events, run_until_caught_up, start_at_current

DDL = """
CREATE TABLE types (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, bo BOOL,
  d65 DECIMAL(65,30), d10 DECIMAL(10,2), f FLOAT, db DOUBLE,
  b1 BIT(1), b12 BIT(12),
  c CHAR(5), vc VARCHAR(100), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(10), bl BLOB,
  e ENUM('a','b','c'), st SET('x','y','z'), js JSON,
  dt DATE, tm TIME(6), dtm DATETIME(6), dtm0 DATETIME, ts TIMESTAMP(3) NULL, yr YEAR,
  g POINT
) DEFAULT CHARSET=utf8mb4
"""

EDGE = ("INSERT INTO types VALUES (1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
        "-9223372036854775808, 18446744073709551615, TRUE, "
        "'-12345678901234567890123456789012345.123456789012345678901234567890', 12345678.91, 3.5, "
        "-1.7976931348623157e308, b'1', b'101000000001', 'ab', 'emoji \U0001F600 ok', REPEAT('t', 300), 'caf\u00e9', "
        "0x0102, 0x00ff00, 0xDEADBEEF, 'b', 'z,x', '{\"k\": [1, 2.5, \"s\"]}', '1969-07-20', '-838:59:59.000001', "
        "'2024-02-29 23:59:59.999999', '1000-01-01 00:00:00', '2038-01-19 03:14:07.499', 2155, "
        "ST_GeomFromText('POINT(1 2)'))")

NULLS = "INSERT INTO types (id) VALUES (2)"


def test_type_matrix_through_binlog_and_kafka(stack, config, test_db):
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute(DDL)
    start_at_current(config)
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(EDGE)
        cur.execute(NULLS)
        cur.execute("UPDATE types SET vc = 'changed', biu = 9223372036854775808 WHERE id = 1")
    run_until_caught_up(config)
    events = read_events(config, f"{config.kafka.topic_prefix}.{test_db}.types")
    assert [v["op"] for _, _, v in events] == ["c", "c", "u"]
    row = events[0][2]["after"]
    expected = {
        "id": 1, "ti": -128, "tiu": 255, "si": -32768, "siu": 65535, "mi": -8388608, "miu": 16777215,
        "i": -2147483648, "iu": 4294967295, "bi": -9223372036854775808, "biu": Decimal("18446744073709551615"),
        "bo": 1,
        "d65": Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
        "d10": Decimal("12345678.91"), "f": 3.5, "db": -1.7976931348623157e308,
        "b1": True, "b12": (0b101000000001).to_bytes(2, "little"),
        "c": "ab", "vc": "emoji \U0001F600 ok", "tx": "t" * 300, "l1": "caf\u00e9",
        "bn": b"\x01\x02\x00\x00", "vb": b"\x00\xff\x00", "bl": b"\xde\xad\xbe\xef",
        "e": "b", "st": "x,z",
        "dt": (date(1969, 7, 20) - date(1970, 1, 1)).days,
        "tm": -(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 1,
        "dtm": 1709251199999999, "dtm0": -30610224000000,
        "ts": "2038-01-19T03:14:07.499Z", "yr": 2155,
    }
    for name, value in expected.items():
        assert row[name] == value, name
    assert row["js"].replace(" ", "") == '{"k":[1,2.5,"s"]}'
    point = row["g"]
    assert (point["x"], point["y"]) == (1.0, 2.0) and point["wkb"][:1] in (b"\x01", b"\x00")
    nulls = events[1][2]["after"]
    assert nulls["id"] == 2 and all(v is None for k, v in nulls.items() if k != "id")
    upd = events[2][2]
    assert upd["before"]["biu"] == Decimal("18446744073709551615")
    assert upd["after"]["biu"] == Decimal("9223372036854775808") and upd["after"]["vc"] == "changed"
