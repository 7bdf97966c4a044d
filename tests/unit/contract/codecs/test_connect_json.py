"""contract.codecs.connect_json: Kafka Connect's JsonConverter shape as Debezium 3.x writes it, and
reading it back into the values Avro decoding gives (the type matrix of
tests/unit/producer/events/test_types_and_values.py)."""

from __future__ import annotations

import base64
import io
import json
import struct
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.codecs.connect_json import TRANSCODES, ConnectJsonWriter, avro_view, connect_schema, float32_shortest
from contract.codecs.serde import RecordDecoder
from contract.envelope import envelope_schema, record_names, source_block
from contract.errors import SerdeError
from producer.events.avro_types import key_record_schema, row_record_schema
from producer.table_schema import TableDef
from spark_jobs.sinks.layout import row_columns
from tests.unit.producer.events.test_types_and_values import COLS, make_col

WEIRD = [make_col("9 weird-col", "int", "int(11)", ordinal=len(COLS) + 1),
         make_col("_9_weird_col", "varchar", "varchar(5)", cs="utf8mb4", ordinal=len(COLS) + 2)]
TABLE = TableDef("shop", "everything", [*COLS.values(), *WEIRD], ["id"])
KEY_NAME, ROW_NAME, ENVELOPE_NAME = record_names("cdc", "shop", "everything")
ROW = row_record_schema(TABLE, ROW_NAME)
ENVELOPE = envelope_schema(ROW, ENVELOPE_NAME)
KEY = key_record_schema(TABLE, ["id", "d"], name=KEY_NAME)
SOURCE = source_block("cdc", 7, db="shop", table="everything", ts_ms=1_700_000_000_000, file="mysql-bin.000003",
                      pos=4711, row=2, gtid="0-1-42", thread=9)


def _fields(schema: dict) -> dict[str, dict]:
    return {f["field"]: f for f in schema["fields"]}


def _avro_round_trip(schema: dict, record: dict):
    parsed = fastavro.parse_schema(schema)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    buf.seek(0)
    return fastavro.schemaless_reader(buf, parsed, None)


# ----------------------------------------------------------------------------- the shape
def test_envelope_schema_is_debeziums():
    cs = connect_schema(ENVELOPE)
    assert (cs["type"], cs["optional"], cs["name"], cs["version"]) == ("struct", False, "cdc.shop.everything.Envelope", 2)
    # Debezium's order (Envelope + SchemaFactory.datatypeEnvelopeSchema), then ours
    assert [f["field"] for f in cs["fields"]] == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us",
                                                  "ts_ns", "position", "snapshot_window"]
    f = _fields(cs)
    for image in ("before", "after"):
        assert {k: f[image][k] for k in ("type", "optional", "name")} == {
            "type": "struct", "optional": True, "name": "cdc.shop.everything.Value"}
        assert "version" not in f[image] and "doc" not in f[image]
    assert f["op"] == {"type": "string", "optional": False, "field": "op"}
    assert f["ts_ms"] == {"type": "int64", "optional": True, "field": "ts_ms"}
    assert {k: f["transaction"][k] for k in ("optional", "name", "version")} == {
        "optional": True, "name": "event.block", "version": 1}
    assert [(x["field"], x["type"], x["optional"]) for x in f["transaction"]["fields"]] == [
        ("id", "string", False), ("total_order", "int64", False), ("data_collection_order", "int64", False)]
    # JsonConverter's key order
    assert list(f["source"]) == ["type", "fields", "optional", "name", "version", "field"]


def test_source_block_is_debeziums_mysql_source():
    src = _fields(connect_schema(ENVELOPE))["source"]
    assert (src["name"], src["version"], src["optional"]) == ("io.debezium.connector.mysql.Source", 1, False)
    # SchemaFactory.sourceInfoSchemaBuilder + BinlogSourceInfoStructMaker, in order
    assert [(x["field"], x["type"], x["optional"]) for x in src["fields"]] == [
        ("version", "string", False), ("connector", "string", False), ("name", "string", False),
        ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
        ("sequence", "string", True), ("ts_us", "int64", True), ("ts_ns", "int64", True),
        ("table", "string", True), ("server_id", "int64", False), ("gtid", "string", True),
        ("file", "string", False), ("pos", "int64", False), ("row", "int32", False),
        ("thread", "int64", True), ("query", "string", True)]
    assert _fields(src)["snapshot"] == {
        "type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
        "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
        "default": "false", "field": "snapshot"}


