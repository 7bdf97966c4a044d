"""The producer's offset copy outside Kafka, and telling when Kafka lost its history."""

from __future__ import annotations

import json

import pytest

from producer.offset_store import LocalOffsetCopy, lost_history


def rec(file: str, pos: int, last: str | None = None, **extra) -> dict:
    return {"resume": {"file": file, "pos": pos, "last": last}, "ts_ms": 1, **extra}


def test_no_local_copy_means_nothing_to_tell():
    assert lost_history(None, None) is None
    assert lost_history(rec("mysql-bin.000001", 4), None) is None


def test_kafka_without_the_position_lost_the_history():
    assert "no stored position" in lost_history(None, rec("mysql-bin.000003", 900))
    assert "no stored position" in lost_history({"ts_ms": 3}, rec("mysql-bin.000003", 900))


@pytest.mark.parametrize("kafka, local, lost", [
    (rec("mysql-bin.000003", 900), rec("mysql-bin.000003", 900), False),
    (rec("mysql-bin.000003", 901), rec("mysql-bin.000003", 900), False),  # crash after the Kafka commit
    (rec("mysql-bin.000004", 4), rec("mysql-bin.000003", 900), False),
    (rec("mysql-bin.000003", 899), rec("mysql-bin.000003", 900), True),
    (rec("mysql-bin.000002", 9000), rec("mysql-bin.000003", 4), True),   # by file index, not by text
    (rec("mysql-bin.000003", 900, "0" * 29 + "1"), rec("mysql-bin.000003", 900, "0" * 29 + "2"), True),
    (rec("mysql-bin.000009", 4), rec("mysql-bin.000010", 4), True),
])
def test_kafka_behind_the_local_copy_lost_the_history(kafka, local, lost):
    assert (lost_history(kafka, local) is not None) == lost


def test_the_copy_round_trips_and_carries_a_recovery_request(tmp_path):
    copy = LocalOffsetCopy(tmp_path, "prod-1")
    assert copy.load() is None
    assert copy.request_recovery("snapshot", "why") is False  # nothing kept: nothing to recover
    value = json.dumps(rec("mysql-bin.000003", 900, snapshot={"snapshot_id": "s"})).encode()
    copy.save(value)
    assert copy.path == tmp_path / "offsets" / "prod-1.json"
    assert copy.load() == json.loads(value)
    assert copy.request_recovery("snapshot", "the broker came back empty") is True
    assert copy.load()["recover"]["mode"] == "snapshot"
    copy.save(value)  # the next commit replaces the request
    assert "recover" not in copy.load()
    copy.remove()
    assert copy.load() is None


def test_an_unreadable_copy_is_an_error_not_a_silent_start(tmp_path):
    copy = LocalOffsetCopy(tmp_path, "p")
    copy.path.parent.mkdir(parents=True)
    copy.path.write_text("{half a record")
    with pytest.raises(OSError, match="cannot be read"):
        copy.load()
