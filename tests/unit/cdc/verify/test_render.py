"""``cdc verify``'s table as a pipe or a log gets it (80 columns): every name whole, every
line within 80 columns; a wide terminal gets a column per figure."""

from __future__ import annotations

import io

from rich.console import Console

from cdc.verify.render import print_report
from cdc.verify.report import RowDiff, SinkResult, TableReport, VerifyReport

REPORT = VerifyReport([
    TableReport("shop.customers", ["id"], "chunked", 220000, 27, checksum="a1b2c3d4e5f6", results=[
        SinkResult("postgres", "cdc_sink.shop__customers", 220000, 220000, 27, 0, checksum="a1b2c3d4e5f6"),
        SinkResult("changelog", "cdc.clean.shop.customers", 220000, 219999, 27, 1, missing=1, checksum="ffffffff0000",
                   samples=[RowDiff("missing", {"id": 7})])]),
    TableReport("east/shop_01.order_line_items", ["id"], "whole", 1000, 1, target="shop.order_line_items",
                checksum="00001111", results=[
                    SinkResult("mysql", "cdc_sink.shop__order_line_items", 1000, 1000, 1, 0, checksum="00001111")]),
    TableReport("shop.nokey", skipped="no primary key and no source.key_columns"),
], seconds=3.2)


def _render(monkeypatch, **console) -> str:
    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    print_report(REPORT, Console(file=buf, **console))  # (not a terminal: rich's 80 columns)
    return buf.getvalue()


def test_not_a_terminal_every_name_whole_within_80_columns(monkeypatch):
    text = _render(monkeypatch)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text
    words = {w for line in lines for w in line.split()}
    for name in ("shop.customers", "cdc_sink.shop__customers", "cdc.clean.shop.customers", "shop.order_line_items",
                 "cdc_sink.shop__order_line_items", "220,000", "219,999", "a1b2c3d4", "ffffffff", "DIFFERS",
                 "equal", "skipped", "postgres", "changelog", "mysql"):
        assert name in words, f"{name} is not whole in:\n{text}"
    assert "missing in sink: id=7" in text and "1 table(s) differ (3 table(s), 3.2s)" in text


def test_a_wide_terminal_gets_a_column_per_figure(monkeypatch):
    text = _render(monkeypatch, width=200)
    row = next(line for line in text.splitlines() if "changelog" in line)
    for figure in ("shop.customers", "cdc.clean.shop.customers", "220,000 / 219,999", "a1b2c3d4 / ffffffff",
                   "1 / 27 (chunked)", "1 / 0 / 0", "DIFFERS"):
        assert figure in row, row
    assert "…" not in text
