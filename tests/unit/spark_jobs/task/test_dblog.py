"""The DBLog window rule (spark_jobs/task/dblog.py) against a simulated source database.

The simulation: a table (single, composite or string primary key) starts with random
rows; a binlog records every change (inserts, updates, deletes, primary-key changes as a
delete plus a create in one event, multi-row events, delete and re-insert of a key) and
the OPEN/CLOSE marker rows of snapshot chunks.  A chunk's SELECT is a snapshot of the
table at one instant strictly between its OPEN and its CLOSE (a non-locking read sees one
state somewhere in the window; now and then a chunk is read in pieces at several
instants, since the rule only needs each row to be seen at some instant of its window);
up to three readers have windows open at once, and one
or two snapshots cover the whole key range in contiguous chunks.  The chunk rows land at
``chunk_row_position(close, i)``, the changes and chunk rows are spread over 1-3 Kafka
partitions by key, the markers go to every partition's buffer.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contract.position import BinlogPosition
from spark_jobs.task.dblog import (
    ChangeRecord,
    ChunkRow,
    Marker,
    Version,
    Window,
    WindowBuffer,
    apply_in_order,
    chunk_row_position,
    dedupe_chunk,
    dedupe_log,
    from_envelope,
    live_rows,
    make_key,
    merge_upsert,
)
from spark_jobs.errors import DBLogError, OrderingError, UnknownWindowError

END = "9" * 30
PROPERTY = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- simulated source
DOMAINS = {
    "int": [(i,) for i in range(10)],
    "composite": [(a, b) for a in range(3) for b in (-1, 0, 5)],
    "string": [(s,) for s in ("", "A", "a", "aa", "ab", "b", "ba", "z", "é")],
}
COLUMNS = {"int": ("id",), "composite": ("a", "b"), "string": ("code",)}


class Source:
    """A table plus its binlog: every write is a binlog event at a fresh position."""

    def __init__(self, shape: str = "int", initial: dict | None = None, initial_keys=()) -> None:
        self.shape = shape
        self.domain = DOMAINS[shape]
        self._v = itertools.count(1)
        self.state: dict = {}
        for k in initial_keys:
            self.state[k] = self.row(k)
        if initial:
            self.state.update(initial)
        self.initial = dict(self.state)
        self.file, self.pos, self.events = 1, 4, 0
        self.changes: list[ChangeRecord] = []
        self.markers: list[Marker] = []
        self.rows: list[ChunkRow] = []
        self.windows: list[Window] = []

    def row(self, k) -> dict:
        return {**dict(zip(COLUMNS[self.shape], k)), "v": next(self._v)}

    def _event(self) -> BinlogPosition:
        self.events += 1
        if self.events % 7 == 0:  # binlog rotation now and then
            self.file, self.pos = self.file + 1, 4
        else:
            self.pos += 37
        return BinlogPosition(self.file, self.pos)

    # one binlog event with several rows: ops are ("ins"|"upd"|"del", k) or ("pk", k_old, k_new)
    def event(self, *ops) -> None:
        base = self._event()
        for i, op in enumerate(ops):
            kind, k = op[0], op[1]
            if kind == "ins":
                assert k not in self.state
                self.state[k] = r = self.row(k)
                self.changes.append(ChangeRecord(k, "c", r, base.encode_row(2 * i)))
            elif kind == "upd":
                assert k in self.state
                self.state[k] = r = self.row(k)
                self.changes.append(ChangeRecord(k, "u", r, base.encode_row(2 * i)))
            elif kind == "del":
                del self.state[k]
                self.changes.append(ChangeRecord(k, "d", None, base.encode_row(2 * i)))
            elif kind == "pk":  # UPDATE that changes the key: d old (2i), c new (2i+1)
                new = op[2]
                assert new not in self.state
                del self.state[k]
                self.state[new] = r = self.row(new)
                self.changes.append(ChangeRecord(k, "d", None, base.encode_row(2 * i)))
                self.changes.append(ChangeRecord(new, "c", r, base.encode_row(2 * i + 1)))
            else:
                raise AssertionError(kind)

    def ins(self, k):
        self.event(("ins", k))

    def upd(self, k):
        self.event(("upd", k))

    def delete(self, k):
        self.event(("del", k))

    # a chunk: OPEN marker, read (snapshot of its key range), CLOSE marker
    def open(self, sid: str, cid: int, keys) -> dict:
        p = self._event().encode()
        self.markers.append(Marker("OPEN", sid, cid, p))
        return {"sid": sid, "cid": cid, "keys": sorted(keys), "cursor": 0, "open": p, "read": []}

    def read(self, chunk: dict, n: int | None = None) -> None:
        """Read the chunk's next ``n`` keys of its range (all by default) as the table is now.

        Reading in several steps models a read that is not one instant: each row is still
        seen at some instant of the window, which is all the rule needs."""
        lo = chunk["cursor"]
        hi = len(chunk["keys"]) if n is None else min(len(chunk["keys"]), lo + n)
        chunk["read"] += [(k, self.state[k]) for k in chunk["keys"][lo:hi] if k in self.state]
        chunk["cursor"] = hi

    @staticmethod
    def done(chunk: dict) -> bool:
        return chunk["cursor"] == len(chunk["keys"])

    def close(self, chunk: dict) -> Window:
        assert self.done(chunk)
        p = self._event().encode()
        self.markers.append(Marker("CLOSE", chunk["sid"], chunk["cid"], p))
        w = Window(chunk["sid"], chunk["cid"], chunk["open"], p)
        self.windows.append(w)
        self.rows.extend(ChunkRow.at(k, r, w, i) for i, (k, r) in enumerate(chunk["read"]))
        return w

    def chunk(self, sid: str, cid: int, keys=None) -> Window:
        c = self.open(sid, cid, self.domain if keys is None else keys)
        self.read(c)
        return self.close(c)

    # Kafka view
    def part(self, key, n: int) -> int:
        return self.domain.index(key) % n

    def feed(self, p: int, n: int) -> list:
        """Partition p's records merged by position with every marker."""
        data = [r for r in self.changes + self.rows if self.part(r.key, n) == p]
        return sorted(data + self.markers, key=lambda r: r.position)


