"""The clean changelog as a verify target: ``<prefix>.clean.<db>.<table>`` replayed (a
route's merged clean changelog: :class:`MergedChangelogTarget`, one shard's records).

The topic is replayed from the beginning into a dict keyed by the normalised key (a record
not above the highest position seen in its partition is a copy and skipped; ``d`` removes
the key, a truncate event ``t`` every key whose last record is below it).  Records are
read with the table's newest schema (:mod:`contract.schema_resolution`).  **This needs
memory proportional to the table** (one normalised row per live key): a replay cannot be
bounded.  The source chunks are then compared with the entries
they take out of the dict; what is left is "extra".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator

from confluent_kafka.admin import AdminClient

from cdc.errors import TargetMissing
from cdc.verify.report import SinkResult
from cdc.verify.spec import TableSpec
from cdc.verify.targets import KeyedRowsTarget
from common.errors import CDCError
from common.kafka.topic_reader import read_topic
from contract.codecs.serde import SINGLE_OBJECT_MAGIC, ConfluentRegistry, RecordDecoder
from contract.envelope import POSITION_HEADER, TRUNCATE_OP
from contract.position import CopyFilter
from contract.schema_store import SchemaStore
from contract.topics import clean_topic
from spark_jobs.clean_changelog import SHARD_HEADER
from spark_jobs.sinks.layout import row_columns

_EPOCH = datetime(1970, 1, 1)

#: Value of a column the changelog record does not have (not in the table's newest schema).
ABSENT = "<absent from the record>"


def replay_changelog(records: Iterable[tuple[int, dict | None, dict | None]], spec: TableSpec,
                     notes: list[str] | None = None, *, absent_is_null: bool = False) -> dict[tuple, tuple]:
    """Replay decoded clean-changelog records ``(partition, key record, envelope)`` in
    offset order per partition: normalised key -> normalised values.

    Memory is proportional to the table (one entry per live key).  A record whose
    position is not above the highest seen in its partition is a copy and skipped.
    ``absent_is_null``: a column the record does not have is NULL (records that carry their
    own schema, Debezium's: one written before the column was added, as the sink tables
    hold it), not :data:`ABSENT`.
    """
    absent = None if absent_is_null else ABSENT
    rows: dict[tuple, tuple] = {}
    positions: dict[tuple, str] = {}
    truncated = ""  # the position of the last truncate event (op t): every row below is gone
    copies = CopyFilter()
    ks, vs = spec.key_specs, spec.value_specs
    for partition, key, value in records:
        if value is None:
            continue
        pos = value.get("position") or ""
        if pos and not copies.keep(partition, pos):
            continue
        op = value.get("op")
        if op == TRUNCATE_OP:
            truncated = max(truncated, pos)
            continue
        row = value.get("before") if op == "d" else value.get("after")
        # The key from the row when it has the key columns (a record keyed before the
        # table's primary key changed has another key record), else from the key record.
        src = row if row is not None and all(c.field in row for c in ks) else \
            key if isinstance(key, dict) and key else row
        if src is None:
            continue
        k = tuple(c.avro(src.get(c.field, src.get(c.name))) for c in ks)
        before = value.get("before")
        if op == "u" and isinstance(before, dict) and all(c.field in before for c in ks):
            old = tuple(c.avro(before[c.field]) for c in ks)
            if old != k:  # the update moved the row to another key (under today's key)
                rows.pop(old, None)
                positions.pop(old, None)
        if op == "d":
            rows.pop(k, None)
            positions.pop(k, None)
        elif row is not None:
            rows[k] = tuple(c.avro(row[c.field]) if c.field in row else
                            (c.avro(None) if absent is None else absent) for c in vs)
            positions[k] = pos
    if truncated:  # (partitions are read in no particular order between them: applied last)
        for k in [k for k, p in positions.items() if p < truncated]:
            del rows[k]
    if copies.copies and notes is not None:
        notes.append(f"{copies.copies} copies skipped in the changelog (position not above their partition's "
                     "highest)")
    return rows


def _timestamp_units(schema: dict) -> dict[str, int]:
    """:meth:`ChangelogTarget._timestamps` of a writer schema (an envelope)."""
    try:
        columns = row_columns(schema)
    except (CDCError, KeyError, TypeError, ValueError):
        return {}
    units = {"timestamp_ms": 1_000, "timestamp_us": 1_000_000}
    return {c.field: units[c.kind] for c in columns if c.kind in units}


def _as_datetimes(value: Any, units: dict[str, int]) -> Any:
    """A decoded change event with its rows' DATETIME numbers as ``datetime`` values, each
    by its writer schema's unit (``units``)."""
    if not units or not isinstance(value, dict):
        return value
    for side in ("before", "after"):
        row = value.get(side)
        if isinstance(row, dict):
            for f, per in units.items():
                v = row.get(f)
                if isinstance(v, int) and not isinstance(v, bool):
                    try:
                        row[f] = _EPOCH + timedelta(microseconds=v * (1_000_000 // per))
                    except OverflowError:
                        pass
    return value


def record_position(message) -> str:
    """A clean changelog record's position: its header (:data:`POSITION_HEADER`, which the
    merge job writes on every record); "" when it has none."""
    for name, v in message.headers() or []:
        if name == POSITION_HEADER and v:
            return v.decode()
    return ""


class ChangelogTarget(KeyedRowsTarget):
    """The clean changelog topic, replayed into memory (proportional to the table)."""

    sink = "changelog"

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.decoder = None
        self.store: SchemaStore | None = None
        self._units: dict[str, dict[str, int]] = {}  # writer schema -> its timestamp fields' units
        self.rows: dict[tuple, tuple] = {}
        self._chunk: tuple[int, list] | None = None

    def _decoder(self):
        if self.decoder is None:
            k = self.cfg.kafka
            registry = ConfluentRegistry(k.schema_registry_url, k.schema_registry_client) \
                if k.schema_registry_url else None
            # Each record read with its table's newest schema: a record written before a
            # column was added has the column (its default).
            self.store = SchemaStore(k.bootstrap_servers, k.topic_prefix, k.client_settings() or None)
            self.decoder = RecordDecoder.resolving(self.store, registry)
        return self.decoder

    def _timestamps(self, data: bytes | None) -> dict[str, int]:
        """The fields of the record's writer schema that hold a DATETIME as a number, with
        their unit per second (1,000 for Debezium's ``Timestamp``, 1,000,000 for its
        ``MicroTimestamp``): the number alone does not say which (``DATETIME(3)`` changed to
        ``DATETIME(6)`` leaves records of both in the topic)."""
        if not data:
            return {}
        if data[:2] == SINGLE_OBJECT_MAGIC:
            fp = data[2:10].hex()
            if fp not in self._units:
                schema = self.store.get(fp)
                self._units[fp] = _timestamp_units(schema) if isinstance(schema, dict) else {}
            return self._units[fp]
        found = self.decoder.connect_schema(data)
        if found is None or found[1] is None:
            return {}
        if found[0] not in self._units:
            self._units[found[0]] = _timestamp_units(found[1])
        return self._units[found[0]]

    def _exists(self, topic: str) -> bool:
        k = self.cfg.kafka
        # All topics: a metadata request naming the topic may create it (auto-creation).
        md = AdminClient({"bootstrap.servers": k.bootstrap_servers, **k.client_settings()}).list_topics(timeout=15)
        t = md.topics.get(topic)
        return t is not None and t.error is None and bool(t.partitions)

    def topic_of(self, spec: TableSpec) -> str:
        return clean_topic(self.cfg.kafka.topic_prefix, spec.db, spec.table)

    def holds(self, message, spec: TableSpec) -> bool:  # noqa: ARG002 - a record of the topic: the table's
        return True

    def carries(self, value: Any, spec: TableSpec) -> bool:  # noqa: ARG002 - every record of a held one
        """Whether a held record (decoded) is one of the table's."""
        return True

    def open(self, spec: TableSpec, result: SinkResult) -> None:
        k = self.cfg.kafka
        topic = self.topic_of(spec)
        result.target = topic
        self.rows = {}
        self._chunk = None
        if not self._exists(topic):
            raise TargetMissing(f"topic {topic} does not exist")
        dec = self._decoder()

        debezium = k.input == "debezium"

        def records() -> Iterator[tuple[int, dict | None, dict | None]]:
            for m in read_topic(k.bootstrap_servers, topic, client_config=k.client_settings() or None, timeout=300):
                if not self.holds(m, spec):
                    continue
                value = _as_datetimes(dec.decode(m.value()), self._timestamps(m.value()))
                if not self.carries(value, spec):
                    continue
                if debezium and isinstance(value, dict) and "position" not in value:
                    # Debezium's records carry no position: the merge job's header has it
                    # (the record's own, :func:`contract.debezium.debezium_position`)
                    value["position"] = record_position(m)
                yield m.partition(), dec.decode(m.key()), value
        self.rows = replay_changelog(records(), spec, result.notes, absent_is_null=debezium)
        result.sink_rows = len(self.rows)


class MergedChangelogTarget(ChangelogTarget):
    """A route's merged clean changelog ``<kafka.topic_prefix>.clean.<target db>.<target
    table>`` (``cfg``: the configuration with ``routes``), as the target of one of its shards:
    the records its header ``cdc.shard`` names the shard by (``source/db.table``), replayed
    with the target's newest schema (per partition the positions of one shard rise; shards'
    positions are not comparable, so the copy check is per shard).  The topic is read once per
    shard; memory holds one shard's rows."""

    def topic_of(self, spec: TableSpec) -> str:
        return clean_topic(self.cfg.kafka.topic_prefix, *spec.target)

    def holds(self, message, spec: TableSpec) -> bool:
        return dict(message.headers() or []).get(SHARD_HEADER) == f"{spec.source}/{spec.db}.{spec.table}".encode()

    def carries(self, value: Any, spec: TableSpec) -> bool:
        """A record the header gives to the shard, whose row holds the shard's values in the
        route's columns (origin and column mapping): one with other values is not the
        shard's row in the target (the shard then misses it)."""
        if not isinstance(value, dict) or value.get("op") == TRUNCATE_OP:
            return True
        row = value.get("before") if value.get("op") == "d" else value.get("after")
        return not isinstance(row, dict) or all(row.get(c) == v for c, v in spec.origin.items())
