"""The chaos run's Kafka nodes (``cdc.chaos`` with a cluster of several nodes): stopping the
node that leads the busiest partition of the run's table topics, starting it again, and the
evidence, read from the topics after the run, that each stop did what it was meant to:

* **the stopped node led the partition**: the records the partition took after the stop (at
  and past its end offset then, before the next stop where there are any) carry a newer leader
  epoch than those below that offset (Kafka writes the epoch of the leader that appended a record batch into
  it; the epoch moves only when leadership does);
* **a snapshot was running** at a stop planned during the snapshots: some snapshot of the
  run's tables had started (its first notification) and not yet ended (COMPLETED or
  ABORTED) at the stop's moment, by the notifications' own timestamps.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from confluent_kafka.admin import AdminClient

from cdc.errors import ChaosError
from cdc.stack.kafka_broker import EmbeddedKafka, partition_leaders, stop_node
from common.config import CDCConfig
from common.kafka.offsets import end_offsets
from common.kafka.topic_reader import read_topic
from contract.notifications import Notification
from contract.topics import notifications_topic

#: How long a Kafka node the chaos stopped stays down.
BROKER_DOWN_S = 6.0


@dataclass(frozen=True)
class BrokerStop:
    """One node stopped: which, how, when (epoch ms), and the partition it was stopped for
    (the busiest of the run's table topics then, its end offset then)."""

    node: int
    kill: bool
    at_ms: int
    topic: str
    partition: int
    end_offset: int
    during_snapshot: bool


@dataclass
class BrokerChaos:
    """The chaos run's hold on a Kafka cluster of several nodes (the stack's ``kafka`` record
    and its :class:`~cdc.stack.kafka_broker.EmbeddedKafka`): which node leads the busiest
    partition, stopping and starting nodes, and the stops made."""

    cluster: EmbeddedKafka
    info: dict
    down: list[int] = field(default_factory=list)
    #: Called with the cluster's record after a node started again (its new pid: stack.json).
    on_change: Callable[[dict], None] | None = None
    stops: list[BrokerStop] = field(default_factory=list)

    def stop_busiest_leader(self, cfg: CDCConfig, topics: list[str], *, kill: bool,
                            during_snapshot: bool = False) -> BrokerStop:
        """Stop the node leading the partition of ``topics`` that holds the most records
        (SIGKILL when ``kill``, else a controlled shutdown).  Call :meth:`wait_in_sync` first:
        the run stops one node at a time, never a second one while a node started again is
        still catching up (then the leaders left could be replicas that missed acknowledged
        writes).  A :class:`ChaosError` when no partition of ``topics`` holds a record yet."""
        busiest = self.busiest_partition(cfg, topics)
        if busiest is None:
            raise ChaosError(f"no partition of {', '.join(topics)} holds a record or has a leader: nothing to stop")
        (topic, partition), end, node_id = busiest
        node = next(n for n in self.info["nodes"] if n["id"] == node_id)
        stop = BrokerStop(node_id, kill, int(time.time() * 1000), topic, partition, end, during_snapshot)
        stop_node(node, sig=signal.SIGKILL if kill else signal.SIGTERM)
        self.down.append(node_id)
        self.stops.append(stop)
        return stop

    @staticmethod
    def busiest_partition(cfg: CDCConfig, topics: list[str]) -> tuple[tuple[str, int], int, int] | None:
        """The partition of ``topics`` holding the most records and having a leader: ``((topic,
        partition), end offset, leader's node id)``; None while none does."""
        client = cfg.kafka.client_settings()
        leaders = partition_leaders(cfg.kafka.bootstrap_servers, topics, client)
        ends = end_offsets(cfg.kafka.bootstrap_servers, list(leaders), client_config=client) if leaders else {}
        busy = {tp: end for tp, (_, end) in ends.items() if end > 0 and leaders.get(tp, -1) >= 0}
        if not busy:
            return None
        tp, end = max(busy.items(), key=lambda kv: kv[1])
        return tp, end, leaders[tp]

    def wait_in_sync(self, cfg: CDCConfig, timeout: float) -> bool:
        """Wait until every partition of the cluster has all its replicas in sync; whether it did."""
        admin = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.client_settings()})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                meta = admin.list_topics(timeout=10)
                if all(len(p.isrs) >= len(p.replicas) for t in meta.topics.values() for p in t.partitions.values()):
                    return True
            except Exception:  # noqa: BLE001 - a node still starting: asked again
                pass
            time.sleep(0.5)
        return False

    def start_stopped(self) -> list[int]:
        """Start every node stopped so far again (their ports and data); their ids."""
        started, self.down = self.down, []
        for node_id in started:
            self.info = self.cluster.restart_node(self.info, node_id)
        if started and self.on_change is not None:
            self.on_change(self.info)
        return started


