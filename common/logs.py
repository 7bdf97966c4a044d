"""Logging for the processes of the project (the ``cdc`` command, the merge job's driver).

Every module logs to ``logging.getLogger(__name__)``, so a logger's name is its module's
(``producer.app``, ``spark_jobs.merge_job``, ...) and configuring a package configures all
of its modules.  :func:`configure` sets the one format and quiets libraries that log every
connection at INFO.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: Libraries whose INFO lines are noise here (py4j logs every gateway connection).
QUIET = ("pymysqlreplication", "py4j")


def configure(verbose: bool = False) -> None:
    """INFO (DEBUG with ``verbose``) to stderr, for the project's loggers and the rest."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=FORMAT)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
