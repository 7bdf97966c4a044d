"""The type table (contract.type_table): every family and kind known to every path that reads it,
and the C paths' codes the same as the Python paths'."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.verify.normalise import normalise
from common.errors import UnsupportedType
from cdc.verify.spec import column_kind as verify_kind
from contract import type_table as tt
from producer.events import avro_types, values
from producer.table_schema import ColumnDef
from spark_jobs.sinks import copy_text, lake_types, layout, types
from tests.all_types import DDL, MARIADB_ONLY

ROOT = Path(__file__).resolve().parents[3]

#: A column of each DATA_TYPE spelling, with the column type that gives it its parameters.
COLUMN_TYPES = {
    "decimal": "decimal(12,3)", "numeric": "numeric(12,3)", "dec": "decimal(12,3)", "fixed": "decimal(12,3)",
    "bit": "bit(12)", "enum": "enum('a','b')", "set": "set('x','y')", "datetime": "datetime(6)",
    "binary": "binary(4)", "float": "float",
}


def _column(data_type: str, unsigned: bool = False, nullable: bool = True) -> ColumnDef:
    ct = COLUMN_TYPES.get(data_type, data_type) + (" unsigned" if unsigned else "")
    precision = 12 if data_type in tt.data_types("decimal") else 12 if data_type == "bit" else None
    return ColumnDef("c", data_type, ct, nullable, 1, numeric_precision=precision,
                     numeric_scale=3 if data_type in tt.data_types("decimal") else None,
                     datetime_precision=6 if data_type == "datetime" else None,
                     character_set="utf8mb4" if data_type in tt.data_types("string", "enum", "set") else None,
                     char_max_length=4 if data_type == "binary" else None)


EVERY_DATA_TYPE = sorted(dt for s in tt.SOURCE_TYPES for dt in s.data_types)


def test_each_data_type_belongs_to_one_family():
    seen: dict[str, str] = {}
    for s in tt.SOURCE_TYPES:
        for dt in s.data_types:
            assert dt not in seen, f"{dt} in {seen.get(dt)} and {s.family}"
            seen[dt] = s.family
    assert tt.family_of("VARCHAR") == "string" and tt.family_of("VECTOR") == "vector" and tt.family_of("hnsw") is None


def test_every_type_of_the_all_types_table_is_in_the_table():
    ddl = DDL.replace("{extra}", MARIADB_ONLY)
    declared = re.findall(r"\b[a-z0-9]+ ([A-Z]+[0-9]?)", ddl)
    assert len(declared) > 30
    for name in declared:
        assert tt.family_of(name) is not None, name


def test_every_family_has_its_avro_type_converter_and_verify_kind():
    families = {s.family for s in tt.SOURCE_TYPES}
    assert set(avro_types._AVRO_TYPES) == families
    assert set(values._CONVERTERS) == families
    for s in tt.SOURCE_TYPES:
        # cdc verify knows each family's kind (normalise raises for a kind it has no rule for)
        assert verify_kind(s.data_types[0]) == s.verify
        normalise(s.verify, None)


@pytest.mark.parametrize("data_type", EVERY_DATA_TYPE)
@pytest.mark.parametrize("unsigned", [False, True])
def test_each_data_types_avro_type_has_a_sink_kind_every_sink_stores(data_type, unsigned):
    if unsigned and tt.family_of(data_type) != "integer":
        return
    col = _column(data_type, unsigned)
    field = avro_types.avro_field(col)
    kind, nullable, attrs = layout.column_kind(field["type"])
    assert nullable is True
    row = tt.SINK_KINDS[kind]
    sink_col = layout.SinkColumn("c", "c", kind, True, attrs.get("precision"), attrs.get("scale"), attrs.get("length"))
    assert types.postgres_type(sink_col) and types.mysql_type(sink_col)
    assert isinstance(lake_types.arrow_type(sink_col), pa.DataType)
    assert (row.postgres is None) == (kind in ("decimal", "bits"))
    assert values.value_converter(col)(None) is None


def test_integer_types_follow_debeziums_mapping():
    expected = {("tinyint", False): "int", ("tinyint", True): "int", ("smallint", False): "int",
                ("smallint", True): "int", ("mediumint", True): "int", ("int", False): "int",
                ("int", True): "long", ("bigint", False): "long", ("bigint", True): "bytes"}
    for (dt, unsigned), prim in expected.items():
        t = avro_types.avro_type(_column(dt, unsigned, nullable=False))
        assert (t if isinstance(t, str) else t["type"]) == prim, (dt, unsigned)
    assert avro_types.avro_type(_column("smallint", nullable=False))["connect.type"] == "int16"
    assert avro_types.avro_type(_column("bigint", True, nullable=False))["precision"] == 20
    assert values.value_converter(_column("bigint", True))(-1) == 2 ** 64 - 1
    assert values.value_converter(_column("int", True))(-1) == 2 ** 32 - 1


def test_zero_dates_make_temporal_fields_nullable():
    for dt in ("date", "datetime", "timestamp"):
        assert avro_types.is_nullable(_column(dt, nullable=False))
    assert not avro_types.is_nullable(_column("time", nullable=False))


@given(st.sampled_from(sorted(tt.SINK_KINDS)))
def test_each_sink_kind_is_reachable_from_an_avro_type(kind):
    reachable = set(tt.CONNECT_KINDS.values()) | set(tt.AVRO_LOGICAL_KINDS.values()) | \
        set(tt.PRIMITIVE_KINDS.values()) | set(tt.RECORD_KINDS.values()) | {"smallint"}
    assert kind in reachable


def test_an_unknown_debezium_time_type_has_no_kind():
    assert tt.sink_kind("long", None, "io.debezium.time.NanoTimestamp") is None
    assert tt.sink_kind("int", None, None, "int16") == "smallint"
    assert tt.sink_kind("bytes", "decimal", "org.apache.kafka.connect.data.Decimal") == "decimal"


def test_the_c_header_the_build_wrote_is_the_tables():
    """setup.py writes contract/type_codes.h from the table before compiling (make venv runs it)."""
    assert (ROOT / "contract" / "type_codes.h").read_text() == tt.c_header()
    c_source = (ROOT / "spark_jobs" / "sinks" / "_copy_text.c").read_text()
    assert '#include "type_codes.h"' in c_source and "T_NULL = 100" not in c_source


def test_the_copy_encoders_codes_are_the_tables():
    assert copy_text._T_NULL == tt.COPY_TEXT_NULL
    assert [copy_text._T_CODES[h] for h in tt.COPY_TEXTS] == list(range(101, 101 + len(tt.COPY_TEXTS)))
    header = tt.c_header()
    for how in tt.COPY_TEXTS:
        assert f"T_{how.upper()} = {tt.copy_text_code(how)}" in header


def test_the_docs_show_the_table():
    page = (ROOT / "docs" / "types.md").read_text()
    start = page.index("<!-- type tables: generated by contract.type_table.markdown_tables() -->\n")
    end = page.index("<!-- end of type tables -->")
    assert page[start:end].split("\n", 1)[1] == tt.markdown_tables(), \
        "docs/types.md: paste contract.type_table.markdown_tables() between its markers"
