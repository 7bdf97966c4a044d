"""Timing a run from outside, by its records in Kafka: the same clock for every side of the
peers' race (:mod:`cdc.bench.peers_race`), whatever process writes the topic.

A :class:`TopicClock` polls the topic's end offsets (read_uncommitted: every side of this race
writes without Kafka transactions, so the offsets count records) every ``interval`` seconds
in a thread, and keeps the ``time.monotonic()`` at which the topic first held a record, a
tenth of the expected records (the end of the warm-up) and all of them.  The figures
derived (:func:`clock_figures`) are then the same for every side: start-up from the
process's launch (or the signal) to the first record, rows/s from the first record, after
the warm-up, and including the start-up.  Their resolution is one poll (``interval`` plus
the poll's own time): a side fast enough to write the rest of its records between two polls
has two marks on the same poll, and the span between them is then taken as that poll's
distance from the one before (the longest it can have been: the rate a lower bound, the run
flagged ``within_one_poll``), never as zero seconds and a rate of 0.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


class TopicClock:
    """Marks on the monotonic clock as ``topic`` fills up to ``expected`` records."""

    def __init__(self, bootstrap: str, topic: str, expected: int, *, interval: float = 0.05) -> None:
        self.bootstrap, self.topic, self.expected, self.interval = bootstrap, topic, expected, interval
        self.first: float | None = None
        self.warm: float | None = None
        self.done: float | None = None
        self.count = 0
        self.before_done: float | None = None  # the poll before the one that saw every record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"clock-{topic}")

    def _partitions(self, consumer: Consumer) -> list[TopicPartition]:
        md = consumer.list_topics(self.topic, timeout=10)
        tmd = md.topics.get(self.topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            return []
        return [TopicPartition(self.topic, p) for p in sorted(tmd.partitions)]

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"clock-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
        try:
            parts: list[TopicPartition] = []
            last_poll: float | None = None
            while not self._stop.is_set():
                now = time.monotonic()
                try:
                    parts = parts or self._partitions(consumer)
                    count = sum(hi - lo for lo, hi in (consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                                                      for tp in parts))
                except KafkaException:
                    count = self.count
                self.count = count
                if count and self.first is None:
                    self.first = now
                if count >= max(1, self.expected // 10) and self.warm is None:
                    self.warm = now
                if count >= self.expected:
                    self.done, self.before_done = now, last_poll
                    return
                last_poll = now
                self._stop.wait(self.interval)
        finally:
            consumer.close()

    def start(self) -> "TopicClock":
        self._thread.start()
        return self

    def wait(self, timeout: float, check=None, *, stall_s: float = 180.0) -> bool:
        """Until every expected record is there (True), or ``timeout`` s passed or no record
        came for ``stall_s`` s (False: a peer that logs an error and goes on running writes
        nothing more); ``check()`` is called every second (it raises to stop a run whose
        process failed)."""
        now = time.monotonic()
        deadline, last_count, last_change = now + timeout, -1, now
        while time.monotonic() < deadline:
            self._thread.join(1.0)
            if not self._thread.is_alive():
                return self.done is not None
            if check is not None:
                check()
            if self.count != last_count:
                last_count, last_change = self.count, time.monotonic()
            elif time.monotonic() - last_change > stall_s:
                return False
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def clock_figures(clock: TopicClock, rows: int, launch: float, *, signal: float | None = None) -> dict[str, Any]:
    """A run's figures from its clock: ``rows`` change events (the table's rows for a snapshot),
    ``launch`` the ``time.monotonic()`` just before its process started, ``signal`` the
    snapshot signal's (the clock of *from the signal*)."""
    first, warm, done = clock.first, clock.warm, clock.done
    out: dict[str, Any] = {"records": clock.count, "clock": "topic end offsets, polled every "
                                                             f"{clock.interval:g} s"}
    if first is None or done is None:
        return out

    def rate(n: float, seconds: float) -> float:
        return n / seconds if seconds > 0 else 0.0

    def span(mark: float) -> float:  # from a mark to the last; on the same poll: at most one poll
        if done > mark or clock.before_done is None:
            return done - mark
        out["within_one_poll"] = True
        return done - clock.before_done

    from_first = span(first)
    out.update(startup_s=first - launch, total_s=done - launch, from_first_s=from_first,
               rows_per_s_total=rate(rows, done - launch), rows_per_s_from_first=rate(rows, from_first),
               rows_per_s_after_warmup=rate(rows - rows / 10, span(warm)) if warm is not None else 0.0)
    if signal is not None:
        out.update(signal_to_first_s=first - signal, from_signal_s=done - signal,
                   rows_per_s_from_signal=rate(rows, done - signal))
    return out
