"""Both sides' throughput settings in the race against Debezium, and their side-by-side table.

The race is like for like only if Debezium's engine and its Kafka producer get the same
throughput settings as our producer (``producer.kafka_writer.THROUGHPUT_SETTINGS`` over
``common.kafka.clients.producer_config``) and its JVM an explicit heap.  The harness
(:mod:`cdc.bench.debezium`) takes Debezium's settings from here, and the report renders
:func:`settings_table_lines` from the same constants, so the table cannot drift from what
ran.  Debezium at its own defaults (``--debezium-defaults``) is an extra row, never the
headline.  Pure: no I/O.
"""

from __future__ import annotations

from common.config import ProducerConfig
from producer.kafka_writer import THROUGHPUT_SETTINGS

#: Changes of the embedded race's single-row (OLTP-shaped) streaming run (``cdc bench race --oltp-rows``).
OLTP_ROWS = 100_000
#: Debezium's engine in the race: batches, queue and poll interval raised to match our
#: producer's batching (its defaults: :data:`ENGINE_DEFAULTS`): a batch of as many records
#: as ours commits at once (``producer.batch_size``), a queue of four of them.
_OUR_BATCH = ProducerConfig().batch_size
ENGINE_TUNED = {"max.batch.size": _OUR_BATCH, "max.queue.size": 4 * _OUR_BATCH, "poll.interval.ms": 50}
#: Debezium 3.6's own engine defaults.
ENGINE_DEFAULTS = {"max.batch.size": 2048, "max.queue.size": 8192, "poll.interval.ms": 500}

#: Kafka's Java producer in Debezium's runs, matched to our librdkafka settings: the same
#: linger, batches of librdkafka's ``batch.size`` bytes, a send buffer of
#: ``queue.buffering.max.kbytes``.  Both idempotent with ``acks=all`` (the runner sets those).
PRODUCER_TUNED = {"linger.ms": THROUGHPUT_SETTINGS["linger.ms"],
                  "batch.size": THROUGHPUT_SETTINGS["batch.size"],
                  "buffer.memory": THROUGHPUT_SETTINGS["queue.buffering.max.kbytes"] * 1024}
#: The Java client's defaults (kafka-clients 4.3).
PRODUCER_DEFAULTS = {"linger.ms": 5, "batch.size": 16384, "buffer.memory": 33554432}

#: The JVM's heap in the race (``--debezium-heap``); the defaults row runs without ``-Xmx``.
DEFAULT_HEAP = "1g"

TUNED = "tuned"
DEFAULTS = "defaults"


def engine_settings(tuning: str) -> dict[str, int]:
    """Debezium's engine settings for a run of ``tuning`` (:data:`TUNED` or :data:`DEFAULTS`)."""
    return dict(ENGINE_TUNED if tuning == TUNED else ENGINE_DEFAULTS)


def producer_settings(tuning: str) -> dict[str, int]:
    """The Java producer's settings for a run of ``tuning``."""
    return dict(PRODUCER_TUNED if tuning == TUNED else PRODUCER_DEFAULTS)


def heap_options(tuning: str, heap: str = DEFAULT_HEAP) -> list[str]:
    """The JVM's heap option of a run: ``-Xmx<heap>`` tuned, none at the defaults."""
    return [f"-Xmx{heap}"] if tuning == TUNED and heap else []


def _n(x: int) -> str:
    return f"{x:,}"


def settings_rows(heap: str = DEFAULT_HEAP, *, with_defaults: bool = False) -> list[tuple[str, ...]]:
    """The side-by-side settings: ``(setting, ours, Debezium in the race[, Debezium at its
    defaults])`` per row, from the constants the harness runs with."""
    ours, et, ed = THROUGHPUT_SETTINGS, ENGINE_TUNED, ENGINE_DEFAULTS
    pt, pd = PRODUCER_TUNED, PRODUCER_DEFAULTS
    batch = _OUR_BATCH
    rows = [
        ("Kafka producer: linger", f"`linger.ms` {ours['linger.ms']}", f"`linger.ms` {pt['linger.ms']}",
         f"`linger.ms` {pd['linger.ms']}"),
        ("Kafka producer: batch", f"`batch.size` {_n(ours['batch.size'])} B, `batch.num.messages` "
                                  f"{_n(ours['batch.num.messages'])}",
         f"`batch.size` {_n(pt['batch.size'])} B", f"`batch.size` {_n(pd['batch.size'])} B"),
        ("Kafka producer: send buffer", f"`queue.buffering.max.kbytes` {_n(ours['queue.buffering.max.kbytes'])}",
         f"`buffer.memory` {_n(pt['buffer.memory'])} B", f"`buffer.memory` {_n(pd['buffer.memory'])} B"),
        ("Kafka producer: delivery", "idempotent, `acks=all`", "idempotent, `acks=all`", "idempotent, `acks=all`"),
        ("records per engine batch", f"`producer.batch_size` {_n(batch)} events per Kafka batch",
         f"`max.batch.size` {_n(et['max.batch.size'])}", f"`max.batch.size` {_n(ed['max.batch.size'])}"),
        ("engine queue", "the binlog reader process's hand-off", f"`max.queue.size` {_n(et['max.queue.size'])}",
         f"`max.queue.size` {_n(ed['max.queue.size'])}"),
        ("poll interval", "none (the reader pushes)", f"`poll.interval.ms` {et['poll.interval.ms']}",
         f"`poll.interval.ms` {ed['poll.interval.ms']}"),
        ("memory ceiling", "none (CPython)", f"`-Xmx{heap}`" if heap else "the JVM's default",
         "the JVM's default (no `-Xmx`)"),
    ]
    return rows if with_defaults else [r[:3] for r in rows]


