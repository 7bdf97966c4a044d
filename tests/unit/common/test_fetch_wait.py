"""The fetch wait of a reader: short while the broker answers within it, longer when it
does not (a deep partition on the embedded broker), short again when answers come fast."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.kafka.fetch_wait import CEILING_MS, FAST_READS, FLOOR_MS, GROWTH, AdaptiveConsumer, FetchWait


def test_it_starts_at_the_floor_and_grows_by_steps_to_the_ceiling():
    w = FetchWait()
    assert w.ms == FLOOR_MS
    seen = [w.ms]
    while w.grow():
        seen.append(w.ms)
    assert seen[1] == FLOOR_MS * GROWTH
    assert seen[-1] == CEILING_MS and w.ms == CEILING_MS
    assert not w.grow()  # at the ceiling: no change, the read's stall check reports it


def test_starvation_is_judged_over_a_few_answers_and_never_below_a_connection_set_up():
    assert FetchWait().starved_after_s() >= 0.1
    w = FetchWait()
    w.grow()
    w.grow()
    assert w.starved_after_s() == 3 * w.ms / 1000


def test_it_comes_back_down_only_after_several_fast_reads_in_a_row():
    w = FetchWait()
    w.grow()
    w.grow()  # 160 ms
    for _ in range(FAST_READS - 1):
        assert not w.answered(0.005)
    assert w.answered(0.005) and w.ms == 80
    # a slow read in between starts the count again
    w.answered(0.001)
    w.answered(0.5)
    assert not w.answered(0.001) and w.ms == 80


def test_a_wait_the_client_settings_give_is_the_floor():
    w = FetchWait.for_client({"fetch.wait.max.ms": "500"})
    assert w.ms == w.floor_ms == 500
    for _ in range(10):
        w.answered(0.0)
    assert w.ms == 500
    assert FetchWait.for_client({}).ms == FLOOR_MS
    assert FetchWait.for_client({"fetch.wait.max.ms": 20000}).ceiling_ms == 20000


@given(st.lists(st.one_of(st.just("grow"), st.floats(min_value=0, max_value=20)), max_size=60))
def test_the_wait_stays_between_floor_and_ceiling(steps):
    w = FetchWait()
    for step in steps:
        w.grow() if step == "grow" else w.answered(step)
        assert FLOOR_MS <= w.ms <= CEILING_MS


def test_the_consumer_is_made_with_the_current_wait_and_made_again_when_it_changes():
    c = AdaptiveConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "fetch.wait.max.ms": 30})
    assert "fetch.wait.max.ms" not in c.config and c.wait.ms == 30
    first = c.consumer
    assert c.consumer is first  # the same while the wait is the same
    assert c.starved("t[0]", 5)
    assert c.consumer is first  # never replaced in the middle of a read: at the next assign
    c.assign([])
    second = c.consumer
    assert second is not first and c.rebuilds == 1
    c.assign([])
    assert c.consumer is second
    c.close()


def test_a_wait_that_comes_down_during_a_read_keeps_the_reads_consumer():
    """``answered`` may halve the wait at a read's first records: the read goes on with its
    assigned consumer (made anew there, it would have no partition and the read would stall)."""
    c = AdaptiveConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}, FetchWait())
    c.wait.grow()
    c.wait.grow()
    c.assign([])
    reading = c.consumer
    for _ in range(FAST_READS):
        c.answered(0.001)
    assert c.wait.ms < FLOOR_MS * GROWTH * GROWTH
    assert c.consumer is reading
    c.close()
