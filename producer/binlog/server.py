"""The source server: checks before streaming, and binlog coordinates.

Works on MariaDB 10.6+ and MySQL 8.0/8.4 (which removed ``SHOW MASTER STATUS`` in favour
of ``SHOW BINARY LOG STATUS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pymysql

from common.errors import SourceError
from common.sql.sessions import connect
from contract.errors import GtidError
from contract.gtid import GtidSet
from producer.binlog.grants import grants_problem, missing_privileges
from producer.errors import BinlogPurgedError


@dataclass(frozen=True)
class ServerInfo:
    flavor: str  # "mariadb" or "mysql"
    version: str
    server_id: int

    @property
    def is_mariadb(self) -> bool:
        return self.flavor == "mariadb"


def _variables(cur, names: list[str]) -> dict[str, str]:
    cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ",".join(["%s"] * len(names)) + ")", names)
    return {k.lower(): v for k, v in cur.fetchall()}


def server_info(conn) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute("SELECT @@version, @@server_id")
        version, server_id = cur.fetchone()
    flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
    return ServerInfo(flavor, version, int(server_id))


def check_server(conn) -> ServerInfo:
    """Refuse, naming the setting and its fix, a server whose binlog cannot feed CDC, or whose
    commits do not follow the binlog's order (MySQL's ``binlog_order_commits``: a snapshot
    window's rows are read after its open marker committed, and hold every change before the
    marker only when those committed first)."""
    info = server_info(conn)
    with conn.cursor() as cur:
        v = _variables(cur, ["log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
                             "binlog_order_commits"])
    problems = []
    if v.get("log_bin", "OFF").upper() not in ("ON", "1"):
        problems.append("the binary log is off (log_bin=OFF): start the server with --log-bin "
                        "(and a --server-id) to enable it")
    if v.get("binlog_format", "").upper() != "ROW":
        problems.append(f"binlog_format is {v.get('binlog_format')!r}, not ROW: "
                        "SET GLOBAL binlog_format = 'ROW' (and binlog_format=ROW in the server configuration)")
    if v.get("binlog_row_image", "").upper() != "FULL":
        problems.append(f"binlog_row_image is {v.get('binlog_row_image')!r}, not FULL: "
                        "SET GLOBAL binlog_row_image = 'FULL' (and in the server configuration)")
    if "binlog_row_metadata" in v and v["binlog_row_metadata"].upper() != "FULL":
        problems.append(f"binlog_row_metadata is {v['binlog_row_metadata']!r}, not FULL: "
                        "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server configuration); "
                        "the producer reads column names and types from the binlog itself")
    if v.get("binlog_order_commits", "ON").upper() not in ("ON", "1"):  # (MySQL's; MariaDB always orders them)
        problems.append("binlog_order_commits is OFF: the server may commit a transaction after one written later "
                        "to the binlog, so a snapshot's read could miss a change the stream gave before its window "
                        "(a lost change): SET GLOBAL binlog_order_commits = ON (and in the server configuration)")
    if problems:
        raise SourceError("the source server is not configured for change capture:\n  - " + "\n  - ".join(problems))
    return info


def check_grants(conn, *, read_only: bool, signal_table: str) -> None:
    """Refuse a CDC user that lacks a privilege the producer needs, naming each and the
    GRANT statement that gives it: REPLICATION SLAVE, REPLICATION CLIENT (BINLOG MONITOR),
    SELECT, and unless ``read_only`` INSERT and DELETE on ``signal_table``."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        account = cur.fetchone()[0]
        cur.execute("SHOW GRANTS")
        lines = [row[0] for row in cur.fetchall()]
    problem = grants_problem(missing_privileges(lines, read_only=read_only, signal_table=signal_table), account,
                             read_only=read_only)
    if problem:
        raise SourceError(problem)


def start_at_current(cfg) -> tuple[str, int]:
    """Set ``cfg.producer.startup`` to the binlog's current end (``mode: position``), so a
    producer started later streams from exactly here; returns that position."""
    conn = connect(cfg.source)
    try:
        file, pos = current_position(conn)
    finally:
        conn.close()
    st = cfg.producer.startup
    st.mode, st.file, st.pos = "position", file, pos
    return file, pos


