"""The decide stage alone: records and window markers in, kept records, dead letters and
pending markers out (JSON-encoded records, so without Kafka)."""

from __future__ import annotations

from contract.markers import CLOSE, OPEN
from contract.position import chunk_row_position
from spark_jobs.task.dblog import WindowBuffer
from spark_jobs.task.decide import PartitionDecider, merge_markers
from spark_jobs.task.envelope_decoder import EnvelopeDecoder
from tests.unit.spark_jobs.task.test_partition_merge_windows import _change, _key, _marker, _pos, _settings, _window


def _decider(markers: list[dict]) -> PartitionDecider:
    s = _settings()
    return PartitionDecider(s, EnvelopeDecoder(s), WindowBuffer(), markers, ("db", "t"), ignore_columns=False)


def test_the_dblog_rule_keeps_what_wins_and_leaves_later_markers_pending():
    open_, close, later = _pos(100), _pos(300), _pos(900)
    win = _window(open_, close)
    records = [(0, _key(1), _change("c", 1, _pos(50))),
               (1, _key(1), _change("u", 1, _pos(200))),  # inside the window: beats the chunk's row of 1
               (2, _key(1), _change("r", 1, chunk_row_position(close, 0), win)),
               (3, _key(2), _change("r", 2, chunk_row_position(close, 1), win)),
               (4, _key(9), None),  # a tombstone: not a change
               (5, _key(3), b"not a change")]
    markers = [_marker(OPEN, open_), _marker(CLOSE, close), _marker(OPEN, later, 1)]
    decision = _decider(markers).run(records)
    assert [(k.op, k.offset, k.table) for k in decision.kept] == [("c", 0, ("db", "t")), ("u", 1, ("db", "t")),
                                                                   ("r", 3, ("db", "t"))]
    assert [k.row["id"] for k in decision.kept] == [1, 1, 2]
    assert [offset for offset, *_ in decision.dead] == [5]  # (not a record: a dead letter, the rest goes on)
    assert decision.pending == [markers[2]] and decision.truncates == {}
    assert decision.key_columns == {("db", "t"): ["id"]}


def test_pending_and_new_markers_merge_by_position_each_once():
    a, b, c = _marker(OPEN, _pos(1)), _marker(CLOSE, _pos(2)), _marker(OPEN, _pos(3), 1)
    assert merge_markers([b, a], [c, a]) == [a, b, c]