def draw_change(data, src: Source) -> None:
    """One random binlog event (1-3 rows on distinct keys), or a delete + re-insert."""
    n = data.draw(st.integers(1, 3), label="rows in event")
    ops, used, state = [], set(), set(src.state)
    for _ in range(n):
        present = sorted(k for k in state if k not in used)
        absent = sorted(k for k in src.domain if k not in state and k not in used)
        kinds = (["upd", "del"] if present else []) + (["ins"] if absent else [])
        kinds += ["pk"] if present and absent else []
        kinds += ["delre"] if present and not ops else []
        if not kinds:
            break
        kind = data.draw(st.sampled_from(kinds), label="kind")
        if kind == "delre":  # delete, then re-insert the same key, as two events
            k = data.draw(st.sampled_from(present))
            src.delete(k)
            src.ins(k)
            return
        if kind == "ins":
            k = data.draw(st.sampled_from(absent))
            ops.append(("ins", k)); state.add(k); used.add(k)
        elif kind in ("upd", "del"):
            k = data.draw(st.sampled_from(present))
            ops.append((kind, k)); used.add(k)
            if kind == "del":
                state.discard(k)
        else:
            k = data.draw(st.sampled_from(present))
            new = data.draw(st.sampled_from(absent))
            ops.append(("pk", k, new)); state.discard(k); state.add(new); used |= {k, new}
    if ops:
        src.event(*ops)


@st.composite
def scenarios(draw):
    data = _Drawer(draw)
    shape = draw(st.sampled_from(sorted(DOMAINS)), label="shape")
    domain = DOMAINS[shape]
    src = Source(shape, initial_keys=draw(st.sets(st.sampled_from(domain)), label="initial keys"))
    pending = []
    for s in range(draw(st.integers(1, 2), label="snapshots")):
        cuts = draw(st.sets(st.integers(1, len(domain) - 1), max_size=4), label="chunk cuts")
        bounds = [0, *sorted(cuts), len(domain)]
        pending += [(f"snap-{s}", cid, domain[lo:hi]) for cid, (lo, hi) in enumerate(zip(bounds, bounds[1:]))]
    readers = draw(st.integers(1, 3), label="parallel readers")
    budget = draw(st.integers(0, 30), label="change events")
    inflight: list[dict] = []
    while pending or inflight or budget:
        actions = ["change"] if budget else []
        if pending and len(inflight) < readers:
            actions.append("open")
        if not all(Source.done(c) for c in inflight):
            actions.append("read")
        if any(Source.done(c) for c in inflight):
            actions.append("close")
        act = draw(st.sampled_from(actions), label="action")
        if act == "change":
            budget -= 1
            draw_change(data, src)
        elif act == "open":
            sid, cid, keys = pending.pop(0)
            inflight.append(src.open(sid, cid, keys))
        elif act == "read":
            c = draw(st.sampled_from([c for c in inflight if not Source.done(c)]), label="reader")
            torn = draw(st.integers(0, 3), label="torn read") == 0  # mostly one instant
            src.read(c, draw(st.integers(1, len(c["keys"])), label="keys read") if torn else None)
        else:
            c = draw(st.sampled_from([c for c in inflight if Source.done(c)]), label="closer")
            inflight.remove(c)
            src.close(c)
    return src, draw(st.integers(1, 3), label="partitions"), readers


