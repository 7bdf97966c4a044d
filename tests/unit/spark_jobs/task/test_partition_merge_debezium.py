"""merge_partition over records Debezium wrote (kafka.input: debezium), without Kafka: no
clean changelog, no table sinks; dead letters captured."""

from __future__ import annotations

import json

from common.config import SinksConfig
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.partition_merge import merge_partition

ROW = {"type": "struct", "optional": True, "name": "dbz.db.t.Value",
       "fields": [{"type": "int32", "optional": False, "field": "id"},
                  {"type": "string", "optional": True, "field": "v"}]}
SOURCE = {"type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source",
          "fields": [{"type": "string", "optional": False, "field": "db"},
                     {"type": "string", "optional": True, "field": "table"},
                     {"type": "string", "optional": False, "field": "file"},
                     {"type": "int64", "optional": False, "field": "pos"},
                     {"type": "int32", "optional": True, "field": "row"},
                     {"type": "string", "optional": True, "field": "snapshot"}]}
ENVELOPE = {"type": "struct", "optional": False, "name": "dbz.db.t.Envelope", "version": 2,
            "fields": [{**ROW, "field": "before"}, {**ROW, "field": "after"}, {**SOURCE, "field": "source"},
                       {"type": "string", "optional": False, "field": "op"},
                       {"type": "int64", "optional": True, "field": "ts_ms"}]}
KEY = {"type": "struct", "optional": False, "name": "dbz.db.t.Key",
       "fields": [{"type": "int32", "optional": False, "field": "id"}]}


def _key(i: int) -> bytes:
    return json.dumps({"schema": KEY, "payload": {"id": i}}, separators=(",", ":")).encode()


def _value(op: str, i: int, pos: int, row: int = 0, v: str = "x") -> bytes:
    before = {"id": i, "v": "old"} if op in "ud" else None
    after = None if op == "d" else {"id": i, "v": v}
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1,
               "source": {"db": "db", "table": "t", "file": "mysql-bin.000002", "pos": pos, "row": row,
                          "snapshot": "incremental" if op == "r" else "false"}}
    return json.dumps({"schema": ENVELOPE, "payload": payload}, separators=(",", ":")).encode()


def _settings() -> MergeSettings:
    return MergeSettings(bootstrap="127.0.0.1:1", prefix="dbz", changelog=False, sinks=SinksConfig(),
                         dlq_topic="dbz._dlq", debezium=True)


def test_debezium_records_pass_with_derived_positions_copies_dropped(dead):
    records = [
        (0, _key(1), _value("c", 1, 400)),
        (1, _key(1), _value("u", 1, 500)),
        (2, _key(5), _value("r", 5, 600)),  # a chunk: every read at the chunk's close coordinates
        (3, _key(6), _value("r", 6, 600)),
        (4, _key(1), _value("d", 1, 700, 1)),  # a key change: delete and create share source
        (5, _key(1), None),  # its tombstone
        (6, _key(2), _value("c", 2, 700, 1)),
        (7, _key(1), _value("u", 1, 500)),  # written again after a Debezium restart: a copy
    ]
    state, stats = merge_partition("dbz.db.t", 0, records, _settings(), None, [])
    assert dead == []
    assert (stats["input"], stats["emitted"], stats["copies"], stats["dropped"]) == (8, 6, 1, 0)
    assert state["pending"] == [] and state["buffer"]["windows"] == []
    # the next batch goes on from the state: what is below its highest position is a copy
    _, stats = merge_partition("dbz.db.t", 0, [(8, _key(6), _value("r", 6, 600))], _settings(), state, [])
    assert (stats["emitted"], stats["copies"]) == (0, 1)


def test_a_schemaless_record_is_a_dead_letter_naming_the_converter_setting(dead):
    schemaless = json.dumps({"before": None, "after": {"id": 1}, "op": "c"}).encode()
    _, stats = merge_partition("dbz.db.t", 0, [(0, b'{"id":1}', schemaless), (1, _key(2), _value("c", 2, 400))],
                               _settings(), None, [])
    assert stats["emitted"] == 1 and len(dead) == 1
    assert "value.converter.schemas.enable=true" in dead[0][3]


def test_a_truncate_is_handed_to_the_driver_with_its_position(dead):
    truncate = json.loads(_value("c", 0, 900))
    truncate["payload"].update(op="t", after=None)
    records = [(0, _key(1), _value("c", 1, 400)), (1, None, json.dumps(truncate).encode()),
               (2, _key(2), _value("c", 2, 1000))]
    _, stats = merge_partition("dbz.db.t", 0, records, _settings(), None, [])
    assert dead == [] and stats["emitted"] == 2
    ((db, table, below),) = stats["truncates"]
    assert (db, table) == ("db", "t") and below[10:20] == f"{900:010d}"
