"""How the producer frames records: Avro, JSON (:mod:`contract.codecs.serde`) or Kafka Connect's
JsonConverter shape as Debezium writes it (``debezium-json``, :mod:`contract.codecs.connect_json`).

debezium-json records are made as Avro ones are -- the row images encoded where they are read,
the envelope joined around them -- and the Avro body then transcoded into the record in C
(:meth:`RecordEncoder.json_writer`); where the transcoder is not built, from the event's dicts.

Avro records use the single-object framing, with every writer schema published to
``<prefix>._schemas`` (:mod:`contract.schema_store`) before the first record that uses it,
or Confluent's framing with ids from a schema registry.

The order of ``<prefix>._schemas`` tells readers which schema of a table is the newest
(:mod:`contract.schema_store`): a schema the topic already holds is not published again
when the producer starts (a restart at an older position must not make an old schema
look new), and after a DDL every schema is published again at its first use
(:meth:`RecordEncoder.schemas_changed`).  Publishing goes through
``publish`` (the Kafka writer's ``produce``), so a schema record is part of the same batch
(with transactions: the same transaction) as the first record that needs it.
"""

from __future__ import annotations

from typing import Any, Callable

from common.config import KafkaConfig
from common.kafka.clients import ensure_topics
from contract.codecs.connect_json import TRANSCODES, ConnectJsonWriter
from contract.codecs.serde import AvroWriter, ConfluentRegistry, encode_json
from contract.errors import SerdeError
from contract.schema_store import SchemaStore, schema_record
from contract.topics import schemas_topic

#: ``publish(topic, key, value)``: write one record in the current batch.
Publish = Callable[[str, bytes, bytes], None]


def from_avro_bodies(fmt: str) -> bool:
    """Whether records of ``fmt`` are made from Avro bodies (so row images and chunk rows can be
    encoded where they are read): Avro, and debezium-json where the transcoder is built."""
    return fmt == "avro" or fmt == "debezium-json" and TRANSCODES


class RecordEncoder:
    def __init__(self, kafka: KafkaConfig, fmt: str, publish: Publish) -> None:
        self.prefix = kafka.topic_prefix
        self.fmt = fmt
        self._publish = publish
        self._writers: dict[int, AvroWriter] = {}
        self._connect: dict[int, ConnectJsonWriter] = {}
        self._published: set[str] = set()
        self._registry = ConfluentRegistry(kafka.schema_registry_url, kafka.schema_registry_client) \
            if kafka.schema_registry_url else None
        if fmt == "avro" and self._registry is None:
            ensure_topics(kafka, [schemas_topic(self.prefix)], partitions=1, compacted=True)
            store = SchemaStore(kafka.bootstrap_servers, self.prefix, kafka.client_settings() or None)
            self._published = set(store.known())

    @property
    def keeps_schemas(self) -> bool:
        """Whether writer schemas go to ``<prefix>._schemas`` (Avro without a registry)."""
        return self.fmt == "avro" and self._registry is None

    @property
    def schemas_known(self) -> int:
        """How many writer schemas the schemas topic holds, as far as this encoder knows."""
        return len(self._published)

    def publish_schemas(self, schemas: list[tuple[dict | None, str, str]]) -> int:
        """Publish (or register) each ``(schema, topic, role)`` the topic does not hold yet;
        how many that were (the schema snapshot of ``snapshot.mode: recovery``)."""
        before = len(self._published)
        for schema, topic, role in schemas:
            if schema is not None and self.fmt == "avro":
                self._writer(schema, topic, role)
        return len(self._published) - before

    def schemas_changed(self) -> None:
        """A DDL went by: publish each schema again at its first use, so the schemas topic's
        order keeps telling which schema of each table is the newest."""
        self._published.clear()

    def _writer(self, schema: dict, topic: str, role: str) -> AvroWriter:
        w = self._writers.get(id(schema))
        if w is None:
            header = None
            if self._registry is not None:
                sid = self._registry.register(f"{topic}-{role}", schema)
                header = b"\x00" + sid.to_bytes(4, "big")
            w = self._writers[id(schema)] = AvroWriter(schema, header)
        if self._registry is None and w.fingerprint not in self._published:
            self._publish(*schema_record(self.prefix, w.fingerprint, schema))
            self._published.add(w.fingerprint)
        return w

    def encode(self, schema: dict | None, record: Any, topic: str, role: str) -> bytes | None:
        """``record`` framed for ``topic`` (``role``: key or value); None stays None."""
        if record is None:
            return None
        if self.fmt == "debezium-json":
            return self._connect_writer(schema, topic).encode(record)
        if self.fmt == "json" or schema is None:
            return encode_json(record)
        return self._writer(schema, topic, role).encode(record)

    def encode_column(self, schema: Any, value: Any, topic: str, role: str) -> bytes | None:
        """A column's value as a record of its own, ``schema`` its Avro type (the outbox router's
        keys and values, as Debezium's EventRouter makes them of a column): debezium-json writes a
        null as ``"payload": null`` with the column's optional schema, as Kafka's JsonConverter;
        Avro and JSON write no record for it."""
        if self.fmt == "debezium-json":
            return self._connect_writer(schema, topic).encode_optional(value)
        return self.encode(schema, value, topic, role)

    def _connect_writer(self, schema: dict | None, topic: str) -> ConnectJsonWriter:
        if schema is None:
            raise SerdeError(f"{topic}: a debezium-json record needs its schema")
        w = self._connect.get(id(schema))
        if w is None or w.schema is not schema:
            w = self._connect[id(schema)] = ConnectJsonWriter(schema)
        return w

    def header(self, schema: dict, topic: str, role: str) -> bytes | None:
        """The framing before the Avro body of a record of ``schema`` (the schema is published
        or registered first); empty for debezium-json made from Avro bodies (:meth:`json_writer`);
        None when records are made from dicts (JSON, or debezium-json without the transcoder)."""
        if self.fmt == "debezium-json":
            return b"" if self._connect_writer(schema, topic).program is not None else None
        if self.fmt != "avro":
            return None
        return self._writer(schema, topic, role).header

    def json_writer(self, schema: dict, topic: str) -> ConnectJsonWriter | None:
        """debezium-json: the writer whose ``transcode`` makes a record of ``schema`` from its Avro
        body (``contract/codecs/avro_json.h``: 2 against 10 us a record of the type matrix from its
        dict); None for Avro records."""
        if self.fmt != "debezium-json":
            return None
        return self._connect_writer(schema, topic)
