"""Kafka reads in a child process (``common.kafka.client_process``).

The hazard first, on the real broker, in a process of its own: a consumer fetching a topic
that Tansu deletes dies with SIGSEGV (librdkafka's leader-hint handling).  Then the cure:
the same read run through ``run_isolated`` ends in ``KafkaClientCrashed`` in the caller,
which goes on, and its next read works.  Then the child process's own contract, without
Kafka: results and exceptions cross, a child killed or silent is replaced, and a caller
whose main module is an unguarded script can use it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common.errors import KafkaClientCrashed, OffsetLookupError, PartitionStalled
from common.kafka import client_process
from common.kafka.client_process import run_isolated
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import partition_records
from tests.producer_helpers import ROOT


def _topic_with_records(bootstrap: str, topic: str, n: int = 10) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    return admin


def _delete_later(admin: AdminClient, topic: str, after: float) -> threading.Thread:
    def run() -> None:
        time.sleep(after)
        admin.delete_topics([topic])[topic].result(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


_WAITING_READER = textwrap.dedent("""
    import sys
    from common.kafka.topic_reader import partition_records
    bootstrap, topic = sys.argv[1:3]
    try:
        partition_records(bootstrap, topic, 0, 0, 1000, timeout=20)  # 10 records there: it waits, fetching
    except Exception as exc:
        print(f"raised {type(exc).__name__}: {exc}")
    print("alive")
""")


def test_a_consumer_fetching_a_topic_the_broker_deletes_dies_with_its_process(stack, config, unique):
    """Why the driver's reads run in a child: the reader below, in a process of its own,
    is fetching when the topic goes; librdkafka crashes on Tansu's answer.  (Should a later
    librdkafka or broker answer without crashing, this test fails and says so: the child
    processes can then go.)"""
    bs, topic = config.kafka.bootstrap_servers, unique("gone")
    admin = _topic_with_records(bs, topic)
    reader = subprocess.Popen([sys.executable, "-c", _WAITING_READER, bs, topic], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _delete_later(admin, topic, 2.0).join(60)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == -signal.SIGSEGV, (
        f"the reader ended with {reader.returncode} and printed {out!r}: librdkafka no longer crashes when the "
        f"broker deletes a topic under a fetch; common/kafka/client_process.py may not be needed any more")


def test_a_read_whose_topic_is_deleted_ends_its_child_and_the_caller_goes_on(stack, config, unique):
    bs, topic = config.kafka.bootstrap_servers, unique("gone")
    admin = _topic_with_records(bs, topic)
    deleter = _delete_later(admin, topic, 2.0)
    with pytest.raises(KafkaClientCrashed) as caught:
        run_isolated(partition_records, bs, topic, 0, 0, 1000, timeout=20, wait=60, what=f"reading {topic}")
    deleter.join(60)
    assert caught.value.exit_code == -signal.SIGSEGV
    text = str(caught.value)
    assert f"reading {topic}: the Kafka client process died (signal SIGSEGV)" in text, text
    assert isinstance(caught.value, OffsetLookupError)  # (what the merge job's callers already handle)

    # The caller goes on: the next read starts a new child and answers.
    other = unique("kept")
    _topic_with_records(bs, other, 7)
    assert run_isolated(end_offsets, bs, [(other, 0)], wait=60, what="ends") == {(other, 0): (0, 7)}
    records = run_isolated(partition_records, bs, other, 0, 2, 5, wait=60, what="read")
    assert records == [(2, b"v2"), (3, b"v3"), (4, b"v4")]


def test_results_and_exceptions_cross_and_the_child_is_kept():
    pid = run_isolated(os.getpid, wait=30, what="pid")
    assert pid != os.getpid()
    assert run_isolated(os.getpid, wait=30, what="pid") == pid  # (one child, kept between calls)
    assert run_isolated(sorted, [3, 1, 2], reverse=True, wait=30, what="sorted") == [3, 2, 1]
    with pytest.raises(ValueError, match="invalid literal"):
        run_isolated(int, "x", wait=30, what="int")
    # confluent-kafka's exceptions do not pickle: the caller gets one with the same code
    with pytest.raises(KafkaException) as caught:
        run_isolated(_raise_kafka, wait=30, what="kafka")
    assert caught.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "no such topic" in caught.value.args[0].str()
    # an exception with more than its message keeps what pickles (its message)
    with pytest.raises(PartitionStalled, match="stalled here"):
        run_isolated(_raise_stalled, wait=30, what="stalled")
    assert run_isolated(os.getpid, wait=30, what="pid") == pid  # (errors do not cost the child)


def test_a_child_that_dies_or_does_not_answer_is_replaced():
    pid = run_isolated(os.getpid, wait=30, what="pid")
    with pytest.raises(KafkaClientCrashed, match=r"kill: the Kafka client process died \(signal SIGKILL\)") as caught:
        run_isolated(os.kill, pid, signal.SIGKILL, wait=30, what="kill")
    assert caught.value.exit_code == -signal.SIGKILL
    second = run_isolated(os.getpid, wait=30, what="pid")
    assert second != pid
    with pytest.raises(OffsetLookupError, match=r"nap: the Kafka client process gave no answer within 0.5s"):
        run_isolated(time.sleep, 30, wait=0.5, what="nap")
    third = run_isolated(os.getpid, wait=30, what="pid")
    assert third not in (pid, second)
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)  # (the silent one was stopped, not left behind)
    client_process.stop_all()
    with pytest.raises(ProcessLookupError):
        os.kill(third, 0)


def test_a_caller_whose_main_module_is_an_unguarded_script_can_use_it(tmp_path):
    """(``multiprocessing``'s spawn would run such a script again in the child, and fail.)"""
    script = tmp_path / "job.py"
    script.write_text("import os\nfrom common.kafka.client_process import run_isolated\n"
                      "print(run_isolated(os.getpid, wait=30, what='pid') != os.getpid())\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr[-2000:]


def _raise_kafka() -> None:
    raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no such topic"))


def _raise_stalled() -> None:
    raise PartitionStalled("stalled here", 5)


def test_a_result_that_does_not_pickle_is_an_error_and_costs_no_child():
    pid = run_isolated(os.getpid, wait=30, what="pid")
    with pytest.raises(OffsetLookupError, match="cannot be sent back"):
        run_isolated(_unpicklable, wait=30, what="lock")
    assert run_isolated(os.getpid, wait=30, what="pid") == pid


def _unpicklable():
    return threading.Lock()
