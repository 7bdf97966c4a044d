"""Positions of records Debezium wrote (contract.debezium): unique and rising in a
partition's offset order, key changes and snapshot chunks included."""

from __future__ import annotations

import pytest

from contract.debezium import READS_BELOW, debezium_position, debezium_table_markers, not_connect_shape
from contract.errors import SerdeError
from contract.markers import DROP_TABLE, REFILL, RENAME_TABLE
from contract.position import BinlogPosition, CopyFilter, is_position


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


# -- Debezium's schema change topic (records as Debezium 3.6.3 wrote them for MariaDB 10.11) --
def _ddl_record(ddl: str, changes: list[tuple[str, str]], *, db: str = "d1", pos: int = 3364,
                snapshot: str = "false") -> dict:
    source = {"version": "3.6.3.Final", "connector": "mysql", "name": "dbz", "snapshot": snapshot, "db": db,
              "file": "mysql-bin.000001", "pos": pos, "row": 0, "server_id": 77}
    return {"schema": {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeValue"},
            "payload": {"source": {**source}, "ts_ms": 1, "databaseName": db, "schemaName": None, "ddl": ddl,
                        "tableChanges": [{"type": kind, "id": tid, "table": {}} for kind, tid in changes]}}


def test_a_drop_table_event_is_a_drop_table_marker_at_its_binlog_event():
    [m] = debezium_table_markers(_ddl_record("DROP TABLE `d1`.`t2new`", [("DROP", '"d1"."t2new"')], pos=3894))
    assert (m["kind"], m["db"], m["table"]) == (DROP_TABLE, "d1", "t2new")
    assert m["position"] == m["below"] == BinlogPosition.from_binlog("mysql-bin.000001", 3894).encode()
    # below every change Debezium writes for the events after it, above those before it
    assert debezium_position(_rec("c", 3893, 7, "mysql-bin.000001"), 0) < m["position"] < \
        debezium_position(_rec("c", 3895, 0, "mysql-bin.000001"), 0)


def test_a_drop_of_two_tables_comes_as_one_event_per_table():
    one = _ddl_record("DROP TABLE IF EXISTS `d1`.`t3`", [("DROP", '"d1"."t3"')], pos=4338)
    two = _ddl_record("DROP TABLE IF EXISTS `d1`.`nothere`", [("DROP", '"d1"."nothere"')], pos=4338)
    assert [(m["db"], m["table"]) for r in (one, two) for m in debezium_table_markers(r)] == \
        [("d1", "t3"), ("d1", "nothere")]


@pytest.mark.parametrize("ddl, new", [
    ("RENAME TABLE d1.t1 TO d1.t1new", '"d1"."t1new"'),
    ("RENAME TABLE t1 TO t1new", '"d1"."t1new"'),
    ("ALTER TABLE d1.t1 RENAME TO d1.t1new", '"d1"."t1new"'),
    ("ALTER TABLE `t1` RENAME AS `other`.`t1new`", '"other"."t1new"'),
    ("RENAME TABLE t0 TO tx, d1.t1 TO t1new", '"d1"."t1new"'),
])
def test_a_rename_is_told_by_its_statement_as_debezium_names_only_the_new_table(ddl, new):
    [m] = debezium_table_markers(_ddl_record(ddl, [("ALTER", new)]))
    to_db = "other" if "other" in new else "d1"
    assert (m["kind"], m["db"], m["table"], m["to_db"], m["to_table"]) == (RENAME_TABLE, "d1", "t1", to_db, "t1new")


def test_schema_capture_create_and_other_alters_give_no_marker():
    # the connector's schema capture: a DROP TABLE IF EXISTS before each CREATE, snapshot true/last
    assert debezium_table_markers(_ddl_record("DROP TABLE IF EXISTS `d1`.`t1`", [("DROP", '"d1"."t1"')],
                                              snapshot="true")) == []
    assert debezium_table_markers(_ddl_record("DROP TABLE IF EXISTS `d1`.`t1`", [("DROP", '"d1"."t1"')],
                                              snapshot="last")) == []
    assert debezium_table_markers(_ddl_record("CREATE TABLE d1.t3 (id INT PRIMARY KEY)",
                                              [("CREATE", '"d1"."t3"')])) == []
    assert debezium_table_markers(_ddl_record("ALTER TABLE d1.t1 ADD COLUMN x INT", [("ALTER", '"d1"."t1"')])) == []
    assert debezium_table_markers(_ddl_record("CREATE DATABASE d2", [], db="d2")) == []


@pytest.mark.parametrize("ddl, reason", [
    ("ALTER TABLE d1.t1 ADD COLUMN c INT NOT NULL DEFAULT 5", "a column added with a value for the existing rows"),
    ("ALTER TABLE t1 RENAME COLUMN v TO w", "a column renamed"),
    ("ALTER TABLE `t1` CHANGE v w VARCHAR(20)", "a column changed or renamed"),
    ("ALTER TABLE t1 MODIFY n BIGINT", "a column's type changed"),
])
def test_an_alter_that_changed_rows_without_row_events_is_a_refill(ddl, reason):
    [m] = debezium_table_markers(_ddl_record(ddl, [("ALTER", '"d1"."t1"')], pos=5000))
    assert (m["kind"], m["db"], m["table"], m["reason"]) == (REFILL, "d1", "t1", reason)
    assert m["position"] == BinlogPosition.from_binlog("mysql-bin.000001", 5000).encode()


def test_quoted_names_and_bad_records():
    [m] = debezium_table_markers(_ddl_record('DROP TABLE `we"ird`', [("DROP", '"d1"."we""ird"')]))
    assert m["table"] == 'we"ird'
    with pytest.raises(SerdeError, match="tableChanges"):
        debezium_table_markers({"payload": {"ddl": "DROP TABLE x"}})
    with pytest.raises(SerdeError, match="binlog position"):
        debezium_table_markers({"payload": {"source": {"snapshot": "false"}, "databaseName": "d1",
                                            "tableChanges": [{"type": "DROP", "id": '"d1"."x"'}]}})
