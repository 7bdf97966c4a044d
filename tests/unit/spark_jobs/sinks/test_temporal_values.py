"""The sinks take a temporal value as the number its Avro type holds or as the object a converting
reader (fastavro) makes of an Avro logical type (Kafka Connect's Date, Time and Timestamp of
``time.precision.mode: connect``): the same sink value either way."""

from __future__ import annotations

import io

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.sinks.lake_types import lake_converter
from spark_jobs.sinks.layout import SinkColumn, column_kind
from spark_jobs.sinks.values import mysql_converter, postgres_converter

LOGICAL = {  # logical type -> (primitive, the numbers it holds)
    "date": ("int", st.integers(-719_162, 2_932_896)),
    "time-millis": ("int", st.integers(0, 86_399_999)),
    "time-micros": ("long", st.integers(0, 86_399_999_999)),
    "timestamp-millis": ("long", st.integers(-62_135_596_800_000, 253_402_300_799_999)),
    "timestamp-micros": ("long", st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999)),
}


def _read_back(t: dict, n: int):
    """``n`` written as Avro type ``t`` and read by fastavro: the object it makes."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "v", "type": t}]}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), {"v": n})
    buf.seek(0)
    return fastavro.schemaless_reader(buf, fastavro.parse_schema(schema))["v"]


@given(st.sampled_from(sorted(LOGICAL)).flatmap(lambda lt: st.tuples(st.just(lt), LOGICAL[lt][1])))
def test_a_temporal_value_as_a_number_or_as_fastavros_object_is_the_same_sink_value(case):
    logical, n = case
    t = {"type": LOGICAL[logical][0], "logicalType": logical}
    kind, _, _ = column_kind(t)
    col = SinkColumn("c", "c", kind)
    obj = _read_back(t, n)
    assert not isinstance(obj, int)
    for make in (postgres_converter, mysql_converter):
        assert make(col)(obj) == make(col)(n), (logical, n, obj)
    lake = lake_converter(col)
    if lake is not None:
        assert lake(obj) == lake(n)