def test_column_types_carry_debeziums_names_and_parameters():
    row = _fields(_fields(connect_schema(ENVELOPE))["after"])
    assert row["id"] == {"type": "int32", "optional": False, "field": "id"}
    assert (row["ti"]["type"], row["siu"]["type"], row["iu"]["type"], row["bi"]["type"]) == (
        "int16", "int32", "int64", "int64")
    assert row["dec2"] == {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                           "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
                           "field": "dec2"}
    assert row["biu"]["parameters"] == {"scale": "0", "connect.decimal.precision": "20"}
    assert (row["fl"]["type"], row["db"]["type"], row["b1"]["type"]) == ("float", "double", "boolean")
    assert row["b13"] == {"type": "bytes", "optional": True, "name": "io.debezium.data.Bits", "version": 1,
                          "parameters": {"length": "13"}, "field": "b13"}
    assert row["en"]["name"] == "io.debezium.data.Enum" and row["en"]["parameters"] == {"allowed": "a,b'q,c\\,d"}
    assert row["st"]["name"] == "io.debezium.data.EnumSet" and row["st"]["parameters"] == {"allowed": "x,y,z"}
    assert {k: row["js"][k] for k in ("type", "name", "version")} == {
        "type": "string", "name": "io.debezium.data.Json", "version": 1}
    names = {c: (row[c]["type"], row[c]["name"]) for c in ("d", "tm", "dt", "dt3", "dt6", "ts", "yr")}
    assert names == {"d": ("int32", "io.debezium.time.Date"), "tm": ("int64", "io.debezium.time.MicroTime"),
                     "dt": ("int64", "io.debezium.time.Timestamp"), "dt3": ("int64", "io.debezium.time.Timestamp"),
                     "dt6": ("int64", "io.debezium.time.MicroTimestamp"),
                     "ts": ("string", "io.debezium.time.ZonedTimestamp"), "yr": ("int32", "io.debezium.time.Year")}
    assert [(x["field"], x["type"], x["optional"]) for x in row["pt"]["fields"]] == [
        ("x", "double", False), ("y", "double", False), ("wkb", "bytes", True), ("srid", "int32", True)]
    assert (row["pt"]["name"], row["pt"]["version"], row["pt"]["doc"]) == (
        "io.debezium.data.geometry.Point", 1, "Geometry (POINT)")
    assert (row["geo"]["name"], row["geo"]["doc"]) == ("io.debezium.data.geometry.Geometry", "Geometry")
    assert row["ls"]["fields"] == row["geo"]["fields"]  # a named type used twice is written out twice
    # a field renamed for Avro has its column's name (Debezium's field.name.adjustment.mode=none)
    assert row["9 weird-col"]["type"] == "int32" and row["_9_weird_col"]["type"] == "string"


def test_key_schema_is_a_required_struct_named_key():
    assert connect_schema(KEY) == {
        "type": "struct",
        "fields": [{"type": "int32", "optional": False, "field": "id"},
                   {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "d"}],
        "optional": False, "name": "cdc.shop.everything.Key"}


def test_a_record_is_schema_and_payload_only():
    w = ConnectJsonWriter(KEY)
    data = w.encode({"id": 5, "d": 19000})
    assert data.startswith(b'{"schema":{"type":"struct","fields":[')
    assert json.loads(data) == {"schema": connect_schema(KEY), "payload": {"id": 5, "d": 19000}}


@pytest.mark.parametrize("value, scale, b64", [
    (Decimal("12345678.91"), 2, "SZYC0w=="),  # BigInteger 1234567891: 49 96 02 D3
    (Decimal("0.00"), 2, "AA=="),
    (Decimal("-0.01"), 2, "/w=="),
    (Decimal("1.28"), 2, "AIA="),  # 128 needs a sign byte
    (Decimal("-1.29"), 2, "/38="),
    (Decimal(18446744073709551615), 0, "AP//////////"),
    (Decimal(5), 2, "AfQ="),  # rescaled: 500
])
def test_decimal_payload_is_connects_unscaled_twos_complement(value, scale, b64):
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": scale}}]}
    w = ConnectJsonWriter(schema)
    assert w.payload({"v": value}) == {"v": b64}
    assert RecordDecoder().decode(w.encode({"v": value})) == {"v": value.quantize(Decimal(1).scaleb(-scale))}


