"""The versions of the libraries whose private layouts a fast path reads, as tested.

No fast path reaches past a library's public API now (issue 56 lists what did), so
:data:`TESTED` is empty: the table reads' rows come from the project's own connection
(``common/sql/row_reads.py`` over ``common/sql/wire.py``; pymysql, the reference, is used
through its public API only), the binlog reader has a client of its own
(``producer/binlog/binlog_stream.py``; python-mysql-replication is read through its public
API only, ``producer/binlog/library_reader.py``), ``producer/_native_producer.c`` drives a
librdkafka handle of its own through librdkafka's public API, and the lake sinks' Iceberg
driver engine writes its data files with pyiceberg's public ``write_file`` and maps column
types with ``spark_jobs/sinks/lake_types.py``, ``spark_jobs/sinks/iceberg_files.py`` (it
imported ``_dataframe_to_data_files`` and ``_ConvertToIceberg`` before).
``tests/unit/common/test_tested_versions.py`` checks that no code imports a private name of
pymysql's, pyiceberg's or delta-rs's.  A fast path that had to read a library's privates
again would be listed here, with its range.

Each is used only with a version of its library in :data:`TESTED` (pyproject.toml pins the
same ranges); with any other, :func:`tested` says no once, with a WARNING naming the version,
the range and what takes the plain path (the library's public API: the same records, slower).
Never a crash.
"""

from __future__ import annotations

import functools
import logging
from importlib import metadata

log = logging.getLogger(__name__)

#: distribution -> (lowest, highest) (major, minor) tested, both included (pyproject.toml: the same)
TESTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}

_warned: set[str] = set()


@functools.cache
def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None: not installed); read once."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def in_range(dist: str, version: str | None) -> bool:
    """Whether ``version`` of ``dist`` is in its tested range (a version that is not
    ``major.minor...`` is not)."""
    if version is None:
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    low, high = TESTED[dist]
    return low <= (major, minor) <= high


def tested(dist: str, what: str) -> bool:
    """Whether the installed ``dist`` is a tested version; if not, a WARNING (once per
    distribution) that ``what`` takes the plain path."""
    version = installed_version(dist)
    if in_range(dist, version):
        return True
    if dist not in _warned:
        _warned.add(dist)
        low, high = TESTED[dist]
        log.warning("%s %s is outside the versions tested (%d.%d to %d.%d): %s takes the plain path (its public "
                    "API: the same records, slower)", dist, version or "(not installed)", *low, *high, what)
    return False