class _Drawer:
    """Gives draw_change the ``data.draw`` interface inside a composite strategy."""

    def __init__(self, draw):
        self.draw = draw


def kept_rows(out):
    return [r for r in out if r.op == "r"]


# ---------------------------------------------------------------------------- properties
@PROPERTY
@given(scenarios(), st.randoms(use_true_random=False))
def test_changes_plus_deduplicated_chunks_reproduce_the_table(scenario, rnd):
    src, _, _ = scenario
    out = dedupe_log(src.changes, src.rows)
    dropped = len(src.rows) - len(kept_rows(out))
    event(f"chunk rows dropped: {'0' if not dropped else '1-3' if dropped < 4 else '4+'}")
    event(f"overlapping windows: {any(a.open < b.open < a.close for a in src.windows for b in src.windows)}")
    event(f"raw chunk rows alone would be wrong: {apply_in_order(src.changes + [r.as_record() for r in src.rows]) != src.state}")
    assert [r.position for r in out] == sorted(r.position for r in out)
    assert apply_in_order(out) == src.state
    # The upsert view, in any arrival order, with the kept rows at their CLOSE positions...
    records = list(out)
    rnd.shuffle(records)
    assert live_rows(merge_upsert(records)) == src.state
    # ... or with every raw chunk row ranked at its window's OPEN, no dedup at all.
    raw = src.changes + src.rows
    rnd.shuffle(raw)
    assert live_rows(merge_upsert(raw)) == src.state
    # Replaying into a merged state changes nothing.
    state = merge_upsert(records)
    assert merge_upsert(raw, dict(state)) == merge_upsert(raw + records)
    assert merge_upsert(records, dict(state)) == state


@PROPERTY
@given(scenarios())
def test_dedupe_chunk_is_the_rule(scenario):
    src, _, _ = scenario
    for w in src.windows:
        rows = [r for r in src.rows if r.window == w]
        changed = {c.key for c in src.changes if w.open < c.position < w.close}
        kept = dedupe_chunk(rows, src.changes)
        assert kept == [r.as_record() for r in rows if r.key not in changed]
        assert all(r.position > w.close and r.op == "r" and r.window == w for r in kept)
        # pre-filtered changes give the same answer
        assert dedupe_chunk(rows, [c for c in src.changes if w.contains(c.position)]) == kept


@PROPERTY
@given(scenarios())
def test_window_buffer_equals_batch_and_is_bounded(scenario):
    src, n, readers = scenario
    out = dedupe_log(src.changes, src.rows)
    emitted = []
    for p in range(n):
        feed = src.feed(p, n)
        buf = WindowBuffer()
        got, pushed_changes = [], []
        for item in feed:
            r = buf.push(item)
            if r is not None:
                got.append(r)
            if isinstance(item, ChangeRecord):
                pushed_changes.append(item)
            # bounded: at most one window per reader; keys only from changes inside live windows
            assert buf.window_count <= readers
            live_opens = [w[2] for w in buf.windows()]
            since = sum(1 for c in pushed_changes if live_opens and c.position > min(live_opens))
            assert buf.tracked_keys <= since * readers
        buf.advance(END)
        assert buf.is_empty and buf.tracked_keys == 0
        assert got == [r for r in out if src.part(r.key, n) == p]
        assert buf.stats["rows_kept"] + buf.stats["rows_dropped"] == sum(
            1 for r in src.rows if src.part(r.key, n) == p)
        # replay of the same input: same output
        assert WindowBuffer().feed(feed) == got
        emitted += got
    assert sorted(emitted, key=lambda r: r.position) == out


