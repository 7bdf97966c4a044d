"""EventBuilder.records: Debezium envelopes of a rows event, in Avro and in JSON."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import KafkaConfig
from contract.codecs.serde import SINGLE_OBJECT_MAGIC, AvroWriter, encode_json
from contract.position import BinlogPosition
from producer.column_controls import ColumnControls
from producer.binlog.reader import RowChanges
from producer.events.builder import EnvelopeBinder, EventBuilder, envelope_parts, envelope_value
from producer.record_encoder import RecordEncoder, from_avro_bodies
from producer.table_schema import ColumnDef, TableDef

TABLE = TableDef(db="shop", name="items", columns=[
    ColumnDef(name="id", data_type="int", column_type="int(11)", nullable=False, ordinal=1),
    ColumnDef(name="name", data_type="varchar", column_type="varchar(20)", nullable=True, ordinal=2,
              character_set="utf8mb4"),
    ColumnDef(name="price", data_type="decimal", column_type="decimal(8,2)", nullable=True, ordinal=3,
              numeric_precision=8, numeric_scale=2),
    ColumnDef(name="secret", data_type="varchar", column_type="varchar(20)", nullable=True, ordinal=4,
              character_set="utf8mb4"),
], primary_key=["id"])
BASE = BinlogPosition.from_binlog("mysql-bin.000007", 1234)


class FakeWriter:
    """The record formats of KafkaWriter, without Kafka."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.writers: dict[int, AvroWriter] = {}

    def _writer(self, schema: dict) -> AvroWriter:
        return self.writers.setdefault(id(schema), AvroWriter(schema))

    def encode(self, schema, record, topic, role):
        if record is None:
            return None
        if self.fmt == "json" or schema is None:
            return encode_json(record)
        return self._writer(schema).encode(record)

    def header(self, schema, topic, role):
        return None if self.fmt == "json" else self._writer(schema).header

    def json_writer(self, schema, topic):
        return None


def _decode(writer: FakeWriter, data: bytes):
    if writer.fmt == "json":
        return json.loads(data)
    assert data[:2] == SINGLE_OBJECT_MAGIC
    schema = next(w.parsed for w in writer.writers.values() if w.header == data[:10])
    value = fastavro.schemaless_reader(io.BytesIO(data[10:]), schema, None)
    return json.loads(encode_json(value))  # the JSON form: Decimal as string, bytes as base64


def _row(i, name, price, secret="pw"):
    return {"id": i, "name": name, "price": Decimal(price), "secret": secret}


def _changes(kind: str, rows: list[dict], first: int = 0) -> RowChanges:
    return RowChanges(kind, "shop", "items", TABLE, BASE, rows, first, 1700000000000, "0-1-9", 42,
                      "mysql-bin.000007", "mysql-bin.000007", 1000)


def _records(fmt: str, ch: RowChanges, skip_up_to: str | None = None):
    writer = FakeWriter(fmt)
    builder = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={"shop.items": ["secret"]}))
    out = builder.records(ch, ch.first, len(ch.rows), writer, skip_up_to=skip_up_to)
    return [(topic, _decode(writer, key), _decode(writer, value), pos) for topic, key, value, pos in out]


