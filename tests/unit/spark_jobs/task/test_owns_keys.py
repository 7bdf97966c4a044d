"""Which merge tasks write PostgreSQL under their partition's own turn
(:func:`spark_jobs.task.sink_apply.owns_keys`): every key framed with the topic's one key
schema and where Kafka's partitioner puts it."""

from __future__ import annotations

from common.kafka.partitioner import partition_of
from contract.codecs.serde import SINGLE_OBJECT_MAGIC
from spark_jobs.task.sink_apply import owns_keys

FP = "0123456789abcdef"
OTHER = "fedcba9876543210"


def _key(fp: str, i: int) -> bytes:
    return SINGLE_OBJECT_MAGIC + bytes.fromhex(fp) + i.to_bytes(4, "little")


def _placed(fp: str, count: int, partition: int, n: int) -> list[bytes]:
    keys = (_key(fp, i) for i in range(100_000))
    return [k for k in keys if partition_of(k, count) == partition][:n]


def test_keys_of_the_topics_key_schema_where_the_partitioner_puts_them():
    keys = _placed(FP, 4, 2, 50)
    assert len(keys) == 50 and owns_keys((4, FP), keys, 2)


def test_a_key_elsewhere_or_of_another_key_schema_takes_the_whole_turn():
    keys = _placed(FP, 4, 2, 50)
    assert not owns_keys((4, FP), keys, 1)  # not where the partitioner puts them
    # counted against another partition count (the topic's grew): some key is elsewhere
    assert any(partition_of(k, 3) != 2 for k in keys) and not owns_keys((3, FP), keys, 2)
    # a row whose key schema changed: new bytes, placed where the partitioner puts them
    # (in partition 2 as well), yet another encoding of a row another partition may hold
    assert not owns_keys((4, FP), keys + _placed(OTHER, 4, 2, 1), 2)
    assert not owns_keys((4, OTHER), keys, 2)
    assert not owns_keys((4, FP), keys + [None], 2)  # (a record without a key)
    json_key = b'{"id": 1}'  # (Debezium's JSON keys: not single-object framed)
    assert not owns_keys((1, FP), [json_key], 0)
    assert not owns_keys(None, keys, 2) and not owns_keys((4, FP), [], 2)
