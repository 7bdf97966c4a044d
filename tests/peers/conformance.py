"""Event-for-event comparison of our debezium-json records with Debezium's own (pure).

Both sides are lists of :class:`Event` read from Kafka Connect's JSON converter shape
(``{"schema", "payload"}``; a tombstone has no value).  :func:`compare` names every
difference by a stable id -- ``aspect:table.column`` or ``aspect:field`` -- with one example
of each side, so a conformance table (``docs/debezium-conformance.md``) can list the ids
that are known and explained, and a test fails on any id that is not listed and on any
listed id that no longer occurs.

What is compared, per table:

* ``events``: the sequence of ``(op, key)`` (with tombstones as ``("tombstone", key)``);
* ``key-schema``, ``schema``: the Connect schema of each key field and each column of
  ``before``/``after`` (type, logical name, parameters, optional);
* ``value``: each column's value in each event, ``before`` and ``after``;
* ``envelope``: the payload's top-level fields;
* ``source``: the ``source`` block's fields and their types, and the values that must agree
  when both read one binlog (``connector``, ``db``, ``table``, ``snapshot``, ``file``, ``pos``,
  ``row``, ``server_id``, ``gtid``, ``ts_ms``) -- ``source-value:<field>`` for changes,
  ``snapshot-source-value:<field>`` for snapshot reads; ``name`` (each side's topic prefix),
  ``thread`` and ``query`` are not compared.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

# The source fields whose values must agree when both sides read one binlog.
SOURCE_VALUES = ("connector", "db", "table", "snapshot", "file", "pos", "row", "server_id", "gtid", "ts_ms")


@dataclass(frozen=True)
class Event:
    table: str                      # db.table
    key: dict | None                # the key payload
    key_schema: dict | None
    value: dict | None              # the value payload (None: a tombstone)
    value_schema: dict | None

    @property
    def op(self) -> str:
        return "tombstone" if self.value is None else str(self.value.get("op"))


@dataclass
class Difference:
    id: str
    ours: Any
    theirs: Any

    def __str__(self) -> str:
        return f"{self.id}: ours {self.ours!r}, Debezium {self.theirs!r}"


def parse(topic: str, key: str | bytes | None, value: str | bytes | None, prefix: str) -> Event | None:
    """An event from a record of a table topic ``<prefix>.<db>.<table>`` (None for other topics)."""
    if not topic.startswith(prefix + "."):
        return None
    table = topic[len(prefix) + 1:]
    if table.count(".") != 1:
        return None
    k = json.loads(key) if key else None
    v = json.loads(value) if value else None
    return Event(table, None if k is None else k.get("payload"), None if k is None else k.get("schema"),
                 None if v is None else v.get("payload"), None if v is None else v.get("schema"))


def json_lines(path: Path) -> list:
    """The records of a JSON-lines file another process may be writing now: its complete lines
    only (a last line without its newline is still being written)."""
    text = path.read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]


def read_jsonl(path: Path, prefix: str) -> list[Event]:
    """The events of a :mod:`tests.peers.debezium_capture` file."""
    out = []
    for r in json_lines(path):
        e = parse(r["topic"], r["key"], r["value"], prefix)
        if e is not None:
            out.append(e)
    return out


def _fields(schema: dict | None) -> dict[str, dict]:
    return {f["field"]: f for f in (schema or {}).get("fields", [])}


def _describe(f: dict) -> dict:
    """A Connect field schema without its name in the struct."""
    d = {k: v for k, v in f.items() if k != "field"}
    if d.get("type") == "struct":
        d["fields"] = {name: _describe(sub) for name, sub in _fields(f).items()}
    return d


def _row_schema(e: Event) -> dict[str, dict]:
    """The column schemas of an event's ``after`` (or ``before``) struct."""
    env = _fields(e.value_schema)
    for side in ("after", "before"):
        if side in env:
            return {n: _describe(f) for n, f in _fields(env[side]).items()}
    return {}


def _first(d: dict, key: str, diff: Difference) -> None:
    d.setdefault(key, diff)


