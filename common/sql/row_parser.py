"""A faster reading of SELECT results for pymysql: the same rows, parsed by generated code.

pymysql parses each text-protocol row in :meth:`MySQLResult._read_row_from_packet`: per
column a method call for the length-coded string (and one for its length), the decoding and
the column's converter.  For a table read in chunks of thousands of rows that is most of the
client's time.  :func:`install` makes a session's results parse their rows with a function
generated for the result's columns (:func:`row_parser`): the lengths read inline, the same
``(encoding, converter)`` pymysql chose for each column (``MySQLResult.converters``), so the
values are pymysql's by construction.  Results without rows, and anything unusual (a row
shorter than its columns), take pymysql's own code.

It reads a connection's packets through pymysql's private methods and attributes: only a
pymysql of the versions tested is given it (:mod:`common.tested_versions`; pyproject.toml pins
them); with another, :func:`install` leaves the session as pymysql made it (a WARNING says so).
"""

from __future__ import annotations

import types
from typing import Any, Callable

from pymysql import err
from pymysql.connections import MAX_PACKET_LEN, MySQLResult
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket

from common.tested_versions import tested

_NULL, _U16, _U24 = 251, 252, 253  # (254: an 8-byte length)


def length_coded(data: bytes, p: int) -> tuple[int, int]:
    """A length-coded integer of 2, 3 or 8 bytes at ``p`` (its first byte 252, 253 or 254):
    (value, position after it)."""
    c = data[p]
    width = 2 if c == _U16 else 3 if c == _U24 else 8
    return int.from_bytes(data[p + 1:p + 1 + width], "little"), p + 1 + width


def column_code(null: list[str], value: list[str]) -> list[str]:
    """Statements that read a text row's next column in ``data`` at ``p`` (``length_coded`` as
    ``_length`` in their namespace): for a NULL the statements ``null``; else its bytes into
    ``b`` and their length into ``n``, then the statements ``value``; ``p`` moves past it."""
    return ["n = data[p]",
            f"if n == {_NULL}:",
            "    p += 1",
            *("    " + line for line in null),
            "else:",
            f"    if n < {_NULL}:",
            "        p += 1",
            "    else:",
            "        n, p = _length(data, p)",
            "    b = data[p:p + n]",
            "    p += n",
            *("    " + line for line in value)]


def row_parser(converters: list[tuple[str | None, Callable | None]]) -> Callable[[bytes], tuple]:
    """A function of a row packet's payload to the row's values, as pymysql gives them for
    columns read with ``converters`` (each column's encoding and converter, None for none);
    raises IndexError or ValueError on a payload it does not fit."""
    env: dict[str, Any] = {"_length": length_coded}
    lines = ["def parse(data):", "    p = 0"]
    for i, (encoding, converter) in enumerate(converters):
        env[f"e{i}"], env[f"c{i}"] = encoding, converter
        value = "b"
        if encoding is not None:
            value = f"{value}.decode(e{i})"
        if converter is not None:
            value = f"c{i}({value})"
        lines += ["    " + line for line in column_code([f"v{i} = None"], [f"v{i} = {value}"])]
    lines += ["    if p != len(data):",
              "        raise ValueError('the row has more or fewer bytes than its columns')",
              "    return (" + "".join(f"v{i}, " for i in range(len(converters))) + ")"]
    exec(compile("\n".join(lines), "<row parser>", "exec"), env)  # noqa: S102 - generated from column metadata
    return env["parse"]


#: Parsers by their columns' (encoding, converter): a session's queries repeat (chunk reads,
#: table definitions), so each is generated once.  Bounded: emptied when it holds this many.
_PARSERS_KEPT = 256
_parsers: dict[tuple, Callable[[bytes], tuple]] = {}


def cached_row_parser(converters: list[tuple[str | None, Callable | None]]) -> Callable[[bytes], tuple]:
    """:func:`row_parser`, generated once per distinct list of columns' readings."""
    key = tuple(converters)
    parse = _parsers.get(key)
    if parse is None:
        if len(_parsers) >= _PARSERS_KEPT:
            _parsers.clear()
        parse = _parsers[key] = row_parser(converters)
    return parse


def _pymysql_row(converters: list[tuple[str | None, Callable | None]], payload: bytes, encoding: str) -> tuple:
    """pymysql's own reading of a row payload (``MySQLResult._read_row_from_packet``)."""
    return MySQLResult._read_row_from_packet(types.SimpleNamespace(converters=converters),  # type: ignore[arg-type]
                                             MysqlPacket(payload, encoding))