def _summary(records):
    return [(t, k, v["op"], v["before"], v["after"], v["source"]["row"], v["position"], pos)
            for t, k, v, pos in records]


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_insert_update_pk_change_delete(fmt):
    inserts = _changes("insert", [{"values": _row(1, "a", "1.50"), "none_sources": {}},
                                  {"values": _row(2, None, "2.00"), "none_sources": {"name": "null"}}])
    updates = _changes("update", [
        {"before_values": _row(1, "a", "1.50"), "after_values": _row(1, "b", "1.75"),
         "before_none_sources": {}, "after_none_sources": {}},
        {"before_values": _row(2, None, "2.00"), "after_values": _row(3, None, "2.00"),
         "before_none_sources": {}, "after_none_sources": {}}])
    deletes = _changes("delete", [{"values": _row(3, None, "2.00"), "none_sources": {}}])
    p = BASE.encode_row
    a = {"id": 1, "name": "a", "price": "1.50"}
    assert _summary(_records(fmt, inserts)) == [
        ("cdc.shop.items", {"id": 1}, "c", None, a, 0, p(0), p(0)),
        ("cdc.shop.items", {"id": 2}, "c", None, {"id": 2, "name": None, "price": "2.00"}, 1, p(2), p(2)),
    ]
    assert _summary(_records(fmt, updates)) == [
        ("cdc.shop.items", {"id": 1}, "u", a, {"id": 1, "name": "b", "price": "1.75"}, 0, p(0), p(0)),
        # a primary-key change: delete of the old key, create of the new one
        ("cdc.shop.items", {"id": 2}, "d", {"id": 2, "name": None, "price": "2.00"}, None, 1, p(2), p(2)),
        ("cdc.shop.items", {"id": 3}, "c", None, {"id": 3, "name": None, "price": "2.00"}, 1, p(3), p(3)),
    ]
    assert _summary(_records(fmt, deletes)) == [
        ("cdc.shop.items", {"id": 3}, "d", {"id": 3, "name": None, "price": "2.00"}, None, 0, p(0), p(0)),
    ]
    [(_, _, value, _)] = _records(fmt, deletes)
    assert value["source"] == {"version": "0.1.0", "connector": "mysql", "name": "prod", "ts_ms": 1700000000000,
                               "snapshot": "false", "db": "shop", "sequence": None, "table": "items",
                               "server_id": 1, "gtid": "0-1-9", "file": "mysql-bin.000007", "pos": 1234, "row": 0,
                               "thread": 42, "query": None}
    assert value["transaction"] is None and value["snapshot_window"] is None and isinstance(value["ts_ms"], int)


def test_avro_and_json_carry_the_same_events():
    ch = _changes("update", [{"before_values": _row(i, f"n{i}", "9.99"), "after_values": _row(i + i % 2, "x", "0.01"),
                              "before_none_sources": {}, "after_none_sources": {}} for i in range(6)])
    strip = [(t, k, {**v, "ts_ms": None}, pos) for t, k, v, pos in _records("avro", ch)]
    assert strip == [(t, k, {**v, "ts_ms": None}, pos) for t, k, v, pos in _records("json", ch)]


def test_tombstones_follow_deletes_with_the_key_and_position_of_the_delete():
    ch = _changes("update", [
        {"before_values": _row(1, "a", "1"), "after_values": _row(1, "b", "1"),
         "before_none_sources": {}, "after_none_sources": {}},
        {"before_values": _row(2, "a", "1"), "after_values": _row(5, "a", "1"),
         "before_none_sources": {}, "after_none_sources": {}}])
    deletes = _changes("delete", [{"values": _row(3, None, "2.00"), "none_sources": {}}])
    writer = FakeWriter("json")
    builder = EventBuilder("cdc", "prod", 1, tombstones=True)
    p = BASE.encode_row
    out = [(json.loads(k), v and json.loads(v)["op"], pos) for _, k, v, pos in
           builder.records(ch, 0, 2, writer) + builder.records(deletes, 0, 1, writer)]
    assert out == [({"id": 1}, "u", p(0)), ({"id": 2}, "d", p(2)), ({"id": 2}, None, p(2)), ({"id": 5}, "c", p(3)),
                   ({"id": 3}, "d", p(0)), ({"id": 3}, None, p(0))]
    # off by default (the avro and json formats' default)
    assert [v is None for *_, v, _ in EventBuilder("cdc", "prod", 1).records(deletes, 0, 1, writer)] == [False]


def test_debezium_json_records_read_back_as_the_avro_ones():
    from contract.codecs.serde import RecordDecoder

    encoder = RecordEncoder(KafkaConfig(), "debezium-json", lambda *record: pytest.fail(f"published {record}"))
    ch = _changes("update", [{"before_values": _row(i, f"n{i}", "9.99"), "after_values": _row(i + i % 2, "x", "0.01"),
                              "before_none_sources": {}, "after_none_sources": {}} for i in range(6)])
    builder = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={"shop.items": ["secret"]}))
    records = builder.records(ch, ch.first, len(ch.rows), encoder)
    assert all(v.startswith(b'{"schema":{"type":"struct"') and k.startswith(b'{"schema":') for _, k, v, _ in records)
    dec = RecordDecoder()

    def comparable(v):
        v = json.loads(encode_json(v))  # Decimal as string, as _records gives Avro's values
        v["source"] = {k: x for k, x in v["source"].items() if k not in ("ts_us", "ts_ns")}
        return {k: x for k, x in v.items() if k not in ("ts_ms", "ts_us", "ts_ns")}
    got = [(t, dec.decode(k), comparable(dec.decode(v)), pos) for t, k, v, pos in records]
    assert got == [(t, k, {x: y for x, y in v.items() if x != "ts_ms"}, pos) for t, k, v, pos in _records("avro", ch)]


