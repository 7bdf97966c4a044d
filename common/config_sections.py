"""The sections of the configuration that the parts reading them declare: each sink's
settings (``sinks.<name>``) beside the sink, the settings of a route (each entry of
``routes``) beside the routes, registered here as their modules are imported.
:mod:`common.config` validates each section into the model registered for it, so adding a
sink edits its own modules only, never the shared configuration::

    @register_sink_settings("postgres")
    class PostgresSinkConfig(Section):
        enabled: bool = False
        dsn: SecretStr = SecretStr("")

A check that needs the whole configuration (a route naming a source that is configured) is
registered with :func:`register_config_check` and runs when a configuration is validated.

Every section of the pipeline is registered by importing :mod:`spark_jobs.sections` (light:
pydantic and common only), which the operator tools (the ``cdc`` package) and the merge job
do; the producer reads none of them.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from pydantic import BaseModel

from common.errors import ConfigError

M = TypeVar("M", bound=type[BaseModel])
#: A check of the whole configuration (the root model, validated): raises ValueError naming the setting.
ConfigCheck = Callable[[Any], None]

_SINK_SETTINGS: dict[str, type[BaseModel]] = {}
_ROUTE_SETTINGS: dict[str, type[BaseModel]] = {}
_CHECKS: list[ConfigCheck] = []


def _register(registry: dict[str, type[BaseModel]], key: str, setting: str, model: type[BaseModel]) -> None:
    known = registry.get(key)
    if known is not None and known is not model:
        raise ConfigError(f"two settings models registered for {setting}: {known.__name__} and {model.__name__}")
    registry[key] = model


def register_sink_settings(name: str) -> Callable[[M], M]:
    """Register the decorated model as the settings of the section ``sinks.<name>``."""
    def register(model: M) -> M:
        _register(_SINK_SETTINGS, name, f"sinks.{name}", model)
        return model
    return register


def sink_settings() -> dict[str, type[BaseModel]]:
    """Every registered sink section's model by its name, in the order they registered (the
    order the sinks are built in)."""
    return dict(_SINK_SETTINGS)


def register_route_settings(model: M) -> M:
    """Register the decorated model as the settings of each entry of ``routes``."""
    _register(_ROUTE_SETTINGS, "routes", "routes", model)
    return model


def route_settings() -> type[BaseModel] | None:
    """The model of an entry of ``routes``; None when no module registered one."""
    return _ROUTE_SETTINGS.get("routes")


def register_config_check(check: ConfigCheck) -> ConfigCheck:
    """Register ``check`` to run on every configuration once its sections are validated."""
    if check not in _CHECKS:
        _CHECKS.append(check)
    return check


def config_checks() -> list[ConfigCheck]:
    """The registered checks of the whole configuration, in the order they registered."""
    return list(_CHECKS)
