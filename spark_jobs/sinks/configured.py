"""The sinks a configuration enables: the one place that builds them from ``sinks``.

Every sink module registers its class under its configuration section's name
(:mod:`spark_jobs.sinks.registry`), and its settings module the section's model
(:mod:`common.config_sections`); a sink is built for each section that is enabled, in the
order the sections registered (:mod:`spark_jobs.sections`).  The merge job names no sink:
adding one is its modules (the sink's imported here, its settings' in
:mod:`spark_jobs.sections`).

The sink objects pickle without their connections (each connects on first use), so the
merge job ships the configuration to its executors, and each Python worker builds its sinks
once and keeps them (and their connections) for the tasks it runs.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, SecretStr

from common.config import SinksConfig
from spark_jobs.errors import SinkError
from spark_jobs.sinks import delta, iceberg, mysql, postgres  # noqa: F401 - the sink modules: registered as imported
from spark_jobs.sinks.interface import Sink
from spark_jobs.sinks.registry import registered_sinks

_built: dict[tuple, list[tuple[str, Sink]]] = {}
_lock = threading.Lock()


def _sections(cfg: SinksConfig) -> list[tuple[str, type[Sink], Any]]:
    """``(name, sink class, section)`` of every registered sink, in the sections' order."""
    kinds, sections = registered_sinks(), cfg.sections()
    unset = sorted(set(kinds) - set(sections))
    if unset:
        raise SinkError(f"no settings registered for the sinks {', '.join(unset)}: their settings modules are "
                        f"imported by spark_jobs.sections")
    return [(name, kinds[name], section) for name, section in sections.items() if name in kinds]


def _plain(value: Any) -> Any:
    """A section's value in a hashable form (secrets as their values, mappings as items)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, BaseModel):  # a nested section (``ssl``)
        return tuple((k, _plain(v)) for k, v in value)
    return value


def _identity(cfg: SinksConfig) -> tuple:
    return tuple((name, tuple((k, _plain(v)) for k, v in section)) for name, _, section in _sections(cfg))


def build_sinks(cfg: SinksConfig) -> list[tuple[str, Sink]]:
    """``[(name, sink)]`` for the enabled sinks (``[("postgres", sink), ("mysql", sink)]``), new objects."""
    return [(name, kind.from_config(section)) for name, kind, section in _sections(cfg) if section.enabled]


def configured_sinks(cfg: SinksConfig) -> list[tuple[str, Sink]]:
    """:func:`build_sinks`, built once per process and configuration (the sinks keep their
    connections between calls)."""
    key = _identity(cfg)
    with _lock:
        sinks = _built.get(key)
        if sinks is None:
            sinks = _built[key] = build_sinks(cfg)
        return sinks
