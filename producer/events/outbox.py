"""Debezium's outbox event router (``io.debezium.transforms.outbox.EventRouter``) as a
producer setting of its own, ``producer.outbox``.

Each INSERT into the outbox table becomes one record, as the EventRouter makes it of
Debezium's change event (``EventRouterDelegate.apply`` in Debezium 3.6):

* topic: the ``aggregate_type_column`` value (``route.by.field``) through ``topic_regex``
  (``route.topic.regex``, Java syntax; matched in full) and ``topic_replacement``
  (``route.topic.replacement``, ``${routedByValue}``, ``$1``); not matched: the value itself;
* key: the ``aggregate_id_column`` value (``table.field.event.key``) with that column's schema;
* value: the ``payload_column`` value (``table.field.event.payload``) with that column's
  schema -- a string column's text, JSON-quoted, in ``debezium-json``; with ``envelope``
  placements (``additional_placement``) a struct ``{payload, <alias>...}`` named
  ``<prefix>.<db>.<table>.<routed value>.Value`` after the first record's routed value (as
  Debezium, which keeps that struct by the payload's schema); an empty or NULL payload with
  ``tombstone_on_empty_payload`` (``route.tombstone.on.empty.payload``): no value;
* headers: ``id``, the ``id_column`` value (``table.field.event.id``) as Kafka Connect's
  default header converter (``SimpleHeaderConverter``) writes it: its text; ``header``
  placements likewise under their alias; our ``cdc.position`` as on every record.

UPDATEs of the outbox table are ignored with a warning (``invalid_operation``, Debezium's
``table.op.invalid.behavior``: ``warn``, ``error``: logged as an error, ``fatal``: the producer
stops), DELETEs silently, as Debezium's router does; snapshot reads of the table (``r``) are
routed as inserts, as Debezium's are.  The outbox table's own change topic is not written
(Debezium's router replaces its records).  Other tables never come here: the session's write
paths (:mod:`producer.write_path`) ask :meth:`OutboxRouter.routes` once per table.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from decimal import Decimal
from typing import Any, Callable, Iterable, Protocol

from common.errors import CDCError
from contract.position import chunk_row_positions
from producer.errors import OutboxError, ProducerStopped
from producer.table_schema import TableDef

log = logging.getLogger(__name__)

SETTING = "producer.outbox"
#: A routed record: topic, key, value (None: a tombstone), encoded position, headers.
OutboxRecord = tuple[str, "bytes | None", "bytes | None", str, list]

_NAMED_GROUP = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")  # Java's (?<name>...); not (?<= or (?<!
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_JAVA_TRIM = "".join(chr(c) for c in range(33))  # what Java's String.trim() takes off
_PLACEMENTS = ("header", "envelope", "partition")


def java_regex(pattern: str, setting: str) -> re.Pattern[str]:
    """A Java regular expression (``route.topic.regex``) as Python's: named groups
    ``(?<name>...)`` become ``(?P<name>...)``."""
    try:
        return re.compile(_NAMED_GROUP.sub(r"(?P<\1>", pattern))
    except re.error as exc:
        raise OutboxError(f"{setting}: {pattern!r} is not a valid regular expression: {exc}") from None


def java_replacement(text: str, regex: re.Pattern[str], setting: str) -> str:
    """A Java replacement (``Matcher.replaceFirst``: ``${name}``, ``$1``, ``\\x`` a literal x)
    as a template for Python's ``Match.expand``; a group the regex does not have, or a lone
    ``$``, is refused naming the setting."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$":
            m = re.match(r"\$\{([A-Za-z][A-Za-z0-9]*)\}", text[i:])
            if m:
                if m.group(1) not in regex.groupindex:
                    raise OutboxError(f"{setting}: {text!r} names group {m.group(1)!r}, which the topic regex "
                                      f"{regex.pattern!r} does not have")
                out.append(f"\\g<{m.group(1)}>")
                i += m.end()
                continue
            m = re.match(r"\$(\d+)", text[i:])
            if not m:
                raise OutboxError(f"{setting}: {text!r} has a '$' that is not a group reference "
                                  "('${name}' or '$1'; '\\$' for a dollar)")
            digits, n = m.group(1), int(m.group(1)[0])
            if n > regex.groups:
                raise OutboxError(f"{setting}: {text!r} refers to group {n}, the topic regex has {regex.groups}")
            used = 1
            while used < len(digits) and int(digits[:used + 1]) <= regex.groups:  # (Java: digits while a group)
                n, used = int(digits[:used + 1]), used + 1
            out.append(f"\\g<{n}>")
            i += 1 + used
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


