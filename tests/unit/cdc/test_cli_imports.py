"""The CLI loads the merge side's libraries only for the commands that run it: a `cdc produce`
(or `cdc snapshot`, `cdc status`) process carries no Spark, pyarrow, numpy or PostgreSQL client
(75 MB of its memory when it did: 137 against 65 MB on importing the CLI)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

from cdc import cli

MERGE_SIDE = ("pyspark", "pyarrow", "numpy", "pandas", "psycopg", "deltalake", "pyiceberg", "duckdb", "sqlalchemy")


def test_the_cli_and_the_producer_import_nothing_of_the_merge_side():
    code = ("import json, sys; import cdc.cli, producer.app; "
            f"print(json.dumps(sorted(m for m in {MERGE_SIDE!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_cli_registers_every_section_of_the_configuration_without_the_sinks():
    """(A configuration the CLI loads is validated against every part's sections: each sink's
    settings and the routes' are registered from their light modules, the sinks not imported.)"""
    code = ("import json, sys; import cdc.cli; from common.config_sections import route_settings, sink_settings; "
            "print(json.dumps([list(sink_settings()), route_settings().__module__, "
            "sorted(m for m in sys.modules if m.startswith('spark_jobs.sinks.'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    sinks, routes, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert sinks == ["changelog", "postgres", "mysql", "delta", "iceberg"]
    assert routes == "spark_jobs.sharding.route_settings"
    sink_modules = {f"spark_jobs.sinks.{m}" for m in ("configured", "postgres", "mysql", "delta", "iceberg")}
    assert "spark_jobs.sinks.postgres_settings" in loaded and not sink_modules & set(loaded)


def test_the_imports_each_command_makes_where_it_runs_resolve():
    """(Each ``from X import Y`` inside a function of cdc/cli.py names something that is there.)"""
    tree = ast.parse(Path(cli.__file__).read_text())
    lazy = [node for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
            for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert len(lazy) >= 10
    for node in lazy:
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
