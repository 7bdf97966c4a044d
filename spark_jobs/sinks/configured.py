"""The table sinks a configuration enables: the one place that builds them from ``sinks``.

The sink objects pickle without their connections (each connects on first use), so the
merge job ships the configuration to its executors, and each Python worker builds its sinks
once and keeps them (and their connections) for the tasks it runs.
"""

from __future__ import annotations

import threading

from common.config import SinksConfig
from spark_jobs.sinks.base import TableSinkBase
from spark_jobs.sinks.mysql import MySQLSink
from spark_jobs.sinks.postgres import PostgresSink

_built: dict[tuple, list[tuple[str, TableSinkBase]]] = {}
_lock = threading.Lock()


def _identity(cfg: SinksConfig) -> tuple:
    p, m = cfg.postgres, cfg.mysql
    return ((p.enabled, p.dsn.get_secret_value(), p.schema_name),
            (m.enabled, m.host, m.port, m.user, m.password.get_secret_value(), m.database))


def build_sinks(cfg: SinksConfig) -> list[tuple[str, TableSinkBase]]:
    """``[("postgres", sink), ("mysql", sink)]`` for the enabled table sinks, new objects."""
    out: list[tuple[str, TableSinkBase]] = []
    p, m = cfg.postgres, cfg.mysql
    if p.enabled:
        out.append(("postgres", PostgresSink(p.dsn.get_secret_value(), p.schema_name)))
    if m.enabled:
        out.append(("mysql", MySQLSink(m.host, m.port, m.user, m.password.get_secret_value(), m.database)))
    return out


def configured_sinks(cfg: SinksConfig) -> list[tuple[str, TableSinkBase]]:
    """:func:`build_sinks`, built once per process and configuration (the sinks keep their
    connections between calls)."""
    key = _identity(cfg)
    with _lock:
        sinks = _built.get(key)
        if sinks is None:
            sinks = _built[key] = build_sinks(cfg)
        return sinks
