"""Positions of records Debezium wrote (contract.debezium): unique and rising in a
partition's offset order, key changes and snapshot chunks included."""

from __future__ import annotations

import pytest

from contract.debezium import READS_BELOW, debezium_position, not_connect_shape
from contract.errors import SerdeError
from contract.position import CopyFilter, is_position


def _rec(op: str, pos: int, row: int = 0, file: str = "mysql-bin.000003") -> dict:
    return {"op": op, "before": None, "after": None, "source": {"file": file, "pos": pos, "row": row}}


def test_a_key_change_shares_source_but_its_create_ranks_above_its_delete():
    delete, create = debezium_position(_rec("d", 900, 1), 10), debezium_position(_rec("c", 900, 1), 11)
    assert is_position(delete) and is_position(create)
    assert delete < create
    # ... and both above the rows before them in the event, below the next row's
    assert debezium_position(_rec("u", 900, 0), 9) < delete
    assert create < debezium_position(_rec("u", 900, 2), 12)


def test_the_rows_of_one_chunk_share_source_and_rank_by_offset_between_the_changes_around_the_close():
    before = debezium_position(_rec("u", 700), 3)
    reads = [debezium_position(_rec("r", 800), off) for off in (4, 5, 9)]
    after = debezium_position(_rec("c", 850), 10)
    assert before < reads[0] < reads[1] < reads[2] < after
    assert len(set(reads)) == 3
    # a read ranks below the changes of the event it carries (read-only snapshot, initial
    # snapshot: Debezium writes the chunk before that event's changes)
    assert reads[-1] < debezium_position(_rec("d", 800), 11)


def test_positions_follow_the_binlog_file_then_the_event():
    assert debezium_position(_rec("c", 10**9, 5, "mysql-bin.000003"), 1) < \
        debezium_position(_rec("c", 4, 0, "mysql-bin.000004"), 0)


def test_a_change_debezium_wrote_again_after_a_restart_is_a_copy():
    records = [(_rec("c", 100), 0), (_rec("u", 200), 1), (_rec("c", 100), 2), (_rec("u", 200), 3),
               (_rec("d", 300), 4)]
    copies = CopyFilter()
    kept = [off for value, off in records if copies.keep(0, debezium_position(value, off))]
    assert kept == [0, 1, 4] and copies.copies == 2


@pytest.mark.parametrize("value, message", [
    ({"op": "c", "source": {"pos": 4}}, "source.file"),
    ({"op": "c", "source": {"file": "mysql-bin.000001"}}, "source.file"),
    ({"op": "c"}, "source.file"),
    ({"op": "x", "source": {"file": "mysql-bin.000001", "pos": 4}}, "op"),
    ({"op": "c", "source": {"file": "binlog", "pos": 4}}, "binlog"),
    ({"op": "c", "source": {"file": "mysql-bin.000001", "pos": 4, "row": -1}}, "source.row"),
    ([1], "object"),
])
def test_records_that_cannot_be_placed_say_why(value, message):
    with pytest.raises(SerdeError, match=message):
        debezium_position(value, 0)


def test_a_read_beyond_the_offsets_positions_hold_is_refused():
    with pytest.raises(SerdeError, match="offset"):
        debezium_position(_rec("r", 4), READS_BELOW)


def test_a_schemaless_record_names_the_converter_setting():
    assert "value.converter.schemas.enable=true" in str(not_connect_shape(b'{"before":null,"after":{"id":1}}'))
    assert "not JSON" in str(not_connect_shape(b"\x00\x00\x00\x00\x01"))


def test_the_position_is_the_binlog_positions_wire_form():
    from contract.position import BinlogPosition
    p = debezium_position(_rec("u", 4567, 2, "/var/lib/mysql/binlog.000123"), 0)
    assert BinlogPosition.decode(p) == BinlogPosition(123, 4567, READS_BELOW + 4)
    with pytest.raises(SerdeError, match="source.pos"):
        debezium_position(_rec("u", "4567"), 0)