def _with_copies(feed: list, data) -> list:
    """``feed`` with copies of earlier records drawn in after some of them."""
    noisy = []
    for i, item in enumerate(feed):
        noisy.append(item)
        if i and data.draw(st.integers(0, 4), label="copy?") == 0:
            noisy.append(feed[data.draw(st.integers(0, i), label="copy of")])
    return noisy


@PROPERTY
@given(scenarios(), st.data())
def test_window_buffer_drops_copies_and_resumes_from_checkpoint(scenario, data):
    src, n, _ = scenario
    for p in range(n):
        feed = src.feed(p, n)
        clean = WindowBuffer().feed(feed)
        # copies: earlier records of the same feed re-delivered later (producer restart,
        # aborted transaction) are dropped, whatever their kind
        noisy = _with_copies(feed, data)
        buf = WindowBuffer()
        assert buf.feed(noisy) == clean
        assert buf.stats["copies"] == len(noisy) - len(feed)
        assert buf.feed(feed) == []  # the whole input again: all copies
        # checkpoint anywhere, restore (through JSON, as a state store might), continue
        cut = data.draw(st.integers(0, len(feed)), label="checkpoint at")
        first = WindowBuffer()
        head = first.feed(feed[:cut])
        state = json.loads(json.dumps(first.to_state()))
        resumed = WindowBuffer.from_state(state)
        assert head + resumed.feed(feed[cut:]) == clean
        # and a restart that replays from before the checkpoint emits nothing twice
        back = data.draw(st.integers(0, cut), label="replay from")
        again = WindowBuffer.from_state(state)
        assert again.feed(feed[back:]) == clean[len(head):]


# ---------------------------------------------------------------------------- the rule is needed
def test_keeping_every_chunk_row_breaks_the_table():
    """Without the rule a row read before a delete (or update) in its window comes back."""
    src = Source(initial_keys=[(1,), (2,)])
    c = src.open("s", 0, src.domain)
    src.read(c)
    src.delete((1,))
    src.upd((2,))
    src.close(c)
    everything = src.changes + [r.as_record() for r in src.rows]
    assert apply_in_order(everything) != src.state  # (1,) resurrected, (2,) stale
    assert apply_in_order(everything)[(1,)] == src.initial[(1,)]
    out = dedupe_log(src.changes, src.rows)
    assert apply_in_order(out) == src.state == {(2,): src.state[(2,)]}
    assert kept_rows(out) == []
    # as an upsert: raw rows must rank at OPEN; ranked at CLOSE they would win
    assert live_rows(merge_upsert(src.changes + src.rows)) == src.state
    assert live_rows(merge_upsert(everything)) != src.state


# ---------------------------------------------------------------------------- the paper's cases
def test_dblog_paper_example():
    """DBLog paper, figure 3: chunk k1..k6 read between L and H, log events for k1 and k3
    inside the window: k1 and k3 are removed from the chunk, k2 k4 k5 k6 emitted at H."""
    keys = [(i,) for i in range(1, 7)]
    src = Source(initial_keys=keys)
    c = src.open("s", 0, keys)
    src.upd((3,))
    src.read(c)
    src.upd((1,))
    w = src.close(c)
    out = dedupe_log(src.changes, src.rows)
    assert [r.key for r in kept_rows(out)] == [(2,), (4,), (5,), (6,)]
    assert all(r.position > w.close for r in kept_rows(out))
    assert [r.op for r in out] == ["u", "u", "r", "r", "r", "r"]
    assert apply_in_order(out) == src.state


@pytest.mark.parametrize("read_at", [0, 1, 2])
def test_delete_and_reinsert_inside_a_window(read_at):
    src = Source(initial_keys=[(1,), (2,)])
    c = src.open("s", 0, src.domain)
    steps = [lambda: src.delete((1,)), lambda: src.ins((1,))]
    for i in range(3):
        if i == read_at:
            src.read(c)
        if i < 2:
            steps[i]()
    src.close(c)
    out = dedupe_log(src.changes, src.rows)
    assert [r.key for r in kept_rows(out)] == [(2,)]
    assert apply_in_order(out) == src.state
    assert src.state[(1,)] != src.initial[(1,)]


def test_row_first_inserted_inside_a_window():
    """A key born inside the window: if the read saw it, the chunk row is dropped and the
    create event carries it; if not, there is no chunk row at all."""
    for read_after in (False, True):
        src = Source(initial_keys=[(2,)])
        c = src.open("s", 0, src.domain)
        if not read_after:
            src.read(c)
        src.ins((5,))
        if read_after:
            src.read(c)
        src.close(c)
        out = dedupe_log(src.changes, src.rows)
        assert [r.key for r in kept_rows(out)] == [(2,)]
        assert apply_in_order(out) == src.state