def test_bytes_are_base64_and_source_times_are_derived():
    rec = _envelope({"id": 1, "bn": b"\x01\x02\x00\x00", "b13": b"\x01\x10"})
    payload = ConnectJsonWriter(ENVELOPE).payload(rec)
    assert payload["after"]["bn"] == base64.b64encode(b"\x01\x02\x00\x00").decode()
    assert payload["after"]["b13"] == "ARA="
    assert (payload["source"]["ts_us"], payload["source"]["ts_ns"]) == (1_700_000_000_000_000,
                                                                         1_700_000_000_000_000_000)
    assert (payload["ts_ms"], payload["ts_us"], payload["ts_ns"]) == (1_700_000_000_123, 1_700_000_000_123_000,
                                                                      1_700_000_000_123_000_000)
    assert payload["source"]["snapshot"] == "false"
    assert list(payload) == [f["field"] for f in connect_schema(ENVELOPE)["fields"]]


# ----------------------------------------------------------------------------- reading back
def _value_strategy(t, names: dict):
    """Values of an Avro type as the producer's converters make them."""
    if isinstance(t, list):
        return st.one_of(st.none(), _value_strategy(next(b for b in t if b != "null"), names))
    if isinstance(t, str) and t in names:
        t = names[t]
    if isinstance(t, dict) and t.get("logicalType") == "decimal":
        p, s = t["precision"], t["scale"]
        return st.integers(-(10 ** p - 1), 10 ** p - 1).map(lambda n: Decimal(n).scaleb(-s))
    prim = t["type"] if isinstance(t, dict) else t
    if prim == "record":
        full = t["name"] if "." in t["name"] else f"{t.get('namespace')}.{t['name']}"
        names[full] = t
        return st.fixed_dictionaries({f["name"]: _value_strategy(f["type"], names) for f in t["fields"]})
    if prim == "int":
        bits = 16 if isinstance(t, dict) and t.get("connect.type") == "int16" else 32
        return st.integers(-(1 << bits - 1), (1 << bits - 1) - 1)
    return {"long": st.integers(-(1 << 63), (1 << 63) - 1), "boolean": st.booleans(), "string": st.text(),
            "bytes": st.binary(max_size=40), "double": st.floats(allow_nan=False, allow_infinity=False),
            "float": st.floats(width=32, allow_nan=False, allow_infinity=False)}[prim]


def _rows():
    names: dict = {}
    return st.fixed_dictionaries({f["name"]: _value_strategy(f["type"], names) for f in ROW["fields"]})


def _envelope(after: dict | None, before: dict | None = None, op: str = "c") -> dict:
    full = {f["name"]: None for f in ROW["fields"]}
    return {"before": None if before is None else {**full, **before}, "after": None if after is None else
            {**full, **after}, "source": SOURCE, "op": op, "ts_ms": 1_700_000_000_123, "transaction": None,
            "position": "000000000300000000471100000004", "snapshot_window": None}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows())
def test_rows_read_back_as_avro_decoding_gives_them(row):
    """Across the whole type matrix: what RecordDecoder reads from debezium-json equals what
    fastavro reads from the Avro record of the same row."""
    decoded = RecordDecoder().decode(ConnectJsonWriter(ROW).encode(row))
    assert decoded == _avro_round_trip(ROW, row)
    assert list(decoded) == [f["name"] for f in ROW["fields"]]  # Avro field names, in order


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows(), _rows(), st.sampled_from(["c", "u", "d", "r"]))
def test_envelopes_read_back_as_avro_decoding_gives_them(before, after, op):
    rec = _envelope(after, before, op)
    decoded = RecordDecoder().decode(ConnectJsonWriter(ENVELOPE).encode(rec))
    avro = _avro_round_trip(ENVELOPE, rec)
    extra = {"ts_us", "ts_ns"}  # Debezium's, derived from ts_ms
    source = {k: v for k, v in decoded["source"].items() if k not in extra}
    assert {k: v for k, v in decoded.items() if k not in extra} | {"source": source} == avro
    assert decoded["ts_us"] == rec["ts_ms"] * 1000 and decoded["source"]["ts_ns"] == SOURCE["ts_ms"] * 1_000_000


def _avro_body(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def _same_json(transcoded: bytes, encoded: bytes) -> None:
    """The same record, byte for byte (a key's bytes pick its partition: both ways must agree)."""
    assert transcoded == encoded
    json.loads(transcoded)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows(), _rows(), st.sampled_from(["c", "u", "d", "r"]), st.booleans(), st.booleans())
