"""The producer's stored position: a compacted Kafka topic ``<prefix>._offsets``, and a
copy of it outside Kafka.

One record per commit, keyed by the producer's name, value JSON::

    {"resume": {"file": "mysql-bin.000003", "pos": 1234, "last": "<30 digits>"},
     "gtid": "...", "ts_ms": ..., "snapshot": {...}}

The record is written after every event it covers has been acknowledged by the broker
(and, with transactions, in the same transaction), so a visible offset never points
past an event that is missing.  The latest record for the key wins.

:class:`LocalOffsetCopy` keeps the last committed record in the state directory
(``<state_dir>/offsets/<name>.json``), written after Kafka acknowledged the commit.  On
start, a position kept locally that Kafka does not have (no record, or an older one) means
Kafka lost the producer's history (:func:`lost_history`): the broker was emptied, the
topic deleted, or the configuration points at another cluster.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from common.config import KafkaConfig
from common.kafka.clients import ensure_topics
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from contract.position import BinlogPosition
from contract.topics import offsets_topic

#: What a look-up of a topic that does not exist (yet) answers.
_NO_TOPIC = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)


class OffsetStore:
    def __init__(self, kafka: KafkaConfig, name: str) -> None:
        self.kafka = kafka
        self.name = name
        self.topic = offsets_topic(kafka.topic_prefix)

    def ensure(self) -> None:
        ensure_topics(self.kafka, [self.topic], partitions=1, compacted=True)

    #: Records at the end of the topic read first by :meth:`load` (more when the key is not among them).
    TAIL = 64

    def load(self) -> dict[str, Any] | None:
        """The latest record of this producer (None: none, or a reset).  Read from the end of
        the topic back: the broker may not compact it (the embedded one does not), and it
        gains a record per commit, about 36,000 an hour at the default batch interval, so a
        read from its start grows with the producer's age."""
        span, key = self.TAIL, self.name.encode()
        while True:
            try:
                (low, end), = end_offsets(self.kafka.bootstrap_servers, [(self.topic, 0)],
                                          client_config=self.kafka.client_settings()).values()
            except KafkaException as exc:
                if exc.args and getattr(exc.args[0], "code", lambda: None)() in _NO_TOPIC:
                    return None  # no offsets topic yet
                raise
            start = max(low, end - span)
            found, latest = False, None
            for msg in read_topic(self.kafka.bootstrap_servers, self.topic, start={0: start},
                                  client_config=self.kafka.client_settings()):
                if msg.key() == key:
                    found, latest = True, json.loads(msg.value()) if msg.value() else None
            if found or start <= low:
                return latest
            span *= 16

    def record(self, state: dict[str, Any]) -> tuple[bytes, bytes]:
        return self.name.encode(), json.dumps({**state, "ts_ms": int(time.time() * 1000)}).encode()

    def reset(self, producer) -> None:
        """Forget the stored position (a tombstone for this producer's key)."""
        producer.produce(self.topic, key=self.name.encode(), value=None)
        producer.flush(30)


class LocalOffsetCopy:
    """The producer's last committed offset record, kept in ``<state_dir>/offsets/<name>.json``.

    ``recover`` in the file (written by ``cdc stack up`` when the embedded broker came back
    empty) asks the next start to recover that way (see :func:`lost_history`)."""

    def __init__(self, state_dir: str | os.PathLike[str], name: str) -> None:
        self.path = Path(state_dir) / "offsets" / f"{name}.json"

    def load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise OSError(f"the producer's local offset copy {self.path} cannot be read: {exc}") from exc
        return data if isinstance(data, dict) and data.get("resume") else None

    def save(self, value: bytes | str | dict) -> None:
        """Keep ``value`` (the offset record just committed to Kafka) as the local copy."""
        text = value if isinstance(value, str) else value.decode() if isinstance(value, bytes) else json.dumps(value)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, self.path)

    def request_recovery(self, mode: str, reason: str) -> bool:
        """Ask the next start to recover by ``mode`` (resume | snapshot); False when there
        is no local copy (nothing to recover)."""
        data = self.load()
        if data is None:
            return False
        data["recover"] = {"mode": mode, "reason": reason, "requested_ms": int(time.time() * 1000)}
        self.save(data)
        return True

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def resume_order(record: dict[str, Any]) -> tuple[BinlogPosition, str]:
    """An offset record's place in the binlog: its resume point, then its last change."""
    r = record["resume"]
    return BinlogPosition.from_binlog(str(r["file"]), int(r["pos"])), str(r.get("last") or "")


def lost_history(kafka: dict[str, Any] | None, local: dict[str, Any] | None) -> str | None:
    """Why Kafka lost the producer's history, or None when it did not (or cannot be told:
    no local copy).  Kafka may be ahead of the local copy (a crash between the Kafka commit
    and the local write), never behind it."""
    if local is None:
        return None
    if kafka is None or not kafka.get("resume"):
        return "Kafka holds no stored position for this producer"
    try:
        behind = resume_order(kafka) < resume_order(local)
    except (KeyError, TypeError, ValueError):
        return None  # a record of an older format: nothing to compare
    if behind:
        k = kafka["resume"]
        return (f"the position Kafka holds ({k['file']}:{k['pos']}) is behind the one kept locally: Kafka lost the "
                "commits after it")
    return None


def check_history(kafka: KafkaConfig, name: str, state_dir: str | os.PathLike[str]
                  ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """``(stored, kept, lost)``: the producer's record in Kafka, its local copy, and why Kafka
    lost its history (:func:`lost_history`; None: it did not), as ``cdc status`` tells it
    while the producer runs.  The local copy is read first: it is written after Kafka
    acknowledged the commit it holds, so Kafka read after it holds that commit or a later
    one unless Kafka lost it.  (Read the other way round, a commit between the two reads
    looked like a loss.)"""
    kept = LocalOffsetCopy(state_dir, name).load()
    stored = OffsetStore(kafka, name).load()
    return stored, kept, lost_history(stored, kept)
