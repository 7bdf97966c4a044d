"""The peers' Java runners compiled once and kept (cdc/bench/javac.py), with the JDK's javac."""

from __future__ import annotations

import os

import pytest

from cdc.bench.javac import compiled_classes
from cdc.errors import BenchError

HELLO = "public class Hello { public static void main(String[] a) { System.out.println(\"hi\"); } }\n"


def test_a_runner_is_compiled_once_per_source_and_depends(tmp_path, monkeypatch):
    source = tmp_path / "Hello.java"
    source.write_text(HELLO)
    cache = tmp_path / "cache"
    classes = compiled_classes(source, "Hello", "", cache, "hello", depends=b"jars-1")
    assert (classes / "Hello.class").exists() and classes.parent == cache and classes.name.startswith("hello-")
    assert os.listdir(cache) == [classes.name]  # (no compile directory left behind)
    # Compiled already: found without javac.
    monkeypatch.setenv("PATH", str(tmp_path / "no-jdk"))
    assert compiled_classes(source, "Hello", "", cache, "hello", depends=b"jars-1") == classes
    # Other jars, or another source text: compiled again (here: asks for javac).
    with pytest.raises(BenchError, match="javac is not installed"):
        compiled_classes(source, "Hello", "", cache, "hello", depends=b"jars-2")
    source.write_text(HELLO.replace("hi", "hello"))
    with pytest.raises(BenchError, match="javac is not installed"):
        compiled_classes(source, "Hello", "", cache, "hello", depends=b"jars-1")


def test_a_runner_that_does_not_compile_is_refused_with_javacs_words(tmp_path):
    source = tmp_path / "Broken.java"
    source.write_text("public class Broken { int x = ; }\n")
    with pytest.raises(BenchError, match=r"(?s)compiling Broken.java failed:.*Broken.java:1: error"):
        compiled_classes(source, "Broken", "", tmp_path / "cache", "broken")
    assert os.listdir(tmp_path / "cache") == []  # nothing half-made kept
