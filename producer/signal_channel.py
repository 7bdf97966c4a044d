"""The Kafka signal channel: user signals read from ``<prefix>._signals``.

Debezium's ``signal.enabled.channels=kafka`` / ``signal.kafka.topic``: a record whose key
is the producer's name (``producer.name``) and whose value is the JSON of a signal table
row (:func:`contract.signals.kafka_signal_row`) is a signal for this producer; records
keyed otherwise belong to other producers sharing the prefix and are passed over.

The channel is read by the producer's main loop without blocking (:meth:`poll` takes what
the consumer's background fetches brought).  It has no consumer group and commits
nothing: the next offset to read is the producer's own state, stored in its offset record
with the binlog position and committed in the same Kafka transaction as the records the
signals caused (notifications, the snapshot's state), so a signal is acted on once, also
across restarts.  A producer with no stored offset starts at the channel's end (as
Debezium does): only signals sent after it first started are acted on.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from common.config import KafkaConfig
from common.kafka.clients import base_config, ensure_topics
from common.kafka.offsets import end_offsets
from contract.errors import BadSignal
from contract.signals import kafka_signal_row
from contract.topics import signals_topic
from producer.errors import ProducerStopped

log = logging.getLogger(__name__)

#: Records taken by one :meth:`KafkaSignalChannel.poll` at most.
POLL_RECORDS = 100


@dataclass
class ChannelSignal:
    """One signal for this producer: its row for the coordinator, or why it is no signal."""

    offset: int
    row: dict[str, Any] | None = None
    error: BadSignal | None = None


class KafkaSignalChannel:
    """Reads this producer's signals from ``<prefix>._signals`` (one partition), from
    ``start`` (the stored next offset; ``None``: the topic's current end)."""

    def __init__(self, kafka: KafkaConfig, name: str, start: int | None) -> None:
        self.topic = signals_topic(kafka.topic_prefix)
        self.name = name
        self._key = name.encode()
        ensure_topics(kafka, [self.topic], partitions=1)
        self.consumer = Consumer({
            **base_config(kafka), "group.id": f"cdc-signals-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "isolation.level": "read_committed",
            # an offset the topic no longer has (deleted and created again while the
            # producer runs, retention): its oldest record
            "auto.offset.reset": "earliest", "enable.partition.eof": False})
        try:
            self._check_partitions()
            start = self._start(kafka, start)
            self.consumer.assign([TopicPartition(self.topic, 0, start)])
        except BaseException:
            self.consumer.close()
            raise
        #: The offset of the next record to read: stored with the position once the
        #: signals before it were handled.
        self.next_offset: int = start
        self._last_error = ""

    def _start(self, kafka: KafkaConfig, stored: int | None) -> int:
        """Where to read from: the stored offset, or the channel's end when none is stored.
        A stored offset the topic does not have (past its end: the topic was deleted and
        created again; below its start: retention) reads from its oldest record (asked for
        here: a read at an offset the topic does not have would answer "offset out of range")."""
        (low, end), = end_offsets(kafka.bootstrap_servers, [(self.topic, 0)],
                                  client_config=kafka.client_settings()).values()
        if stored is None:
            log.info("signal channel %s: no stored offset, acting on signals sent from now on (offset %d)",
                     self.topic, end)
            return end
        if not low <= stored <= end:
            log.warning("signal channel %s: the stored offset %d is not in the topic (offsets %d to %d: it was created "
                        "again, or its records expired); reading from its oldest record", self.topic, stored, low, end)
            return low
        log.info("signal channel %s: reading from stored offset %d", self.topic, stored)
        return stored

    def _check_partitions(self) -> None:
        deadline = time.monotonic() + 10.0
        while True:  # a topic just created may take a moment to show in the metadata
            meta = self.consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
            parts = len(meta.partitions) if meta is not None and meta.error is None else 0
            if parts or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if parts != 1:
            raise ProducerStopped(f"the signal channel topic {self.topic} has {parts} partitions: it needs exactly one "
                                  f"(signals keep their order), so delete it and let the producer create it, or "
                                  f"switch the channel off (source.signal_channels without kafka)")

    def poll(self) -> list[ChannelSignal]:
        """This producer's signals that arrived since the last call (without waiting);
        :attr:`next_offset` moves past every record read, this producer's or not."""
        out: list[ChannelSignal] = []
        for msg in self.consumer.consume(POLL_RECORDS, 0):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF and str(err) != self._last_error:
                    self._last_error = str(err)
                    log.warning("signal channel %s: %s", self.topic, err)
                continue
            offset = msg.offset()
            if offset < self.next_offset:
                log.warning("signal channel %s: offset %d is gone from the topic (created again meanwhile?); reading "
                            "from its oldest record, offset %d", self.topic, self.next_offset, offset)
            self.next_offset = offset + 1
            key = msg.key()
            if key != self._key:
                if key is None:
                    log.warning("signal channel %s: the record at offset %d has no key and is passed over (a signal "
                                "for this producer is keyed by its name, %r)", self.topic, offset, self.name)
                continue
            try:
                out.append(ChannelSignal(offset, row=kafka_signal_row(msg.value(), offset)))
            except BadSignal as exc:
                out.append(ChannelSignal(offset, error=exc))
        return out

    def close(self) -> None:
        self.consumer.close()
