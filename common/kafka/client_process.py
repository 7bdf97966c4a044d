"""Kafka reads in a child process: a crash of librdkafka ends the child, not the caller.

librdkafka, from 2.5.0 (KIP-951's leader hints) through 2.16.0 (the newest wheel, measured
2026-11-24), dies with SIGSEGV when a Fetch answer carries a leader hint (``CurrentLeader``)
for a partition whose topic id is zero: it then looks the topic up by a name it never set
(a NULL pointer, in ``rd_kafka_metadata_update_op``).  Tansu answers every fetch of a topic
it does not know that way (error UNKNOWN_TOPIC_OR_PARTITION, topic id zero, leader 0): a
topic deleted, or made again under a new id.  So a consumer that fetches a topic when it is
deleted takes its whole process with it.  Measured on the embedded broker
(``tests/integration/common/test_kafka_client_process.py``): a consumer assigned to the
topic died 3 times of 3; :func:`common.kafka.offsets.end_offsets` probing it in a loop, 2
of 6.  Apache Kafka (not installable here, so not tried) sends leader hints only with
NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (KIP-951), under the topic id it was asked
about, which librdkafka's code handles.

The merge job's driver reads every batch: the table topics' ends, the markers topic, and
the producers' offsets topic.  It does so in the process that also holds the Spark session
and the sinks' connections, where such a crash would end the job without a word instead of
stopping it with :class:`spark_jobs.errors.MergeDataLoss`.  Those reads run here, through
:func:`run_isolated`, in a pool of child processes started as new interpreters (the caller
has threads and a JVM gateway; forking it is not safe).  A child that dies raises
:class:`common.errors.KafkaClientCrashed` in the caller, naming the signal.  That error is an
:class:`~common.errors.OffsetLookupError`, which callers already take as "Kafka did not
answer".  The next call starts a new child.  Spark's tasks and its source's planning run in
processes of their own already: a crash there fails the task and the query, which the
merge job restarts.

Measured: a call costs a round trip through a pipe (0.05 ms, against 10 ms or more for the
fetch it carries); a child costs 0.05 s and 24 MB to start with confluent-kafka imported,
once per process and concurrent caller.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from common.errors import KafkaClientCrashed, OffsetLookupError

_ROOT = str(Path(__file__).resolve().parents[2])  # (the project: where ``common`` is imported from)
_idle: list["_Child"] = []
_lock = threading.Lock()


class _Child:
    """One child process serving calls over a pair of pipes, one call at a time.  Started
    as a new interpreter (not ``multiprocessing``'s ``spawn``, which imports the caller's
    main module again and fails where that module is not guarded), with the caller's
    ``sys.path``, so that it imports what the caller would."""

    def __init__(self) -> None:
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", f"from common.kafka.client_process import _serve; _serve({down_r}, {up_w})"],
                pass_fds=(down_r, up_w), env=env, stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else None)
        except BaseException:
            os.close(down_w)
            os.close(up_r)
            raise
        finally:
            os.close(down_r)
            os.close(up_w)
        self.send = Connection(down_w, readable=False)
        self.recv = Connection(up_r, writable=False)
        self.send.send(list(sys.path))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def end(self) -> int | None:
        """Stop the child (if it still runs); its exit code (negative: the signal)."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.send.close()
        self.recv.close()
        return self.proc.returncode


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


def _serve(down: int, up: int) -> None:
    """The child's loop: ``(fn, args, kwargs)`` in, ``("ok", result)`` or ``("error", exc)`` out."""
    # (the caller's Ctrl-C is the caller's to handle; the child ends when its pipe closes)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    calls, replies = Connection(down, writable=False), Connection(up, readable=False)
    try:
        sys.path[:] = calls.recv()
    except (EOFError, OSError):
        return
    while True:
        try:
            fn, args, kwargs = calls.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
            reply = ("error", _portable(exc))
        try:
            replies.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:  # a result that does not pickle
            replies.send(("error", ("other", type(exc).__name__, f"the result of {fn!r} cannot be sent back: {exc}")))


def _portable(exc: BaseException) -> Any:
    """``exc`` in a form that crosses the pipe: itself when it pickles; a KafkaException
    (which does not) as its error's code and text; anything else as its type and text."""
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "code"):
        err = exc.args[0]
        return ("kafka", err.code(), err.str())
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure: described instead
        return ("other", type(exc).__name__, str(exc))


def _raise_from(portable: Any) -> None:
    if isinstance(portable, BaseException):
        raise portable
    if portable[0] == "kafka":
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(portable[1], portable[2]))
    raise OffsetLookupError(f"{portable[1]}: {portable[2]}")


def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def run_isolated(fn: Callable[..., Any], *args: Any, wait: float, what: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` run in a child process; its result, or the exception it
    raised.  ``fn`` must be a module-level function and its arguments and result picklable.
    ``wait``: how long to wait for the answer (beyond ``fn``'s own timeouts); ``what``: the
    read, for the messages.  Raises :class:`KafkaClientCrashed` when the child dies and
    :class:`OffsetLookupError` when it does not answer within ``wait``."""
    with _lock:
        child = _idle.pop() if _idle else None
    if child is None or not child.alive():
        if child is not None:
            child.end()
        child = _Child()
    keep = False
    try:
        try:
            child.send.send((fn, args, kwargs))
            if not child.recv.poll(wait):
                raise OffsetLookupError(f"{what}: the Kafka client process gave no answer within {wait:g}s")
            status, value = child.recv.recv()
        except (EOFError, OSError):
            code = child.end()
            why = ("librdkafka crashes when a topic is deleted or made again while it is read "
                   "(common/kafka/client_process.py)" if code is not None and code < 0 else
                   "its error output above says why")
            raise KafkaClientCrashed(f"{what}: the Kafka client process died ({_signal_name(code)}); {why}; the next "
                                     f"read starts a new process", exit_code=code) from None
        keep = True
        if status == "ok":
            return value
        _raise_from(value)
    finally:
        if keep:
            with _lock:
                _idle.append(child)
        else:
            child.end()


@atexit.register
def stop_all() -> None:
    """End the idle children (each also ends when its caller's end of the pipe closes)."""
    with _lock:
        children, _idle[:] = list(_idle), []
    for child in children:
        child.end()
