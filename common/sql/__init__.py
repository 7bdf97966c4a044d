"""SQL for MySQL/MariaDB: identifier quoting, source sessions, keyset predicates."""
