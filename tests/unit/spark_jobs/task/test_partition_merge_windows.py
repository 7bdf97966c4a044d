"""merge_partition's DBLog rule over the project's own change events (JSON-encoded, so
without Kafka): a chunk row whose key changed inside its window is dropped, whatever else
the partition holds, and a change's key is taken only while a window is open."""

from __future__ import annotations

import json

from common.config import SinksConfig
from contract.markers import CLOSE, OPEN
from contract.position import chunk_row_position
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.partition_merge import merge_partition

TOPIC = "own.db.t"


def _pos(event: int, row: int = 0) -> str:
    return f"{2:010d}{event:010d}{row:010d}"


def _key(i: int) -> bytes:
    return json.dumps({"id": i}).encode()


def _change(op: str, i: int, position: str, window: dict | None = None) -> bytes:
    row = {"id": i, "v": f"{op}{position[-12:]}"}
    return json.dumps({"op": op, "position": position, "snapshot_window": window,
                       "source": {"db": "db", "table": "t", "ts_ms": 1_000},
                       "before": row if op in "ud" else None, "after": None if op == "d" else row}).encode()


def _marker(kind: str, position: str, chunk: int = 0) -> dict:
    return {"kind": kind, "snapshot_id": "s1", "chunk_id": chunk, "position": position}


def _settings() -> MergeSettings:
    return MergeSettings(bootstrap="127.0.0.1:1", prefix="own", changelog=False, sinks=SinksConfig(),
                         dlq_topic="own._dlq")


def _window(open_: str, close: str, chunk: int = 0) -> dict:
    return {"snapshot_id": "s1", "chunk_id": chunk, "open_position": open_, "close_position": close}


def test_a_chunk_row_whose_key_changed_in_its_window_is_dropped(dead):
    open_, close = _pos(100), _pos(300)
    win = _window(open_, close)
    records = [
        (0, _key(1), _change("c", 1, _pos(50))),   # before any window: no key kept
        (1, _key(3), _change("c", 3, _pos(60))),
        (2, _key(1), _change("u", 1, _pos(200))),  # inside the window: beats the chunk's row of 1
        (3, _key(1), _change("r", 1, chunk_row_position(close, 0), win)),
        (4, _key(2), _change("r", 2, chunk_row_position(close, 1), win)),
        (5, _key(3), _change("u", 3, _pos(400))),  # after the window
    ]
    _, stats = merge_partition(TOPIC, 0, records, _settings(), None, [_marker(OPEN, open_), _marker(CLOSE, close)])
    assert dead == []
    assert (stats["input"], stats["emitted"], stats["dropped"], stats["copies"]) == (6, 5, 1, 0)
    # the same records with the change to 1 before the window open: nothing dropped
    records[2] = (2, _key(1), _change("u", 1, _pos(90)))
    _, stats = merge_partition(TOPIC, 0, records, _settings(), None, [_marker(OPEN, open_), _marker(CLOSE, close)])
    assert (stats["emitted"], stats["dropped"]) == (6, 0)


def test_a_window_opened_in_an_earlier_batch_still_sees_the_changes_of_this_one(dead):
    open_, close = _pos(100), _pos(300)
    win = _window(open_, close)
    # batch 1: the OPEN marker and a change to 2 before it, nothing of the window's rows yet
    state, stats = merge_partition(TOPIC, 0, [(0, _key(2), _change("c", 2, _pos(50)))], _settings(), None,
                                   [_marker(OPEN, open_)])
    assert stats["emitted"] == 1
    # batch 2: a change to 2 inside the window, then CLOSE and the chunk's rows
    records = [(1, _key(2), _change("u", 2, _pos(150))),
               (2, _key(1), _change("r", 1, chunk_row_position(close, 0), win)),
               (3, _key(2), _change("r", 2, chunk_row_position(close, 1), win))]
    state, stats = merge_partition(TOPIC, 0, records, _settings(), state, [_marker(CLOSE, close)])
    assert dead == []
    assert (stats["emitted"], stats["dropped"]) == (2, 1)
