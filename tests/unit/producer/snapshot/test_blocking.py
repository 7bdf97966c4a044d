"""A blocking snapshot's pure parts: where its read lies from the stream (a keyless table's
pause point), and the batches handed over with whether each is the table's last."""

from __future__ import annotations

import pytest

from contract.gtid import GtidSet
from contract.position import BinlogPosition
from producer.snapshot.blocking import BlockingRead, _with_last
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