def compare(ours: Iterable[Event], theirs: Iterable[Event], *, tables: Iterable[str] | None = None) -> list[Difference]:
    """Every difference between two event lists, one example per id, sorted by id."""
    ours, theirs = list(ours), list(theirs)
    found: dict[str, Difference] = {}
    names = sorted(set(tables) if tables is not None else {e.table for e in ours + theirs})
    for table in names:
        a = [e for e in ours if e.table == table]
        b = [e for e in theirs if e.table == table]
        short = table.split(".", 1)[1]
        seq_a = [(e.op, json.dumps(e.key, sort_keys=True)) for e in a]
        seq_b = [(e.op, json.dumps(e.key, sort_keys=True)) for e in b]
        if seq_a != seq_b:
            _first(found, f"events:{short}", Difference(f"events:{short}", seq_a, seq_b))
        # Key schemas.
        ka = {n: _describe(f) for e in a[:1] for n, f in _fields(e.key_schema).items()}
        kb = {n: _describe(f) for e in b[:1] for n, f in _fields(e.key_schema).items()}
        for n in sorted(set(ka) | set(kb)):
            if ka.get(n) != kb.get(n):
                _first(found, f"key-schema:{short}.{n}", Difference(f"key-schema:{short}.{n}", ka.get(n), kb.get(n)))
        # Column schemas: of the first data event on each side.
        da = next((e for e in a if e.value is not None), None)
        db = next((e for e in b if e.value is not None), None)
        if da is None or db is None:
            continue
        sa, sb = _row_schema(da), _row_schema(db)
        for n in sorted(set(sa) | set(sb)):
            if sa.get(n) != sb.get(n):
                _first(found, f"schema:{short}.{n}", Difference(f"schema:{short}.{n}", sa.get(n), sb.get(n)))
        # Envelope and source.
        ea, eb = sorted(_fields(da.value_schema)), sorted(_fields(db.value_schema))
        for n in sorted(set(ea) ^ set(eb)):
            _first(found, f"envelope:{n}", Difference(f"envelope:{n}", n in ea, n in eb))
        src_a = {n: _describe(f) for n, f in _fields(_fields(da.value_schema).get("source")).items()}
        src_b = {n: _describe(f) for n, f in _fields(_fields(db.value_schema).get("source")).items()}
        for n in sorted(set(src_a) | set(src_b)):
            if src_a.get(n) != src_b.get(n):
                _first(found, f"source:{n}", Difference(f"source:{n}", src_a.get(n), src_b.get(n)))
        # Values, event by event (as far as both sequences go).
        for x, y in zip(a, b):
            if x.value is None or y.value is None:
                continue
            for side in ("before", "after"):
                ra, rb = x.value.get(side) or {}, y.value.get(side) or {}
                for n in sorted(set(ra) | set(rb)):
                    if ra.get(n) != rb.get(n):
                        _first(found, f"value:{short}.{n}", Difference(f"value:{short}.{n}", ra.get(n), rb.get(n)))
            # Snapshot reads apart: where their source block points is each snapshot's own.
            kind = "snapshot-source-value" if x.value.get("op") == "r" else "source-value"
            for n in SOURCE_VALUES:
                va, vb = (x.value.get("source") or {}).get(n), (y.value.get("source") or {}).get(n)
                if va != vb:
                    _first(found, f"{kind}:{n}", Difference(f"{kind}:{n}", va, vb))
    return [found[k] for k in sorted(found)]


_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def listed_differences(doc: Path, section: str | None = None) -> set[str]:
    """The difference ids the conformance table lists: the first cell of each table row,
    in backticks; with ``section``, only the rows under the heading ``## <section>`` (up to
    the next heading of that level)."""
    lines = doc.read_text().splitlines()
    if section is not None:
        heads = [i for i, line in enumerate(lines) if line.strip() == f"## {section}"]
        if not heads:
            raise ValueError(f"{doc.name} has no section '## {section}'")
        rest = lines[heads[0] + 1:]
        lines = rest[:next((i for i, line in enumerate(rest) if line.startswith("## ")), len(rest))]
    return {m.group(1) for line in lines if (m := _ROW.match(line.strip()))}


def check_against_table(found: list[Difference], doc: Path, *, scope: Iterable[str],
                        section: str | None = None) -> list[str]:
    """What is wrong with the table (of ``section``: :func:`listed_differences`) for the ids
    under ``scope`` (id prefixes such as ``value:types.``): differences it does not list and
    listed ones that did not occur."""
    scope = tuple(scope)
    listed = {x for x in listed_differences(doc, section) if x.startswith(scope)}
    ids = {d.id for d in found}
    problems = [f"not in {doc.name}: {d}" for d in found if d.id not in listed]
    problems += [f"listed in {doc.name} but not found any more: {x}" for x in sorted(listed - ids)]
    return problems


__all__ = ["Difference", "Event", "check_against_table", "compare", "json_lines", "listed_differences", "parse",
           "read_jsonl",
           "SOURCE_VALUES"]
