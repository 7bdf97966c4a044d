"""A table topic's records decoded with their table's newest schema, and that schema told."""

from __future__ import annotations

from typing import Any

from contract.codecs.serde import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC, AvroWriter, ConfluentRegistry, RecordDecoder
from contract.schema_store import SchemaStore
from spark_jobs.task.settings import MergeSettings


class EnvelopeDecoder:
    """Decodes a record with its table's newest schema (:mod:`contract.schema_resolution`)
    and tells that schema (the sinks build tables from it)."""

    def __init__(self, s: MergeSettings) -> None:
        self.store = SchemaStore(s.bootstrap, s.prefix, s.client or None)
        self.registry = ConfluentRegistry(s.registry_url, s.registry_client) if s.registry_url else None
        self.decoder = RecordDecoder.resolving(self.store, self.registry)
        self._first_writers: dict[str, AvroWriter] = {}
        # Per fingerprint (raw bytes), worked out once while the store's schemas stay put:
        self._schemas: dict[bytes, tuple[str, Any]] = {}
        self._keys: dict[bytes, tuple[list[str], bool]] = {}
        self._at = -1

    def _fresh(self) -> None:
        if self.store.generation != self._at:
            self._schemas.clear()
            self._keys.clear()
            self._at = self.store.generation

    def schema_of(self, data: bytes) -> tuple[str, Any]:
        if data[:2] == SINGLE_OBJECT_MAGIC:
            self._fresh()
            found = self._schemas.get(data[2:10])
            if found is None:
                fp = data[2:10].hex()
                writer = self.store.get(fp)
                found = (fp, None) if writer is None else self.decoder.reader_schema(fp) or (fp, writer)
                self._fresh()  # (the lookup may have read new schemas)
                self._schemas[data[2:10]] = found
            return found
        if data[:1] == CONFLUENT_MAGIC and self.registry is not None:
            sid = int.from_bytes(data[1:5], "big")
            return f"registry-{sid}", self.registry.schema(sid)
        return self.decoder.connect_schema(data) or ("json", None)  # debezium-json: the record's own schema

    def decode(self, data: bytes | None) -> Any:
        return self.decoder.decode(data)

    def key_names(self, data: bytes) -> tuple[list[str], bool]:
        """The field names of a key record, and whether its schema is its table's newest key
        schema (False: written before the table's primary key changed)."""
        if data[:2] != SINGLE_OBJECT_MAGIC:
            return list(self.decoder.decode(data)), True
        self._fresh()
        found = self._keys.get(data[2:10])
        if found is None:
            names = list(self.decoder.decode(data))
            newest = self.store.newest(data[2:10].hex())
            self._fresh()
            found = self._keys[data[2:10]] = (names, newest is None or newest[0] == data[2:10].hex())
        return found

    def as_first(self, data: bytes, envelope_name: str) -> tuple[Any, bytes, str, dict] | None:
        """``columns: ignore``: the record as its table's first schema has it (columns added
        since left out): ``(value, bytes framed with that schema, its id, the reader schema
        the sinks lay tables out by)``; None when the record has that schema already or that
        schema cannot read it (a column renamed)."""
        first = self.store.first(envelope_name)
        if first is None or data[:2] != SINGLE_OBJECT_MAGIC or data[2:10].hex() == first[0]:
            return None
        value = self.decoder.decode_as(data, first[1])
        if value is None:
            return None
        writer = self._first_writers.get(first[0])
        if writer is None:
            writer = self._first_writers[first[0]] = AvroWriter(first[1])
        return value, writer.encode(value), first[0], self.decoder.view_of(first[0], first[1])[0]
