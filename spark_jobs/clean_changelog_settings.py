"""The clean changelog's settings, ``sinks.changelog`` (:mod:`spark_jobs.clean_changelog`):
declared and registered here, light (pydantic and common only)."""

from __future__ import annotations

from common.config import Section
from common.config_sections import register_sink_settings


@register_sink_settings("changelog")
class ChangelogSinkConfig(Section):
    """``sinks.changelog``: the clean changelog topics ``<prefix>.clean.<db>.<table>``."""

    enabled: bool = True