class FromDicts(RecordEncoder):
    """debezium-json made from the events' dicts (the producer's way without the transcoder):
    what the records made from Avro bodies are held to."""

    def header(self, schema, topic, role):
        return None

    def json_writer(self, schema, topic):
        return None


@pytest.mark.parametrize("general", [False, True])
def test_debezium_json_from_avro_bodies_is_the_dict_paths_byte_for_byte(monkeypatch, general):
    """Records transcoded from Avro bodies against the same records made from dicts: inserts,
    an update keeping its key, one changing it (a delete and a create), deletes with tombstones,
    names with quotes and newlines, a negative price, nulls.  ``general``: every row off the
    fast path, which makes debezium-json from dicts: the same records still."""
    def published(*record):
        pytest.fail(f"published {record}")
    encoder = RecordEncoder(KafkaConfig(), "debezium-json", published)
    # (so the binlog reader and chunk read processes encode the rows where they read them, as for Avro)
    assert from_avro_bodies("debezium-json") and from_avro_bodies("avro") and not from_avro_bodies("json")
    assert encoder.header(EventBuilder("cdc", "prod", 1).table_events(TABLE).value_schema, "t", "value") == b""
    builder = EventBuilder("cdc", "prod", 1, tombstones=True)
    monkeypatch.setattr("producer.events.builder.time.time", lambda: 1700000000.123)
    if general:
        monkeypatch.setattr(EventBuilder, "_fast_records", lambda self, te, ch, start, *a: start)
    names = ['plain', 'quote " and \\ back', "new\nline\ttab", "ünï", None, "\x01"]
    for kind in ("insert", "update", "delete"):
        def image(i, name, price):
            return _row(i, name, price)
        if kind == "update":
            rows = [{"before_values": image(i, names[i % 6], "-128.00"), "before_none_sources": {},
                     "after_values": image(i + i % 2, names[(i + 1) % 6], f"{i}.5{i % 10}"), "after_none_sources": {}}
                    for i in range(12)]
        else:
            rows = [{"values": image(i, names[i % 6], "-128.00" if i % 3 else f"{i}.05"), "none_sources": {}}
                    for i in range(12)]
        ch = _changes(kind, rows)
        got = builder.records(ch, 0, len(rows), encoder)
        assert got == builder.records(ch, 0, len(rows), FromDicts(KafkaConfig(), "debezium-json", published))
        assert len(got) > len(rows) or kind == "insert"
        assert all(v is None or v.startswith(b'{"schema":{"type":"struct"') for _, _, v, _ in got)


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_events_written_before_a_restart_are_left_out(fmt):
    """After a restart: the delete half of a PK change is out (position 2), its create is not."""
    ch = _changes("update", [
        {"before_values": _row(1, "a", "1"), "after_values": _row(1, "b", "1"),
         "before_none_sources": {}, "after_none_sources": {}},
        {"before_values": _row(2, "a", "1"), "after_values": _row(5, "a", "1"),
         "before_none_sources": {}, "after_none_sources": {}}], first=1)
    out = _records(fmt, ch, skip_up_to=BASE.encode_row(2))
    assert [(k, v["op"], pos) for _, k, v, pos in out] == [({"id": 5}, "c", BASE.encode_row(3))]


def test_a_table_version_is_built_once_also_with_excluded_columns():
    builder = EventBuilder("cdc", "prod", 1, controls=ColumnControls(exclude_columns={"shop.items": ["secret"]}))
    te = builder.table_events(TABLE)
    assert builder.table_events(TABLE) is te
    assert [c.name for c in te.table.columns] == ["id", "name", "price"]
    other = TableDef(db="shop", name="items", columns=TABLE.columns[:3], primary_key=["id"])
    assert builder.table_events(other) is not te


