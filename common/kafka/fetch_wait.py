"""How long a reader lets the broker hold a fetch: short while that works, longer when not.

librdkafka's ``fetch.wait.max.ms`` is the longest a broker may hold a fetch before it
answers.  A consumer that reads records already in the log wants it short: a fetch that
reaches the end of the log (past a range's last record, a probe) is held that long, and the
next fetch on the connection waits behind it.  So the readers asked for 10 ms.

But a broker may need longer than that to answer at all.  The embedded broker (Tansu 0.6,
memory storage) lists every record batch of a partition on each fetch, about 2.3 us a
batch, and when the wait runs out first it answers empty, again and again: measured on a
partition of 100,000 batches (1M records), no record in 8 s with a 10 ms wait, the first
after 0.23 s with 100 ms (docs/operations.md, "The embedded broker's limits").  A reader with
a fixed short wait starves there for good; one with a fixed long wait pays it on every
fetch at the end of a small topic.

:class:`FetchWait` is the wait of one reader: it starts at a floor (10 ms, or what the
client settings ask for), grows fourfold whenever a read gets nothing for
:meth:`FetchWait.starved_after_s` while records are known to be there, up to a ceiling, and
halves again after :data:`FAST_READS` reads in a row whose first records came within a
quarter of it.  :class:`AdaptiveConsumer` is a librdkafka consumer made anew with the
wait whenever it changes (the setting is fixed when a consumer is made).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer

log = logging.getLogger(__name__)

#: The shortest wait: what a read of a small topic is answered within (librdkafka's own
#: default, 500 ms, costs that much on every fetch that reaches the end of the log).
FLOOR_MS = 10
#: The longest wait a reader grows to: the embedded broker's answer for a partition of about
#: 4 million batches, at its 2.3 us a batch.  A broker slower than that is reported by the
#: readers' stall checks (no progress), not waited for silently.
CEILING_MS = 10_000
#: How much the wait grows each time a read starves.
GROWTH = 4
#: Reads in a row whose first records came within a quarter of the wait before it halves.
FAST_READS = 3


class FetchWait:
    """The fetch wait of one reader, in milliseconds (:attr:`ms`)."""

    def __init__(self, floor_ms: int = FLOOR_MS, ceiling_ms: int = CEILING_MS) -> None:
        self.floor_ms = max(1, int(floor_ms))
        self.ceiling_ms = max(self.floor_ms, int(ceiling_ms))
        self.ms = self.floor_ms
        self._fast = 0

    @classmethod
    def for_client(cls, client_config: dict | None) -> "FetchWait":
        """A wait whose floor is the client settings' ``fetch.wait.max.ms`` when they give one
        (an operator's choice is never undercut), else :data:`FLOOR_MS`."""
        given = (client_config or {}).get("fetch.wait.max.ms")
        floor = int(given) if given not in (None, "") else FLOOR_MS
        return cls(floor, max(CEILING_MS, floor))

    def starved_after_s(self) -> float:
        """How long a read may get nothing, with records there to read, before the wait is
        too short: three answers' worth, and at least 0.25 s (a connection's set-up, a busy machine)."""
        return max(0.25, 3 * self.ms / 1000.0)

    def grow(self) -> bool:
        """The read starved: the next wait is :data:`GROWTH` times longer (up to the
        ceiling).  Whether it changed."""
        self._fast = 0
        new = min(self.ceiling_ms, self.ms * GROWTH)
        changed, self.ms = new != self.ms, new
        return changed

    def answered(self, first_s: float) -> bool:
        """A read's first records came after ``first_s`` seconds: after :data:`FAST_READS`
        such reads in a row within a quarter of the wait, it halves (not below the floor).
        Whether it changed."""
        if self.ms <= self.floor_ms or first_s * 1000.0 > self.ms / 4:
            self._fast = 0
            return False
        self._fast += 1
        if self._fast < FAST_READS:
            return False
        self._fast = 0
        self.ms = max(self.floor_ms, self.ms // 2)
        return True

    def __repr__(self) -> str:
        return f"FetchWait({self.ms} ms, floor {self.floor_ms}, ceiling {self.ceiling_ms})"


class AdaptiveConsumer:
    """A librdkafka consumer (made from ``config`` when first used) whose
    ``fetch.wait.max.ms`` is :attr:`wait`'s: :meth:`starved` and :meth:`answered` change the
    wait, and the next :meth:`assign` makes the consumer again with it (reads assign it when
    they start, so a new one loses nothing).  ``name``: what the log lines call it."""

    def __init__(self, config: dict, wait: FetchWait | None = None, name: str = "reader") -> None:
        self.config = {k: v for k, v in config.items() if k != "fetch.wait.max.ms"}
        self.wait = wait if wait is not None else FetchWait.for_client(config)
        self.name = name
        self._consumer: Consumer | None = None
        self._built_ms: int | None = None
        self.rebuilds = 0

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self.config, "fetch.wait.max.ms": self.wait.ms})
            self._built_ms = self.wait.ms
        return self._consumer

    def starved(self, where: str, position: int) -> bool:
        """Nothing came for :meth:`FetchWait.starved_after_s` while records are there: a
        longer wait (the consumer is made again at the next :meth:`assign`).  False at the ceiling."""
        before = self.wait.ms
        if not self.wait.grow():
            return False
        self.rebuilds += 1
        log.info("%s: no answer with records from %s at offset %d within %d ms fetch waits: the broker needs "
                 "longer to answer (a deep partition on the embedded broker?); waiting up to %d ms", self.name,
                 where, position, before, self.wait.ms)
        return True

    def answered(self, first_s: float) -> None:
        if self.wait.answered(first_s):
            log.debug("%s: fetch wait back down to %d ms", self.name, self.wait.ms)

    def _drop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def close(self) -> None:
        self._drop()

    # what the readers call, passed on to the current consumer
    def assign(self, partitions: list) -> None:
        """Assign ``partitions``, to a consumer made anew first when the wait changed since
        the current one was made (never in the middle of a read: a read assigns when it starts,
        and again after :meth:`starved`)."""
        if self._consumer is not None and self._built_ms != self.wait.ms:
            self._drop()
        self.consumer.assign(partitions)

    def unassign(self) -> None:
        if self._consumer is not None:
            self._consumer.unassign()

    def consume(self, num_messages: int, timeout: float) -> list:
        return self.consumer.consume(num_messages, timeout)

    def position(self, partitions: list) -> list:
        return self.consumer.position(partitions)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self.consumer.list_topics(topic, timeout=timeout)
