"""Reading a record with its table's newest schema (Avro schema resolution).

A table topic holds records written with every schema the table had: a record written
before ``ALTER TABLE ... ADD COLUMN`` lacks the new column.  Readers decode each record
with the table's newest schema as the *reader schema* (:meth:`SchemaStore.newest
<contract.schema_store.SchemaStore.newest>`), so every record of a table has the same
fields: a column the writer did not have reads its default.

The reader schema is the newest schema's :func:`reader_view`: each field of the row record
without a default becomes nullable with a null default.  The binlog does not carry
column defaults, so a column added ``NOT NULL DEFAULT 5`` reads null in records written
before it (the producer snapshots such a table again by itself, see
``common/sql/ddl.py``); a nullable column added without a default reads null, which is
what the source holds.  A change resolution cannot express (a column's type changed to
one Avro does not promote, ``INT`` to ``VARCHAR``, or a decimal's scale changed, which
Avro would misread) reads the record with its writer schema alone, as before
(:func:`resolvable`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = ["describe_change", "is_envelope", "reader_view", "resolvable", "row_fields"]

#: Avro's promotions (writer -> reader) of plain primitives.
#: (Avro's string <-> bytes is left out: a binary column's bytes are not text.)
_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double")}


def _named(t: Any) -> dict | None:
    if isinstance(t, dict) and t.get("type") == "record":
        return t
    if isinstance(t, list):
        for b in t:
            if isinstance(b, dict) and b.get("type") == "record":
                return b
    return None


def is_envelope(schema: Any) -> bool:
    """Whether ``schema`` is a change event envelope (a record with ``before`` and ``after``)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    names = {f.get("name") for f in schema.get("fields", [])}
    return "before" in names and "after" in names


def row_fields(schema: dict) -> list[dict] | None:
    """The fields of the row record of an envelope schema (``before``'s record), of a
    row record itself, or None for anything else."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = {f["name"]: f for f in schema.get("fields", [])}
    if is_envelope(schema):
        row = _named(fields["before"]["type"])
        return None if row is None else row.get("fields", [])
    return schema.get("fields", [])


def _optional(t: Any) -> Any:
    if isinstance(t, list):
        return t if "null" in t and t[0] == "null" else ["null", *[b for b in t if b != "null"]]
    return ["null", t]


def reader_view(schema: dict) -> dict:
    """``schema`` (an envelope or a row record) with every row field that has no default
    made nullable with a null default: a reader schema that can read records written
    before any of its columns existed.  The input is not changed."""
    view = copy.deepcopy(schema)
    fields = row_fields(view)
    for f in fields or []:
        if "default" not in f:
            f["type"] = _optional(f["type"])
            f["default"] = None
        elif isinstance(f["type"], list) and f["type"][0] != "null" and f["default"] is None:
            f["type"] = _optional(f["type"])
    return view


def _non_null(t: Any) -> Any:
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        return rest[0] if len(rest) == 1 else rest
    return t


def _same_type(w: Any, r: Any) -> bool:
    w, r = _non_null(w), _non_null(r)
    if w == r:
        return True
    if isinstance(w, str) and isinstance(r, str):
        return (w, r) in _PROMOTIONS
    if isinstance(w, dict) and isinstance(r, dict) and w.get("type") == "record" == r.get("type"):
        return w.get("name") == r.get("name")  # a named record (geometry) is the same definition
    if isinstance(w, str) and isinstance(r, dict) and r.get("type") == "record":
        return r.get("name") == w
    if isinstance(r, str) and isinstance(w, dict) and w.get("type") == "record":
        return w.get("name") == r
    return False


def resolvable(writer: dict, reader: dict) -> bool:
    """Whether records of ``writer`` read right with ``reader`` (both envelopes, or both row
    records): every row field both have is of the same type (up to nullability, or one of
    Avro's promotions between plain primitives; a logical type or Debezium semantic type
    must match exactly, so a decimal's changed scale is not resolvable), and the envelope's
    other fields are the same."""
    wf, rf = row_fields(writer), row_fields(reader)
    if wf is None or rf is None:
        return False
    if is_envelope(writer):
        outer = lambda s: {f["name"]: json.dumps(f["type"], sort_keys=True)  # noqa: E731
                           for f in s.get("fields", []) if f["name"] not in ("before", "after")}
        if outer(writer) != outer(reader):
            return False
    by_name = {f["name"]: f for f in wf}
    return all(_same_type(by_name[f["name"]]["type"], f["type"]) for f in rf if f["name"] in by_name)


def describe_change(old: dict, new: dict) -> str | None:
    """The row columns ``new`` adds, drops and retypes against ``old`` (envelopes or row
    records), in words; None when there is no difference in them."""
    before = {f["name"]: json.dumps(_non_null(f["type"]), sort_keys=True) for f in row_fields(old) or []}
    after = {f["name"]: json.dumps(_non_null(f["type"]), sort_keys=True) for f in row_fields(new) or []}
    parts = []
    for label, names in (("added", [n for n in after if n not in before]),
                         ("dropped", [n for n in before if n not in after]),
                         ("retyped", [n for n in after if n in before and after[n] != before[n]])):
        if names:
            parts.append(f"{label}: {', '.join(names)}")
    return "; ".join(parts) or None
