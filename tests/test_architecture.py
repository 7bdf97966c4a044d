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
  what it overrides, and uses the rest through public APIs), nor reaches a private attribute
  of one: on a name its imports bind (or a value made from one), or by a name known as a
  library's private (:data:`LIBRARY_PRIVATES`), whatever holds it.
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
LAZY_MODULES = {"spark_jobs.spark_session", "spark_jobs.input.kafka_source"}
MAX_FUNCTION_IMPORTS = 20
#: The CLI's commands of the merge side, imported by cdc/cli.py in the commands that run them (they
#: load Spark, pyarrow and PostgreSQL's client: `cdc produce` does not; tests/unit/cdc/test_cli_imports.py).
CLI_COMMAND_MODULES = {"cdc.chaos", "cdc.demo", "cdc.demo_shards", "cdc.lake", "cdc.verify", "cdc.bench.merge",
                       "cdc.bench.peers_race", "cdc.bench.peers_report", "cdc.bench.report", "cdc.bench.lake_cadence",
                       "cdc.bench.sink_race", "cdc.bench.soak", "cdc.bench.latency_breakdown",
                       "spark_jobs.planning.data_loss_guard", "spark_jobs.merge_job"}


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


MAX_CLASS_LINES, MAX_FUNCTION_LINES = 300, 80
#: Functions and classes past the size rule for now, each with why it is not split yet (an
#: entry whose code is back within the rule is refused too: delete it).
SIZE_EXCEPTIONS: dict[str, str] = {}


def _sized_files():
    """Every Python file of the project's own code: its packages, scripts/ and the files at the
    root (setup.py); not the tests."""
    for pkg in (*PACKAGES, "scripts"):
        yield from sorted((ROOT / pkg).rglob("*.py"))
    yield from sorted(ROOT.glob("*.py"))


def oversized(tree: ast.Module, where: str) -> list[tuple[str, str]]:
    """(``<file> <name>``, what) for each class over :data:`MAX_CLASS_LINES` and function or
    method (nested ones too) over :data:`MAX_FUNCTION_LINES` in ``tree``, counted from its
    ``def``/``class`` line to its last line."""
    over = []
    for node in ast.walk(tree):
        limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
                 MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
        lines = node.end_lineno - node.lineno + 1 if limit is not None else 0
        if limit is not None and lines > limit:
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            over.append((f"{where} {node.name}", f"{where}:{node.lineno} {kind} {node.name}: {lines} lines "
                                                 f"(at most {limit})"))
    return over


def test_no_class_over_300_lines_and_no_function_over_80_anywhere():
    """Issue 38's size figures, for the whole tree since issue 71 (the operator tools in cdc/
    and the scripts too, not the tests): a class or function past them holds more than one
    job; split it by responsibility, a helper per step."""
    over, found = [], set()
    for path in _sized_files():
        for key, what in oversized(ast.parse(path.read_text(), str(path)), str(path.relative_to(ROOT))):
            found.add(key)
            if key not in SIZE_EXCEPTIONS:
                over.append(what)
    assert not over, "over the size rule:\n" + "\n".join(over)
    stale = sorted(set(SIZE_EXCEPTIONS) - found)
    assert not stale, f"within the size rule now: delete their SIZE_EXCEPTIONS entries: {stale}"


def test_the_size_check_counts_functions_methods_and_classes():
    def body(n: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))

    assert oversized(ast.parse("def f():\n" + body(79, "    ")), "m.py") == []  # 80 lines with its def
    assert [k for k, _ in oversized(ast.parse("def f():\n" + body(80, "    ")), "m.py")] == ["m.py f"]
    method = "class C:\n    def g(self):\n" + body(80, "        ")
    assert [k for k, _ in oversized(ast.parse(method), "m.py")] == ["m.py g"]
    assert oversized(ast.parse("class D:\n" + body(299, "    ")), "m.py") == []
    assert [k for k, _ in oversized(ast.parse("class D:\n" + body(300, "    ")), "m.py")] == ["m.py D"]


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