def header_text(value: Any) -> bytes | None:
    """A column's value as a header, as Kafka Connect's ``SimpleHeaderConverter`` writes it
    (``Values.convertToString``): text; None (no header) for a null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value))
    if isinstance(value, float):
        return _java_double(value).encode()
    return str(value).encode()  # (str, int, Decimal: BigDecimal.toString's rule is Decimal's)


def _java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it (``1.5``, ``1.0E10``, ``1.0E-4``)."""
    if x != x or x in (float("inf"), float("-inf")):
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x) if "e" not in repr(x) else f"{x:f}"
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{int(exp) + len(digits) - 1}"


class RoutingParts(Protocol):
    """What the router uses of its caller (the outbox table's write path,
    :class:`producer.write_path.OutboxPath`; the stream session for snapshot chunks)."""

    builder: Any   # producer.events.builder.EventBuilder: the table versions' converters and schemas
    encoder: Any   # producer.record_encoder.RecordEncoder: the record format
    writer: Any    # producer.kafka_writer.KafkaWriter


class OutboxRouter:
    """The ``producer.outbox`` settings (:class:`common.config.OutboxConfig`), checked, and the
    records of the outbox table's rows (see the module's text)."""

    def __init__(self, cfg: Any, prefix: str) -> None:
        self.cfg = cfg
        self.prefix = prefix
        self.db, _, self.name = cfg.table.partition(".")
        self.regex = java_regex(cfg.topic_regex, f"{SETTING}.topic_regex")
        self.replacement = java_replacement(cfg.topic_replacement, self.regex, f"{SETTING}.topic_replacement")
        self.headers: list[tuple[str, str]] = []   # (column, header name)
        self.envelope: list[tuple[str, str]] = []  # (column, field name)
        for entry in cfg.additional_placement:
            parts = [p.strip() for p in entry.split(":")]
            if len(parts) not in (2, 3) or not parts[0] or parts[1].lower() not in _PLACEMENTS:
                raise OutboxError(f"{SETTING}.additional_placement: {entry!r} is not 'column:header[:alias]' or "
                                  "'column:envelope[:alias]' (Debezium's table.fields.additional.placement)")
            if parts[1].lower() == "partition":
                raise OutboxError(f"{SETTING}.additional_placement: {entry!r}: the 'partition' placement is not "
                                  "supported (records are partitioned by their key)")
            (self.headers if parts[1].lower() == "header" else self.envelope).append(
                (parts[0], parts[2] if len(parts) == 3 and parts[2] else parts[0]))
        self._topics: dict[str, str] = {}
        self._shapes: dict[int, tuple] = {}
        self._envelopes: dict[str, dict] = {}

    def routes(self, db: str, table: str) -> bool:
        """Whether ``db.table`` is the outbox table."""
        return table == self.name and db == self.db

    def columns(self) -> Iterable[tuple[str, str]]:
        """``(setting, column)`` of every column the settings name."""
        c = self.cfg
        yield from (("id_column", c.id_column), ("aggregate_id_column", c.aggregate_id_column),
                    ("aggregate_type_column", c.aggregate_type_column), ("payload_column", c.payload_column))
        yield from (("additional_placement", col) for col, _ in self.headers + self.envelope)

    def check(self, table: TableDef | None, resolved: TableDef | None = None, captured: bool = True) -> None:
        """The settings against the outbox table's definition (at start; None: the table does
        not exist yet, checked when its first row comes): every column they name is a column
        of the table its events carry (``resolved``: as the column controls leave it)."""
        if not captured:
            raise OutboxError(f"{SETTING}.table: {self.cfg.table} is not captured (source.include_tables / "
                              "exclude_tables / databases): its rows would never reach the router")
        if table is None:
            return
        carried = (resolved or table).column_names
        for setting, col in self.columns():
            if col not in table.column_names:
                raise OutboxError(f"{SETTING}.{setting}: {col!r} is not a column of {table.qualified_name} "
                                  f"(columns: {', '.join(table.column_names)})")
            if col not in carried:
                raise OutboxError(f"{SETTING}.{setting}: column {col!r} of {table.qualified_name} is left out by "
                                  "source.column_include_list / column_exclude_list")

    def topic(self, routed: Any) -> str:
        """The topic of a row whose route-by column holds ``routed``."""
        topic = self._topics.get(routed)
        if topic is None:
            if routed is None:
                raise CDCError(f"{SETTING}: a row of {self.cfg.table} has a NULL {self.cfg.aggregate_type_column} "
                               "(aggregate_type_column): it cannot be routed")
            m = self.regex.fullmatch(str(routed))
            topic = m.expand(self.replacement) if m else str(routed)
            if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
                raise CDCError(f"{SETTING}: the row of {self.cfg.table} with {self.cfg.aggregate_type_column} "
                               f"{routed!r} routes to {topic!r}, which is not a Kafka topic name "
                               "(topic_regex / topic_replacement)")
            if len(self._topics) >= 4096:
                self._topics.clear()
            self._topics[routed] = topic
        return topic

    # -- records ------------------------------------------------------------------------

    def records(self, te: Any, ch: Any, start: int, stop: int, writer: Any,
                skip_up_to: str | None = None) -> list[OutboxRecord]:
        """The routed records of rows ``start`` to ``stop - 1`` of ``ch`` (a rows event of the
        outbox table, ``te`` its :class:`producer.events.builder.TableEvents`)."""
        if ch.kind != "insert":
            if ch.kind == "update":
                self._invalid(ch, stop - start)
            return []
        out = []
        for i in range(start, stop):
            position = ch.position(2 * i)
            if skip_up_to is not None and position <= skip_up_to:
                continue
            _, after, _, after_none = ch.images(i)
            out.append(self.record(te, self._convert(te, after, after_none), position, writer))
        return out

    def write_rows(self, parts: RoutingParts, ch: Any, start: int, stop: int, skip_up_to: str | None) -> int:
        """:meth:`records` of ``ch`` (rows of the outbox table), produced by the session's writer
        (:meth:`producer.kafka_writer.KafkaWriter.produce_headed`); their number."""
        records = self.records(parts.builder.table_events(ch.table_def), ch, start, stop, parts.encoder, skip_up_to)
        if records:
            parts.writer.produce_headed(records)
        return len(records)

    def write_chunk(self, parts: RoutingParts, chunk: Any) -> int | None:
        """The routed records of a released snapshot chunk of the outbox table (Debezium routes its
        reads as it routes inserts), at the chunk rows' positions, produced by the session's
        writer; their number.  None when the chunk is not of the outbox table."""
        table = chunk.table_def
        if not self.routes(table.db, table.name):
            return None
        te, encoder = parts.builder.read_table_events(table), parts.encoder
        positions = chunk_row_positions(chunk.close_position.encode(), len(chunk.rows))
        records = [self.record(te, self._convert(te, row, None), p, encoder) for row, p in zip(chunk.rows, positions)]
        if records:
            parts.writer.produce_headed(records)
        return len(records)

    def read_encoding(self, encoding: Callable[[TableDef], Any]) -> Callable[[TableDef], Any]:
        """``encoding`` (how the chunk read processes encode a table's rows) but for the outbox
        table, whose rows the router reads as values."""
        return lambda table: None if self.routes(table.db, table.name) else encoding(table)

    @staticmethod
    def _convert(te: Any, values: dict, none_sources: Any) -> dict:
        if te.dropped:
            values = {k: v for k, v in values.items() if k not in te.dropped}
        return te.converter.convert(values, none_sources)

    def _invalid(self, ch: Any, n: int) -> None:
        what = (f"{n} UPDATE(s) of the outbox table {self.cfg.table} at {ch.file}:{ch.pos}: the router routes "
                "INSERTs only (producer.outbox.invalid_operation)")
        if self.cfg.invalid_operation == "fatal":
            raise ProducerStopped(what)
        (log.error if self.cfg.invalid_operation == "error" else log.warning)("%s; ignored", what)

    def _shape(self, te: Any) -> tuple:
        """Per table version: the Avro field name and type of each column the router reads."""
        shape = self._shapes.get(id(te))
        if shape is None or shape[0] is not te:
            fields = {f.get("mysql.column") or f["name"]: f for f in te.row_schema["fields"]}
            try:
                pick = {col: (fields[col]["name"], fields[col]["type"]) for _, col in self.columns()}
            except KeyError as exc:
                raise OutboxError(f"{SETTING}: column {exc.args[0]!r} is not a column of {te.table.qualified_name} "
                                  f"as its events carry it (columns: {', '.join(fields)})") from None
            shape = self._shapes[id(te)] = (te, pick)
        return shape[1]

    def record(self, te: Any, row: dict, position: str, writer: Any) -> OutboxRecord:
        """The routed record of one converted row (``row``: the Avro field values)."""
        cfg, pick = self.cfg, self._shape(te)
        routed_field, _ = pick[cfg.aggregate_type_column]
        routed = row.get(routed_field)
        topic = self.topic(routed)
        key_field, key_type = pick[cfg.aggregate_id_column]
        key = writer.encode_column(key_type, row.get(key_field), topic, "key")
        pay_field, pay_type = pick[cfg.payload_column]
        payload = row.get(pay_field)
        id_field, _ = pick[cfg.id_column]
        headers = [("id", header_text(row.get(id_field)))]
        headers += [(alias, header_text(row.get(pick[col][0]))) for col, alias in self.headers]
        headers = [(k, v) for k, v in headers if v is not None]
        empty = payload is None or (isinstance(payload, str) and not payload.strip(_JAVA_TRIM))
        if empty and cfg.tombstone_on_empty_payload:
            value = None
        elif self.envelope:
            schema = self._envelope_schema(te, pick, str(routed))
            fields = {"payload": payload, **{alias: row.get(pick[col][0]) for col, alias in self.envelope}}
            value = writer.encode_column(schema, fields, topic, "value")
        else:
            value = writer.encode_column(pay_type, payload, topic, "value")
        return topic, key, value, position, headers

    def _envelope_schema(self, te: Any, pick: dict, routed: str) -> dict:
        """The value's struct with ``envelope`` placements: ``payload`` and the placed columns,
        named as Debezium names it: the ``after`` struct's name with the routed value before its
        last part.  Kept by the payload column's type, as Debezium keeps it (its
        ``payloadSchemaCache``): the routed value of the first record since the start names the
        struct of every record after it whose payload column has that type."""
        pay_type = pick[self.cfg.payload_column][1]
        cache = json.dumps(pay_type, sort_keys=True)
        schema = self._envelopes.get(cache)
        if schema is None:
            row_name = te.row_schema.get("connect.name") or te.row_schema["name"]
            head, _, last = row_name.rpartition(".")
            name = f"{head}.{routed}.{last}" if head else f"{routed}.{row_name}"
            fields = [{"name": "payload", "type": pay_type}]
            fields += [{"name": alias, "type": pick[col][1]} for col, alias in self.envelope]
            avro_name = re.sub(r"[^A-Za-z0-9_.]", "_", name)
            schema = {"type": "record", "name": avro_name, "connect.name": name, "fields": fields}
            if len(self._envelopes) >= 4096:
                self._envelopes.clear()
            self._envelopes[cache] = schema
        return schema
