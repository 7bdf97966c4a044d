"""Read-only chunk windows, the pure parts: when a window has been passed, and the
positions its markers and rows take at the close point."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contract.gtid import GtidSet
from contract.position import BinlogPosition, chunk_row_position
from producer.snapshot.gtid_windows import Boundary, MarkerSlots, window_passed


def _at(file_index: int, pos: int, gtids: str = "") -> Boundary:
    p = BinlogPosition(file_index, pos)
    return Boundary(p, p, GtidSet.parse(gtids, "mariadb"))


def test_a_window_is_passed_at_the_binlog_end_read_after_the_chunk():
    end = ("mysql-bin.000003", 500)
    after = GtidSet.parse("0-1-9")
    assert not window_passed(end, after, _at(3, 499, "0-1-8"))
    assert window_passed(end, after, _at(3, 500, "0-1-8"))
    assert window_passed(end, after, _at(4, 4, "0-1-8"))


def test_a_window_is_passed_once_every_gtid_of_the_second_set_is():
    end = ("mysql-bin.000003", 900)  # transactions after the second set moved the end on
    assert window_passed(end, GtidSet.parse("0-1-9"), _at(3, 600, "0-1-9"))
    assert not window_passed(end, GtidSet.parse("0-1-9,1-2-3"), _at(3, 600, "0-1-9"))
    assert not window_passed(end, GtidSet(), _at(3, 600, "0-1-9"))  # no GTIDs: by position only


def test_slots_put_open_close_and_rows_at_the_point_and_the_next_window_above():
    slots = MarkerSlots()
    at = BinlogPosition(7, 1000)
    o1, c1 = slots.window(at, 3)
    assert (o1, c1) == (at, at.with_row(1))
    rows = [chunk_row_position(c1.encode(), i) for i in range(3)]
    o2, c2 = slots.window(at, 0)
    assert o2.encode() > rows[-1] and c2 > o2
    later = BinlogPosition(7, 2000)
    assert slots.window(later, 5) == (later, later.with_row(1))


def test_a_floor_at_a_later_point_holds_windows_back_and_one_at_the_point_lifts_them():
    slots = MarkerSlots()
    slots.reserve(BinlogPosition(7, 1000, 4), rows=10)
    assert slots.window(BinlogPosition(6, 50), 1) is None
    o, c = slots.window(BinlogPosition(7, 1000), 1)
    assert o > BinlogPosition(7, 1000, 4 + 10) and c > o
    assert slots.window(BinlogPosition(7, 1200), 1)[0] == BinlogPosition(7, 1200)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1, max_size=40))
def test_every_marker_and_row_position_is_unique_and_rising(windows):
    slots = MarkerSlots()
    point = BinlogPosition(1, 4)
    seen: list[str] = []
    for step, rows in windows:
        point = BinlogPosition(point.file_index, point.pos + step * 100)
        o, c = slots.window(point, rows)
        seen += [o.encode(), c.encode(), *(chunk_row_position(c.encode(), i) for i in range(rows))]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
