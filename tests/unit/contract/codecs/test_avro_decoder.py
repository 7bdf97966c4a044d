"""The compiled Avro decoder reads what fastavro reads, for any schema it compiles."""

from __future__ import annotations

import io
import itertools
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.codecs.avro_decoder import (
    OFFSET,
    NotCompiled,
    compile_change_header,
    compile_change_reader,
    compile_decoder,
    read_long,
)
from contract.errors import SerdeError
from tests.unit.producer.events.test_avro_template import SCHEMA, TEMPLATE, _example, records_strategy, sources


def fastavro_bytes(schema, value) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def fastavro_read(schema, data: bytes):
    return fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(schema), None)


# -- schemas and values drawn together ----------------------------------------------------------

_names = itertools.count()


def _name() -> str:
    return f"n{next(_names)}"


def _decimal(precision: int, scale: int, fixed: bool):
    t = {"type": "fixed", "name": _name(), "size": 16} if fixed else {"type": "bytes"}
    schema = {**t, "logicalType": "decimal", "precision": precision, "scale": scale}
    values = st.integers(-(10 ** precision) + 1, 10 ** precision - 1).map(lambda n: Decimal(n).scaleb(-scale))
    return schema, values


LEAVES = st.one_of(
    st.just(("null", st.none())),
    st.just(("boolean", st.booleans())),
    st.just(("int", st.integers(-(1 << 31), (1 << 31) - 1))),
    st.just(("long", st.integers(-(1 << 63), (1 << 63) - 1))),
    st.just(("float", st.floats(width=32, allow_nan=False))),
    st.just(("double", st.floats(allow_nan=False))),
    st.just(("bytes", st.binary(max_size=40))),
    st.just(("string", st.text(max_size=40))),
    st.builds(lambda p, s, f: _decimal(p, min(s, p), f), st.integers(1, 38), st.integers(0, 20), st.booleans()),
    st.builds(lambda n: ({"type": "enum", "name": _name(), "symbols": [f"S{i}" for i in range(n)]},
                         st.sampled_from([f"S{i}" for i in range(n)])), st.integers(1, 5)),
    st.builds(lambda n: ({"type": "fixed", "name": _name(), "size": n}, st.binary(min_size=n, max_size=n)),
              st.integers(0, 8)),
    st.just(({"type": "long", "connect.name": "io.debezium.time.Timestamp"}, st.integers(0, 1 << 50))),
)


def _record(fields):
    schema = {"type": "record", "name": _name(),
              "fields": [{"name": f"f{i}", "type": t} for i, (t, _) in enumerate(fields)]}
    return schema, st.fixed_dictionaries({f"f{i}": v for i, (_, v) in enumerate(fields)})


def _nullable(inner, null_first: bool):
    t, values = inner
    if t == "null" or isinstance(t, list):
        return inner
    return (["null", t] if null_first else [t, "null"]), st.one_of(st.none(), values)


def _containers(children):
    return st.one_of(
        st.lists(children, min_size=1, max_size=4).map(_record),
        children.map(lambda c: ({"type": "array", "items": c[0]}, st.lists(c[1], max_size=4))),
        children.map(lambda c: ({"type": "map", "values": c[0]},
                                st.dictionaries(st.text(max_size=5), c[1], max_size=3))),
        st.tuples(children, st.booleans()).map(lambda cb: _nullable(*cb)),
    )


SCHEMAS = st.recursive(LEAVES, _containers, max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_decoder_reads_what_fastavro_reads(data):
    schema, values = data.draw(SCHEMAS.map(lambda sv: _record([sv])))  # a record around any type
    decode = compile_decoder(schema)
    for value in data.draw(st.lists(values, min_size=1, max_size=3)):
        encoded = fastavro_bytes(schema, value)
        assert decode(b"\xc3\x01HEADER!!" + encoded, 10) == fastavro_read(schema, encoded)


def _envelopes(source: dict, now: int, records: list):
    """The change-event records (single-object framed) of a drawn source and its records."""
    bound = TEMPLATE.bind(_example(source, now), b"\xc3\x01HEADER!!")
    for values in records:
        yield TEMPLATE.encode(bound, values)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources, st.integers(0, 1 << 45), records_strategy)
