"""Validation of ``additional-conditions`` filters from snapshot signals.

A filter must be a plain predicate on the table's own columns.  It is tokenised, every
token checked against a small grammar, and the SQL actually run is rebuilt from the
tokens (identifiers backquoted), so nothing the user typed reaches the server
unchecked.  Refused: statement separators, comments, subqueries and any SELECT,
other tables (qualified names), variables, functions outside a list of pure ones
(no SLEEP, BENCHMARK, LOAD_FILE, ...), unknown columns, unbalanced parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.sql.quoting import quote_ident as _quote
from producer.errors import FilterRefused

MAX_FILTER_LENGTH = 2000

# Pure, deterministic functions only.
ALLOWED_FUNCTIONS = frozenset({
    "ABS", "CEIL", "CEILING", "FLOOR", "ROUND", "TRUNCATE", "MOD", "SIGN", "GREATEST", "LEAST",
    "LOWER", "UPPER", "LCASE", "UCASE", "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "CONCAT", "CONCAT_WS",
    "SUBSTRING", "SUBSTR", "LEFT", "RIGHT", "TRIM", "LTRIM", "RTRIM", "REPLACE", "LOCATE", "INSTR", "LPAD", "RPAD",
    "COALESCE", "IFNULL", "NULLIF", "IF", "ISNULL",
    "DATE", "YEAR", "MONTH", "DAY", "DAYOFMONTH", "DAYOFWEEK", "HOUR", "MINUTE", "SECOND", "DATE_FORMAT",
    "DATEDIFF", "TIMESTAMPDIFF", "DATE_ADD", "DATE_SUB", "STR_TO_DATE", "UNIX_TIMESTAMP", "FROM_UNIXTIME",
    "JSON_EXTRACT", "JSON_UNQUOTE", "JSON_CONTAINS", "JSON_LENGTH", "CAST", "CONVERT", "HEX", "UNHEX",
})
KEYWORDS = frozenset({
    "AND", "OR", "NOT", "XOR", "IS", "NULL", "TRUE", "FALSE", "IN", "BETWEEN", "LIKE", "ESCAPE", "REGEXP", "RLIKE",
    "DIV", "MOD", "INTERVAL", "AS", "CASE", "WHEN", "THEN", "ELSE", "END", "BINARY", "COLLATE",
    # units and cast targets
    "MICROSECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR",
    "SIGNED", "UNSIGNED", "CHAR", "DATE", "DATETIME", "TIME", "DECIMAL", "DOUBLE", "INTEGER", "JSON",
})
# Keywords that may stand before '(' without being a function call.
_OPERATOR_WORDS = frozenset({"AND", "OR", "NOT", "XOR", "IN", "IS", "BETWEEN", "LIKE", "REGEXP", "RLIKE", "WHEN",
                             "THEN", "ELSE", "CASE", "DIV", "MOD", "BINARY", "INTERVAL"})
FORBIDDEN_WORDS = frozenset({"SELECT", "FROM", "UNION", "INTO", "INSERT", "UPDATE", "DELETE", "DROP", "CREATE",
                             "ALTER", "CALL", "EXEC", "EXECUTE", "HANDLER", "LOAD", "OUTFILE", "DUMPFILE", "SET",
                             "SLEEP", "BENCHMARK", "GET_LOCK", "RELEASE_LOCK", "LOAD_FILE", "SYSTEM_USER", "USER",
                             "DATABASE", "VERSION", "RAND", "UUID", "NOW", "SYSDATE", "LIMIT", "PROCEDURE",
                             "LOCK", "SHARE", "FOR", "WITH", "EXISTS", "ANY", "ALL", "SOME", "GRANT", "SHUTDOWN",
                             "KILL"})

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|0x[0-9A-Fa-f]+)
  | (?P<quoted>`(?:[^`]|``)+`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op><=>|<=|>=|<>|!=|=|<|>|\+|-|\*|/|%|\(|\)|,)
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterRefused(f"filter longer than {MAX_FILTER_LENGTH} characters")
    for bad, why in ((";", "statement separator ';'"), ("--", "comment '--'"), ("#", "comment '#'"),
                     ("/*", "comment '/*'"), ("@", "variables ('@')"), ("\\N", "escape")):
        # Outside string literals: check on the text with literals blanked out.
        if bad in re.sub(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"", "''", text):
            raise FilterRefused(f"filter contains {why}")
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise FilterRefused(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        if m.lastgroup != "ws":
            tokens.append(Token(m.lastgroup or "", m.group()))
    if not tokens:
        raise FilterRefused("filter is empty")
    return tokens


def validate_filter(text: str, columns: list[str]) -> str:
    """The filter rebuilt from checked tokens, ready to AND into a chunk query."""
    by_lower = {c.lower(): c for c in columns}
    tokens = tokenize(text)
    out: list[str] = []
    depth = 0
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        prev = tokens[i - 1] if i else None
        if tok.kind == "quoted":
            name = tok.text[1:-1].replace("``", "`")
            if nxt is not None and nxt.text == "(":
                raise FilterRefused(f"{tok.text} is not a function the filter may call")
            if name.lower() not in by_lower:
                raise FilterRefused(f"unknown column {tok.text} (columns: {', '.join(columns)})")
            out.append(_quote(by_lower[name.lower()]))
        elif tok.kind == "word":
            up = tok.text.upper()
            if up in FORBIDDEN_WORDS and up not in KEYWORDS:
                raise FilterRefused(f"{tok.text} is not allowed in a snapshot filter")
            if nxt is not None and nxt.text == "(" and up not in _OPERATOR_WORDS:
                if up not in ALLOWED_FUNCTIONS:
                    raise FilterRefused(f"function {tok.text}() is not allowed in a snapshot filter")
                out.append(up)
            elif tok.text.lower() in by_lower:
                out.append(_quote(by_lower[tok.text.lower()]))
            elif up in KEYWORDS:
                out.append(up)
            else:
                raise FilterRefused(f"unknown column {tok.text!r} (columns: {', '.join(columns)})")
        elif tok.kind == "op":
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
                if depth < 0:
                    raise FilterRefused("unbalanced ')'")
            out.append(tok.text)
        elif tok.kind == "string":
            if prev is not None and prev.kind == "string":
                raise FilterRefused("adjacent string literals")
            out.append(tok.text)
        else:
            out.append(tok.text)
    if depth != 0:
        raise FilterRefused("unbalanced '('")
    if out[-1] in ("AND", "OR", "NOT", "=", "<", ">", "<=", ">=", "<>", "!=", ",", "(", "+", "-", "*", "/"):
        raise FilterRefused("filter ends in the middle of an expression")
    return " ".join(out)
