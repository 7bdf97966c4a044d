"""The consumers that read records already in the log do not pause their fetching ahead.

librdkafka postpones a partition's next fetch by ``fetch.queue.backoff.ms`` (1 s by
default) whenever its local queue holds ``queued.min.messages``; a reader that drains the
queue faster than the broker fills it then waits (docs/merge-performance.md has the
figures).  The merge tasks' range consumer and the whole-topic reader (the verifier, the
offset and schema stores, the benchmarks' reference consumer) set it short, and a client
setting the user gives still wins.
"""

from __future__ import annotations

from common.kafka.topic_reader import READ_AHEAD, topic_reader_config
from spark_jobs.input.kafka_source import parse_options, range_consumer_config

LIBRDKAFKA_DEFAULT_BACKOFF_MS = 1000


def _options(**client: str) -> dict:
    return {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribePattern": "p\\..*",
            **{f"kafka.{k}": v for k, v in client.items()}}


def test_read_ahead_is_far_below_librdkafkas_default_backoff():
    assert int(READ_AHEAD["fetch.queue.backoff.ms"]) <= LIBRDKAFKA_DEFAULT_BACKOFF_MS // 20


def test_the_merge_tasks_range_consumer_reads_ahead_without_pausing():
    conf = range_consumer_config(parse_options(_options()))
    assert conf["fetch.queue.backoff.ms"] == READ_AHEAD["fetch.queue.backoff.ms"]
    assert conf["bootstrap.servers"] == "127.0.0.1:9092"
    assert conf["enable.auto.commit"] is False


def test_the_whole_topic_reader_reads_ahead_without_pausing():
    conf = topic_reader_config("127.0.0.1:9092")
    assert conf["fetch.queue.backoff.ms"] == READ_AHEAD["fetch.queue.backoff.ms"]
    assert conf["isolation.level"] == "read_committed"


def test_a_client_setting_given_by_the_user_wins():
    conf = range_consumer_config(parse_options(_options(**{"fetch.queue.backoff.ms": "250"})))
    assert str(conf["fetch.queue.backoff.ms"]) == "250"
    assert topic_reader_config("b:1", {"fetch.queue.backoff.ms": 250})["fetch.queue.backoff.ms"] == 250


def test_each_reader_is_a_consumer_group_of_its_own():
    assert topic_reader_config("b:1")["group.id"] != topic_reader_config("b:1")["group.id"]
    opts = parse_options(_options())
    assert range_consumer_config(opts)["group.id"] != range_consumer_config(opts)["group.id"]


def test_the_range_consumer_does_not_wait_at_the_broker_for_records_past_a_commit_marker():
    """A range of a transactional topic ends with a commit marker, which the consumer passes
    on the next fetch: a fetch that finds nothing, which the broker holds for the fetch wait
    (1 ms here, READ_AHEAD's 10 for the whole-topic readers; kafka_source's _READ_DEFAULTS);
    a user's setting still wins."""
    assert range_consumer_config(parse_options(_options()))["fetch.wait.max.ms"] == 1
    assert topic_reader_config("b:1")["fetch.wait.max.ms"] == READ_AHEAD["fetch.wait.max.ms"]
    assert str(range_consumer_config(parse_options(_options(**{"fetch.wait.max.ms": "7"})))["fetch.wait.max.ms"]) == "7"