def leader_epochs(cfg: CDCConfig, stop: BrokerStop, until_ms: int | None) -> tuple[int, int]:
    """:func:`epochs_across` the stop, of the records of the partition ``stop`` was made for."""
    records = ((m.offset(), m.timestamp()[1], m.leader_epoch())
               for m in read_topic(cfg.kafka.bootstrap_servers, stop.topic, client_config=cfg.kafka.client_settings())
               if m.partition() == stop.partition and m.leader_epoch() is not None)
    return epochs_across(records, stop.end_offset, until_ms)


def epochs_across(records: Iterable[tuple[int, int, int]], end_offset: int, until_ms: int | None) -> tuple[int, int]:
    """The newest leader epoch of a partition's ``records`` (offset, timestamp ms, epoch) below
    ``end_offset`` (its end when a node was stopped), and of those at and past it created before
    ``until_ms`` (the next stop); when none of these came from a newer leader (the producer held
    up until then: a restart, the election), of every record past it.  -1 where there are none.
    (The end offset is the high watermark: the stopped leader may have appended records past it,
    in its own epoch, that its followers had fetched and the watermark not yet reached; they are
    the old leader's.)"""
    before = within = later = -1
    for offset, ts_ms, epoch in records:
        if offset < end_offset:
            before = max(before, epoch)
        elif until_ms is None or ts_ms < until_ms:
            within = max(within, epoch)
        else:
            later = max(later, epoch)
    return before, within if within > before else max(within, later)


def leader_moved(epochs: tuple[int, int]) -> bool:
    """Whether :func:`leader_epochs`' pair shows a new leader after the stop: the stopped node led."""
    before, after = epochs
    return before >= 0 and after > before


def snapshot_spans(cfg: CDCConfig, db: str) -> list[tuple[int, float]]:
    """The spans (epoch ms; an unended one ends at infinity) of the snapshots of ``db``'s tables,
    from their notifications' timestamps."""
    first: dict[str, int] = {}
    end: dict[str, int] = {}
    ours: set[str] = set()
    for m in read_topic(cfg.kafka.bootstrap_servers, notifications_topic(cfg.kafka.topic_prefix), timeout=10,
                        client_config=cfg.kafka.client_settings()):
        doc = json.loads(m.value())
        n = Notification.from_json(doc)
        ts = int(doc.get("timestamp") or m.timestamp()[1])
        tables = list(n.data.get("tables") or []) + [n.data.get("table") or ""]
        if any(str(t).startswith(f"{db}.") for t in tables):
            ours.add(n.snapshot_id)
        first[n.snapshot_id] = min(first.get(n.snapshot_id, ts), ts)
        if n.type in ("COMPLETED", "ABORTED"):
            end[n.snapshot_id] = max(end.get(n.snapshot_id, ts), ts)
    return [(first[i], float(end.get(i, float("inf")))) for i in sorted(ours)]


def snapshot_running(cfg: CDCConfig, db: str, at_ms: int) -> bool:
    """Whether a snapshot of ``db``'s tables was running at ``at_ms``."""
    return any(start <= at_ms < stop for start, stop in snapshot_spans(cfg, db))