def test_compiled_decoder_reads_change_event_envelopes(source, now, records):
    decode = compile_decoder(SCHEMA)
    for data in _envelopes(source, now, records):
        got = decode(data, 10)
        assert got == fastavro_read(SCHEMA, data[10:])
        assert [type(v) for v in got.values()] == [type(v) for v in fastavro_read(SCHEMA, data[10:]).values()]


def test_decimals_keep_their_scale():
    schema = {"type": "record", "name": "D", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}
    for text in ("0.00", "-1.50", "12345678.91"):
        got = compile_decoder(schema)(fastavro_bytes(schema, {"d": Decimal(text)}), 0)["d"]
        assert str(got) == text


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_read_long(n):
    encoded = fastavro_bytes("long", n)
    assert read_long(b"xx" + encoded + b"yy", 2) == (n, 2 + len(encoded))


@pytest.mark.parametrize("schema", [
    {"type": "record", "name": "T", "fields": [{"name": "t", "type": {"type": "long",
                                                                      "logicalType": "timestamp-millis"}}]},
    {"type": "record", "name": "U", "fields": [{"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]},
    {"type": "record", "name": "R", "fields": [{"name": "next", "type": ["null", "R"]}]},
])
def test_schemas_fastavro_converts_or_that_recurse_are_not_compiled(schema):
    with pytest.raises(NotCompiled):
        compile_decoder(schema)


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_truncated_record_is_a_serde_error(cut):
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"},
                                                        {"name": "d", "type": "double"}]}
    data = fastavro_bytes(schema, {"s": "x" * 30, "d": 1.5})
    with pytest.raises(SerdeError, match="cannot be decoded"):
        compile_decoder(schema)(data[:-cut], 0)


def test_a_union_branch_out_of_range_is_a_serde_error():
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": ["null", "string"]}]}
    with pytest.raises(SerdeError, match="union branch"):
        compile_decoder(schema)(b"\x06", 0)


# -- projections: fields skipped over, not built ------------------------------------------------

def _projection(schema: dict, draw) -> dict:
    """A projection of a record schema's fields: each field kept, skipped or an offset."""
    return {f["name"]: draw(st.sampled_from([True, OFFSET, None])) for f in schema["fields"]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_projection_reads_its_fields_as_the_whole_record_has_them(data):
    schema, values = data.draw(st.lists(SCHEMAS, min_size=1, max_size=4).map(_record))
    project = _projection(schema, data.draw)
    whole, part = compile_decoder(schema), compile_decoder(schema, {k: v for k, v in project.items() if v})
    types = {f["name"]: f["type"] for f in schema["fields"]}
    for value in data.draw(st.lists(values, min_size=1, max_size=3)):
        encoded = b"\xc3\x01HEADER!!" + fastavro_bytes(schema, value)
        full, got = whole(encoded, 10), part(encoded, 10)
        assert list(got) == [k for k, v in project.items() if v]  # in field order, nothing else
        for name, how in project.items():
            if how is True:
                assert got[name] == full[name]
            elif how == OFFSET:  # where the field starts: a decoder of its type reads it there
                assert compile_decoder(_record_of(name, types[name]))(encoded, got[name])[name] == full[name]


def _record_of(name: str, t) -> dict:
    return {"type": "record", "name": _name(), "fields": [{"name": name, "type": t}]}


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_truncated_record_is_a_serde_error_where_the_short_field_is_skipped(cut):
    schema = {"type": "record", "name": "S", "fields": [{"name": "d", "type": "double"},
                                                        {"name": "s", "type": "string"}]}
    data = fastavro_bytes(schema, {"s": "x" * 30, "d": 1.5})
    with pytest.raises(SerdeError, match="cannot be decoded"):
        compile_decoder(schema, {"d": True})(data[:-cut], 0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources, st.integers(0, 1 << 45), records_strategy)
def test_the_change_reader_reads_what_applying_a_change_takes(source, now, records):
    read = compile_change_reader(SCHEMA)
    for data in _envelopes(source, now, records):
        full = fastavro_read(SCHEMA, data[10:])
        assert read(data, 10) == {
            "source": {"ts_ms": full["source"]["ts_ms"], "db": full["source"]["db"],
                       "table": full["source"]["table"]},
            "op": full["op"], "position": full["position"], "snapshot_window": full["snapshot_window"],
            "row": full["before"] if full["op"] == "d" else full["after"]}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources, st.integers(0, 1 << 45), records_strategy)
def test_the_change_header_reads_the_change_reader_s_fields_and_where_the_image_is(source, now, records):
    header, row = compile_change_header(SCHEMA)
    read = compile_change_reader(SCHEMA)
    for data in _envelopes(source, now, records):
        whole = read(data, 10)
        got = header(data, 10)
        image = whole.pop("row")
        assert {k: v for k, v in got.items() if k != "row_at"} == whole
        if image is None:
            assert got["row_at"] is None
        else:  # the image's union starts there, and the row reader reads it
            assert row(data, got["row_at"]) == image


def test_the_change_reader_is_for_envelopes_only():
    with pytest.raises(NotCompiled, match="envelope"):
        compile_change_reader({"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"}]})