def test_avro_bodies_transcode_to_the_records_the_dicts_give(before, after, op, has_before, has_after):
    """Across the whole type matrix: the record transcoded in C from an envelope's Avro body is
    the record ConnectJsonWriter.encode makes from its dict, byte for byte (the envelope's order,
    ts_us and ts_ns derived, decimals in Connect's shortest form, bytes in base64, orjson's
    escapes and number notation), and likewise for keys."""
    rec = _envelope(after if has_after else None, before if has_before else None, op)
    w = ConnectJsonWriter(ENVELOPE)
    assert w.program is not None
    _same_json(w.transcode(_avro_body(ENVELOPE, rec)), w.encode(rec))
    k = ConnectJsonWriter(KEY)
    key = {"id": after["id"], "d": after["d"]}
    _same_json(k.transcode(_avro_body(KEY, key)), k.encode(key))


FLOATS = {"type": "record", "name": "Floats", "fields": [{"name": "d", "type": "double"}, {"name": "f", "type": "float"},
                                                         {"name": "n", "type": ["null", "double"]}]}


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.sampled_from([None, 1e-5, 1.5e-5, 9.99e-6, 1e-7, 1e16, 9999999999999998.0, 1e21, -0.0, 5e-324]))
def test_transcoded_floats_are_written_as_orjson_writes_them(d, f, n):
    """Positional from 1e-5 to below 1e16, else an exponent without padding (1e-7, 1e+16)."""
    w = ConnectJsonWriter(FLOATS)
    rec = {"d": d, "f": f, "n": n}
    _same_json(w.transcode(_avro_body(FLOATS, rec)), w.encode(rec))


@pytest.mark.parametrize("unscaled", [0, 1, -1, 127, 128, -128, -129, 255, 256, -256, -32768, 2 ** 63, -(2 ** 63)])
def test_transcoded_decimals_are_connects_shortest_twos_complement(unscaled):
    """The Avro decimal's bytes have a sign bit to spare (-128: ff80); Connect's have none (80)."""
    row = {f["name"]: None for f in ROW["fields"]} | {"id": 1}
    dec_field = next(f for f in ROW["fields"] if isinstance(f["type"], list) and any(
        isinstance(b, dict) and b.get("logicalType") == "decimal" for b in f["type"]))
    scale = next(b for b in dec_field["type"] if isinstance(b, dict))["scale"]
    row[dec_field["name"]] = Decimal(unscaled).scaleb(-scale)
    w = ConnectJsonWriter(ROW)
    try:
        expected = w.encode(row)
    except SerdeError:  # (beyond the column's precision)
        return
    _same_json(w.transcode(_avro_body(ROW, row)), expected)