def test_insert_and_delete_inside_a_window_seen_by_the_read():
    src = Source(initial_keys=[])
    c = src.open("s", 0, src.domain)
    src.ins((4,))
    src.read(c)
    src.delete((4,))
    src.close(c)
    assert [r.key for r in src.rows] == [(4,)]
    out = dedupe_log(src.changes, src.rows)
    assert kept_rows(out) == [] and apply_in_order(out) == {} == src.state


def test_primary_key_change_inside_a_window():
    src = Source(initial_keys=[(1,), (3,)])
    c = src.open("s", 0, src.domain)
    src.read(c)
    src.event(("pk", (1,), (7,)))
    src.close(c)
    assert [c.op for c in src.changes] == ["d", "c"]
    assert src.changes[0].position[:20] == src.changes[1].position[:20]
    out = dedupe_log(src.changes, src.rows)
    assert [r.key for r in kept_rows(out)] == [(3,)]
    assert apply_in_order(out) == src.state == {(3,): src.initial[(3,)], (7,): src.state[(7,)]}


def test_changes_outside_the_window_do_not_drop_the_row():
    src = Source(initial_keys=[(1,)])
    src.upd((1,))  # before OPEN: the read sees its result
    w = src.chunk("s", 0)
    src.upd((1,))  # after CLOSE: beats the chunk row by position
    out = dedupe_log(src.changes, src.rows)
    assert [(r.op, r.position > w.close) for r in out] == [("u", False), ("r", True), ("u", True)]
    assert apply_in_order(out) == src.state
    assert dedupe_chunk(src.rows, src.changes) == [src.rows[0].as_record()]


def test_overlapping_windows_of_parallel_readers():
    src = Source(initial_keys=[(i,) for i in range(6)])
    a = src.open("s", 0, [(0,), (1,), (2,)])
    src.upd((1,))                       # inside a only
    b = src.open("s", 1, [(3,), (4,), (5,)])
    src.upd((4,))                       # inside a and b
    src.upd((2,))                       # inside a and b
    src.read(b)
    src.read(a)
    wa = src.close(a)
    src.upd((5,))                       # inside b only
    src.upd((0,))                       # after a: does not drop a's row
    wb = src.close(b)
    out = dedupe_log(src.changes, src.rows)
    assert [(r.window.chunk_id, r.key) for r in kept_rows(out)] == [(0, (0,)), (1, (3,))]
    assert apply_in_order(out) == src.state
    for n in (1, 2, 3):
        streamed = []
        for p in range(n):
            buf = WindowBuffer()
            streamed += buf.feed(src.feed(p, n))
            buf.advance(END)
            assert buf.is_empty
        assert sorted(streamed, key=lambda r: r.position) == out
    assert wa.open < wb.open < wa.close < wb.close


def test_a_later_snapshot_of_the_same_key():
    src = Source(initial_keys=[(1,)])
    src.chunk("s1", 0)
    src.upd((1,))
    src.chunk("s2", 0)
    out = dedupe_log(src.changes, src.rows)
    assert [r.window.snapshot_id for r in kept_rows(out)] == ["s1", "s2"]
    assert apply_in_order(out) == src.state
    assert live_rows(merge_upsert(src.rows + src.changes)) == src.state


# ---------------------------------------------------------------------------- merge_upsert
def test_tombstone_keeps_an_older_record_from_resurrecting_the_row():
    src = Source(initial_keys=[(1,)])
    c = src.open("s", 0, src.domain)
    src.read(c)
    src.delete((1,))
    src.close(c)
    state = merge_upsert(src.changes)
    assert state == {(1,): Version(src.changes[0].position, None)}
    merge_upsert(src.rows, state)  # the raw chunk row ranks at OPEN, below the delete
    assert live_rows(state) == {} and state[(1,)].row is None
    assert merge_upsert([src.changes[0]], state) == state


def test_merge_upsert_rejects_other_types():
    with pytest.raises(TypeError):
        merge_upsert([Marker("OPEN", "s", 0, "1" * 30)])


# ---------------------------------------------------------------------------- WindowBuffer contract
def _window_scenario():
    src = Source(initial_keys=[(1,), (2,)])
    c = src.open("s", 0, src.domain)
    src.upd((1,))
    src.read(c)
    src.close(c)
    return src


