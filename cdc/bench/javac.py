"""The peers' Java runners (``cdc/bench/java/*.java``) compiled once and kept.

A runner is compiled with ``javac`` against its class path into a class directory named by the
hash of its source text and what else its classes depend on (the class path, the jar
directory); a later run with the same source and jars finds the directory and compiles
nothing.  Two processes compiling at once each write a directory of their own and rename it
into place: the first wins, the second drops its copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from cdc.errors import BenchError

__all__ = ["compiled_classes"]


def compiled_classes(source: Path, main_class: str, classpath: str, cache: Path, name: str, *,
                     depends: bytes = b"") -> Path:
    """The class directory of ``source`` (whose class ``main_class`` the runner starts) compiled
    against ``classpath``: ``cache/<name>-<hash of the source and depends>``, compiled where it
    is not there yet.  Raises :class:`BenchError` without ``javac`` or when it fails."""
    out = Path(cache) / f"{name}-{hashlib.sha256(source.read_bytes() + depends).hexdigest()[:12]}"
    if (out / f"{main_class}.class").exists():
        return out
    javac = shutil.which("javac")
    if not javac:
        raise BenchError("javac is not installed (a JDK 17, e.g. Debian's openjdk-17-jdk-headless)")
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    res = subprocess.run([javac, "-nowarn", "-cp", classpath, "-d", str(tmp), str(source)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BenchError(f"compiling {source.name} failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    try:
        tmp.rename(out)
    except OSError:  # another process compiled it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / f"{main_class}.class").exists():
            raise
    return out
