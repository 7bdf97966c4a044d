"""Kafka's default partitioner (``common.kafka.partitioner``): the Java client's murmur2,
natively and in Python."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.kafka import partitioner
from common.kafka.partitioner import in_partition, murmur2, partition_of

# Kafka's own test vectors (clients' UtilsTest.testMurmur2), as signed Java ints.
KAFKA_VECTORS = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                 b"a-little-bit-longer-string": -1486304829,
                 b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}


@pytest.mark.parametrize("data,java", KAFKA_VECTORS.items())
def test_murmur2_is_the_java_clients(data, java):
    assert murmur2(data) == java & 0xFFFFFFFF
    if partitioner.native():
        from common.kafka._partitioner import murmur2 as native
        assert native(data) == java & 0xFFFFFFFF


def test_the_native_partitioner_is_built():
    """(`pip install -e .` builds it where a C compiler is, as `make` does here.)"""
    assert partitioner.native()


@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 64), st.integers(0, 63))
def test_native_and_python_agree(keys, count, partition):
    from common.kafka._partitioner import in_partition as native_in
    from common.kafka._partitioner import murmur2 as native_murmur2

    assert [native_murmur2(k) for k in keys] == [murmur2(k) for k in keys]
    expected = all(partition_of(k, count) == partition for k in keys)
    assert native_in(keys, count, partition) is expected
    assert partitioner._in_partition(keys, count, partition) is expected
    placed = [k for k in keys if partition_of(k, count) == partition % count]
    assert in_partition(placed, count, partition % count)


def test_in_partition_edges():
    assert in_partition([], 4, 0)  # (nothing to write: nothing elsewhere)
    assert not in_partition([None], 1, 0)  # a record without a key: no partition is its own
    with pytest.raises(ValueError):
        in_partition([b"k"], 0, 0)
    with pytest.raises(TypeError):
        in_partition(5, 4, 0)
    assert partition_of(b"21", 1) == 0
