"""common.tested_versions: a fast path that read a library's private layout would run only with
a version tested; with another it takes the plain path, with one WARNING, never a crash.  None
does now (issue 56): the checks run on a library listed for the test."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from common import tested_versions
from common.tested_versions import TESTED, in_range, installed_version

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def listed(monkeypatch):
    """pymysql listed as if a fast path read its privates, 1.1 to 1.2."""
    monkeypatch.setitem(TESTED, "pymysql", ((1, 1), (1, 2)))


def test_no_library_is_read_past_its_public_api():
    assert TESTED == {}


def test_the_installed_versions_are_tested_ones():
    for dist in TESTED:
        assert in_range(dist, installed_version(dist)), (dist, installed_version(dist))


@pytest.mark.parametrize("dist, version, inside", [
    ("pymysql", "1.2.4", True), ("pymysql", "1.3.0", False), ("pymysql", None, False), ("pymysql", "dev", False),
    ("pymysql", "0.9.3", False),
])
def test_a_version_is_inside_its_range_or_not(listed, dist, version, inside):
    assert in_range(dist, version) is inside


def test_pyproject_pins_the_same_ranges():
    """Each range here is the one pyproject.toml's dependencies allow (below the next minor)."""
    text = (ROOT / "pyproject.toml").read_text()
    for dist, (low, high) in TESTED.items():
        m = re.search(rf'"{re.escape(dist)}(\[[^\]]*\])?>=([\d.]+),<([\d.]+)"', text, re.IGNORECASE)
        assert m, f"{dist} is not pinned to a range in pyproject.toml"
        lower = tuple(int(p) for p in m.group(2).split(".")[:2])
        upper = tuple(int(p) for p in m.group(3).split("."))
        assert lower == low and upper == (high[0], high[1] + 1), (dist, m.group(0))


@pytest.fixture
def another_pymysql(listed, monkeypatch):
    """pymysql as a version outside the range (the warning not said yet)."""
    monkeypatch.setattr(tested_versions, "installed_version",
                        lambda dist: "9.0.0" if dist == "pymysql" else installed_version(dist))
    monkeypatch.setattr(tested_versions, "_warned", set())


def test_another_version_is_warned_of_once_and_takes_the_plain_path(another_pymysql, caplog):
    caplog.set_level(logging.WARNING, logger="common.tested_versions")
    assert not tested_versions.tested("pymysql", "the thing")
    assert not tested_versions.tested("pymysql", "the thing")
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["pymysql 9.0.0 is outside the versions tested (1.1 to 1.2): the thing takes the plain path "
                        "(its public API: the same records, slower)"]


#: The libraries read through their public API only (not in TESTED: no version check needed).
PUBLIC_ONLY = ("pymysql", "pyiceberg", "deltalake")


def test_no_part_imports_a_private_name_of_the_libraries_it_reads_publicly():
    """No part (the lake sinks' driver engine, the table reads...) imports a name of pymysql's,
    pyiceberg's or delta-rs's that starts with ``_``, nor a private module of theirs (issue 56:
    pyiceberg's ``_dataframe_to_data_files`` and ``_ConvertToIceberg`` were; the table reads'
    row parser read pymysql's results through ``MySQLResult``'s private methods)."""
    import ast
    found = []
    for sub in ("spark_jobs", "cdc", "common", "producer", "contract"):
        for path in (ROOT / sub).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PUBLIC_ONLY:
                    modules, names = [node.module], [a.name for a in node.names]
                elif isinstance(node, ast.Import):
                    modules, names = [a.name for a in node.names if a.name.split(".")[0] in PUBLIC_ONLY], []
                else:
                    continue
                private = [n for n in names if n.startswith("_")]
                private += [m for m in modules if any(p.startswith("_") for p in m.split("."))]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(private)}")
    assert not found, found