def test_a_row_with_a_named_type_used_twice_is_read_by_the_change_decoders():
    """Two POINT and two GEOMETRY columns: each named type defined at its first use and named
    after (as the producer writes them).  The row decoders compile a part of the expanded
    envelope, which repeats the definitions: they are collapsed again (fastavro refused the
    expanded part, 'redefined named type', and the merge job stopped on such a table)."""
    from contract.envelope import envelope_schema
    from producer.events.avro_types import avro_field
    from producer.table_schema import ColumnDef

    point, geometry = "io.debezium.data.geometry.Point", "io.debezium.data.geometry.Geometry"
    fields = [avro_field(ColumnDef(n, t, t, n != "id", i)) for i, (n, t) in
              enumerate([("id", "int"), ("g", "point"), ("h", "point"), ("x", "geometry"), ("y", "linestring")])]
    fields[2]["type"], fields[4]["type"] = ["null", point], ["null", geometry]
    schema = envelope_schema({"type": "record", "name": "Value", "namespace": "p.db.t", "fields": fields},
                             "p.db.t.Envelope")
    row = {"id": 7, "g": {"x": 1.5, "y": -2.0, "wkb": b"\x01", "srid": None},
           "h": {"x": 0.0, "y": 3.0, "wkb": None, "srid": 4326}, "x": {"wkb": b"\x02\x03", "srid": 0}, "y": None}
    source = {"name": "p", "ts_ms": 1, "db": "db", "table": "t", "server_id": 1, "gtid": None, "file": "b.000001",
              "pos": 4, "thread": None}
    value = {**_example(source, 1), "before": row, "op": "d", "position": "0" * 30}
    data = fastavro_bytes(schema, value)
    header, image = compile_change_header(schema)
    assert image(data, header(data, 0)["row_at"]) == row
    assert compile_change_reader(schema)(data, 0)["row"] == row


def test_only_the_same_definition_of_a_named_type_is_collapsed():
    from contract.codecs.avro_decoder import collapse_named
    a = {"type": "record", "name": "P", "namespace": "n", "fields": [{"name": "x", "type": "int"}]}
    b = {"type": "record", "name": "P", "namespace": "n", "fields": [{"name": "x", "type": "long"}]}
    row = {"type": "record", "name": "R", "fields": [{"name": "f", "type": a}, {"name": "g", "type": dict(a)},
                                                    {"name": "h", "type": ["null", b]}]}
    got = collapse_named(row)
    assert [f["type"] for f in got["fields"]] == [a, "n.P", ["null", b]]
    with pytest.raises(Exception, match="redefined named type"):
        compile_decoder(got)