#: Private attributes of the libraries the project uses, found whatever the object that holds
#: them (its type is not known statically: a session from ``build_session``, an engine, a
#: connection), and also refused as the name of a function or keyword (a stand-in providing
#: a library's private hook).  The project's own attributes of the same names (``_sock``,
#: ``_rfile``, ``_table``) are why those are not listed.
LIBRARY_PRIVATES = {
    # PySpark: the Py4J handles of the JVM side, the sessions' and contexts' registries
    "_jvm", "_jsc", "_jsparkSession", "_jconf", "_jdf", "_jcol", "_jreader", "_jwrite", "_jsq", "_gateway",
    "_active_spark_context", "_instantiatedSession", "_activeSession",
    # Py4J
    "_gateway_client", "_target_id",
    # pydbzengine: the JVM's start and the Java engine's building
    "_ensure_jvm_started", "_build_engine", "_resolve_format",
    # python-mysql-replication: its stream's connections and the hook its events call on them
    "_get_dbms", "_ctl_connection", "_stream_connection", "_ctl_connection_settings", "_fetch_rows",
    "_read_column_data", "_read_table_id",
    # pymysql: the connection's packet layer
    "_read_packet", "_write_bytes", "_next_seq_id", "_read_ok_packet", "_execute_command", "_read_query_result",
}


