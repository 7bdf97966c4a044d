"""Writes records to Kafka in batches, each closed by an offset record.

Per batch: events are produced as they come; at the end of the batch the writer waits
until the broker acknowledged every one of them, then writes the offset record, then
commits (with transactions: ``commit_transaction``, so events and offset become visible
together; without: a flush).  An offset record is therefore never visible before the
events it covers.  A delivery failure stops the writer with :class:`WriterError` before
the offset is written, so the stored position never passes a lost event.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from common.config import KafkaConfig
from common.errors import KafkaAuthError
from common.kafka.clients import authorization_problem, ensure_topics, producer_config
from contract.envelope import POSITION_HEADER
from producer.errors import WriterError
from producer.native_producer import KINDS, open_native_producer

log = logging.getLogger(__name__)

#: The writer's throughput settings (librdkafka's names), on top of
#: :func:`common.kafka.clients.producer_config`: the benchmark race gives Debezium's Kafka
#: producer the same (``cdc.bench.race_settings``).  ``batch.size`` is librdkafka's default,
#: written out so that both sides' tables name it.
THROUGHPUT_SETTINGS = {"linger.ms": 20, "batch.num.messages": 10000, "batch.size": 1_000_000,
                       "queue.buffering.max.kbytes": 262144}


def transactional_id(name: str) -> str:
    """The transactional id of producer ``name``'s writer."""
    return f"cdc-producer-{name}"


def settle_last_transaction(kafka: KafkaConfig, name: str, timeout_s: float = 60.0) -> bool:
    """Let Kafka finish producer ``name``'s last transaction; whether it could be asked.

    A commit returns once the transaction coordinator has logged it; the commit markers reach
    the partitions after that, and until they do, read-committed readers (the offsets' load)
    do not see the transaction's records.  A writer killed with a node of the cluster (the
    chaos run's broker kills) can leave them unwritten for seconds, its last position then
    looking lost.  Initialising a client of the same transactional id waits until the
    coordinator has completed that transaction (and aborts one left open, as the next writer
    would), fencing the last writer."""
    client = Producer(producer_config(kafka, transactional_id=transactional_id(name)))
    try:
        client.init_transactions(timeout_s)
    except KafkaException as exc:
        log.warning("producer %r: Kafka could not be asked to finish its last transaction (%s)", name, exc)
        return False
    finally:
        client.flush(0)
    return True


