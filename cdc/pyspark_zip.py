"""Spark's Python processes import the installed PySpark, with its bytecode: ``python -m
cdc.pyspark_zip`` (run by ``make venv`` and in the Spark image; ``--restore`` undoes it).

Spark starts its Python processes (the worker daemon and its workers, the Python data
source's planners, the streaming source runner) with ``$SPARK_HOME/python/lib/pyspark.zip``
first on their path, so they import PySpark from that zip rather than from site-packages.
Python caches no bytecode for a zip, so every such process compiled each PySpark module it
imported from source; and each task's start (``importlib.invalidate_caches()`` in
``pyspark.worker_util.setup_spark_files``) reads the zip's directory of 1,485 entries
again.  A profile of ``cdc bench merge`` (300k events, ``local[2]``) had a third of the
Python workers' samples in imports, most of them compiling from the zip; a job starts
about 20 such processes, some per micro-batch.

With pip's PySpark, ``SPARK_HOME`` is the installed package itself: the zip holds the same
modules as site-packages.  Moving it aside (to ``pyspark.zip.orig``) lets those processes
import PySpark from site-packages, compiled once.  They need an interpreter with PySpark
installed, which the merge job's workers have anyway: they import this project, which
requires it (``spark_jobs.spark_session`` points ``PYSPARK_PYTHON`` at the driver's own
interpreter).  A Spark distribution installed apart (``SPARK_HOME`` elsewhere, a cluster's
own) is left alone.  Measured (``cdc bench merge --events 300000``, one run each, same
stack): CPU per event of Spark's Python workers 36.5 µs with the zip, 26.6 without; query
start 4.9 s and 3.0 s (docs/merge-performance.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

#: Where the zip goes (``--restore`` brings it back).
ASIDE = ".orig"


def pyspark_zip() -> Path:
    """The ``pyspark.zip`` of the installed PySpark (pip's PySpark is its own ``SPARK_HOME``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pyspark is not installed in this interpreter")
    return Path(list(spec.submodule_search_locations)[0]) / "python" / "lib" / "pyspark.zip"


def set_aside(path: Path) -> str:
    """Move the zip at ``path`` aside (idempotent); what was done."""
    aside = path.with_name(path.name + ASIDE)
    if path.exists():
        os.replace(path, aside)
        return f"{path} moved to {aside.name}: Spark's Python processes import PySpark from site-packages"
    return f"{path}: already set aside" if aside.exists() else f"{path}: no such file (nothing to do)"


def restore(path: Path) -> str:
    aside = path.with_name(path.name + ASIDE)
    if aside.exists():
        os.replace(aside, path)
        return f"{path} restored"
    return f"{path}: nothing to restore"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cdc.pyspark_zip", description=__doc__.split("\n\n")[0])
    ap.add_argument("zip", nargs="?", type=Path, help="default: the installed PySpark's python/lib/pyspark.zip")
    ap.add_argument("--restore", action="store_true", help="put the zip back")
    args = ap.parse_args(argv)
    path = args.zip or pyspark_zip()
    print(restore(path) if args.restore else set_aside(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