@pytest.mark.parametrize("verb,ddl,rewrites", [
    ("truncate", "TRUNCATE TABLE t", False),  # a truncate event, not a snapshot
    ("alter", "ALTER TABLE t ADD COLUMN c INT", False),
    ("alter", "ALTER TABLE t ADD COLUMN c INT NULL DEFAULT NULL", False),
    ("alter", "ALTER TABLE t ADD COLUMN c CHAR(3) DEFAULT 'EUR'", True),
    ("alter", "ALTER TABLE t ADD c INT NOT NULL", True),
    ("alter", "ALTER TABLE t ADD COLUMN g INT AS (id * 2) STORED", True),
    ("alter", "ALTER TABLE t ADD COLUMN g INT GENERATED ALWAYS AS (id * 2) VIRTUAL", True),
    ("alter", "alter table t change qty quantity int", True),
    ("alter", "ALTER TABLE t RENAME COLUMN a TO b", True),
    ("alter", "ALTER TABLE t MODIFY c BIGINT", True),
    ("alter", "ALTER TABLE t DROP INDEX i, ADD INDEX j (c)", False),
    ("alter", "ALTER TABLE t ADD UNIQUE KEY j (c) /* NOT NULL */", False),
    ("alter", "ALTER TABLE t ADD INDEX j (c), MODIFY d INT NOT NULL", True),
    ("alter", "ALTER TABLE t DROP COLUMN c", False),
    ("alter", "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (a, b)", True),
    ("create", "CREATE TABLE t (a INT NOT NULL DEFAULT 1)", False),
])
def test_rows_rewritten_names_the_ddl_that_changes_rows_without_row_events(verb, ddl, rewrites):
    from common.sql.ddl import rows_rewritten
    assert (rows_rewritten(verb, ddl) is not None) == rewrites


@settings(max_examples=200, deadline=None)
@given(ts_ms=st.integers(0, 2**41), gtid=st.none() | st.text(max_size=40),
       file=st.text(min_size=1, max_size=30), pos=st.integers(0, 2**40), thread=st.none() | st.integers(0, 2**40),
       now=st.integers(0, 2**42), event=st.from_regex(r"[0-9]{20}", fullmatch=True))
def test_the_envelope_binder_gives_the_bytes_of_the_whole_bind(ts_ms, gtid, file, pos, thread, now, event):
    """EnvelopeBinder (the fixed fields encoded once, the event's own per event) against
    RecordTemplate.bind over the whole envelope, for any values of the event's fields."""
    builder = EventBuilder("cdc", "srv", 11)
    te = builder.table_events(TABLE)
    header = b"\xc3\x01" + b"h" * 8
    ch = RowChanges("insert", "shop", "items", TABLE, BASE, [], 0, ts_ms, gtid, thread, file, file, 4, 0, pos)
    whole = envelope_value(None, None, builder._source(ch), "", now, "")
    expected = envelope_parts(te.template, te.template.bind(whole, header), event)
    binder = EnvelopeBinder(te.template, te.value_schema)
    fixed = binder.fix(("k",), envelope_value(None, None, builder._source(
        RowChanges("insert", "shop", "items", TABLE, BASE, [], 0, 1, "0-1-1", 7, "x.000001", "x", 4, 0, 9)),
        "", 5, ""), header)
    assert binder.native(fixed, ts_ms, gtid, file, pos, thread, now, event) == expected.native()
    # the next events: the same file and times (kept from the last), then others
    assert binder.native(fixed, ts_ms, gtid, file, pos + 1, thread, now, event) == envelope_parts(
        te.template, te.template.bind({**whole, "source": {**whole["source"], "pos": pos + 1}}, header), event).native()
    later = {**whole, "ts_ms": now + 1, "source": {**whole["source"], "ts_ms": ts_ms + 1000, "file": file + "x"}}
    assert binder.native(fixed, ts_ms + 1000, gtid, file + "x", pos, thread, now + 1, event) == envelope_parts(
        te.template, te.template.bind(later, header), event).native()