def test_a_schema_the_transcoder_cannot_follow_takes_the_dicts():
    """A source block whose sequence comes before its ts_ms (ts_us and ts_ns, derived from ts_ms,
    follow sequence), and an array: no program (the producer then makes these records from
    their dicts), the records as ever."""
    fields = [{"name": "sequence", "type": ["null", "string"]}, {"name": "ts_ms", "type": "long"}]
    source = {"type": "record", "name": "Source", "namespace": "x", "fields": fields}
    w = ConnectJsonWriter(source)
    assert w.program is None
    assert json.loads(w.encode({"sequence": None, "ts_ms": 5}))["payload"] == {
        "sequence": None, "ts_us": 5000, "ts_ns": 5000000, "ts_ms": 5}
    with pytest.raises(SerdeError, match="not transcoded"):
        w.transcode(b"\x00\x0a")
    arrays = {"type": "record", "name": "A", "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}]}
    assert ConnectJsonWriter(arrays).program is None


def test_a_truncated_or_overlong_body_is_refused_not_read_past():
    w = ConnectJsonWriter(KEY)
    body = _avro_body(KEY, {"id": 5, "d": 19_000})
    for bad in (body[:-1], body + b"\x00", b"", b"\xff" * 12):
        with pytest.raises(SerdeError, match="record does not fit schema"):
            w.transcode(bad)


def test_a_schema_seen_once_is_not_parsed_again_and_others_still_read():
    dec = RecordDecoder()
    w, k = ConnectJsonWriter(ENVELOPE), ConnectJsonWriter(KEY)
    for i in range(3):
        assert dec.decode(k.encode({"id": i, "d": None})) == {"id": i, "d": None}
        assert dec.decode(w.encode(_envelope({"id": i})))["after"]["id"] == i
    # the same record as JsonConverter might space it: read all the same
    spaced = json.dumps(json.loads(k.encode({"id": 3, "d": 1})), indent=1).encode()
    assert dec.decode(spaced) == {"id": 3, "d": 1}
    # schemaless JSON (producer.format json) is left alone
    assert dec.decode(b'{"before": null, "schema": 1}') == {"before": None, "schema": 1}


def test_the_sinks_lay_out_the_same_columns_from_the_records_schema():
    data = ConnectJsonWriter(ENVELOPE).encode(_envelope({"id": 1}))
    sid, view = RecordDecoder().connect_schema(data)
    assert sid.startswith("connect-")
    fastavro.parse_schema(view)  # a valid Avro schema
    assert row_columns(view) == row_columns(ENVELOPE)
    assert avro_view(connect_schema(KEY))["fields"] == [
        {"name": "id", "type": "int"},
        {"name": "d", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date", "connect.version": 1}],
         "default": None}]
    assert RecordDecoder().connect_schema(b'{"before": null}') is None


def test_renamed_columns_keep_their_avro_field_names_when_read():
    data = ConnectJsonWriter(ROW).encode({**{f["name"]: None for f in ROW["fields"]}, "id": 1, "_9_weird_col_2": 7,
                                          "_9_weird_col": "x"})
    assert b'"9 weird-col":7' in data
    decoded = RecordDecoder().decode(data)
    assert (decoded["_9_weird_col_2"], decoded["_9_weird_col"]) == (7, "x")


# ----------------------------------------------------------------------------- bad input
def test_bad_records_are_refused_naming_the_field():
    w = ConnectJsonWriter(KEY)
    with pytest.raises(SerdeError, match=r"Key\.id: null, but the field is not optional"):
        w.encode({"id": None, "d": None})
    dec_schema = {"type": "record", "name": "R", "fields": [
        {"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 1}}]}
    with pytest.raises(SerdeError, match="does not have scale 1"):
        ConnectJsonWriter(dec_schema).encode({"v": Decimal("1.25")})
    with pytest.raises(SerdeError, match="unions other than"):
        ConnectJsonWriter({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]})
    dec = RecordDecoder()
    schema = connect_schema(KEY)
    with pytest.raises(SerdeError, match=r"Key\.id: 'x' is not an int32"):
        dec.decode(json.dumps({"schema": schema, "payload": {"id": "x", "d": None}}).encode())
    with pytest.raises(SerdeError, match=r"Key\.id: null, but the field is not optional"):
        dec.decode(json.dumps({"schema": schema, "payload": {"d": 3}}).encode())
    bad_bytes = {"type": "struct", "optional": False, "fields": [{"type": "bytes", "optional": False, "field": "b"}]}
    with pytest.raises(SerdeError, match=r"record\.b: '\*\*\*' is not base64"):
        dec.decode(json.dumps({"schema": bad_bytes, "payload": {"b": "***"}}).encode())
    with pytest.raises(SerdeError, match="unknown Connect schema type 'int128'"):
        dec.decode(b'{"schema":{"type":"int128","optional":false},"payload":1}')


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_a_float32_is_written_with_the_shortest_digits_that_read_back_as_it(value):
    """A VECTOR's floats (Connect's FLOAT32 in an array): the digits Kafka Connect's JSON converter
    writes (``0.1``, not the widened ``0.10000000149011612``)."""
    written = float32_shortest(value)
    assert struct.pack("<f", written) == struct.pack("<f", value)
    assert float32_shortest(struct.unpack("<f", struct.pack("<f", 0.1))[0]) == 0.1


@pytest.mark.skipif(not TRANSCODES, reason="no C compiler on this machine, or CDC_JSON_TRANSCODE=0: records are made "
                    "from their dicts, whose FLOAT digits the test above checks, and no transcoder runs")
def test_the_transcoder_writes_a_float_with_its_shortest_digits():
    """A FLOAT column holding 0.1 (float32 0.100000001490116...): ``0.1``, as the dict path and Kafka
    Connect's JSON converter write it, not the widened double's 17 digits."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "f", "type": ["null", "float"], "default": None}]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {"f": 0.1})
    assert json.loads(ConnectJsonWriter(schema).transcode(body.getvalue()))["payload"] == {"f": 0.1}
