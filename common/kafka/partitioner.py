"""Kafka's default partitioner for keyed records: where a key's records go.

The Java client puts a keyed record in partition ``(murmur2(key) & 0x7fffffff) % count``
(``Utils.murmur2``, seed ``0x9747b28c``); librdkafka's ``murmur2_random``, which the
producer uses (``producer/kafka_writer.py``), and Kafka Connect (Debezium) do the same.  So
while a topic keeps its partition count, all of a key's records are in one partition, and
writers of two partitions never write the same key: what lets the merge tasks write
PostgreSQL under a turn of their partition instead of the table's
(:meth:`spark_jobs.sinks.postgres.PostgresSink._take_turn`).  A task checks that every
record it writes is where this puts its key (:func:`in_partition`); a record that is not (a
producer with another partitioner, records from before a change of the partition count)
makes it take the table's whole turn.

Natively in ``_partitioner.c`` (about 20 ns a key); the Python below is the fallback where
the extension was not built, and the reference the tests hold it to.
"""

from __future__ import annotations

from typing import Sequence

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The Java client's ``Utils.murmur2`` of ``data``, as an unsigned 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    tail = data[4 * n4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, count: int) -> int:
    """The partition of ``count`` that Kafka's default partitioner puts ``key`` in."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def _in_partition(keys: Sequence[bytes | None], count: int, partition: int) -> bool:
    if count <= 0:
        raise ValueError("the partition count must be positive")
    return all(isinstance(k, bytes) and partition_of(k, count) == partition for k in keys)


try:
    from common.kafka._partitioner import in_partition as _native_in_partition
except ImportError:  # (the extension is optional: built by `pip install -e .` where a compiler is)
    _native_in_partition = None


def in_partition(keys: Sequence[bytes | None], count: int, partition: int) -> bool:
    """Whether every key is where Kafka's default partitioner puts it among ``count``
    partitions: in ``partition`` (a key that is not bytes, such as None: no)."""
    return (_native_in_partition or _in_partition)(keys, count, partition)


def native() -> bool:
    """Whether the compiled partitioner is in use."""
    return _native_in_partition is not None
