"""Writer-schema fingerprints that see logical types (contract.codecs.fingerprint): Avro's
canonical form plus the attributes that give the bytes their meaning; Avro's own
fingerprint for a schema without them."""

from __future__ import annotations

import copy

import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.codecs.fingerprint import canonical_form, schema_fingerprint
from contract.codecs.serde import AvroWriter
from contract.envelope import envelope_schema
from producer.events.avro_types import row_record_schema
from producer.table_schema import ColumnDef, TableDef
from tests.unit.producer.events.test_types_and_values import TABLE


def _strip(s):
    """``s`` without the attributes the fingerprint keeps beyond Avro's canonical form."""
    if isinstance(s, dict):
        return {k: _strip(v) for k, v in s.items()
                if k not in ("logicalType", "precision", "scale", "mysql.column") and not k.startswith("connect.")}
    if isinstance(s, list):
        return [_strip(x) for x in s]
    return s


def _envelope(table: TableDef) -> dict:
    return envelope_schema(row_record_schema(table, f"cdc.{table.db}.{table.name}"), f"cdc.{table.db}.{table.name}.Envelope")


def _avro(schema) -> str:
    return fingerprint(to_parsing_canonical_form(fastavro.parse_schema(schema)), "CRC-64-AVRO")


def test_without_logical_attributes_it_is_avros_canonical_form_and_fingerprint():
    schema = _strip(_envelope(TABLE))  # every column type the producer maps, the source block
    assert canonical_form(schema) == to_parsing_canonical_form(fastavro.parse_schema(schema))
    assert schema_fingerprint(schema) == _avro(schema)
    plain = {"type": "record", "name": "M", "namespace": "n", "fields": [
        {"name": "a", "type": ["null", "string"], "default": None, "doc": "x"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 16}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "n.E"}}},
        {"name": "r", "type": ["null", "M"]}]}
    assert canonical_form(plain) == to_parsing_canonical_form(fastavro.parse_schema(plain))


def _col(name, data_type, column_type, prec=None, scale=None, dtp=None):
    return ColumnDef(name, data_type, column_type, True, 2, numeric_precision=prec, numeric_scale=scale,
                     datetime_precision=dtp)


@pytest.mark.parametrize("old, new", [
    (_col("x", "datetime", "datetime(3)", dtp=3), _col("x", "datetime", "datetime(6)", dtp=6)),
    (_col("x", "decimal", "decimal(10,2)", 10, 2), _col("x", "decimal", "decimal(12,4)", 12, 4)),
    (_col("x", "decimal", "decimal(10,2)", 10, 2), _col("x", "decimal", "decimal(12,2)", 12, 2)),
    (_col("x", "enum", "enum('a','b')"), _col("x", "enum", "enum('a','b','c')")),
    (_col("x", "bit", "bit(12)", 12), _col("x", "bit", "bit(16)", 16)),
    (_col("x", "int", "int(11)", 10, 0), _col("x", "bigint", "bigint(20) unsigned", 20, 0)),
    (_col("x", "smallint", "smallint(6)", 5, 0), _col("x", "mediumint", "mediumint(9)", 7, 0)),
])
def test_a_logical_type_change_is_a_new_fingerprint(old, new):
    key = ColumnDef("id", "int", "int(11)", False, 1, numeric_precision=10, numeric_scale=0)
    a, b = (_envelope(TableDef("shop", "t", [key, c], ["id"])) for c in (old, new))
    assert a != b and schema_fingerprint(a) != schema_fingerprint(b)
    assert AvroWriter(a).fingerprint == schema_fingerprint(a) and AvroWriter(a).header[2:] == bytes.fromhex(
        schema_fingerprint(a))


def test_the_source_column_a_field_holds_is_part_of_it():
    key = ColumnDef("id", "int", "int(11)", False, 1, numeric_precision=10, numeric_scale=0)
    a, b = (_envelope(TableDef("shop", "t", [key, _col(n, "int", "int(11)", 10, 0)], ["id"])) for n in ("a-b", "a_b"))
    assert _avro(a) == _avro(b) and schema_fingerprint(a) != schema_fingerprint(b)


def test_what_does_not_change_the_bytes_meaning_does_not_change_it():
    s = _envelope(TABLE)
    other = copy.deepcopy(s)
    other["doc"] = "a table"
    other["fields"][0]["default"] = None
    assert schema_fingerprint(other) == schema_fingerprint(s)
    # attribute order and namespace spelling do not matter
    a = {"type": "record", "name": "R", "namespace": "n", "fields": [
        {"name": "x", "type": {"type": "bytes", "scale": 2, "precision": 10, "logicalType": "decimal"}}]}
    b = {"type": "record", "name": "n.R", "fields": [
        {"name": "x", "type": {"logicalType": "decimal", "precision": 10, "type": "bytes", "scale": 2}}]}
    assert schema_fingerprint(a) == schema_fingerprint(b)


NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
PRIMS = st.sampled_from(["null", "boolean", "int", "long", "float", "double", "bytes", "string"])


@st.composite
def _plain_records(draw):
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    fields = []
    for n in names:
        t = draw(st.one_of(PRIMS, st.builds(lambda p: {"type": "array", "items": p}, PRIMS),
                           st.builds(lambda p: {"type": "map", "values": p}, PRIMS),
                           st.builds(lambda p: ["null", p], PRIMS.filter(lambda p: p != "null"))))
        fields.append({"name": n, "type": t})
    return {"type": "record", "name": draw(NAMES), "namespace": draw(st.sampled_from(["a", "a.b", None])) or "x",
            "fields": fields}


@settings(max_examples=200, deadline=None)
@given(_plain_records())
def test_any_plain_schema_keeps_avros_fingerprint(schema):
    assert schema_fingerprint(schema) == _avro(schema)
