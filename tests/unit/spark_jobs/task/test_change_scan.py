"""The native change scan (``scan_changes`` in spark_jobs/task/_change_scan.c, called by
spark_jobs.task.decide.scan_plain) decides what the decide stage's loop (PartitionDecider) decides.

Held to a reference built from the loop's own parts (the header read by the generated
Python, the DBLog rule of ``WindowBuffer.push_change``) on drawn partitions: stream changes
of the topic's table and of another, copies, positions out of order or malformed, snapshot
rows, truncates and unknown ops, tombstones, records without a key, of another key or value
writer schema, cut or altered bytes, a snapshot window on a change, a null image, the next
window marker.  For every record the scan takes it must give the ``Kept`` the loop would
append (or count the copy), and it must stop at every record the loop would not take
plainly (errors included), leaving it to the loop.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.codecs.avro_decoder import change_scan_program, compile_change_header
from contract.codecs.serde import AvroWriter
from contract.envelope import envelope_schema, source_block
from contract.errors import SerdeError
from contract.position import ENCODED_WIDTH
from spark_jobs.task.dblog import DBLogError, WindowBuffer
from spark_jobs.task.decide import native_scan
from spark_jobs.task.kept import KEPT_MEMBERS, Kept
from tests.native_helpers import can_build
from tests.unit.contract.codecs.test_avro_native import _native

# (test_avro_native fails where the extension could be built and is not: this skips only
# where it cannot be, and there the merge loop decides every record)
pytestmark = pytest.mark.skipif(native_scan is None and not can_build(),
                                reason="no C compiler or Python headers here: the native extension (its change "
                                       "scan) cannot be built, and the decide stage's loop (PartitionDecider) decides every record")

DB, TABLE = "db_é", "t"
ROW = {"type": "record", "name": "Value", "fields": [{"name": "id", "type": ["null", "int"], "default": None},
                                                     {"name": "v", "type": ["null", "string"], "default": None}]}
SCHEMA = envelope_schema(ROW, "Envelope")
OTHER_SCHEMA = envelope_schema({**ROW, "fields": [*ROW["fields"], {"name": "w", "type": "long"}]}, "Envelope")
KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
OTHER_KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}, {"name": "k", "type": "int"}]}
WRITER, OTHER_WRITER = AvroWriter(SCHEMA), AvroWriter(OTHER_SCHEMA)
KEY_WRITER, OTHER_KEY_WRITER = AvroWriter(KEY), AvroWriter(OTHER_KEY)
SID = WRITER.fingerprint
NAMES = (DB, TABLE)


with _native(False):  # (the generated Python: the loop's reader where the extension is not built)
    HEADER, ROW_READER = compile_change_header(SCHEMA)
with _native(True):  # (whatever CDC_AVRO_NATIVE says: the scan itself is under test)
    PROGRAM, INDICES = change_scan_program(SCHEMA) or (b"", ())


def _pos(i: int) -> str:
    return f"{i:0{ENCODED_WIDTH}d}"


def _event(op: str, position: str, i: int, *, db: str | None = DB, table: str | None = TABLE,
           null_image: bool = False, window: bool = False, wide: bool = False) -> bytes:
    row = None if null_image else {"id": i, "v": f"v{i}", **({"w": i} if wide else {})}
    src = source_block("n", 1, db=db, table=table, ts_ms=1_700_000_000_000 + i, file="mysql-bin.000001", pos=4, row=0)
    value = {"before": row if op in "ud" else None, "after": None if op == "d" else row, "source": src, "op": op,
             "ts_ms": None, "transaction": None, "position": position,
             "snapshot_window": {"snapshot_id": "s", "chunk_id": 1, "open_position": _pos(1),
                                 "close_position": _pos(2)} if window else None}
    return (OTHER_WRITER if wide else WRITER).encode(value)


@st.composite
def _record(draw, offset: int):
    kind = draw(st.sampled_from(["change"] * 12 + ["tombstone", "no key", "other key", "other value", "cut",
                                                   "altered", "other table", "no table", "window", "null image",
                                                   "bad position", "short"]))
    i = draw(st.integers(0, 40))
    op = draw(st.sampled_from("cccuuud" + ("rtx" if draw(st.integers(0, 9)) == 0 else "")))
    position = _pos(draw(st.integers(1, 60)))
    key = KEY_WRITER.encode({"id": i})
    if kind == "tombstone":
        return offset, key, None
    if kind == "no key":
        key = None
    elif kind == "other key":
        key = OTHER_KEY_WRITER.encode({"id": i, "k": 1})
    value = _event(op, position if kind != "bad position" else draw(st.sampled_from(["12", "x" * ENCODED_WIDTH,
                                                                                      "٣" * ENCODED_WIDTH])), i,
                   db=DB if kind != "other table" else "other", table=None if kind == "no table" else TABLE,
                   null_image=kind == "null image", window=kind == "window", wide=kind == "other value")
    if kind == "cut":
        value = value[:draw(st.integers(10, len(value) - 1))]
    elif kind == "short":  # (shorter than its framing)
        value = value[:draw(st.integers(0, 9))]
    elif kind == "altered":
        at = draw(st.integers(10, len(value) - 1))
        value = value[:at] + bytes([draw(st.integers(0, 255))]) + value[at + 1:]
    return offset, key, value


@st.composite
def _partitions(draw):
    n = draw(st.integers(1, 40))
    records = [draw(_record(offset)) for offset in range(n)]
    highs = sorted(draw(st.lists(st.integers(0, 30), min_size=2, max_size=2)))
    data_high = "" if highs[0] == 0 else _pos(highs[0])
    marker_high = "" if highs[1] == 0 or draw(st.booleans()) else _pos(highs[1])
    if data_high and marker_high == data_high:
        marker_high = ""
    limit = draw(st.one_of(st.none(), st.integers(1, 60).map(_pos)))
    return records, data_high, marker_high, limit


def _buffer(data_high: str, marker_high: str) -> WindowBuffer:
    return WindowBuffer.from_state({"version": 1, "data_high": data_high, "marker_high": marker_high, "windows": []})


def _reference(records, start, data_high, marker_high, limit):
    """The loop's decisions from ``start`` while records are plain: (index it stops at,
    buffer highs and stats, kept)."""
    buf = _buffer(data_high, marker_high)
    kept = []
    i = start
    framing = (records[start][1] or b"")[:10], (records[start][2] or b"")[:10]
    for i in range(start, len(records)):
        offset, key_b, value_b = records[i]
        if value_b is None:
            continue
        if key_b is None or (key_b[:10], value_b[:10]) != framing:
            break
        try:
            value = HEADER(value_b, 10)
        except SerdeError:
            break
        op, position, src = value["op"], value["position"], value["source"]
        if (op not in ("c", "u", "d") or value["snapshot_window"] is not None
                or (src["db"], src["table"]) != NAMES or (limit is not None and position > limit)):
            break
        row_at = value["row_at"]
        try:
            emit = buf.push_change("", op, None if op == "d" or row_at is None else object(), position)
        except DBLogError:
            break
        if emit:
            kept.append(Kept(op, None, position, SID, SCHEMA, int(src["ts_ms"] or 0), offset, key_b, value_b,
                              NAMES, False, None, ROW_READER if row_at is not None else None, row_at or 0))
    else:
        i = len(records)
    return i, buf.highs(), buf.stats["changes"], buf.stats["copies"], kept


def _scan(records, start, data_high, marker_high, limit):
    kept: list = []
    value_b, key_b = records[start][2], records[start][1]
    end, high, changes, copies = native_scan(PROGRAM, INDICES, records, start, (value_b or b"")[:10].ljust(10, b"?"),
                                             (key_b or b"")[:10].ljust(10, b"?"), DB.encode(), TABLE.encode(),
                                             ENCODED_WIDTH, data_high, marker_high, limit, kept, KEPT_MEMBERS,
                                             (SID, SCHEMA, NAMES, False, ROW_READER))
    buf = _buffer(data_high, marker_high)
    buf.took_changes(high, changes, copies)
    return end, buf.highs(), buf.stats["changes"], buf.stats["copies"], kept


def _fields(k: Kept) -> tuple:
    return tuple(getattr(k, f.name) for f in fields(Kept))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_partitions(), st.data())
def test_the_scan_takes_what_the_loop_would_and_stops_where_it_would_not(partition, data):
    records, data_high, marker_high, limit = partition
    start = data.draw(st.integers(0, len(records) - 1))
    want = _reference(records, start, data_high, marker_high, limit)
    got = _scan(records, start, data_high, marker_high, limit)
    assert got[:4] == want[:4]
    assert [_fields(k) for k in got[4]] == [_fields(k) for k in want[4]]


def test_a_plain_run_is_taken_whole():
    records = [(o, KEY_WRITER.encode({"id": o % 7}), _event("cud"[o % 3], _pos(10 + o), o)) for o in range(500)]
    records[100] = (100, records[100][1], None)  # a tombstone is passed over
    records[200] = records[199][:2] + (records[199][2],)  # a copy (the same position again) is counted
    end, highs, changes, copies, kept = _scan(records, 0, "", "", None)
    assert (end, highs, changes, copies) == (500, (_pos(509), ""), 498, 1)
    assert [k.offset for k in kept] == [o for o in range(500) if o not in (100, 200)]
    assert all(k.row_reader is ROW_READER and k.row_at > 0 and k.table is NAMES for k in kept)


@pytest.mark.parametrize("stop", ["no key", "other table", "window", "limit", "ordering", "op r", "cut"])
def test_the_scan_stops_at_the_first_record_it_does_not_take(stop):
    records = [(o, KEY_WRITER.encode({"id": o}), _event("c", _pos(10 + o), o)) for o in range(6)]
    key, marker_high, limit = records[3][1], "", None
    if stop == "no key":
        records[3] = (3, None, records[3][2])
    elif stop == "other table":
        records[3] = (3, key, _event("c", _pos(13), 3, table="t2"))
    elif stop == "window":
        records[3] = (3, key, _event("c", _pos(13), 3, window=True))
    elif stop == "limit":
        limit = _pos(12)
    elif stop == "ordering":  # (above the data high, at or below a marker's: only before the first taken)
        marker_high = _pos(10)
    elif stop == "op r":
        records[3] = (3, key, _event("r", _pos(13), 3))
    else:
        records[3] = (3, key, records[3][2][:-5])
    end, _, changes, _, kept = _scan(records, 0, "", marker_high, limit)
    taken = 0 if stop == "ordering" else 3
    assert (end, changes, len(kept)) == (taken, taken, taken)


def test_the_scan_refuses_members_of_anything_but_a_slots_class():
    records = [(0, KEY_WRITER.encode({"id": 1}), _event("c", _pos(10), 1))]
    for members in (KEPT_MEMBERS[:-1], (*KEPT_MEMBERS[:-1], object()), (*KEPT_MEMBERS[:-1], WindowBuffer.stats)):
        with pytest.raises((TypeError, ValueError)):
            native_scan(PROGRAM, INDICES, records, 0, records[0][2][:10], records[0][1][:10], DB.encode(),
                        TABLE.encode(), ENCODED_WIDTH, "", "", None, [], members, (SID, SCHEMA, NAMES, False, None))


def test_the_buffer_takes_a_scans_changes_only_with_no_window_open():
    buf = _buffer(_pos(5), _pos(7))
    with pytest.raises(DBLogError):
        buf.took_changes(_pos(6), 1, 0)  # (at or below the marker high: an ordering error)
    buf.took_changes(_pos(9), 2, 1)
    assert buf.highs() == (_pos(9), _pos(7)) and (buf.stats["changes"], buf.stats["copies"]) == (2, 1)