def current_position(conn) -> tuple[str, int]:
    """The binlog coordinates of the end of the log right now."""
    with conn.cursor() as cur:
        for stmt in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
            try:
                cur.execute(stmt)
            except pymysql.err.ProgrammingError:
                continue  # syntax not known to this server version
            row = cur.fetchone()
            if row:
                return row[0], int(row[1])
    raise SourceError("the server reports no binary log status: is log_bin on and does the CDC user have "
                      "REPLICATION CLIENT (BINLOG MONITOR on MariaDB)?")


def executed_gtids(conn, is_mariadb: bool) -> GtidSet:
    """The server's executed GTID set now: MariaDB ``@@gtid_binlog_pos`` (the last GTID of
    each domain in its binlog), MySQL ``@@gtid_executed``."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos" if is_mariadb else "SELECT @@gtid_executed")
        (text,) = cur.fetchone()
    return GtidSet.parse(text or "", "mariadb" if is_mariadb else "mysql")


def purged_gtids(conn) -> GtidSet:
    """MySQL's ``@@gtid_purged``: the transactions the server executed whose binlogs are gone."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_purged")
        (text,) = cur.fetchone()
    return GtidSet.parse(text or "", "mysql")


def gtids_at(conn, info: ServerInfo, file: str, pos: int) -> GtidSet | None:
    """The GTID position of binlog coordinates ``file:pos`` (MariaDB's ``BINLOG_GTID_POS``;
    MySQL: :func:`_mysql_gtids_at_end`); None when the server does not tell it."""
    if not info.is_mariadb:
        return _mysql_gtids_at_end(conn, file, pos)
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        except pymysql.err.MySQLError:
            return None
        (text,) = cur.fetchone()
    return None if text is None else GtidSet.parse(text, "mariadb")


def binlog_files(conn) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(r[0], int(r[1])) for r in cur.fetchall()]


def earliest_position(conn) -> tuple[str, int]:
    files = binlog_files(conn)
    if not files:
        raise SourceError("the server has no binary logs")
    return files[0][0], 4


def check_position_available(conn, file: str) -> None:
    names = [f for f, _ in binlog_files(conn)]
    if file not in names:
        oldest = names[0] if names else None
        raise BinlogPurgedError(
            f"the binlog file {file} holding the stored position is no longer on the server "
            f"(oldest is {oldest or 'none'}): changes between the stored position and the oldest "
            f"binlog are gone. Restart from a fresh snapshot: delete the producer's offsets "
            f"('cdc produce --reset-offsets') and start with startup.mode=initial, or raise the server's "
            f"binlog retention (binlog_expire_logs_seconds / expire_logs_days) to avoid this", file, oldest)


def validate_gtid_set(gtid_set: str, info: ServerInfo) -> str:
    """``startup.gtid_set`` as given (the server reads it), once it parses as this
    server's flavour of GTID set."""
    s = gtid_set.strip().replace("\n", "")
    try:
        if not GtidSet.parse(s, info.flavor):
            raise GtidError("an empty set")
    except GtidError as exc:
        form = "domain-server-sequence[,...] (e.g. 0-1-42)" if info.is_mariadb else \
            "uuid:interval[,...] (e.g. 3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5)"
        raise SourceError(f"startup.gtid_set {gtid_set!r} is not a {info.flavor} GTID set ({exc}): "
                          f"expected {form}") from None
    return s


def parse_timestamp(value: str) -> int:
    """Epoch seconds from ISO-8601 (naive = UTC) or a number of seconds."""
    try:
        return int(float(value))
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SourceError(f"startup.timestamp {value!r} is neither ISO-8601 nor epoch seconds") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp())


def _mysql_gtids_at_end(conn, file: str, pos: int) -> GtidSet | None:
    """MySQL has no function from binlog coordinates to GTIDs, but at the binlog's end the
    executed set (``@@gtid_executed``) is theirs: read before the end is read and again after
    it, alike (no transaction committed between); None when ``file:pos`` is not the end or a
    transaction committed meanwhile.  A transaction enters ``@@gtid_executed`` only once its
    binlog is written, so the set holds no transaction past ``file:pos`` (at most one written
    there whose commit was not done yet: short of it, the stream's next transaction of its
    source makes that good, never ahead).  Without it a start at the current position (no
    stored position: ``startup.mode`` latest or initial) knew no GTID there, and a blocking
    snapshot with a keyless table, whose read's point is a GTID set, waited for the stream to
    reach that point until another transaction came."""
    before = executed_gtids(conn, False)
    if current_position(conn) != (file, pos) or executed_gtids(conn, False) != before:
        return None
    return before
