"""The pure parts of spark_jobs.sinks.copy_text (the lines against PostgreSQL itself are in
tests/integration/spark_jobs/test_sinks.py)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.errors import NotCompiled
from spark_jobs.sinks.copy_text import compile_copy_encoder, copy_escape, date_text, stage_column
from spark_jobs.sinks.layout import SinkColumn

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
