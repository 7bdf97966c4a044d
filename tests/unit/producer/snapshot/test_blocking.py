"""A blocking snapshot's pure parts: where its read lies from the stream (a keyless table's
pause point), the batches handed over with whether each is the table's last, and the read
spans that tell the stream a table's read may not have been the table's."""

from __future__ import annotations

import json

import pytest

from contract.gtid import GtidSet
from contract.position import BinlogPosition
from producer.snapshot.blocking import BlockingQueue, BlockingRead, ReadSpans, _with_last
from producer.snapshot.gtid_windows import Boundary

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def _read(point) -> BlockingRead:
    read = BlockingRead(None, 100, is_mariadb=isinstance(point, BinlogPosition))  # type: ignore[arg-type]
    read.point = point
    return read


def _at(pos: int, gtid: int | None = None) -> Boundary:
    p = BinlogPosition.from_binlog("mysql-bin.000002", pos)
    gtids = GtidSet.parse(f"{UUID}:1-{gtid}", "mysql") if gtid else GtidSet()
    return Boundary(p, p, gtids)


@pytest.mark.parametrize("pos, where", [(500, 0), (400, 1), (600, -1)])
def test_a_mariadb_read_lies_where_its_binlog_point_is(pos, where):
    assert _read(BinlogPosition.from_binlog("mysql-bin.000002", 500)).where(_at(pos)) == where


def test_a_mariadb_read_in_a_later_binlog_file_lies_ahead():
    assert _read(BinlogPosition.from_binlog("mysql-bin.000003", 4)).where(_at(900)) == 1


@pytest.mark.parametrize("gtid, where", [(353, 0), (350, 1), (360, -1)])
def test_a_mysql_read_lies_where_its_gtid_set_is(gtid, where):
    assert _read(GtidSet.parse(f"{UUID}:1-353", "mysql")).where(_at(100, gtid)) == where


def test_a_mysql_read_whose_point_is_not_known_lies_nowhere():
    assert _read(None).where(_at(100, 5)) is None


def test_each_batch_comes_with_whether_it_is_the_last():
    assert list(_with_last(iter([[1, 2], [3, 4], [5]]))) == [([1, 2], False), ([3, 4], False), ([5], True)]
    assert list(_with_last(iter([]))) == []


def test_ddl_inside_a_tables_read_span_is_crossed_once():
    """DDL of a table the stream reads after the pause point and up to the binlog's end after
    the table's read: the read may not be the table's (a cut-over meanwhile), once."""
    spans = ReadSpans()
    spans.read("db.t", (1, 100), (1, 900))
    spans.read("db.u", (1, 100), (2, 50))
    assert not spans.crossed("db.t", (1, 99))  # (before the pause point: in the read's view)
    assert not spans.crossed("db.other", (1, 500))
    assert spans.crossed("db.t", (1, 100))  # (a statement right after the pause point)
    assert not spans.crossed("db.t", (1, 600))  # (once: the table is snapshotted again)
    assert spans.crossed("db.u", (2, 49))
    spans.read("db.u", (1, 100), (2, 50))
    assert not spans.crossed("db.u", (2, 50))  # (the end: written after the read)


def test_a_span_the_stream_passed_is_forgotten():
    spans = ReadSpans()
    spans.read("db.t", (1, 100), (1, 900))
    spans.read("db.u", (1, 100), (3, 4))
    spans.passed((1, 900))
    assert spans.state() == {"db.u": [[1, 100], [3, 4]]}
    assert not spans.crossed("db.u", (3, 4))  # (at the end: passed, and forgotten)
    assert spans.state() is None and not spans


def test_read_spans_survive_the_offset_record():
    spans = ReadSpans()
    spans.read("db.t", (4, 100), (5, 7))
    again = ReadSpans(json.loads(json.dumps(spans.state())))
    assert again.state() == spans.state() and again.crossed("db.t", (5, 1))
    assert BlockingQueue(None, None, spans.state()).spans.crossed("db.t", (4, 101))
