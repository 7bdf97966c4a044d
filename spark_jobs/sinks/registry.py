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

A section with an ``engine`` setting (the lake sinks': ``driver`` or ``spark``) picks among
classes registered for it with ``@register_sink("<name>", engine="<engine>")``; the class
registered without an engine is the section's default.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from spark_jobs.errors import SinkError
from spark_jobs.sinks.interface import Sink

S = TypeVar("S", bound=type[Sink])

_SINKS: dict[str, type[Sink]] = {}
_ENGINES: dict[tuple[str, str], type[Sink]] = {}


def register_sink(name: str, engine: str = "") -> Callable[[S], S]:
    """Register the decorated sink class under configuration section ``name`` (with
    ``engine``: the class of the section when its ``engine`` setting says so)."""
    def register(cls: S) -> S:
        if not cls.KIND:
            raise SinkError(f"sink {cls.__name__}: neither a RowSink nor a BatchSink")
        where = _ENGINES if engine else _SINKS
        slot = (name, engine) if engine else name
        known = where.get(slot)  # type: ignore[call-overload]
        if known is not None and known is not cls:
            raise SinkError(f"two sinks registered as {name!r}{f' (engine {engine})' if engine else ''}: "
                            f"{known.__name__} and {cls.__name__}")
        cls.NAME = name
        where[slot] = cls  # type: ignore[index]
        return cls
    return register


def sink_class(name: str, section: object) -> type[Sink]:
    """The class of section ``name`` as configured: the one registered for its ``engine``
    setting, if it has one and a class is registered for it, else the section's default."""
    engine = getattr(section, "engine", "")
    if engine and (name, engine) in _ENGINES:
        return _ENGINES[(name, engine)]
    return _SINKS[name]


def registered_sinks() -> dict[str, type[Sink]]:
    """Every registered sink class by its configuration section's name."""
    return dict(_SINKS)
