"""The reader's rows events: which rows are new after a resume, positions, resume points."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contract.position import BinlogPosition
from producer.binlog.reader import ResumePoint, RowChanges, first_new_row
from producer.table_schema import TableDef

small = st.integers(0, 3)
positions = st.builds(BinlogPosition, small, st.integers(0, 5), st.integers(0, 12))


@given(positions, positions, st.integers(1, 7))
def test_first_new_row_keeps_the_rows_whose_two_halves_are_not_both_out(base, last, n):
    """Row i is new unless both its sequences (2i, 2i+1) are at or before ``last``."""
    base = base.with_row(0)
    expected = [i for i in range(n) if not base.with_row(2 * i + 1) <= last]
    first = first_new_row(base, last)
    kept = [] if first is None else [i for i in range(n) if i >= first]
    assert kept == expected


def test_first_new_row_without_a_last_position_keeps_everything():
    assert first_new_row(BinlogPosition(3, 400), None) == 0


@given(positions, st.integers(0, 10 ** 6))
def test_encode_row_is_with_row_encoded(p, row):
    assert p.encode_row(row) == p.with_row(row).encode()


def _changes(kind: str, rows: list[dict], first: int = 0) -> RowChanges:
    return RowChanges(kind, "db", "t", TableDef(db="db", name="t", columns=[], primary_key=[]),
                      BinlogPosition.from_binlog("mysql-bin.000012", 3456), rows, first, 1000, "0-1-5", 7,
                      "mysql-bin.000012", "mysql-bin.000012", 3000)


def test_images_per_kind():
    a, b = {"id": 1}, {"id": 2}
    assert _changes("insert", [{"values": a, "none_sources": {}}]).images(0) == (None, a, None, {})
    assert _changes("delete", [{"values": a, "none_sources": {}}]).images(0) == (a, None, {}, None)
    update = {"before_values": a, "after_values": b, "before_none_sources": {}, "after_none_sources": {"x": "null"}}
    assert _changes("update", [update]).images(0) == (a, b, {}, {"x": "null"})


def test_positions_and_resume_points():
    ch = _changes("insert", [{"values": {}, "none_sources": {}}] * 3, first=1)
    assert ch.pos == 3456
    # source.pos is the rows event's first byte when the reader knows it (Debezium's pos)
    moved = RowChanges(**{**ch.__dict__, "event_pos": 3433})
    assert moved.pos == 3433 and moved.position(5) == ch.position(5)
    assert ch.position(5) == BinlogPosition.from_binlog("mysql-bin.000012", 3456, 5).encode()
    assert ch.resume_after(1) == ResumePoint("mysql-bin.000012", 3000, ch.position(3))
    assert ch.resume == ResumePoint("mysql-bin.000012", 3000, ch.position(5))