def values_reader(converters: list[tuple[str | None, Callable | None]], encoding: str) -> Callable[[bytes], tuple]:
    """A function of a row payload of a result with these columns' readings (``encoding``: the
    connection's) to the row's values as pymysql gives them: :func:`row_parser`'s, pymysql's own
    for a row it does not fit."""
    parse = cached_row_parser(converters)

    def values(payload: bytes) -> tuple:
        try:
            return parse(payload)
        except (IndexError, ValueError):
            return _pymysql_row(converters, payload, encoding)
    return values


def _payload(conn) -> bytes:
    """The next packet's payload, read as ``Connection._read_packet`` reads it (its sequence
    number checked, a payload of 16 MiB and more joined from its packets), without building
    a packet object: rows are most of a result's packets."""
    read_bytes = conn._read_bytes
    parts = []
    while True:
        header = read_bytes(4)
        size = header[0] | header[1] << 8 | header[2] << 16
        if header[3] != conn._next_seq_id:
            conn._force_close()
            if header[3] == 0:  # MariaDB sends its error packet with sequence number 0 when shutting down
                raise err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
            raise err.InternalError(f"Packet sequence number wrong - got {header[3]} expected {conn._next_seq_id}")
        conn._next_seq_id = (conn._next_seq_id + 1) % 256
        data = read_bytes(size)
        if size < MAX_PACKET_LEN:
            return data if not parts else b"".join(parts) + data
        parts.append(data)


class _FastResult(MySQLResult):
    """pymysql's buffered result, its rows read without a packet object each and parsed by
    :func:`row_parser` (or left unparsed: :func:`raw_rows`)."""

    def _read_rowdata_packet(self) -> None:
        conn = self.connection
        raw = getattr(conn, "_cdc_raw_rows", False)
        values = values_reader(self.converters, conn.encoding)
        if conn._current_timeout != conn._read_timeout:  # (as _read_packet)
            conn._sock.settimeout(conn._read_timeout)
            conn._current_timeout = conn._read_timeout
        rows = []
        append = rows.append
        while True:
            data = _payload(conn)
            first = data[0] if data else 0
            if first == 0xFF or first == 0xFE and len(data) < 9:  # an error, or the end of the rows
                packet = MysqlPacket(data, conn.encoding)
                if packet.is_error_packet():
                    packet.raise_for_error()
                if self._check_packet_is_eof(packet):
                    self.connection = None  # (as pymysql: no cyclic reference)
                    break
            append(data if raw else values(data))
        self.affected_rows = len(rows)
        self.rows = tuple(rows)


def raw_rows(conn, sql: str, args: Any = None) -> tuple[list[bytes], list[tuple[str | None, Callable | None]]]:
    """The rows of ``sql`` on a session of :func:`install` as their packets' payloads, unparsed,
    and the result columns' readings (pymysql's ``(encoding, converter)`` per column): for a
    caller that reads the rows' bytes itself (:func:`values_reader` gives a row's values)."""
    conn._cdc_raw_rows = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            rows = list(cur.fetchall())
            readings = list(conn._result.converters) if conn._result is not None and conn._result.converters else []
    finally:
        conn._cdc_raw_rows = False
    return rows, readings


def _read_query_result(self, unbuffered: bool = False) -> int:
    """``Connection._read_query_result`` with :class:`_FastResult` for buffered results."""
    if unbuffered:
        return type(self)._read_query_result(self, unbuffered=True)
    self._result = None
    result = _FastResult(self)
    result.read()
    self._result = result
    if result.server_status is not None:
        self.server_status = result.server_status
    return result.affected_rows


def install(conn) -> bool:
    """Have the pymysql session ``conn`` parse its buffered results' rows by :func:`row_parser`;
    False (the session left as it is) for a pymysql outside the versions tested."""
    if not tested("pymysql", "the table reads' row parser (rows are parsed by pymysql)"):
        return False
    conn._read_query_result = types.MethodType(_read_query_result, conn)
    conn._cdc_row_parser = True
    return True


def installed(conn) -> bool:
    """Whether :func:`install` gave ``conn`` the row parser (so :func:`raw_rows` reads on it)."""
    return getattr(conn, "_cdc_row_parser", False)
