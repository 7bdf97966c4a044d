"""Lost Kafka history as the cdc-kafka source sees it: detection, what a batch then reads,
the offset JSON that records it, and the checkpoint files the merge job reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.input.data_loss import DataLoss, apply_data_loss, data_loss_message, detect_data_loss
from spark_jobs.errors import KafkaDataLossError
from spark_jobs.input.kafka_offsets import ids_from_json, lost_from_json, offsets_from_json, offsets_to_json, plan_end_offsets
from spark_jobs.input.kafka_source import parse_options, plan_ranges
from spark_jobs.input.offset_log import batch_end_offsets, last_batches, next_start

T = ("cdc.shop.orders", 0)


def test_no_loss_when_the_log_still_holds_the_checkpoint():
    assert detect_data_loss({T: 10}, {T: (0, 10)}) == []
    assert detect_data_loss({T: 10}, {T: (10, 50)}, {"cdc.shop.orders": "A"}, {"cdc.shop.orders": "A"}) == []


@pytest.mark.parametrize("start, latest, old_id, new_id, kind, skipped, resume", [
    (2000, (0, 110), None, None, "past-end", None, 0),        # the broker came back empty, 110 new records
    (2000, (0, 2500), "A", "B", "recreated", None, 0),        # recreated and already longer: only the id tells
    (10, (40, 90), None, None, "truncated", 30, 40),          # retention removed 30 unread records
    (10, (0, 90), "A", "B", "recreated", None, 0),
])
def test_kinds_of_loss(start, latest, old_id, new_id, kind, skipped, resume):
    ids_then = {T[0]: old_id} if old_id else {}
    ids_now = {T[0]: new_id} if new_id else {}
    (loss,) = detect_data_loss({T: start}, {T: latest}, ids_then, ids_now)
    assert (loss.kind, loss.skipped, loss.resume) == (kind, skipped, resume)
    assert (loss.checkpoint, loss.earliest, loss.latest) == (start, *latest)
    text = loss.describe()
    assert f"{T[0]} partition 0" in text and f"checkpoint offset {start}" in text
    assert f"earliest offset {latest[0]}, latest {latest[1]}" in text


def test_a_deleted_partition_is_dropped_and_ids_known_on_one_side_only_are_not_compared():
    (gone,) = detect_data_loss({T: 5, ("b", 0): 3}, {("b", 0): (0, 3)})
    assert (gone.topic, gone.kind, gone.resume, gone.earliest) == (T[0], "deleted", None, None)
    assert "gone from the broker" in gone.describe()
    assert detect_data_loss({T: 5}, {T: (0, 9)}, {}, {T[0]: "B"}) == []
    assert apply_data_loss({T: 5, ("b", 0): 3}, [gone]) == {("b", 0): 3}


def test_with_failondataloss_false_a_batch_reads_the_new_log_from_its_start():
    start = {T: 2000, ("other", 0): 7}
    latest = {T: (0, 110), ("other", 0): (0, 9)}
    losses = detect_data_loss(start, latest)
    end = plan_end_offsets(apply_data_loss(start, losses), latest)
    assert end == {T: 110, ("other", 0): 9}
    doc = offsets_to_json(end, ids={T[0]: "B", "other": "O", "absent": "X"}, lost=losses)
    assert ids_from_json(doc) == {T[0]: "B", "other": "O"}  # ids of topics in the offsets only
    assert lost_from_json(doc) == losses and offsets_from_json(doc) == end
    # partitions(start, end) of the source: the lost partition's range starts over
    first = apply_data_loss(offsets_from_json(offsets_to_json(start)), lost_from_json(doc))
    ranges = {(r.topic, r.start, r.end) for r in plan_ranges(first, offsets_from_json(doc))}
    assert ranges == {(T[0], 0, 110), ("other", 7, 9)}
    json.dumps(doc)  # what Spark stores


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_detection_is_exactly_the_offsets_outside_the_log(start, low, length):
    end = low + length
    losses = detect_data_loss({T: start}, {T: (low, end)})
    assert (losses != []) == (start < low or start > end)
    if losses:
        assert losses[0].resume == low
        assert losses[0].skipped == (low - start if start < low else None)


def test_the_error_names_everything_and_what_to_do():
    losses = detect_data_loss({T: 2000}, {T: (0, 110)})
    err = KafkaDataLossError(data_loss_message(losses), losses)
    assert err.losses == losses
    for part in ("cdc.shop.orders partition 0", "checkpoint offset 2000", "earliest offset 0, latest 110",
                 "failOnDataLoss=false", "cdc snapshot"):
        assert part in str(err)
    v = DataLoss(T[0], 0, 100, 0, 20, "vanished", None, None, until=300)
    assert "planned range [100, 300)" in v.describe() and DataLoss.from_json(v.to_json()) == v


def test_failondataloss_option():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    assert parse_options(base).fail_on_data_loss is True
    assert parse_options({**base, "failOnDataLoss": "False"}).fail_on_data_loss is False
    with pytest.raises(ValueError, match="failOnDataLoss must be true or false"):
        parse_options({**base, "failOnDataLoss": "maybe"})


def _offsets_file(directory, batch_id, source_offset):
    (directory / "offsets").mkdir(parents=True, exist_ok=True)
    (directory / "offsets" / str(batch_id)).write_text(
        "v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(source_offset) + "\n")
    (directory / "offsets" / f".{batch_id}.crc").write_bytes(b"\xc2\x00\xaa")  # Hadoop's checksum file


def test_offset_log(tmp_path):
    q = tmp_path / "query"
    assert next_start(q) == (None, None) and last_batches(q) == (None, None)
    _offsets_file(q, 0, {"a": {"0": 5}})
    _offsets_file(q, 1, {"a": {"0": 9}, "@ids": {"a": "X"}})
    (q / "commits").mkdir()
    (q / "commits" / "0").write_text("v1\n{}\n")
    assert last_batches(q) == (1, 0)
    assert batch_end_offsets(q, 1) == [{"a": {"0": 9}, "@ids": {"a": "X"}}]
    assert next_start(q) == ({"a": {"0": 5}}, {"a": {"0": 9}, "@ids": {"a": "X"}})
    (q / "commits" / "1").write_text("v1\n{}\n")
    assert next_start(q) == ({"a": {"0": 9}, "@ids": {"a": "X"}}, None)
    (q / "offsets" / "2").write_text("not a checkpoint")
    assert batch_end_offsets(q, 2) is None and batch_end_offsets(q, 7) is None
