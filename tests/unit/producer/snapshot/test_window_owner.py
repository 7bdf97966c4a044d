"""Window markers in a signal table that several producers share (sources on one server):
a producer acts only on its own (issue found by test_two_sources_each_with_its_shards_merge_into_one_target,
where east wrote the CLOSE rows of west's windows before west's readers did, so west's chunks
failed on the duplicate row again and again and its snapshot never ended)."""

from __future__ import annotations

import json

from contract.position import BinlogPosition
from producer.snapshot.coordinator import SnapshotCoordinator


def _coordinator(owner: str) -> SnapshotCoordinator:
    def no_server():
        raise AssertionError("no server is reached here")
    return SnapshotCoordinator(signal_table="cdc.signals", chunk_size=10, captures=lambda d, t: True,
                               connect=no_server, owner=owner)


def _open(producer: str | None, run: str = "r0") -> dict:
    data = {"snapshot_id": "s1", "chunk_id": 3, "table": "shop.t", "run": run, "range": {"lo": None, "hi": None}}
    if producer is not None:
        data["producer"] = producer
    return {"id": f"s1-{run}-3-open", "type": "snapshot-window-open", "data": json.dumps(data)}


AT = BinlogPosition.from_binlog("mysql-bin.000001", 400, 0)


def test_another_producers_window_is_left_to_it():
    coord = _coordinator("east")
    assert coord.on_signal(_open("west"), AT) == (None, None)
    assert coord._pending_closes == []  # no CLOSE row written for west's window


def test_an_earlier_run_of_the_same_producer_still_gets_its_window_closed():
    for producer in ("east", None):  # (markers written before the owner was recorded: as before)
        coord = _coordinator("east")
        seen, released = coord.on_signal(_open(producer, run="earlier"), AT)
        assert seen is not None and seen.kind == "OPEN" and released is None
        assert [close_id for close_id, _ in coord._pending_closes] == ["s1-earlier-3-close"]