def settings_table_lines(heap: str = DEFAULT_HEAP, *, with_defaults: bool = False) -> list[str]:
    """:func:`settings_rows` as a Markdown table."""
    head = ("setting", "ours", "Debezium in the race") + (("Debezium at its defaults (extra row)",)
                                                           if with_defaults else ())
    return ["| " + " | ".join(r) + " |" for r in (head, ("---",) * len(head), *settings_rows(
        heap, with_defaults=with_defaults))]


# --- the peers as deployed (cdc bench peers): Debezium in Kafka Connect, Flink CDC --------------

#: The Kafka Connect worker's producer in the peers' race (worker ``producer.*`` overrides): the
#: same throughput settings as the Java producer above, idempotent with ``acks=all`` and five
#: requests in flight, as librdkafka's idempotent producer (Connect's own default is one).
CONNECT_PRODUCER_TUNED = {**PRODUCER_TUNED, "enable.idempotence": "true", "acks": "all",
                          "max.in.flight.requests.per.connection": 5}
#: Flink's Kafka sink in the race: the same producer settings (the runner sets idempotence and acks).
FLINK_PRODUCER_TUNED = dict(PRODUCER_TUNED)
#: Every side's record batch compression in the peers' race (``--compression``): their
#: JsonConverter records carry their schema, about 4 KB a row change; uncompressed, the bytes
#: one broker on two shared cores takes bound Debezium in Kafka Connect (22,244 rows/s, 29,934
#: with lz4, in a round of 2026-11-27), where ours was bound by its own CPU.
PEERS_COMPRESSION = "lz4"


def connect_worker_settings(compression: str = "none") -> dict[str, object]:
    """The Connect worker's properties of a tuned run: its producer's overrides."""
    return {f"producer.{k}": v for k, v in {**CONNECT_PRODUCER_TUNED, "compression.type": compression}.items()}


def flink_producer_settings(compression: str = "none") -> dict[str, object]:
    """Flink's Kafka sink's producer settings of a tuned run."""
    return {**FLINK_PRODUCER_TUNED, "compression.type": compression}


def peers_settings_rows(heap: str = DEFAULT_HEAP, chunk_size: int = 8192,
                        compression: str = "none") -> list[tuple[str, str, str, str]]:
    """The side-by-side settings of the peers' race: ``(setting, ours, Debezium in Kafka
    Connect, Flink CDC)``, from the constants the harness runs with."""
    ours, et, pt = THROUGHPUT_SETTINGS, ENGINE_TUNED, PRODUCER_TUNED
    return [
        ("record format", "`producer.format: debezium-json` (Kafka Connect's JsonConverter shape, schemas on, "
                          "tombstones after deletes)", "JsonConverter, schemas on (key and value), tombstones on "
                                                      "(Debezium's default)", "JsonConverter, schemas on (key and "
                                                                               "value), by the runner"),
        ("Kafka producer: linger / batch / buffer", f"`linger.ms` {ours['linger.ms']}, `batch.size` "
                                                    f"{_n(ours['batch.size'])} B, `queue.buffering.max.kbytes` "
                                                    f"{_n(ours['queue.buffering.max.kbytes'])}",
         f"`producer.linger.ms` {pt['linger.ms']}, `producer.batch.size` {_n(pt['batch.size'])} B, "
         f"`producer.buffer.memory` {_n(pt['buffer.memory'])} B",
         f"`linger.ms` {pt['linger.ms']}, `batch.size` {_n(pt['batch.size'])} B, `buffer.memory` "
         f"{_n(pt['buffer.memory'])} B"),
        ("Kafka producer: compression", f"`kafka.compression: {compression}`",
         f"`producer.compression.type` {compression}", f"`compression.type` {compression}"),
        ("Kafka producer: delivery", "idempotent, `acks=all`, no Kafka transactions",
         "idempotent, `acks=all`, 5 requests in flight (worker `producer.*` overrides)",
         "Flink's Kafka sink, at least once, idempotent, `acks=all`"),
        ("source batching", f"`producer.batch_size` {_n(_OUR_BATCH)} events per Kafka batch",
         f"`max.batch.size` {_n(et['max.batch.size'])}, `max.queue.size` {_n(et['max.queue.size'])}, "
         f"`poll.interval.ms` {et['poll.interval.ms']}", "Flink CDC's defaults"),
        ("snapshot chunks", f"`snapshot.chunk_size` {_n(chunk_size)}, `snapshot.parallelism` 1 or 2",
         f"`incremental.snapshot.chunk.size` {_n(chunk_size)}", f"`splitSize` {_n(chunk_size)}, fetch size 1,024, "
                                                               "parallelism 1 or 2 (MiniCluster)"),
        ("memory ceiling", "none (CPython)", f"`-Xmx{heap}`", f"`-Xmx{heap}`"),
    ]
