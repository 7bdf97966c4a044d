"""The wire format of records: Avro with a findable writer schema, or JSON.

Avro records are framed so any consumer can find the writer schema without the
producer running:

* default: Avro single-object encoding -- ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint
  of the schema's canonical form, logical types kept (:mod:`contract.codecs.fingerprint`: a
  ``DATETIME(3)`` and a ``DATETIME(6)`` column, or two decimal scales, are two schemas) + the
  Avro body.  Every schema is published, before the
  first record that uses it, to the compacted topic ``<prefix>._schemas`` keyed by the
  fingerprint's hex (value: the schema JSON).  :class:`SchemaStore` reads it back.
* with a Confluent Schema Registry (``kafka.schema_registry_url``): Confluent's framing,
  ``00`` + 4-byte schema id (big-endian) + the Avro body, subjects ``<topic>-key`` and
  ``<topic>-value``; the registry is spoken to by confluent-kafka's client
  (:class:`ConfluentRegistry`).

JSON records are plain UTF-8 JSON objects (bytes as base64, decimals as strings), or, in
the ``debezium-json`` format, Kafka Connect's JsonConverter shape ``{"schema", "payload"}``
(:mod:`contract.codecs.connect_json`): :class:`RecordDecoder` reads those into the values Avro
decoding gives.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import urllib.parse
from decimal import Decimal
from typing import Any, Callable

import fastavro
from fastavro.read import SchemaResolutionError

from contract.codecs.avro_decoder import (
    NotCompiled,
    change_scan_program,
    compile_change_header,
    compile_change_reader,
    compile_decoder,
)
from contract.codecs.connect_json import RECORD_PREFIX, ConnectJsonReader
from contract.codecs.fingerprint import schema_fingerprint
from contract.errors import SerdeError
from contract.schema_resolution import is_envelope, reader_view, resolvable

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"


class AvroWriter:
    """Encodes records of one schema (parsed once)."""

    __slots__ = ("schema", "parsed", "fingerprint", "header", "_buf")

    def __init__(self, schema: dict, header: bytes | None = None) -> None:
        self.schema = schema
        self.parsed = fastavro.parse_schema(schema)
        self.fingerprint = schema_fingerprint(schema)
        self.header = header if header is not None else SINGLE_OBJECT_MAGIC + bytes.fromhex(self.fingerprint)

    def encode(self, record: Any) -> bytes:
        buf = io.BytesIO()
        buf.write(self.header)
        try:
            fastavro.schemaless_writer(buf, self.parsed, record)
        except (ValueError, TypeError, AttributeError) as exc:
            raise SerdeError(f"record does not fit schema {self.schema.get('name')}: {exc}") from exc
        return buf.getvalue()


def json_default(o: Any) -> Any:
    if isinstance(o, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(o)).decode()
    if isinstance(o, Decimal):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def encode_json(record: Any) -> bytes:
    return json.dumps(record, default=json_default, ensure_ascii=False, separators=(",", ":")).encode()


class ConfluentRegistry:
    """The Schema Registry calls the framing needs (register a schema under a subject, fetch
    one by id) through confluent-kafka's maintained client
    (:class:`confluent_kafka.schema_registry.SchemaRegistryClient`: basic auth, TLS, retries
    with backoff, caches).  ``conf``: that client's settings besides ``url``
    (``kafka.schema_registry_client``: ``basic.auth.user.info``, ``ssl.ca.location``,
    ``ssl.certificate.location``, ``ssl.key.location``, ``max.retries``, ``retries.wait.ms``,
    ``timeout``, ...).  A failed call raises :class:`SerdeError` naming the registry (without
    credentials) and the call."""

    def __init__(self, url: str, conf: dict | None = None) -> None:
        # (imported here: the client pulls in an HTTP stack that a job without a registry,
        # and every Spark worker of one, need not import)
        from confluent_kafka.schema_registry import SchemaRegistryClient

        parts = urllib.parse.urlsplit(url)
        self.url = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")).geturl() \
            if parts.username or parts.password else url.rstrip("/")
        try:
            self.client = SchemaRegistryClient({"url": url, **(conf or {})})
        except (ValueError, TypeError) as exc:
            raise SerdeError(f"schema registry {self.url}: {exc} (kafka.schema_registry_client)") from exc
        self._by_id: dict[int, dict] = {}
        self._subject_of: dict[int, str] = {}  # schema id -> its value subject ("": none)
        self._seen: dict[str, set[int]] = {}  # subject -> the writer ids met
        self._latest: dict[str, tuple[int, dict]] = {}  # subject -> its newest version

    def register(self, subject: str, schema: dict) -> int:
        """The id of ``schema`` under ``subject`` (registered when new)."""
        from confluent_kafka.schema_registry import Schema
        try:
            return int(self.client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))
        except Exception as exc:  # noqa: BLE001 - the client's HTTP, TLS and registry errors alike
            raise SerdeError(f"schema registry {self.url}: registering {subject}: {exc}") from exc

    def schema(self, schema_id: int) -> dict:
        """The Avro schema of registry id ``schema_id``."""
        if schema_id not in self._by_id:
            try:
                found = self.client.get_schema(schema_id)
            except Exception as exc:  # noqa: BLE001 - as in register
                raise SerdeError(f"schema registry {self.url}: schema id {schema_id}: {exc}") from exc
            self._by_id[schema_id] = json.loads(found.schema_str)
        return self._by_id[schema_id]

    def newest(self, schema_id: int) -> tuple[int, dict] | None:
        """``(id, schema)`` of the newest version of the value subject (``<topic>-value``)
        schema ``schema_id`` is registered under: what records of that writer are read with
        (None: no value subject, a key).  Asked again when a writer id not seen for that subject
        comes (a newer version may have been registered with it)."""
        subject = self._subject_of.get(schema_id)
        if subject is None:
            try:
                subjects = self.client.get_subjects_by_schema_id(schema_id)
            except Exception as exc:  # noqa: BLE001 - as in register
                raise SerdeError(f"schema registry {self.url}: the subjects of schema id {schema_id}: {exc}") from exc
            values = sorted(s for s in subjects if s.endswith("-value"))
            subject = self._subject_of[schema_id] = values[0] if values else ""
        if not subject:
            return None
        seen = self._seen.setdefault(subject, set())
        if schema_id not in seen or subject not in self._latest:
            seen.add(schema_id)
            try:
                self.client.clear_latest_caches()
                latest = self.client.get_latest_version(subject)
            except Exception as exc:  # noqa: BLE001 - as in register
                raise SerdeError(f"schema registry {self.url}: the latest version of {subject}: {exc}") from exc
            self._latest[subject] = (int(latest.schema_id), json.loads(latest.schema.schema_str))
        return self._latest[subject]


class RecordDecoder:
    """Decodes any record of ours, looking writer schemas up by fingerprint or registry id.

    With ``newest`` (:meth:`SchemaStore.newest <contract.schema_store.SchemaStore.newest>`)
    a single-object record is read with its table's newest schema
    (:mod:`contract.schema_resolution`), so records written before a column was added
    have it too.
    """

    def __init__(self, lookup: Callable[[str], dict | None] | None = None,
                 registry: ConfluentRegistry | None = None,
                 newest: Callable[[str], tuple[str, dict] | None] | None = None,
                 generation: Callable[[], int] | None = None) -> None:
        self._lookup = lookup
        self._registry = registry
        self._newest = newest
        # Per fingerprint (8 raw bytes): (parsed writer, parsed reader or None), worked out
        # once; with ``newest`` only while ``generation()`` (the schema store's) stays put.
        self._generation = generation
        self._plans: dict[bytes, tuple[Any, Any, Any]] = {}
        self._plans_at: int | None = None
        self._compiled: dict[str, Any] = {}  # writer fingerprint -> compiled decoder or None
        self._change_readers: dict[bytes, Any] = {}  # writer fingerprint (raw) -> compiled change reader or False
        self._change_headers: dict[bytes, Any] = {}  # ... -> compiled (header reader, row reader) or False
        self._change_scans: dict[bytes, Any] = {}  # ... -> the native change scan's (program, indices) or False
        self._parsed: dict[Any, Any] = {}
        self._views: dict[str, tuple[dict, Any]] = {}
        self._unresolvable: set[tuple[str, str]] = set()
        self._resolvable: set[tuple[str, str]] = set()
        self._connect = ConnectJsonReader()

    @classmethod
    def resolving(cls, store: Any, registry: ConfluentRegistry | None = None) -> "RecordDecoder":
        """A decoder of a :class:`~contract.schema_store.SchemaStore`'s records that reads
        each with its table's newest schema."""
        # (a store without a generation: nothing resolved is kept between records)
        generation = (lambda: store.generation) if hasattr(store, "generation") else None
        return cls(store.get, registry, newest=store.newest, generation=generation)

    def _resolves(self, fp: str, newest: tuple[str, dict]) -> bool:
        """Whether records of writer ``fp`` are read with ``newest`` (see
        :func:`~contract.schema_resolution.resolvable`; a change resolution cannot express,
        INT -> VARCHAR, reads the writer schema alone)."""
        pair = (fp, newest[0])
        if pair in self._unresolvable:
            return False
        if pair not in self._resolvable:
            writer = self._lookup(fp) if self._lookup is not None else None
            # Envelopes only: a key record is read as written (a key is an identity; a changed
            # key is a new one, not an old one with nulls).
            if writer is None or not is_envelope(writer) or not resolvable(writer, newest[1]):
                self._unresolvable.add(pair)
                return False
            self._resolvable.add(pair)
        return True

    def _reader(self, fp: str) -> tuple[str, tuple[dict, Any]] | None:
        """``(fingerprint, (view, parsed view))`` of the newest schema records of writer
        ``fp`` are read with, or None when they are read with their writer schema alone (no
        ``newest``, or a change resolution cannot express)."""
        found = self._newest(fp) if self._newest is not None else None
        if found is None or (found[0] != fp and not self._resolves(fp, found)):
            return None
        return found[0], self.view_of(found[0], found[1])

    def reader_schema(self, fingerprint: str) -> tuple[str, dict] | None:
        """``(fingerprint, reader schema)`` records of writer ``fingerprint`` are read with:
        the reader view of the newest schema of their name; None when they are read with
        their writer schema alone."""
        reader = self._reader(fingerprint)
        return None if reader is None else (reader[0], reader[1][0])

    def decode_as(self, data: bytes, reader: dict) -> Any:
        """A single-object record read with ``reader`` itself (Avro schema resolution, e.g. a
        table's first schema: columns added since are left out), or None when the record is
        not single-object framed or ``reader`` cannot read it."""
        if data[:2] != SINGLE_OBJECT_MAGIC or self._lookup is None:
            return None
        fp = data[2:10].hex()
        writer = self._lookup(fp)
        if writer is None or not resolvable(writer, reader):
            return None
        key = ("as", id(reader))  # (readers are the schema store's: they stay alive)
        parsed_reader = self._parsed.get(key)
        if parsed_reader is None:
            parsed_reader = self._parsed[key] = fastavro.parse_schema(reader)
        try:
            return fastavro.schemaless_reader(io.BytesIO(data[10:]), self._schema_for(fp, lambda: writer),
                                              parsed_reader)
        except SchemaResolutionError:
            return None

    def _registry_reader(self, sid: int) -> Any:
        """The parsed reader schema records of registry id ``sid`` are read with: the newest
        version of their value subject (as :meth:`_reader` does with the ``_schemas`` topic's
        newest), None when that is the writer itself, a key, or a change resolution cannot express."""
        if (f"registry:{sid}", "") in self._unresolvable:
            return None
        newest = self._registry.newest(sid)
        if newest is None or newest[0] == sid:
            return None
        writer = self._registry.schema(sid)
        if not is_envelope(writer) or not resolvable(writer, newest[1]):
            self._unresolvable.add((f"registry:{sid}", ""))
            return None
        return self.view_of(f"registry:{newest[0]}", newest[1])[1]

    def view_of(self, fp: str, schema: dict) -> tuple[dict, Any]:
        """The :func:`~contract.schema_resolution.reader_view` of schema ``fp`` and its parsed
        form, made once."""
        view = self._views.get(fp)
        if view is None:
            v = reader_view(schema)
            view = self._views[fp] = (v, fastavro.parse_schema(v))
        return view

    def _schema_for(self, key: Any, fetch: Callable[[], dict | None]) -> Any:
        parsed = self._parsed.get(key)
        if parsed is None:
            schema = fetch()
            if schema is None:
                raise SerdeError(f"writer schema {key} not found")
            parsed = self._parsed[key] = fastavro.parse_schema(schema)
        return parsed

    def _plan(self, fpb: bytes) -> tuple[Any, Any, Any]:
        """(parsed writer, parsed reader or None, compiled decoder or None) for records of
        fingerprint ``fpb``; the compiled decoder (:mod:`contract.codecs.avro_decoder`) reads
        records that need no resolution."""
        fp = fpb.hex()
        if self._lookup is None:
            raise SerdeError("an Avro record needs a schema store to decode")
        parsed = self._schema_for(fp, lambda: self._lookup(fp))
        reader = self._reader(fp)
        resolving = reader is not None and reader[0] != fp
        compiled = None
        if not resolving:
            compiled = self._compiled.get(fp, False)
            if compiled is False:
                try:
                    compiled = compile_decoder(self._lookup(fp))
                except NotCompiled:
                    compiled = None
                self._compiled[fp] = compiled
        plan = (parsed, reader[1][1] if resolving else None, compiled)
        if self._newest is None or self._generation is not None:
            self._plans[fpb] = plan
        return plan

    def _plan_of(self, fpb: bytes) -> tuple[Any, Any, Any]:
        """:meth:`_plan`, kept while the schema store's generation stays put."""
        if self._generation is not None:
            at = self._generation()
            if at != self._plans_at:
                self._plans.clear()
                self._plans_at = at
        return self._plans.get(fpb) or self._plan(fpb)

    def change_reader_of(self, data: bytes) -> Callable[[bytes, int], dict]:
        """A function ``read(data, 10)`` doing :meth:`decode_change` for the records framed
        like ``data`` (the same first ten bytes: magic and writer fingerprint), while the
        schema store's generation stays put: the writer schema's compiled change reader
        where it has one, else :meth:`decode_change` itself.  For a caller that keeps one
        per writer schema, and saves the look-ups per record."""
        if data[:2] == SINGLE_OBJECT_MAGIC:
            reader = self._change_reader(data[2:10])
            if reader:
                return reader
        return lambda record, _start: self.decode_change(record)

    def _change_reader(self, fpb: bytes) -> Any:
        """The compiled change reader of writer ``fpb`` when its records need no schema
        resolution, else None/False."""
        if self._plan_of(fpb)[2] is None:  # (read with a newer schema: not compiled)
            return None
        reader = self._change_readers.get(fpb)
        if reader is None:
            try:
                reader = compile_change_reader(self._lookup(fpb.hex()))
            except NotCompiled:
                reader = False
            self._change_readers[fpb] = reader
        return reader

    def change_header_of(self, data: bytes) -> tuple[Callable[[bytes, int], dict], Callable[[bytes, int], Any]] | None:
        """For the records framed like ``data`` (magic and writer fingerprint), while the
        schema store's generation stays put: the writer schema's compiled ``(header reader,
        row reader)`` (:func:`~contract.codecs.avro_decoder.compile_change_header`), or None where
        the records need schema resolution or the schema is not compiled (then
        :meth:`change_reader_of`)."""
        if data[:2] != SINGLE_OBJECT_MAGIC:
            return None
        fpb = data[2:10]
        if self._plan_of(fpb)[2] is None:  # (read with a newer schema: not compiled)
            return None
        found = self._change_headers.get(fpb)
        if found is None:
            try:
                found = compile_change_header(self._lookup(fpb.hex()))
            except NotCompiled:
                found = False
            self._change_headers[fpb] = found
        return found or None

    def change_scan_of(self, data: bytes) -> tuple[bytes, tuple[int, ...]] | None:
        """For the records framed like ``data``, while the schema store's generation stays
        put: the native change scan's ``(program, indices)``
        (:func:`~contract.codecs.avro_decoder.change_scan_program`), or None where the records need
        schema resolution, the scan does not read the schema or the native reader is off."""
        if data[:2] != SINGLE_OBJECT_MAGIC:
            return None
        fpb = data[2:10]
        if self._plan_of(fpb)[2] is None:  # (read with a newer schema)
            return None
        found = self._change_scans.get(fpb)
        if found is None:
            found = self._change_scans[fpb] = change_scan_program(self._lookup(fpb.hex())) or False
        return found or None

    def decode_change(self, data: bytes) -> dict:
        """Of a change-event record, what applying it takes:
        ``{"source": {"ts_ms", "db", "table"}, "op", "position", "snapshot_window", "row"}``
        (``row``: ``before`` for a delete, else ``after``).  A record that needs no schema
        resolution is read by its writer schema's compiled change reader
        (:func:`~contract.codecs.avro_decoder.compile_change_reader`: the rest is skipped, not
        built); any other is decoded whole (:meth:`decode`) and cut down to that shape."""
        if data is not None and data[:2] == SINGLE_OBJECT_MAGIC:
            reader = self._change_reader(data[2:10])
            if reader:
                return reader(data, 10)
        value = self.decode(data)
        op = value["op"]
        return {"source": value.get("source"), "op": op, "position": value["position"],
                "snapshot_window": value.get("snapshot_window"),
                "row": value.get("before") if op == "d" else value.get("after")}

    def connect_schema(self, data: bytes) -> tuple[str, dict | None] | None:
        """``(schema id, Avro view of its schema)`` of a record in Kafka Connect's JSON shape
        (:func:`contract.codecs.connect_json.avro_view`: what the table sinks lay tables out by),
        None for any other record."""
        return self._connect.schema_of(data)

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if data[:2] == SINGLE_OBJECT_MAGIC:
            fpb = data[2:10]
            plan = self._plan_of(fpb)
            if plan[2] is not None:
                return plan[2](data, 10)
            body = io.BytesIO(data)
            body.seek(10)
            if plan[1] is not None:
                try:
                    return fastavro.schemaless_reader(body, plan[0], plan[1])
                except SchemaResolutionError:
                    self._unresolvable.add((fpb.hex(), self._reader(fpb.hex())[0]))
                    self._plans.pop(fpb, None)
                    body.seek(10)
            return fastavro.schemaless_reader(body, plan[0], None)
        if data[:1] == CONFLUENT_MAGIC and len(data) >= 5 and self._registry is not None:
            sid = struct.unpack(">I", data[1:5])[0]
            parsed = self._schema_for(("registry", sid), lambda: self._registry.schema(sid))
            reader = self._registry_reader(sid) if self._newest is not None else None
            if reader is not None:
                try:
                    return fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, reader)
                except SchemaResolutionError:
                    self._unresolvable.add((f"registry:{sid}", ""))
            return fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        if data[:1] in (b"{", b"["):
            if data[:10] == RECORD_PREFIX:
                found, value = self._connect.read(data)
                if found:
                    return value
            value = json.loads(data)
            if isinstance(value, dict) and set(value) == {"schema", "payload"}:  # JsonConverter's, spaced
                return self._connect.read(data)[1]
            return value
        raise SerdeError(f"unknown record framing (first bytes {data[:4].hex()})")