class KafkaWriter:
    """The producer's transport: records into Kafka in batches (transactions when
    ``transactions``), topics created on first use.  Framing is the record encoder's
    (:mod:`producer.record_encoder`)."""

    def __init__(self, kafka: KafkaConfig, name: str, *, transactions: bool, offsets_topic: str,
                 linger_ms: int = THROUGHPUT_SETTINGS["linger.ms"]) -> None:
        self.kafka = kafka
        self.transactions = transactions
        self.offsets_topic = offsets_topic
        self._errors: list[str] = []
        self._refused: list[str] = []  # what Kafka's ACLs refused (KafkaAuthError: no retry helps)
        self._topics: set[str] = set()
        tx_id = transactional_id(name) if transactions else None
        settings = producer_config(kafka, transactional_id=tx_id, **{
            **THROUGHPUT_SETTINGS, "linger.ms": linger_ms, "partitioner": "murmur2_random"})
        # The producer's own librdkafka client (producer.native_producer), which also joins and
        # produces whole rows events in C (``emitter``); else confluent-kafka's Producer (every
        # record through produce_all).  Failures reach _delivery_failed; successes cost no
        # Python call per record (the native client passes them over in C; confluent-kafka
        # with its delivery.report.only.error, which it handles itself, not librdkafka).
        self.producer: Any = open_native_producer(settings, self._delivery_failed, self._on_error)
        self.emitter = self.producer
        if self.producer is None:
            self.producer = Producer({**settings, "error_cb": self._on_error, "delivery.report.only.error": True,
                                      "on_delivery": lambda err, msg: self._delivery_failed(err, msg.topic())})
        self.in_batch = False
        self.pending = 0
        if transactions:
            try:
                # Fences a previous instance with the same id and aborts its open transaction.
                self.producer.init_transactions(60)
            except KafkaException as exc:
                refused = authorization_problem(exc.args[0] if exc.args else None, kafka,
                                                f"the transactional id {tx_id!r}")
                if refused:
                    raise KafkaAuthError(refused) from None
                raise WriterError(f"Kafka transactions could not be initialised: {exc}") from exc

    # -- errors -------------------------------------------------------------------------
    def _on_error(self, err: KafkaError) -> None:
        refused = authorization_problem(err, self.kafka, "a request")
        if refused:
            self._refused.append(refused)
        elif err.fatal():
            self._errors.append(f"fatal Kafka error: {err}")
        else:
            log.warning("Kafka client: %s", err)

    def _delivery_failed(self, err: KafkaError | None, topic: str) -> None:
        if err is not None:
            refused = authorization_problem(err, self.kafka, f"a write to topic {topic}")
            if refused:
                self._refused.append(refused)
            self._errors.append(f"delivery to {topic} failed: {err}")

    def _check(self) -> None:
        if self._refused:
            raise KafkaAuthError(self._refused[0])
        if self._errors:
            errors, self._errors = self._errors, []
            raise WriterError("; ".join(errors[:5]))

    # -- topics --------------------------------------------------------------------------------
    def ensure_topic(self, topic: str, *, compacted: bool = False, partitions: int | None = None) -> None:
        if topic not in self._topics:
            ensure_topics(self.kafka, [topic], compacted=compacted, partitions=partitions)
            self._topics.add(topic)

    # -- batches ---------------------------------------------------------------------------
    def _begin(self) -> None:
        if not self.in_batch:
            if self.transactions:
                self.producer.begin_transaction()
            self.in_batch = True

    def produce(self, topic: str, key: bytes | None, value: bytes | None, position: str | None = None) -> None:
        self.produce_all([(topic, key, value, position)])

    def produce_all(self, records: list[tuple[str, bytes | None, bytes | None, str | None]]) -> None:
        """Produce ``(topic, key, value, position)`` records in order."""
        self._begin()
        produce, topics = self.producer.produce, self._topics
        for topic, key, value, position in records:
            if topic not in topics:
                self.ensure_topic(topic)
            headers = [(POSITION_HEADER, position.encode())] if position else None
            while True:
                try:
                    produce(topic, value, key, headers=headers)
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: let deliveries drain
            self.pending += 1
            if self.pending % 2000 == 0:
                self._serve()

    def produce_headed(self, records: list[tuple[str, bytes | None, bytes | None, str, list]]) -> None:
        """Produce ``(topic, key, value, position, headers)`` records in order (the outbox
        router's: ``headers``, ``[(name, bytes)]``, before the position's)."""
        self._begin()
        for topic, key, value, position, headers in records:
            if topic not in self._topics:
                self.ensure_topic(topic)
            headers = headers + [(POSITION_HEADER, position.encode())]
            while True:
                try:
                    self.producer.produce(topic, value, key, headers=headers)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.pending += 1
            if self.pending % 2000 == 0:
                self._serve()

    def _serve(self) -> None:
        """Delivery reports and errors so far (every 2,000 records)."""
        self.producer.poll(0)
        self._check()

    def produce_rows(self, topic: str, key_header: bytes | None, parts: tuple[bytes, ...], bodies: list, kind: str,
                     keyed: bool, start: int, stop: int, skip_up_to: bytes | None,
                     tombstones: bool, first_sequence: int = 0,
                     json: tuple[bytes, bytes, bytes | None, bytes | None] | None = None) -> tuple[int, int]:
        """Produce the records of rows ``start`` to ``stop - 1`` of encoded row images or chunk
        rows by the native row emitter (:meth:`producer.events.builder.EventBuilder.emit_encoded`
        and ``emit_chunk`` give the arguments), as :meth:`produce_all` would produce them;
        ``(records, change events)``.  ``json``: debezium-json, each record transcoded from its
        Avro body by these programs and prefixes (value's, key's)."""
        self._begin()
        if topic not in self._topics:
            self.ensure_topic(topic)
        records = events = 0
        while True:
            n, e, done = self.emitter.rows(topic, key_header, parts, bodies, KINDS[kind], keyed, start, stop,
                                           skip_up_to, tombstones, records, first_sequence, json)
            records += n
            events += e
            if done:
                break
            self.producer.poll(0.05)  # local queue full: let deliveries drain, then go on after the last one
        before, self.pending = self.pending, self.pending + records
        if before // 2000 != self.pending // 2000:
            self._serve()
        return records, events

    def flush(self) -> None:
        """Wait until every record produced so far is acknowledged (the batch stays open):
        what comes after cannot reach the broker without them."""
        remaining = self.producer.flush(120)
        if remaining:
            raise WriterError(f"{remaining} records not acknowledged by Kafka within 120s")
        self._check()

    def commit(self, offset_key: bytes, offset_value: bytes) -> None:
        """Close the batch: wait for every event's ack, write the offset record, commit."""
        self._begin()
        try:
            self.flush()
            self.producer.produce(self.offsets_topic, key=offset_key, value=offset_value)
            if self.transactions:
                self.producer.commit_transaction(120)
            else:
                self.producer.flush(60)
            self._check()
        except KafkaException as exc:
            raise WriterError(f"committing a batch failed: {exc}") from exc
        finally:
            self.in_batch = False
            self.pending = 0

    def close(self) -> None:
        """Abort an open batch, wait up to 10 s for what was produced, then let the client go
        at once (not when the garbage collector finds it: until then it would keep reaching for
        a broker that may have stopped, and say so); what Kafka did not take by then is dropped
        (it was never committed: the next run writes it again).  It raises nothing: a writer is
        closed after the error that stopped it (a record too large, a lost broker), and a client
        in an error state may refuse the abort or the purge (INVALID_TXN_STATE): that is logged,
        the first error is the one the caller sees."""
        try:
            if self.in_batch and self.transactions:
                try:
                    self.producer.abort_transaction(10)
                except KafkaException as exc:
                    log.info("closing the Kafka writer: the abort failed: %s", exc)
            self.producer.flush(10)
            self.producer.purge()
        except KafkaException as exc:
            log.info("closing the Kafka writer: %s (what it held is dropped: never committed)", exc)
        finally:
            self.producer.close()
