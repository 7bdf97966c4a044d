"""SHOW GRANTS lines as MariaDB 10.11 and MySQL 8 print them, and what the CDC user lacks."""

from __future__ import annotations

import pytest

from producer.binlog.grants import Grant, account_sql, grants_problem, missing_privileges, parse_grant

PW = "IDENTIFIED BY PASSWORD '*BA9431FBB6F9D618A903712CD83BD8B50D524C35'"
SIGNAL = "cdc_control.cdc_signal"

# The stack's CDC user on MariaDB 10.11 (REPLICATION CLIENT is shown as BINLOG MONITOR).
MARIADB_CDC = [f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%` {PW}",
               "GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`"]
# The docker compose user on MySQL 8.4.
MYSQL8_CDC = ["GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
              "GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`"]


def _missing(lines, read_only=False, signal_table=SIGNAL):
    return [m.privilege for m in missing_privileges(lines, read_only=read_only, signal_table=signal_table)]


@pytest.mark.parametrize("line, expected", [
    (f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO `cdc`@`%` {PW}",
     Grant(frozenset({"REPLICATION SLAVE", "BINLOG MONITOR", "SELECT"}), None, None)),
    ("GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`",
     Grant(frozenset({"INSERT", "DELETE"}), "cdc_control", "cdc_signal")),
    ("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` IDENTIFIED BY PASSWORD '*4C08' WITH GRANT OPTION",
     Grant(frozenset({"ALL PRIVILEGES"}), None, None)),
    ("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
     Grant(frozenset({"SELECT", "REPLICATION SLAVE", "REPLICATION CLIENT"}), None, None)),
    ("GRANT SELECT ON `cdc\\_control`.* TO `rr`", Grant(frozenset({"SELECT"}), "cdc\\_control", None)),
    ("GRANT SELECT ON TABLE `shop`.`a``b` TO 'cdc'@'%'", Grant(frozenset({"SELECT"}), "shop", "a`b")),
    ("GRANT INSERT, SELECT (`id`, `v`) ON `d`.`t` TO `u`@`%`", Grant(frozenset({"INSERT"}), "d", "t")),
    ("grant   select,insert on `d`.* to `u`@`%`", Grant(frozenset({"SELECT", "INSERT"}), "d", None)),
    # MySQL 8 dynamic privileges are listed on a line of their own
    ("GRANT BACKUP_ADMIN,REPLICATION_SLAVE_ADMIN ON *.* TO `cdc`@`%`",
     Grant(frozenset({"BACKUP_ADMIN", "REPLICATION_SLAVE_ADMIN"}), None, None)),
    # nothing on a table: role grants, PROXY, routines, default roles, column-only
    ("GRANT `rr` TO `r`@`%`", None),
    ("GRANT PROXY ON ``@`%` TO `root`@`localhost` WITH GRANT OPTION", None),
    ("GRANT EXECUTE ON PROCEDURE `d`.`p` TO `u`@`%`", None),
    ("SET DEFAULT ROLE `rr` FOR `r`@`%`", None),
    ("GRANT SELECT (`id`) ON `cdc_control`.`cdc_signal` TO `r`@`%`", None),
])
def test_grant_lines_are_parsed(line, expected):
    assert parse_grant(line) == expected


def test_the_stack_and_compose_users_lack_nothing():
    assert _missing(MARIADB_CDC) == []
    assert _missing(MYSQL8_CDC) == []
    assert _missing([f"GRANT ALL PRIVILEGES ON *.* TO `root`@`127.0.0.1` {PW} WITH GRANT OPTION",
                     "GRANT PROXY ON ``@`%` TO `root`@`127.0.0.1` WITH GRANT OPTION"]) == []


def test_a_read_only_user_needs_no_write_on_the_signal_table():
    lines = [f"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%` {PW}"]
    assert _missing(lines, read_only=True) == []
    assert _missing(lines) == ["INSERT", "DELETE"]


def test_each_missing_privilege_is_named():
    assert _missing([]) == ["REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT", "INSERT", "DELETE"]
    assert _missing(["GRANT USAGE ON *.* TO `cdc`@`%`"], read_only=True) == \
        ["REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT"]
    # REPLICATION SLAVE on a database means nothing: it is a global privilege
    assert _missing(["GRANT SELECT, BINLOG MONITOR ON *.* TO `cdc`@`%`",
                     "GRANT REPLICATION SLAVE, SELECT ON `shop`.* TO `cdc`@`%`"], read_only=True) == \
        ["REPLICATION SLAVE"]
    # SUPER covers REPLICATION CLIENT (SHOW MASTER STATUS), not the binlog stream
    assert _missing(["GRANT SELECT, SUPER ON *.* TO `su`@`%`"], read_only=True) == ["REPLICATION SLAVE"]


def test_select_on_a_database_is_enough():
    lines = ["GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`",
             "GRANT SELECT ON `shop`.* TO `cdc`@`%`"]
    assert _missing(lines, read_only=True) == []


@pytest.mark.parametrize("line, covered", [
    ("GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`", True),
    ("GRANT INSERT, DELETE ON `cdc_control`.* TO `cdc`@`%`", True),
    ("GRANT INSERT, DELETE ON `cdc\\_control`.* TO `cdc`@`%`", True),
    ("GRANT INSERT, DELETE ON `cdc%`.* TO `cdc`@`%`", True),
    ("GRANT ALL PRIVILEGES ON `cdc_control`.* TO `cdc`@`%`", True),
    ("GRANT INSERT, DELETE ON *.* TO `cdc`@`%`", True),
    ("GRANT INSERT, DELETE ON `cdc_control`.`other` TO `cdc`@`%`", False),
    ("GRANT INSERT, DELETE ON `shop`.* TO `cdc`@`%`", False),
    ("GRANT INSERT, DELETE ON `cdc\\_controlx`.* TO `cdc`@`%`", False),
    ("GRANT INSERT (`id`), DELETE ON `cdc_control`.`cdc_signal` TO `cdc`@`%`", None),  # DELETE only
])
def test_insert_and_delete_on_the_signal_table_at_any_level(line, covered):
    base = ["GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `cdc`@`%`"]
    expected = [] if covered else ["INSERT", "DELETE"] if covered is False else ["INSERT"]
    assert _missing(base + [line]) == expected


def test_the_message_names_each_privilege_and_the_grant_that_fixes_it():
    lines = [f"GRANT SELECT, BINLOG MONITOR ON *.* TO `cdc`@`%` {PW}"]
    missing = missing_privileges(lines, read_only=False, signal_table=SIGNAL)
    text = grants_problem(missing, "cdc@%", read_only=False)
    assert "the CDC user 'cdc'@'%' lacks" in text
    assert "  - REPLICATION SLAVE: to read the binlog stream" in text
    assert "  GRANT REPLICATION SLAVE ON *.* TO 'cdc'@'%';" in text
    assert "  GRANT INSERT, DELETE ON `cdc_control`.`cdc_signal` TO 'cdc'@'%';" in text
    assert "snapshot.read_only: true" in text
    assert "BA9431" not in text  # no password hash in messages
    assert grants_problem([], "cdc@%", read_only=False) is None
    assert missing[0].fix("cdc@%") == "GRANT REPLICATION SLAVE ON *.* TO 'cdc'@'%'"


def test_accounts_are_quoted():
    assert account_sql("cdc@%") == "'cdc'@'%'"
    assert account_sql("o'brien@10.0.0.%") == "'o''brien'@'10.0.0.%'"
    assert account_sql("cdc") == "'cdc'@'%'"
