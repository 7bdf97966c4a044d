"""Which topics' tasks write the table sinks under their own partition's turn."""

from __future__ import annotations

from spark_jobs.planning.partition_turns import batch_turn_keys, key_partition_counts, partition_turn_keys


def test_key_partition_counts_per_topic_and_topics_whose_count_changed():
    parts = [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    counts, seen, changed = key_partition_counts(parts, {}, [])
    assert (counts, seen, changed) == ({"a": 3, "b": 1}, {"a": 3, "b": 1}, [])
    # a's count grows: its tasks take the whole turn from then on, also once it is steady
    counts, seen, changed = key_partition_counts(parts + [("a", 3)], seen, changed)
    assert (counts, seen, changed) == ({"b": 1}, {"a": 4, "b": 1}, ["a"])
    counts, seen, changed = key_partition_counts(parts + [("a", 3), ("c", 0)], seen, changed)
    assert (counts, seen, changed) == ({"b": 1, "c": 1}, {"a": 4, "b": 1, "c": 1}, ["a"])
    assert key_partition_counts([], seen, changed) == ({}, seen, ["a"])  # (a topic not listed keeps its count)


def test_partition_turns_only_for_topics_with_one_key_schema():
    counts = {"a": 3, "b": 1, "c": 2}
    fps = {"a": ["00" * 8], "b": ["11" * 8, "22" * 8], "d": ["33" * 8]}
    # b's table had two key schemas (a key column's type changed), c's none known, d no count
    assert partition_turn_keys(counts, fps) == {"a": (3, "00" * 8)}
    assert partition_turn_keys({}, fps) == {}


def test_no_partition_turns_for_debezium_input_several_sources_or_an_unfixed_schemas_end():
    class NoStore:  # never asked: each case is decided before the store is read
        def refresh_until(self, end):
            raise AssertionError("the schema store was read")

    counts = {"cdc.shop.orders": 2}
    assert batch_turn_keys("cdc", NoStore(), counts, 10, debezium=True, several_sources=False) == {}
    assert batch_turn_keys("cdc", NoStore(), counts, 10, debezium=False, several_sources=True) == {}
    assert batch_turn_keys("cdc", NoStore(), counts, 0, debezium=False, several_sources=False) == {}
    assert batch_turn_keys("cdc", NoStore(), {}, 10, debezium=False, several_sources=False) == {}