def _documented_privates() -> dict[str, set[str]]:
    """Names with a leading underscore that a library documents as public: confluent-kafka's
    local error codes (``KafkaError._PARTITION_EOF``: librdkafka's ``RD_KAFKA_RESP_ERR__...``),
    from the table of constants in ``KafkaError``'s own documentation."""
    from confluent_kafka import KafkaError

    return {"KafkaError": set(re.findall(r"^\| (_[A-Z0-9_]+) ", KafkaError.__doc__ or "", re.M))}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.AST) -> str | None:
    """The name an expression's attribute / call / subscript chain starts from, if any."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript, ast.Await)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _in_scope(scope: ast.AST):
    """The nodes of ``scope`` outside its nested functions and classes (those yielded, not entered)."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def library_private_uses(tree: ast.Module, documented: dict[str, set[str]] | None = None) -> list[tuple[int, str]]:
    """(line, what) for each private attribute of another library the module reaches, as far as
    it shows without running: ``X._name`` (not a dunder) where ``X`` is a name the module's
    imports of a library outside the project and the standard library bind, or a name assigned
    (``=``, ``with ... as``, ``for``) from an expression starting from one, in the same or an
    enclosing function; any ``._name`` of :data:`LIBRARY_PRIVATES`, the same names given to
    ``getattr``/``setattr``/``hasattr``/``delattr``, or defined (``def``, a keyword argument)."""
    documented = _documented_privates() if documented is None else documented
    ours = set(PACKAGES) | {"tests"}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.asname or a.name.split(".")[0] for a in node.names
                         if a.name.split(".")[0] not in ours | set(sys.stdlib_module_names)}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and \
                (node.module or "").split(".")[0] not in ours | set(sys.stdlib_module_names):
            imported |= {a.asname or a.name for a in node.names}
    found: list[tuple[int, str]] = []

    def check(scope: ast.AST, inherited: set[str]) -> None:
        nodes = list(_in_scope(scope))
        library = set(inherited)
        while True:  # names bound to values made from a library's names, until no more
            more = set()
            for node in nodes:
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value) for t in node.targets]
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    pairs = [(node.target, node.value)]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    pairs = [(node.optional_vars, node.context_expr)]
                elif isinstance(node, (ast.For, ast.AsyncFor)):
                    pairs = [(node.target, node.iter)]
                else:
                    continue
                more |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _root(v) in library}
            if more <= library:
                break
            library |= more
        for node in nodes:
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                holder = ast.unparse(node.value)
                if node.attr in LIBRARY_PRIVATES or (_root(node.value) in library
                                                     and node.attr not in documented.get(holder, ())):
                    found.append((node.lineno, f"{holder}.{node.attr}"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                name = node.args[1].value
                if name in LIBRARY_PRIVATES or (_is_private(name) and _root(node.args[0]) in library):
                    found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {name!r})"))
            elif isinstance(node, ast.keyword) and node.arg in LIBRARY_PRIVATES:
                found.append((node.value.lineno, f"keyword {node.arg}"))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in LIBRARY_PRIVATES:
                found.append((node.lineno, f"def {node.name}"))
            if isinstance(node, _SCOPES):
                # a class body's names are not its methods'; a function's are its nested functions'
                check(node, inherited if isinstance(scope, ast.ClassDef) else library)

    check(tree, imported)
    return sorted(found)


def test_no_module_reaches_a_private_attribute_of_another_library():
    """No module of the project or its tests reaches a private attribute of a library outside
    the project and the standard library where it shows in the code (:func:`library_private_uses`;
    issue 56: PySpark's ``_jvm`` and ``_jsparkSession``, pydbzengine's ``_ensure_jvm_started``,
    a stand-in with python-mysql-replication's ``_get_dbms`` were)."""
    documented = _documented_privates()
    assert documented["KafkaError"] >= {"_PARTITION_EOF", "_UNKNOWN_TOPIC", "_TRANSPORT"}, documented
    found = []
    for pkg in (*PACKAGES, "tests"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for line, what in library_private_uses(ast.parse(path.read_text(), str(path)), documented):
                found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, found


def test_the_private_attribute_check_sees_what_it_is_for():
    """The check of :func:`library_private_uses` finds what issue 56 removed from the tests (the
    lines as they were), private attributes on names a library's import binds or values made
    from them, and lets the project's own privates and a library's documented names be."""
    def uses(code: str) -> list[str]:
        return [what for _, what in library_private_uses(ast.parse(code))]

    assert uses("def t(session):\n    jvm = session._jvm\n"
                "    conf = session._jsparkSession.sessionState().newHadoopConf()\n") == \
        ["session._jvm", "session._jsparkSession"]
    assert uses("jvm = running_session().sparkContext._jvm\n") == ["running_session().sparkContext._jvm"]
    assert uses("def main():\n    engine = DebeziumJsonEngine(properties={}, handler=None)\n"
                "    engine._ensure_jvm_started()\n") == ["engine._ensure_jvm_started"]
    assert uses("class _ControlConnection:\n    charset = 'utf8'\n\n"
                "    def _get_dbms(self) -> str:\n        return 'mysql'\n") == ["def _get_dbms"]
    assert uses("ns = SimpleNamespace(_get_dbms=lambda: 'mysql')\n") == ["keyword _get_dbms"]
    assert uses("x = getattr(conn, '_read_packet')()\n") == ["getattr(conn, '_read_packet')"]
    # on a library's names, and values made from them (in the same or an enclosing function)
    assert uses("import jpype\njpype._jpype.isStarted()\n") == ["jpype._jpype"]
    assert uses("from pyspark.sql import SparkSession\nSparkSession._instantiatedSession\n"
                "def f():\n    spark = SparkSession.builder.getOrCreate()\n    spark._sc\n"
                "    def g():\n        return spark._sc\n") == \
        ["SparkSession._instantiatedSession", "spark._sc", "spark._sc"]
    assert uses("import pymysql\nwith pymysql.connect() as conn:\n    conn._sock\n"
                "for row in pymysql.connect().cursor():\n    row._x\n") == ["conn._sock", "row._x"]
    # the project's own privates, dunders, the standard library's, documented names: not these
    assert uses("import os\nfrom common.x import thing\nclass A:\n    def f(self):\n        self._sock\n"
                "        thing._private\n        os._exit\n        type(self).__name__\n") == []
    assert uses("from confluent_kafka import KafkaError\nKafkaError._PARTITION_EOF\n") == []
    assert uses("from confluent_kafka import KafkaError\nKafkaError._NOT_A_CODE\n") == ["KafkaError._NOT_A_CODE"]
    # a class body's names are its own: a method's same name is not the library's value
    assert uses("from pydantic import Field\nclass C:\n    kafka: int = Field(1)\n"
                "    def f(self):\n        kafka = self.copy()\n        kafka._x = 1\n") == []


def _package_of(path: Path) -> str:
    """The package a module belongs to: its folder, as a dotted name (``spark_jobs.sinks``)."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def _private_definitions(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, module and class variables, and
    attributes it sets on ``self`` or ``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            if isinstance(t, ast.Name):
                names.add(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"):
                names.add(t.attr)
    return {n for n in names if _is_private(n)}


def project_private_reaches(modules: list[tuple[Path, ast.Module]]) -> list[str]:
    """Where one of the project's packages reaches a private name another package defines: a
    ``from ... import _name`` of a module of another package (a private module of its own
    package, a C extension, is its own business), or ``x._name`` on anything but ``self``,
    ``cls`` and ``super()`` where ``_name`` is defined in another package and not in its own."""
    defined: dict[str, set[str]] = {}
    for path, tree in modules:
        for name in _private_definitions(tree):
            defined.setdefault(name, set()).add(_package_of(path))
    found = []
    for path, tree in modules:
        pkg, where = _package_of(path), path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] in PACKAGES:
                target = node.module if (ROOT / node.module.replace(".", "/")).is_dir() \
                    else node.module.rpartition(".")[0]
                private = [a.name for a in node.names if _is_private(a.name)]
                if private and target != pkg:
                    found.append(f"{where}:{node.lineno}: from {node.module} import {', '.join(private)}")
            elif isinstance(node, ast.Attribute) and _is_private(node.attr):
                holder = node.value
                if isinstance(holder, ast.Name) and holder.id in ("self", "cls") or \
                        isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id == "super":
                    continue
                owners = defined.get(node.attr, set())
                if owners and pkg not in owners:
                    found.append(f"{where}:{node.lineno}: {ast.unparse(holder)}.{node.attr} "
                                 f"(defined in {', '.join(sorted(owners))})")
    return found


def test_no_package_reaches_into_another_packages_private_names():
    """What one package needs of another is public (issue 71: the benchmarks called the lake
    sinks' ``_load``, ``_sql`` and ``_create``, ``cdc route`` read the coordinator's
    ``_versions``, sharding imported the sinks' layout's ``_PRIMITIVES`` and ``_record_ns``)."""
    found = project_private_reaches(list(_modules()))
    assert not found, found


def test_the_private_names_check_sees_what_it_is_for(tmp_path):
    """The check finds a private import and a private attribute across packages, and lets a
    package's own privates, ``self``'s and ``super()``'s be."""
    sinks = ROOT / "spark_jobs" / "sinks" / "x_sink.py"
    bench = ROOT / "cdc" / "bench" / "x_bench.py"
    mods = [
        (sinks, ast.parse("_LIMIT = 3\n\nclass S:\n    def _load(self):\n        self._cache = 1\n"
                          "        return self._cache\n\n    def load(self):\n        return super()._load()\n")),
        (bench, ast.parse("from spark_jobs.sinks.x_sink import _LIMIT, S\n\ndef run(sink):\n"
                          "    return sink._load(), sink.load(), sink._mine\n\ndef _mine():\n    pass\n")),
    ]
    assert project_private_reaches(mods) == [
        "cdc/bench/x_bench.py:1: from spark_jobs.sinks.x_sink import _LIMIT",
        "cdc/bench/x_bench.py:4: sink._load (defined in spark_jobs.sinks)",
    ]


def stacked_classes(modules: list[tuple[Path, ast.Module]]) -> list[str]:
    """The project's classes that derive from more than one of the project's classes (made of
    stacked bases overriding each other's hooks, not of parts passed in)."""
    defined = {n.name for _, tree in modules for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    found = []
    for path, tree in modules:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                own = [b for b in bases if b in defined]
                if len(own) > 1:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}({', '.join(own)})")
    return found


def test_classes_are_made_of_parts_not_stacked_bases():
    """Issue 71: a class is a frame with its parts passed in (a lake sink: a format and an
    engine; a table sink: a connection, its tables and a writer; the producer's stream session:
    its start, newly added tables, schema changes and blocking snapshots, each handed the
    session), not a class of several project bases overriding each other's hooks
    (``DeltaSparkSink(SparkMerge, DeltaSparkMaintenance, DeltaSink)`` and ``StreamSession``,
    of four mixins, were)."""
    found = stacked_classes(list(_modules()))
    assert not found, found


def test_the_stacked_bases_check_sees_what_it_is_for():
    sinks = ROOT / "spark_jobs" / "sinks" / "x_sink.py"
    other = ROOT / "producer" / "x_session.py"
    code = "class A:\n    pass\n\nclass B:\n    pass\n\nclass C(A, B):\n    pass\n\nclass D(A, dict):\n    pass\n"
    assert stacked_classes([(sinks, ast.parse(code)), (other, ast.parse(code))]) == [
        "spark_jobs/sinks/x_sink.py:7: C(A, B)", "producer/x_session.py:7: C(A, B)"]
