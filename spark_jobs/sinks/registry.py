"""The sinks there are: each sink module registers its class under its configuration
section's name (``sinks.<name>``), and the merge job builds the enabled ones from the
configuration (:mod:`spark_jobs.sinks.configured`) without naming any.

Adding a sink: one module that defines a :class:`~spark_jobs.sinks.interface.RowSink` or
:class:`~spark_jobs.sinks.interface.BatchSink` decorated with ``@register_sink("<name>")``
(imported by :mod:`spark_jobs.sinks.configured`), and one light module ``<name>_settings``
beside it (pydantic and common only) declaring the section ``sinks.<name>`` (with
``enabled``) on :class:`common.config.Section`, decorated with
``@register_sink_settings("<name>")`` (:mod:`common.config_sections`) and imported by
:mod:`spark_jobs.sections`; nothing in ``common`` changes (docs/DESIGN.md, "Sinks").

A section with an ``engine`` setting (the lake sinks': ``driver`` or ``spark``) is read by its
sink's ``from_config``, which passes that engine to the format (:mod:`spark_jobs.sinks.lake_sink`).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from spark_jobs.errors import SinkError
from spark_jobs.sinks.interface import Sink

S = TypeVar("S", bound=type[Sink])

_SINKS: dict[str, type[Sink]] = {}


def register_sink(name: str) -> Callable[[S], S]:
    """Register the decorated sink class under configuration section ``name``."""
    def register(cls: S) -> S:
        if not cls.KIND:
            raise SinkError(f"sink {cls.__name__}: neither a RowSink nor a BatchSink")
        known = _SINKS.get(name)
        if known is not None and known is not cls:
            raise SinkError(f"two sinks registered as {name!r}: {known.__name__} and {cls.__name__}")
        cls.NAME = name
        _SINKS[name] = cls
        return cls
    return register


def registered_sinks() -> dict[str, type[Sink]]:
    """Every registered sink class by its configuration section's name."""
    return dict(_SINKS)
