"""The pure parts of spark_jobs.sinks.copy_text (the lines against PostgreSQL itself are in
tests/integration/spark_jobs/test_sinks.py)."""

from __future__ import annotations

import functools
import io
import os
import struct
from datetime import date, timedelta
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark_jobs.sinks import copy_text
from contract.codecs.avro_decoder import NATIVE_ENV
from contract.errors import NotCompiled
from spark_jobs.sinks.batch import EncodedChange
from spark_jobs.sinks.copy_text import compile_copy_encoder, copy_escape, copy_lines_of, date_text, stage_column
from spark_jobs.sinks.layout import SinkColumn, column_kind

_UNESCAPE = {b"\\\\": b"\\", b"\\t": b"\t", b"\\n": b"\n", b"\\r": b"\r"}


def _unescape(text: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(text):
        pair = text[i:i + 2]
        if pair in _UNESCAPE:
            out += _UNESCAPE[pair]
            i += 2
        else:
            out.append(text[i])
            i += 1
    return bytes(out)


@given(st.binary(max_size=64))
def test_copy_escape_leaves_no_separator_and_copy_reads_the_bytes_back(raw):
    text = copy_escape(raw)
    assert b"\t" not in text and b"\n" not in text and b"\r" not in text
    assert _unescape(text) == raw


@given(st.integers(-719162, 2932896))
def test_date_text_is_the_iso_date_of_the_day_count(days):
    assert date_text(days) == (date(1970, 1, 1) + timedelta(days=days)).isoformat().encode()


@pytest.mark.parametrize("days", [-719163, 2932897])
def test_a_date_outside_years_1_to_9999_is_a_value_error(days):
    with pytest.raises(ValueError, match="outside years"):
        date_text(days)


def test_stage_columns_of_the_kinds_sent_as_numbers():
    assert stage_column("timestamp_ms", None, "s.c", "x")[0] == "bigint"
    assert "mod(s.c, 1000)" in stage_column("timestamp_ms", None, "s.c", "x")[1]
    assert "mod(s.c, 1000000)" in stage_column("timestamp_us", None, "s.c", "x")[1]
    assert stage_column("decimal", 3, "s.c", "numeric(9,3)") == ("numeric", "s.c * 0.001")
    assert stage_column("decimal", 0, "s.c", "numeric(9,0)") == ("numeric(9,0)", "s.c")
    assert stage_column("string", None, "s.c", "text") == ("text", "s.c")


def test_kinds_without_copy_text_are_not_compiled():
    row = ["null", {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "int"},
        {"name": "z", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}]}]}]
    with pytest.raises(NotCompiled):
        compile_copy_encoder(row, [SinkColumn("id", "id", "int"), SinkColumn("z", "z", "zoned_timestamp")])
    with pytest.raises(NotCompiled, match="no field"):
        compile_copy_encoder(row, [SinkColumn("gone", "gone", "int")])
    line = compile_copy_encoder(row, [SinkColumn("id", "id", "int")])
    assert line(b"\x02\x0d\x00", 0) == b"-7"  # (the field not asked for is skipped)
    with pytest.raises(ValueError, match="null row image"):
        line(b"\x00", 0)


# -- the native line (spark_jobs/sinks/_copy_text.c) writes what the generated Python writes -------------

_LONGS = st.integers(-(1 << 63), (1 << 63) - 1)


def _decimals(precision: int, scale: int):
    return st.integers(-(10 ** precision) + 1, 10 ** precision - 1).map(lambda n: Decimal(n).scaleb(-scale))


_FIELD_TYPES = [  # every Avro type a column kind has COPY text for, and its values
    ("int", st.integers(-(1 << 31), (1 << 31) - 1)),
    ("long", _LONGS),
    ({"type": "int", "connect.type": "int16"}, st.integers(-32768, 32767)),
    ({"type": "int", "connect.name": "io.debezium.time.Year"}, st.integers(1901, 2155)),
    ({"type": "int", "connect.name": "io.debezium.time.Date"}, st.integers(-719162, 2932896)),
    ({"type": "int", "logicalType": "date"}, st.integers(-719162, 2932896)),
    ({"type": "long", "connect.name": "io.debezium.time.MicroTime"}, _LONGS),
    ({"type": "int", "logicalType": "time-millis"}, st.integers(-(1 << 31), (1 << 31) - 1)),
    ({"type": "long", "connect.name": "io.debezium.time.Timestamp"}, _LONGS),
    ({"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}, _LONGS),
    ("string", st.text(max_size=30)),
    ({"type": "string", "connect.name": "io.debezium.data.Json"}, st.text(max_size=30)),
    ({"type": "string", "connect.name": "io.debezium.data.Enum"}, st.sampled_from(["a", "b\tc", "d\\e"])),
    ("bytes", st.binary(max_size=30)),
    ({"type": "fixed", "name": "F3", "size": 3}, st.binary(min_size=3, max_size=3)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}, _decimals(65, 30)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}, _decimals(12, 2)),
    ({"type": "fixed", "name": "D16", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 0},
     _decimals(38, 0)),
    ("boolean", st.booleans()),
    ("double", st.floats()),
    ("float", st.floats(width=32)),
]


