"""The native Avro reader (contract/codecs/_avro_reader.c) reads what the generated Python reads.

``compile_decoder`` and ``compile_change_header`` use the native reader where it reads the
schema (test_avro_decoder.py holds them to fastavro with it on); here the two are held to
each other on drawn schemas, projections, change events and malformed bytes, and the
fallback is checked: a schema the native reader does not read, or the reader switched off
(``CDC_AVRO_NATIVE=0``), is read by the generated Python.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.codecs import avro_decoder
from contract.codecs.avro_decoder import (
    NATIVE_ENV,
    OFFSET,
    NotCompiled,
    compile_change_header,
    compile_decoder,
    native_enabled,
    native_program,
)
from contract.errors import SerdeError
from tests.native_helpers import can_build
from tests.unit.contract.codecs.test_avro_decoder import (
    SCHEMAS,
    _envelopes,
    _projection,
    _record,
    fastavro_bytes,
)
from tests.unit.producer.events.test_avro_template import SCHEMA, records_strategy, sources

FRAME = b"\xc3\x01HEADER!!"


@contextmanager
def _native(on: bool):
    before = os.environ.get(NATIVE_ENV)
    os.environ[NATIVE_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = before


def _both(make):
    """``make()`` compiled for the native reader and for the generated Python."""
    with _native(True):
        native = make()
    with _native(False):
        python = make()
    return native, python


def _drawn(data, fields: int):
    """A drawn record schema of up to ``fields`` fields, its values, and its decoders (native,
    generated Python) for a drawn projection (or none)."""
    schema, values = data.draw(st.lists(SCHEMAS, min_size=1, max_size=fields).map(_record))
    project = {k: v for k, v in _projection(schema, data.draw).items() if v} or None
    native, python = _both(lambda: compile_decoder(schema, project))
    return schema, values, native, python


def _outcome(decode, data: bytes, start: int):
    try:
        return "value", decode(data, start)
    except SerdeError as exc:
        return "error", str(exc)


def test_the_native_reader_is_built_where_it_can_be_and_used():
    # make venv builds it (setup.py) where a C compiler and Python's headers are, as on these
    # machines: left out there, every record would be read by the generated Python, about four
    # times slower per header.  Without them the build goes on and the generated Python reads.
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    if can_build():
        assert avro_decoder._avro_reader is not None
        # (the merge tasks' change scan, test_change_scan.py; the PostgreSQL sink's COPY lines, test_copy_text.py)
        from spark_jobs.task import decide
        from spark_jobs.sinks import copy_text
        assert decide.native_scan is not None and copy_text._copy_text is not None
        assert native_enabled() == (os.environ.get(NATIVE_ENV, "1") != "0")
    else:
        assert not native_enabled()
    assert compile_decoder(schema)(b"\x04", 0) == {"a": 2}
    with _native(False):
        assert not native_enabled()
        assert compile_decoder(schema)(b"\x04", 0) == {"a": 2}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_native_reader_reads_what_the_generated_python_reads(data):
    schema, values, native, python = _drawn(data, 4)
    for value in data.draw(st.lists(values, min_size=1, max_size=3)):
        encoded = FRAME + fastavro_bytes(schema, value)
        got = native(encoded, 10)
        assert got == python(encoded, 10)
        assert list(got) == list(python(encoded, 10))  # (field order too)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_malformed_bytes_are_a_serde_error_as_in_the_generated_python(data):
    schema, values, native, python = _drawn(data, 3)
    encoded = bytearray(fastavro_bytes(schema, data.draw(values)))
    how = data.draw(st.sampled_from(["cut", "flip", "grow"]))
    if how == "cut" and encoded:
        del encoded[data.draw(st.integers(0, len(encoded) - 1)):]
    elif how == "flip" and encoded:
        for _ in range(data.draw(st.integers(1, 3))):
            encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    else:
        encoded += data.draw(st.binary(min_size=1, max_size=4))
    kind, got = _outcome(native, bytes(encoded), 0)
    if kind == "error" and "beyond 64 bits" in got:
        return  # an Avro long is 64 bits: the generated Python reads a larger number there
    want_kind, want = _outcome(python, bytes(encoded), 0)
    assert kind == want_kind, (got, want)
    if kind == "value":
        assert _same(got, want), (got, want)


def _same(a, b) -> bool:
    """``a == b``, with a NaN equal to a NaN: a flipped byte of a float or double can make one,
    which both readers then read (and ``nan != nan``)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_a_long_of_more_than_64_bits_is_a_serde_error():
    native, _ = _both(lambda: compile_decoder({"type": "record", "name": "L", "fields": [{"name": "n",
                                                                                            "type": "long"}]}))
    assert native(b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", 0) == {"n": (1 << 63) - 1}
    with pytest.raises(SerdeError, match="beyond 64 bits"):
        native(b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x03", 0)
    with pytest.raises(SerdeError, match="longer than 10 bytes"):
        native(b"\x80" * 9 + b"\x81\x01", 0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sources, st.integers(0, 1 << 45), records_strategy)
def test_the_native_change_header_reads_what_the_generated_one_reads(source, now, records):
    (native, native_row), (python, python_row) = _both(lambda: compile_change_header(SCHEMA))
    for data in _envelopes(source, now, records):
        got = native(data, 10)
        assert got == python(data, 10) and list(got) == list(python(data, 10))
        if got["row_at"] is not None:
            assert native_row(data, got["row_at"]) == python_row(data, got["row_at"])


@pytest.mark.parametrize("t", [
    {"type": "enum", "name": "E", "symbols": ["A", "B"]},
    {"type": "array", "items": "long"},
    {"type": "map", "values": "string"},
    {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
])
def test_what_the_native_reader_does_not_read_it_skips_and_the_generated_python_reads(t):
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": t}, {"name": "n", "type": "long"}]}
    with pytest.raises(NotCompiled):
        native_program(schema)
    native_program(schema, {"n": True})  # (skipped: fine)
    native_program(schema, {"x": OFFSET, "n": True})
    x = {"enum": "B", "array": [1, 2], "map": {"k": "v"}, "bytes": Decimal("1.25")}[t["type"]]
    value = {"x": x, "n": 7}
    encoded = fastavro_bytes(schema, value)
    assert compile_decoder(schema)(encoded, 0) == value
    assert compile_decoder(schema, {"n": True})(encoded, 0) == {"n": 7}


@pytest.mark.parametrize("data", [b"\x00", b"\x01", b"\x02", b"\x05", b"\xff"])
def test_a_boolean_is_true_only_for_byte_1_as_in_the_generated_python(data):
    schema = {"type": "record", "name": "B", "fields": [{"name": "b", "type": "boolean"}]}
    native, python = _both(lambda: compile_decoder(schema))
    assert native(data, 0) == python(data, 0) == {"b": data == b"\x01"}


def _count(n: int) -> bytes:
    """An Avro long's bytes (zig-zag varint)."""
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes(out) + bytes([z])


@pytest.mark.parametrize("items", ["null", "long", {"type": "record", "name": "E", "fields": []}])
@pytest.mark.parametrize("project", [None, {"n": True}])
def test_a_block_counting_more_items_than_its_bytes_is_refused_not_built(items, project):
    # A poison record once made a worker build items until the machine ran out of memory (a
    # count of 2**62 nulls); items of some bytes cannot outnumber the bytes left, items of no
    # bytes are skipped without a loop, and at most MAX_EMPTY_ITEMS of them are built.
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": items}},
                                                        {"name": "n", "type": "long"}]}
    data = _count(1 << 62) + b"\x02\x04"  # (a block, a 1-item block, the end... in too few bytes)
    for decode in _both(lambda: compile_decoder(schema, project)):
        if project is not None and items != "long":  # skipped items of no bytes: no loop, no error
            assert decode(_count(1 << 62) + b"\x00\x04", 0) == {"n": 2}
            continue
        with pytest.raises(SerdeError, match="block of more"):
            decode(data, 0)
