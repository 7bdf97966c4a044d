"""The Grafana dashboard's queries and the metric names they read, and Prometheus's HTTP API
as the monitoring tests use it."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "mysql-cdc.json"

#: PromQL words that are not metric names.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
             "offset", "inf", "nan"}


def dashboard_queries(dash: dict[str, Any]) -> list[str]:
    """Every query (``expr``) of the dashboard's panels, rows' panels included."""
    out = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            out += [t["expr"] for t in p.get("targets", []) if t.get("expr")]
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers that are not functions,
    keywords, label names (in ``{}``, after ``by``/``without``/``on``/``ignoring``) or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\boffset\s+\w+", "", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue
        if m.start() > 0 and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # (the exponent or unit of a number)
        names.add(word)
    return names


def prometheus_query(url: str, expr: str) -> list[dict]:
    """The result vector of an instant query (``/api/v1/query``)."""
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def prometheus_series(url: str, name: str) -> list[dict]:
    """The series of metric ``name`` Prometheus holds (``/api/v1/series``)."""
    q = urllib.parse.urlencode({"match[]": name})
    with urllib.request.urlopen(f"{url}/api/v1/series?{q}", timeout=10) as resp:
        return json.loads(resp.read())["data"]


def prometheus_get(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as resp:
        return json.loads(resp.read())["data"]
