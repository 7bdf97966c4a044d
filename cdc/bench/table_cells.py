"""The cells of the benchmarks' Markdown tables: a row, a figure or a ratio with the rounds'
min-max beside it (:func:`cdc.bench.race_rounds.combine_rounds` gives the medians and spreads)."""

from __future__ import annotations

from typing import Any

__all__ = ["figure", "ratio", "row", "with_range"]


def row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def with_range(value: float | None, lo_hi, fmt: str) -> str:
    """``value`` in ``fmt``, with ``lo_hi`` beside it where the two differ in that format; ``-`` for None."""
    if value is None:
        return "-"
    if lo_hi and format(lo_hi[0], fmt) != format(lo_hi[1], fmt):
        return f"{format(value, fmt)} ({format(lo_hi[0], fmt)}-{format(lo_hi[1], fmt)})"
    return format(value, fmt)


def figure(x: dict, key: str, name: str, fmt: str = ",.0f") -> str:
    """Run ``key``'s figure ``name``: its median over the rounds, with the rounds' min-max beside
    it when they differ (``x["spread"]``)."""
    return with_range((x.get(key) or {}).get(name), ((x.get("spread") or {}).get(key) or {}).get(name), fmt)


def ratio(x: dict, name: str) -> str:
    """A ratio: the median of the rounds' own ratios, with their min-max."""
    return with_range((x.get("ratios") or {}).get(name), (x.get("ratio_spread") or {}).get(name), ".2f")
