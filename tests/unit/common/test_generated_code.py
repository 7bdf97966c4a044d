"""Generated code (common.generated_code): a traceback through it shows the generated line."""

from __future__ import annotations

import linecache
import traceback

import pytest

from common import generated_code
from common.generated_code import compile_generated, eval_generated, run_generated
from common.sql.row_parser import row_parser


def _failing_frame_lines(fn, *args) -> list[str]:
    with pytest.raises(Exception) as info:
        fn(*args)
    return traceback.format_exception(info.value)


def test_a_traceback_through_generated_code_shows_the_failing_line():
    ns = run_generated("def f(x):\n    y = x + 1\n    return y / (x - x)\n", "test divider", {})
    text = "".join(_failing_frame_lines(ns["f"], 3))
    assert "<generated test divider " in text
    assert "return y / (x - x)" in text


def test_a_generated_expression_shows_its_text():
    f = eval_generated("lambda v: v['missing']", "test lookup", {})
    assert "lambda v: v['missing']" in "".join(_failing_frame_lines(f, {}))


def test_the_same_source_has_one_name_and_the_kept_sources_are_bounded(monkeypatch):
    monkeypatch.setattr(generated_code, "MAX_SOURCES", 3)
    names = [compile_generated(f"x = {n}\n", "test bounded").co_filename for n in range(5)]
    assert compile_generated("x = 4\n", "test bounded").co_filename == names[4]
    kept = [n for n in names if n in linecache.cache]
    assert kept == names[2:]


def test_the_row_parsers_code_is_readable_in_a_traceback():
    """One of the project's generated functions (the text protocol's row parser): its lines are in
    the traceback of a row it cannot read."""
    parse = row_parser([(None, None), (None, int)])
    text = "".join(_failing_frame_lines(parse, b"\x01a\x02zz"))
    assert "<generated row parser " in text
    # the generated statement that failed is shown, not only its file name
    frames = [f for f in traceback.extract_tb(pytest.raises(Exception, parse, b"\x01a\x02zz").tb)
              if f.filename.startswith("<generated row parser")]
    assert frames and frames[-1].line
