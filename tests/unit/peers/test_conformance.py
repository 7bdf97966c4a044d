"""tests/peers/conformance.py: the comparison of two Debezium-shaped event streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.peers.conformance import check_against_table, compare, listed_differences, parse

INT = {"type": "int32", "optional": False}


def _record(op: str, key: int, after: dict | None, *, extra_field: bool = False, col_type: dict | None = None):
    col = {**(col_type or {"type": "string", "optional": True}), "field": "v"}
    row = {"type": "struct", "optional": True, "fields": [{**INT, "field": "id"}, col]}
    fields = [{**row, "field": "before"}, {**row, "field": "after"},
              {"type": "struct", "field": "source", "fields": [{"type": "string", "optional": False, "field": "db"}]},
              {"type": "string", "optional": False, "field": "op"}]
    if extra_field:
        fields.append({"type": "string", "optional": True, "field": "position"})
    k = json.dumps({"schema": {"type": "struct", "fields": [{**INT, "field": "id"}]}, "payload": {"id": key}})
    v = json.dumps({"schema": {"type": "struct", "fields": fields},
                    "payload": {"before": None, "after": after, "source": {"db": "d"}, "op": op}})
    return k, v


def _events(prefix: str, records):
    return [parse(f"{prefix}.d.t", k, v, prefix) for k, v in records]


def test_equal_streams_have_no_difference():
    recs = [_record("c", 1, {"id": 1, "v": "a"}), _record("d", 1, None)]
    assert compare(_events("a", recs), _events("b", recs)) == []


def test_each_kind_of_difference_is_named():
    ours = _events("a", [_record("c", 1, {"id": 1, "v": "a"}, extra_field=True)])
    theirs = _events("b", [_record("c", 1, {"id": 1, "v": "b"}, col_type={"type": "bytes", "optional": True}),
                           _record("u", 1, {"id": 1, "v": "c"})])
    ids = [d.id for d in compare(ours, theirs)]
    assert ids == ["envelope:position", "events:t", "schema:t.v", "value:t.v"]


def test_tombstones_are_events_and_other_topics_are_ignored():
    assert parse("a.d.t", b'{"payload": {"id": 1}}', None, "a").op == "tombstone"
    assert parse("a._markers", None, b"{}", "a") is None and parse("other.d.t", None, b"{}", "a") is None


def test_the_table_must_list_exactly_what_is_found(tmp_path: Path):
    doc = tmp_path / "table.md"
    doc.write_text("| Difference | Why |\n|---|---|\n| `value:t.v` | because |\n| `schema:t.gone` | was |\n")
    assert listed_differences(doc) == {"value:t.v", "schema:t.gone"}
    found = compare(_events("a", [_record("c", 1, {"id": 1, "v": "a"}, extra_field=True)]),
                    _events("b", [_record("c", 1, {"id": 1, "v": "b"})]))
    problems = check_against_table(found, doc, scope=("value:", "schema:", "envelope:"))
    assert any("not in table.md: envelope:position" in p for p in problems)
    assert any("listed in table.md but not found any more: schema:t.gone" in p for p in problems)
    assert not any("value:t.v" in p for p in problems)


def test_a_section_lists_only_its_own_rows(tmp_path: Path):
    doc = tmp_path / "table.md"
    doc.write_text("## Differences\n\n| `value:t.v` | on one server |\n\n### a sub-heading\n\n| `schema:t.s` | too |\n\n"
                   "## Differences on MySQL\n\n| `value:t.w` | on the other |\n\n## After\n\n| `value:t.x` | no |\n")
    assert listed_differences(doc, "Differences") == {"value:t.v", "schema:t.s"}
    assert listed_differences(doc, "Differences on MySQL") == {"value:t.w"}
    assert listed_differences(doc) == {"value:t.v", "schema:t.s", "value:t.w", "value:t.x"}
    with pytest.raises(ValueError, match="no section"):
        listed_differences(doc, "Nowhere")
