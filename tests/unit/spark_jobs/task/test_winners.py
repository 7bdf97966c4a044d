"""``spark_jobs.task.sink_apply.winners``: per key the record with the highest position, and the
*fresh* winners (not deletes, of keys whose first record in the run is an insert) first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contract.codecs.serde import SINGLE_OBJECT_MAGIC
from spark_jobs.task.kept import Kept
from spark_jobs.task.sink_apply import winners as _winners

_FRAMING = SINGLE_OBJECT_MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08"


def _kept(key: int, op: str, position: int, offset: int, framing: bytes = _FRAMING) -> Kept:
    return Kept(op=op, row=None, position=f"{position:030d}", schema_id="s", schema=None, ts_ms=0, offset=offset,
                 key_bytes=framing + bytes([key]), value_bytes=b"")


# (key, op, position) per record; positions mostly rising, as in a partition, some not (chunk rows)
records = st.lists(st.tuples(st.integers(0, 6), st.sampled_from("cudr"), st.integers(0, 50)), min_size=1,
                   max_size=40)


@given(records)
def test_winners_are_the_last_per_key_and_the_fresh_come_first(recs):
    run = [_kept(k, op, pos, i) for i, (k, op, pos) in enumerate(recs)]
    winners, fresh = _winners(run)
    best: dict[bytes, Kept] = {}
    first_op: dict[bytes, str] = {}
    for r in run:
        first_op.setdefault(r.key_bytes, r.op)
        if r.key_bytes not in best or best[r.key_bytes].position < r.position:
            best[r.key_bytes] = r
    assert sorted(w.offset for w in winners) == sorted(r.offset for r in best.values())
    want_fresh = {r.offset for r in best.values() if first_op[r.key_bytes] == "c" and r.op != "d"}
    assert {w.offset for w in winners[:fresh]} == want_fresh and fresh == len(want_fresh)


def test_no_fresh_winners_without_one_key_writer_schema():
    other = SINGLE_OBJECT_MAGIC + b"\x09" * 8
    run = [_kept(1, "c", 1, 0), _kept(2, "c", 2, 1, framing=other)]
    assert _winners(run) == (run, 0)
    plain = [Kept(op="c", row=None, position="1", schema_id="s", schema=None, ts_ms=0, offset=0,
                   key_bytes=b'{"id": 1}', value_bytes=b"")]
    assert _winners(plain) == (plain, 0)