def test_buffer_needs_the_open_marker():
    src = _window_scenario()
    feed = [x for x in src.feed(0, 1) if not (isinstance(x, Marker) and x.kind == "OPEN")]
    with pytest.raises(UnknownWindowError):
        WindowBuffer().feed(feed)


def test_buffer_refuses_a_broken_merge_order():
    src = _window_scenario()
    feed = src.feed(0, 1)
    close = next(i for i, x in enumerate(feed) if isinstance(x, Marker) and x.kind == "CLOSE")
    change = next(i for i, x in enumerate(feed) if isinstance(x, ChangeRecord))
    late = feed[:change] + feed[change + 1:close + 1] + [feed[change]] + feed[close + 1:]
    with pytest.raises(OrderingError):
        WindowBuffer().feed(late)


def test_buffer_without_close_marker_closes_at_the_first_row():
    src = _window_scenario()
    feed = [x for x in src.feed(0, 1) if not (isinstance(x, Marker) and x.kind == "CLOSE")]
    buf = WindowBuffer()
    out = buf.feed(feed)
    assert out == dedupe_log(src.changes, src.rows)
    assert buf.window_count == 1
    buf.push(ChangeRecord((9,), "c", {"id": 9, "v": 0}, BinlogPosition(99, 4).encode()))
    assert buf.is_empty


def test_buffer_state_does_not_grow_with_the_table():
    buf = WindowBuffer()
    pos = (BinlogPosition(1, 4 + 10 * i).encode() for i in itertools.count())
    for k in range(5000):  # a big table streaming with no snapshot running
        buf.push(ChangeRecord((k,), "c", {"id": k}, next(pos)))
    assert buf.is_empty and buf.tracked_keys == 0
    buf.push(Marker("OPEN", "s", 0, next(pos)))
    for k in range(3):  # inside the window: tracked
        buf.push(ChangeRecord((k,), "u", {"id": k}, next(pos)))
    buf.push(Marker("CLOSE", "s", 0, next(pos)))
    assert buf.tracked_keys == 3 and buf.window_count == 1
    for k in range(3, 1000):  # after CLOSE: not tracked, and the window is gone
        buf.push(ChangeRecord((k,), "u", {"id": k}, next(pos)))
    assert buf.is_empty and buf.tracked_keys == 0
    assert buf.stats["changes"] == 5000 + 3 + 997


def test_reopened_chunk_replaces_the_old_window():
    src = Source(initial_keys=[(1,), (2,)])
    dead = src.open("s", 0, src.domain)  # producer died: no CLOSE, no rows
    src.upd((1,))
    c = src.open("s", 0, src.domain)     # the chunk read again, same id
    src.upd((2,))
    src.read(c)
    src.close(c)
    buf = WindowBuffer()
    out = buf.feed(src.feed(0, 1))
    assert [r.key for r in kept_rows(out)] == [(1,)]  # (1,) changed before the new OPEN
    assert buf.stats["reopened"] == 1 and dead["open"] < c["open"]
    buf.advance(END)
    assert buf.is_empty


def test_rows_must_match_their_markers():
    src = _window_scenario()
    feed = src.feed(0, 1)
    w = src.windows[0]
    first_change = next(x for x in feed if isinstance(x, ChangeRecord))
    other = Window("s", 0, first_change.position, w.close)  # says it opened later than its OPEN
    bad = [ChunkRow.at(r.key, r.row, other, r.index) if isinstance(r, ChunkRow) else r for r in feed]
    with pytest.raises(DBLogError, match="OPEN marker is at"):
        WindowBuffer().feed(bad)
    # a CLOSE marker at another position than the rows' close
    buf = WindowBuffer()
    buf.feed([x for x in feed if not isinstance(x, ChunkRow) and not (isinstance(x, Marker) and x.kind == "CLOSE")])
    buf.push(ChunkRow.at((2,), {"id": 2}, Window("s", 0, w.open, BinlogPosition(50, 4).encode()), 0))
    with pytest.raises(DBLogError, match="its rows said"):
        buf.push(Marker("CLOSE", "s", 0, BinlogPosition(50, 4, 7).encode()))


