"""The README and docs/ stay true to the tree (issue 71): the README is a page, not a manual
(at most 300 lines); every repository path and every `cdc` command or option the README or a
doc names in backticks exists; every link into the docs finds its file and heading. What the
project once had and removed is named in docs/history.md only, which this test leaves alone."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300
HISTORY = ROOT / "docs" / "history.md"
#: The README and every doc but the history: what describes the code as it is.
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != HISTORY)]
#: Paths the docs name that are not in git: headers written by setup.py when it builds the C
#: extensions (contract/type_table.py, contract/conversion_rules_c.py), librdkafka's header.
NOT_IN_GIT = {"contract/type_codes.h", "contract/type_rules.h", "rdkafka.h"}
#: Words in backticks that look like paths and are not: a database `a__b`'s table `c` (docs/sinks.md).
NOT_PATHS = {"a__b.c"}
TOP = ("cdc", "producer", "spark_jobs", "contract", "common", "schemas", "docker", "scripts", "java", "tests")
#: A path in backticks: a .py/.c/.h file (with a line number, or a module's attribute, after
#: it), or anything under one of the tree's top folders.
PATH = re.compile(r"`((?:" + "|".join(TOP) + r")/[\w./-]*|[\w./-]+\.(?:py|c|h))(?::\d+(?:-\d+)?)?`")


def _tree() -> tuple[set[str], set[str]]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
        files = set(listed.stdout.split())
    except (OSError, subprocess.CalledProcessError):  # (no git: a tarball of the tree)
        files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts}
    folders = {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}
    return files, folders


def _exists(path: str, files: set[str], folders: set[str]) -> bool:
    path = path.rstrip("/")
    if path in NOT_IN_GIT | NOT_PATHS or path in files or path in folders:
        return True
    module = re.match(r"(.+?/\w+)\.\w+$", path)  # producer/snapshot/table_reader.read_chunk_values
    if module and f"{module.group(1)}.py" in files:
        return True
    if "/" not in path and path in {Path(f).name for f in files}:  # a file named by its name alone
        return True
    return any(f.endswith("/" + path) for f in files | folders)  # relative to its package


def test_the_readme_is_a_page_not_a_manual():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move what it holds into docs/"


def test_the_readme_and_docs_name_only_paths_that_exist():
    files, folders = _tree()
    missing = [f"{doc.relative_to(ROOT)}:{n}: `{found.group(1)}`"
               for doc in DOCS for n, line in enumerate(doc.read_text().splitlines(), 1)
               for found in PATH.finditer(line)
               if "<" not in found.group(1) and "*" not in found.group(1)
               and not _exists(found.group(1), files, folders)]
    assert missing == [], "paths that do not exist (fix the doc, or move what is gone to docs/history.md)"


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)}


def test_links_into_the_docs_find_their_file_and_heading():
    broken = []
    for doc in [*DOCS, *[HISTORY][:HISTORY.exists()], ROOT / "docker" / "README.md"]:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                name, _, anchor = target.partition("#")
                to = (doc.parent / name).resolve() if name else doc
                if not to.exists() or (anchor and to.suffix == ".md" and anchor not in _anchors(to)):
                    broken.append(f"{doc.relative_to(ROOT)}:{n}: {target}")
    assert broken == []


def _commands(text: str) -> list[str]:
    """The `cdc` command lines of a doc: in backticks, or lines of its code blocks."""
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    blocks = [line for block in re.findall(r"```\w*\n(.*?)```", text, flags=re.S) for line in block.splitlines()]
    found = []
    for span in spans + blocks:
        command = re.match(r"\s*(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?cdc\s+(.*)", span)
        if command:
            found.append(command.group(1).split("#")[0])
    return found


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_the_docs_cdc_commands_and_options_exist():
    from cdc.cli import build_parser

    top = build_parser()
    wrong = []
    for doc in [*DOCS, ROOT / "docker" / "README.md"]:
        for line in _commands(doc.read_text()):
            words = [w for w in line.replace("\\|", "|").split() if w not in ("[", "]")]
            while words[:1] == ["-c"]:
                words = words[2:]
            parsers, path = [top], ["cdc"]
            while words:
                names = re.split(r"[|/]", words[0].strip("[]"))
                if not all(name in _choices(parsers[0]) for name in names):
                    break
                parsers, path, words = [_choices(parsers[0])[name] for name in names], path + [words[0]], words[1:]
            if len(path) == 1 and words and re.fullmatch(r"[a-z][a-z-]+", words[0]):
                wrong.append(f"{doc.relative_to(ROOT)}: cdc {words[0]}")
                continue
            known = set().union(*(_options(p) for p in parsers)) | _options(top)
            for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words)):
                if option not in known:
                    wrong.append(f"{doc.relative_to(ROOT)}: {' '.join(path)} {option}")
    assert wrong == [], "commands or options the cdc command does not have"
