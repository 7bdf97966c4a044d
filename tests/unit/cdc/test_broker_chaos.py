"""The chaos run's evidence that a stopped Kafka node led the partition (pure part)."""

from __future__ import annotations

from cdc.broker_chaos import epochs_across, leader_moved


def test_records_of_a_newer_leader_before_the_next_stop_show_the_move():
    records = [(0, 10, 0), (1, 11, 0), (2, 30, 1), (3, 60, 2)]
    assert epochs_across(records, 2, until_ms=50) == (0, 1)
    assert leader_moved(epochs_across(records, 2, until_ms=50))


def test_the_old_leaders_records_past_the_watermark_are_not_a_new_leaders():
    """The end offset read at the stop is the high watermark: the killed leader had appended
    records past it in its own epoch (seen in a chaos run: end 16, epoch 0 up to 94). With no
    record of the new leader before the next stop, the records after it tell."""
    records = [(i, 10 + i, 0) for i in range(94)] + [(95, 500, 1)]
    assert epochs_across(records, 16, until_ms=400) == (0, 1)
    assert not leader_moved(epochs_across([(i, 10 + i, 0) for i in range(94)], 16, until_ms=400))


def test_nothing_past_the_stop_is_no_evidence():
    assert epochs_across([(0, 1, 0)], 1, until_ms=None) == (0, -1)
    assert not leader_moved((0, -1)) and not leader_moved((-1, 3))
