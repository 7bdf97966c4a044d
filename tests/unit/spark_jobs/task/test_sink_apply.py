"""The sinks stage alone: kept records applied to a table sink, run by run, with the dead
letters of what no sink can apply."""

from __future__ import annotations

from common.config import SinksConfig
from spark_jobs.task import sink_apply
from spark_jobs.task.kept import Kept
from spark_jobs.task.settings import MergeSettings
from spark_jobs.sinks.batch import ApplyResult
from spark_jobs.sinks.interface import RowSink


class _Sink(RowSink):
    """A table sink that records what it was given."""

    PARTITION_TURNS = False

    def __init__(self) -> None:
        self.turn_wait_s, self.turn_partition = 0.0, None
        self.tables: list = []
        self.applied: list = []

    def ensure_table(self, db, table, schema, key_columns, rekey=False):
        self.tables.append((db, table, tuple(key_columns)))

    def apply(self, db, table, schema, key_columns, changes, rekey=False):
        self.applied += [(db, table, c.op, c.row, c.position) for c in changes]
        return ApplyResult(upserted=sum(c.op != "d" for c in changes), deleted=sum(c.op == "d" for c in changes))


def _kept(op: str, i: int, position: str, table=("db", "t"), schema="s", old_key=False) -> Kept:
    return Kept(op, {"id": i}, position, "sid", schema, 0, int(position), None, b"v", table, old_key)


def _stats() -> dict:
    return {"upserted": 0, "deleted": 0, "sink_skipped": 0, "from_bytes": 0, "inserted": 0, "fresh_refused": 0,
            "partition_turns": 0, "whole_turns": 0}


def test_kept_records_reach_the_sink_and_what_it_cannot_apply_is_a_dead_letter(monkeypatch):
    sink = _Sink()
    monkeypatch.setattr(sink_apply, "sinks_of", lambda s: [("fake", sink)])
    s = MergeSettings(bootstrap="127.0.0.1:1", prefix="cdc", sinks=SinksConfig())
    kept = [_kept("c", 1, "1"), _kept("u", 1, "2"), _kept("d", 2, "3"), _kept("c", 3, "4", old_key=True),
            _kept("c", 4, "5", table=("db", "keyless")), _kept("c", 5, "6", table=("db", "json"), schema=None)]
    stats = _stats()
    dead = sink_apply.apply_to_sinks(s, None, "cdc.db.t", 0, kept, {("db", "t"): ["id"], ("db", "json"): ["id"]},
                                     None, stats)
    assert sink.applied == [("db", "t", "c", {"id": 1}, "1"), ("db", "t", "u", {"id": 1}, "2"),
                            ("db", "t", "d", {"id": 2}, "3")]
    assert sink.tables == [("db", "t", ("id",))]
    assert sorted(reason.split(" ")[0] for *_, reason in dead) == ["JSON", "a"] and len(dead) == 2
    assert (stats["upserted"], stats["deleted"], stats["sink_skipped"], stats["whole_turns"]) == (2, 1, 1, 1)
