"""The clean changelog's writer on the real broker: what an earlier attempt wrote is skipped,
and a partition's tail is read only when the writer before did not leave it as it is now
(spark_jobs.clean_changelog: reading the tail costs the embedded broker a listing of the
partition's every batch)."""

from __future__ import annotations

from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from contract.envelope import POSITION_HEADER
from spark_jobs.clean_changelog import CleanPartitionWriter, ensure_clean_topic


def _pos(n: int) -> str:
    return f"{n:030d}"


def _write(bootstrap: str, topic: str, numbers, known=None) -> CleanPartitionWriter:
    writer = CleanPartitionWriter(bootstrap, topic, 0, known=known)
    for n in numbers:
        writer.write(b"k%d" % n, b"v%d" % n, _pos(n))
    writer.flush()
    return writer


def _positions(bootstrap: str, topic: str) -> list[int]:
    return [int(dict(m.headers())[POSITION_HEADER]) for m in read_topic(bootstrap, topic)]


def test_a_writer_takes_the_tail_the_writer_before_left_and_reads_it_when_the_partition_moved(config, unique):
    bootstrap = config.kafka.bootstrap_servers
    topic = unique("clean")
    ensure_clean_topic(bootstrap, topic, 1)

    first = _write(bootstrap, topic, range(1, 6))  # an empty partition: nothing to read
    assert first.tail_read is False and first.written == 5
    (_, end), = end_offsets(bootstrap, [(topic, 0)]).values()
    assert first.tail == (end, _pos(5)) and end == 5  # its offsets as the broker acknowledged them

    # the writer after it, told the tail: copies skipped as when it reads the tail itself
    second = _write(bootstrap, topic, range(3, 8), known=first.tail)
    assert (second.tail_read, second.skipped, second.written) == (False, 3, 2)
    assert second.tail == (7, _pos(7))

    # a tail told for the partition's end is taken as told, without reading the partition
    # (the last position claimed here is past the true one, 7: so 8 and 9 are skipped)
    third = _write(bootstrap, topic, range(8, 11), known=(7, _pos(9)))
    assert (third.tail_read, third.skipped, third.written) == (False, 2, 1)
    assert third.tail == (8, _pos(10))

    # a tail of an earlier end (another attempt wrote since) is not taken: the tail is read
    fourth = _write(bootstrap, topic, range(9, 13), known=(7, _pos(99)))
    assert (fourth.tail_read, fourth.skipped, fourth.written) == (True, 2, 2)
    assert fourth.tail == (10, _pos(12))

    # nothing to write: the tail stays what it was, read or told
    idle = _write(bootstrap, topic, [12], known=fourth.tail)
    assert (idle.tail_read, idle.skipped, idle.written, idle.tail) == (False, 1, 0, (10, _pos(12)))
    assert _positions(bootstrap, topic) == [1, 2, 3, 4, 5, 6, 7, 10, 11, 12]
