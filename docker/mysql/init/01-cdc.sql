-- Change-capture control objects, run once by the mysql image on its first start
-- (files in /docker-entrypoint-initdb.d run in name order, as root).
--
-- The signal table has Debezium's shape and exactly the DDL of SIGNAL_DDL in
-- cdc/stack/mysql_server.py (tests/test_compose.py compares the two).  Users insert
-- `execute-snapshot` (and stop/pause/resume) rows here; the producer writes its OPEN/CLOSE
-- window markers here, so both land in the binlog.
--
-- The CDC user and its grants are created by 02-cdc-user.sh, because its password comes
-- from the CDC_PASSWORD environment variable and plain SQL cannot read the environment.

CREATE DATABASE IF NOT EXISTS `cdc_control` CHARACTER SET utf8mb4;

CREATE TABLE IF NOT EXISTS `cdc_control`.`cdc_signal` ( `id` VARCHAR(64) NOT NULL PRIMARY KEY, `type` VARCHAR(32) NOT NULL, `data` VARCHAR(2048) NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