@st.composite
def _rows(draw):
    """A row schema of drawn fields (some nullable, a named type once), its columns (some of
    its fields, in a drawn order) and encoded images (the ``["null", row]`` union)."""
    picked = draw(st.lists(st.integers(0, len(_FIELD_TYPES) - 1), min_size=1, max_size=8, unique=True))
    fields, values = [], {}
    for n, k in enumerate(picked):
        t, vals = _FIELD_TYPES[k]
        if draw(st.booleans()):
            t, vals = (["null", t] if draw(st.booleans()) else [t, "null"]), st.one_of(st.none(), vals)
        fields.append({"name": f"c{n}", "type": t})
        values[f"c{n}"] = vals
    row = {"type": "record", "name": "Row", "fields": fields}
    shown = draw(st.permutations([f["name"] for f in fields]))
    shown = shown[:draw(st.integers(1, len(shown)))]
    columns = []
    for name in shown:
        kind, _, attrs = column_kind(next(f["type"] for f in fields if f["name"] == name))
        columns.append(SinkColumn(name, name, kind, scale=attrs.get("scale")))
    images = [b"\x02" + _fastavro_bytes(row, draw(st.fixed_dictionaries(values))) for _ in range(draw(st.integers(1, 3)))]
    return ["null", row], columns, images


def _fastavro_bytes(schema, value) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def _compiled(row, columns, native: bool):
    before = os.environ.get(NATIVE_ENV)
    os.environ[NATIVE_ENV] = "1" if native else "0"
    try:
        return compile_copy_encoder(row, columns)
    except NotCompiled as exc:
        return exc
    finally:
        if before is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = before


def _lines(row, columns):
    """The line encoder compiled for the native extension and as generated Python (both
    refuse the same rows: a field of a logical type neither skips, say)."""
    native, python = _compiled(row, columns, True), _compiled(row, columns, False)
    assert isinstance(native, NotCompiled) == isinstance(python, NotCompiled), (native, python)
    assume(not isinstance(native, NotCompiled))
    return native, python


def _line_or_error(line, data: bytes):
    try:
        return line(data, 0)
    except (ValueError, IndexError, struct.error) as exc:  # (what the generated Python raises)
        return exc


def test_the_native_line_is_there():
    row = ["null", {"type": "record", "name": "R", "fields": [{"name": "id", "type": "int"}]}]
    native, python = (_compiled(row, [SinkColumn("id", "id", "int")], on) for on in (True, False))
    # (the extension's copy_line bound to its program, and the generated function; the
    # generated one twice where the extension is not built)
    assert (getattr(native, "func", None) is getattr(copy_text._copy_text, "copy_line", False)) == \
        (copy_text._copy_text is not None)
    assert not isinstance(python, functools.partial)
    assert native(b"\x02\x0d", 0) == python(b"\x02\x0d", 0) == b"-7"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows())
def test_the_native_line_writes_what_the_generated_python_writes(drawn):
    row, columns, images = drawn
    native, python = _lines(row, columns)
    for data in images:
        assert native(data, 0) == python(data, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows(), st.data())
def test_a_malformed_image_fails_the_native_line_as_it_fails_the_generated_one(drawn, data):
    row, columns, images = drawn
    native, python = _lines(row, columns)
    image = bytearray(images[0])
    if data.draw(st.booleans()):
        del image[data.draw(st.integers(0, len(image) - 1)):]
    else:
        image[data.draw(st.integers(0, len(image) - 1))] = data.draw(st.integers(0, 255))
    got, want = _line_or_error(native, bytes(image)), _line_or_error(python, bytes(image))
    if isinstance(got, ValueError) and ("beyond 64 bits" in str(got) or "longer than 64 bytes" in str(got)):
        return  # (an Avro long is 64 bits, a MySQL decimal at most 28 bytes: the generated Python writes more digits)
    assert isinstance(got, Exception) == isinstance(want, Exception), (got, want)
    if not isinstance(got, Exception):
        assert got == want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows(), st.data())
def test_the_native_lines_of_a_batch_are_its_lines_one_by_one(drawn, data):
    """copy_lines_of(line)(changes, start, stop): the stage lines PostgresSink._copy_encoded
    writes one by one (the image's line, its position, no key hash), images at any offset of
    their events; a malformed image fails the batch as its line fails."""
    row, columns, images = drawn
    native, python = _lines(row, columns)
    lines = copy_lines_of(native)
    assert (lines is None) == (copy_text._copy_text is None)
    assume(lines is not None)
    assert copy_lines_of(python) is None
    changes = []
    for n, image in enumerate(images * data.draw(st.integers(1, 3))):
        pad = data.draw(st.binary(max_size=4))
        changes.append(EncodedChange("c", f"{n:030d}", pad + image, len(pad)))
    start = data.draw(st.integers(0, len(changes)))
    stop = data.draw(st.integers(start, len(changes) + 2))
    want = b"".join(b"%s\t%s\t\\N\n" % (python(ch.data, ch.row_at), ch.position.encode()) for ch in changes[start:stop])
    assert lines(changes, start, stop) == want
    last = min(stop, len(changes)) - 1
    if last >= start:
        changes[last] = changes[last]._replace(data=changes[last].data[:changes[last].row_at])
        with pytest.raises(ValueError):
            lines(changes, start, stop)
