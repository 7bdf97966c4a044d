"""Text-protocol rows parsed by generated code: the values pymysql gives, faster.

A client parses each row of a text result column by column: the value's length-coded
bytes, decoded, converted.  For a table read in chunks of thousands of rows that is most of
the client's time.  :func:`row_parser` generates a function for a result's columns' readings
(per column its ``(encoding, converter)``: pymysql's for the column's type,
:func:`common.sql.row_reads.readings`) that reads a row's payload with the lengths read
inline; :func:`values_reader` falls back to the plain loop (:func:`plain_row`) for a row it
does not fit.  The rows come from the project's own connection (:mod:`common.sql.wire`, read
by :mod:`common.sql.row_reads`): nothing of pymysql's is reached into, only its public
converters are called.  :func:`column_code` and :func:`length_coded` are the generated
code's parts, shared with the snapshot's select encoder (``producer/events/select_encoder.py``).
"""

from __future__ import annotations

from typing import Any, Callable

from common.generated_code import run_generated
from common.sql.wire import lenenc_int

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
    run_generated("\n".join(lines), "row parser", env)
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


def plain_row(converters: list[tuple[str | None, Callable | None]], payload: bytes) -> tuple:
    """A row payload's values read column by column, as pymysql reads a text row (each value's
    length-coded bytes, decoded, converted; bytes after the last column ignored): what
    :func:`values_reader` gives a row the generated parser does not fit.  A value running past
    the payload raises ValueError."""
    out = []
    p = 0
    for encoding, converter in converters:
        n, p = lenenc_int(payload, p)
        if n is None:
            out.append(None)
            continue
        b = payload[p:p + n]
        if len(b) != n:
            raise ValueError(f"a row's value of {n} bytes runs past its payload")
        p += n
        value: Any = b if encoding is None else b.decode(encoding)
        out.append(value if converter is None else converter(value))
    return tuple(out)


def values_reader(converters: list[tuple[str | None, Callable | None]]) -> Callable[[bytes], tuple]:
    """A function of a row payload of a result with these columns' readings to the row's
    values as pymysql gives them: :func:`row_parser`'s, :func:`plain_row`'s for a row it does
    not fit."""
    parse = cached_row_parser(converters)

    def values(payload: bytes) -> tuple:
        try:
            return parse(payload)
        except (IndexError, ValueError):
            return plain_row(converters, payload)
    return values