# ---------------------------------------------------------------------------- data model
def test_chunk_row_positions_sit_between_close_and_the_next_event():
    close = BinlogPosition(3, 1000, 0).encode()
    ps = [chunk_row_position(close, i) for i in range(3)]
    assert ps == sorted(ps) and ps[0] > close
    assert all(p < BinlogPosition(3, 1001).encode() for p in ps)
    w = Window("s", 1, BinlogPosition(3, 500).encode(), close)
    r = ChunkRow.at((1,), {"id": 1}, w, 2)
    assert r.index == 2 and r.position == ps[2]
    with pytest.raises(DBLogError):
        ChunkRow((1,), {"id": 1}, w, BinlogPosition(3, 1001).encode())
    with pytest.raises(DBLogError):
        ChunkRow((1,), {"id": 1}, w, close)
    with pytest.raises(DBLogError):
        Window("s", 1, close, close)
    with pytest.raises(DBLogError):
        ChangeRecord((1,), "d", {"id": 1}, close)
    with pytest.raises(DBLogError):
        ChangeRecord((1,), "x", {"id": 1}, close)
    with pytest.raises(DBLogError):
        ChangeRecord((1,), "c", {"id": 1}, "12")


def test_from_envelope():
    w = {"snapshot_id": "snap", "chunk_id": 3, "open_position": BinlogPosition(1, 10).encode(),
         "close_position": BinlogPosition(1, 90).encode()}
    row = from_envelope({"a": 1, "b": "x"}, {"op": "r", "before": None, "after": {"a": 1, "b": "x", "v": 2},
                                              "position": chunk_row_position(w["close_position"], 0),
                                              "snapshot_window": w}, ref=17)
    assert isinstance(row, ChunkRow) and row.key == (1, "x") and row.window == Window.from_dict(w)
    assert row.as_record().ref == 17
    d = from_envelope({"a": 1, "b": "x"}, {"op": "d", "before": {"a": 1}, "after": None,
                                            "position": BinlogPosition(1, 50).encode(), "snapshot_window": None})
    assert d == ChangeRecord((1, "x"), "d", None, BinlogPosition(1, 50).encode())
    assert make_key([1, [2, 3]]) == (1, (2, 3))
    with pytest.raises(DBLogError):
        from_envelope(None, {"op": "c", "after": {}, "position": "0" * 30})
    assert Marker("snapshot-window-open", "s", 0, "1" * 30).kind == "OPEN"


def test_apply_in_order_refuses_duplicate_positions():
    r = ChangeRecord((1,), "c", {"id": 1}, "1" * 30)
    with pytest.raises(DBLogError):
        apply_in_order([r, r])


def _push_changes_as_records(buf: WindowBuffer, items: list) -> list:
    """``items`` fed with :meth:`WindowBuffer.push_change` for the changes (push for the
    rest): what was emitted, a change as its record."""
    out = []
    for item in items:
        if isinstance(item, ChangeRecord):
            if buf.push_change(item.key, item.op, item.row, item.position):
                out.append(item)
        else:
            r = buf.push(item)
            if r is not None:
                out.append(r)
    return out


@PROPERTY
@given(scenarios(), st.data())
def test_push_change_decides_as_push_does(scenario, data):
    src, n, _ = scenario
    for p in range(n):
        noisy = _with_copies(src.feed(p, n), data)
        by_record, by_change = WindowBuffer(), WindowBuffer()
        assert _push_changes_as_records(by_change, noisy) == by_record.feed(noisy)
        assert by_change.to_state() == by_record.to_state()


@pytest.mark.parametrize("args, error", [
    (("k", "c", {"id": 1}, "12"), DBLogError),            # not a position
    (("k", "x", {"id": 1}, "0" * 30), DBLogError),        # not an op
    (("k", "c", None, "0" * 30), DBLogError),             # a create without its row
    (("k", "d", {"id": 1}, "0" * 30), DBLogError),        # a delete with one
    (("k", "c", {"id": 1}, "\u0661" * 30), DBLogError),   # digits, but not ASCII ones
])
def test_push_change_refuses_what_a_change_record_refuses(args, error):
    with pytest.raises(error):
        ChangeRecord(*args)
    with pytest.raises(error):
        WindowBuffer().push_change(*args)


def test_push_change_below_a_marker_breaks_the_merge_order():
    buf = WindowBuffer()
    buf.push(Marker("OPEN", "s", 1, "0" * 29 + "5"))
    with pytest.raises(OrderingError):
        buf.push_change("k", "c", {"id": 1}, "0" * 29 + "4")
