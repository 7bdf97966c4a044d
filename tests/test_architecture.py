"""The house's rules, checked on the code (docs/DESIGN.md, "Layers"):

* the import-linter contracts of pyproject.toml hold: the layers (tools over the
  pipeline's two ends over the event contract over the shared base, the two ends
  independent) and no import cycle between the subpackages of a package;
* project modules are imported at the top of a module, except the few that pull in
  pyspark (the ``cdc`` command and the tools must not start the JVM's Python side to
  print a status);
* every logger is named by its module, every error derives from ``CDCError``;
* docs/DESIGN.md's table of packages names modules that exist, and every subpackage;
* no module imports a private name or module of another library (issue 56: the project owns
  what it overrides, and uses the rest through public APIs).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "contract", "schemas", "producer", "spark_jobs", "cdc")
#: Project modules that may be imported inside a function: they import pyspark.
LAZY_MODULES = {"spark_jobs.spark_session", "spark_jobs.kafka_source"}
MAX_FUNCTION_IMPORTS = 20
#: The CLI's commands of the merge side, imported by cdc/cli.py in the commands that run them (they
#: load Spark, pyarrow and PostgreSQL's client: `cdc produce` does not; tests/unit/cdc/test_cli_imports.py).
CLI_COMMAND_MODULES = {"cdc.chaos", "cdc.demo", "cdc.demo_shards", "cdc.lake", "cdc.verify", "cdc.bench.merge",
                       "cdc.bench.peers_race", "cdc.bench.report", "cdc.bench.sink_race", "cdc.bench.soak",
                       "spark_jobs.data_loss_guard", "spark_jobs.merge_job"}


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


def test_import_contracts_hold():
    out = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-logo", "--no-cache"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_project_imports_inside_functions_are_only_the_heavy_ones():
    inside = []
    for path, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                mods = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                where = str(path.relative_to(ROOT))
                inside += [(f"{where}:{node.lineno}", m) for m in mods if m.split(".")[0] in PACKAGES
                           and not (where == "cdc/cli.py" and m in CLI_COMMAND_MODULES)]
    assert len(inside) <= MAX_FUNCTION_IMPORTS, inside
    assert [x for x in inside if x[1] not in LAZY_MODULES] == []


def test_loggers_are_named_by_their_module_and_errors_derive_from_cdc_error():
    literal_loggers, stray_errors = [], []
    builtin = {"Exception", "ValueError", "TypeError", "RuntimeError", "TimeoutError", "OSError", "KeyError"}
    for path, tree in _modules():
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger" and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                    and node.args[0].value.split(".")[0] in PACKAGES:
                literal_loggers.append(f"{where}:{node.lineno}")
            if isinstance(node, ast.ClassDef) and where != "common/errors.py":
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases and bases <= builtin:
                    stray_errors.append(f"{where}:{node.lineno} {node.name}")
    assert literal_loggers == [], "use logging.getLogger(__name__)"
    assert stray_errors == [], "errors derive from common.errors.CDCError (an errors module per package)"


#: Words in backticks in docs/DESIGN.md's table of packages that are not module names.
DESIGN_WORDS = {"information_schema", "source"}  # (a MySQL schema; the envelope's `source` block)


def test_the_design_document_names_modules_that_exist_and_every_subpackage():
    """docs/DESIGN.md's table of packages stays true to the tree: every module or package it
    names in backticks exists in the package of its row, and every subpackage is listed."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    table = text[text.index("| package | holds |"):text.index("Rules the suite checks")]
    missing, unlisted = [], []
    for row in table.splitlines():
        found = re.match(r"\| `(\w+)/` \|", row)
        if not found:
            continue
        pkg = ROOT / found.group(1)
        names = {p.stem for p in pkg.rglob("*.py")} | {p.name for p in pkg.rglob("*") if p.is_dir()} \
            | {p.name for p in pkg.rglob("*.c")} | {p.name for p in pkg.rglob("*.h")}
        for word in re.findall(r"`([a-z_][a-z_0-9.]*)/?`", row):
            if word.split(".")[-1] not in names and word not in names and word not in DESIGN_WORDS \
                    and word.split(".")[0] not in PACKAGES:
                missing.append(f"{found.group(1)}: {word}")
        for init in pkg.rglob("__init__.py"):
            if init.parent != pkg and f"`{init.parent.name}/`" not in row:
                unlisted.append(str(init.parent.relative_to(ROOT)))
    assert missing == [], "docs/DESIGN.md names modules that do not exist"
    assert unlisted == [], "docs/DESIGN.md does not list these packages"


SIZED_PACKAGES = ("producer", "spark_jobs", "contract", "common")
MAX_CLASS_LINES, MAX_FUNCTION_LINES = 300, 80


def test_no_class_over_300_lines_and_no_function_over_80_in_the_pipeline():
    """Issue 38's size figures, kept: a class or function past them in the pipeline's packages
    is a sign that it holds more than one job (the operator tools in cdc/ are not counted)."""
    over = []
    for pkg in SIZED_PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
                         MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
                if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: "
                                f"{node.end_lineno - node.lineno + 1} lines (at most {limit})")
    assert not over, "\n".join(over)


def test_no_module_imports_a_private_name_of_another_library():
    """No module of the project or its tests imports a name starting with ``_``, or a private
    module, of a library outside the project and the standard library (issue 56: pyiceberg's
    ``_dataframe_to_data_files`` and ``_ConvertToIceberg``, python-mysql-replication's and
    pymysql's privates were; confluent-kafka's struct was copied in C)."""
    ours = set(PACKAGES) | {"tests"}
    found = []
    for pkg in (*PACKAGES, "tests"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules, names = [node.module or ""], [a.name for a in node.names]
                elif isinstance(node, ast.Import):
                    modules, names = [a.name for a in node.names], []
                else:
                    continue
                modules = [m for m in modules if m.split(".")[0] not in ours | set(sys.stdlib_module_names)]
                if not modules:
                    continue
                private = [n for n in names if n.startswith("_")]
                private += [m for m in modules if any(p.startswith("_") for p in m.split("."))]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {', '.join(private)}")
    assert not found, found
