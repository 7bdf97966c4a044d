"""The Delta Lake sink's settings, ``sinks.delta`` (:mod:`spark_jobs.sinks.delta`): declared
and registered here, light (pydantic and common only), so that a configuration loads
without delta-rs."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from common.config_sections import register_sink_settings
from spark_jobs.sinks.lake_settings import LakeSinkConfig


@register_sink_settings("delta")
class DeltaSinkConfig(LakeSinkConfig):
    """``sinks.delta``: Delta Lake tables at ``<path>/<db>/<table>`` (delta-rs)."""

    # A local directory or an object-store URI (s3://, gs://, az://, abfss://).
    path: str = ""
    # Passed to delta-rs as its storage options (credentials, endpoint, region ...).
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)
    # Delta's change data feed on the tables the sink creates (delta.enableChangeDataFeed).
    change_data_feed: bool = False

    @model_validator(mode="after")
    def _where(self) -> "DeltaSinkConfig":
        if self.enabled and not self.path:
            raise ValueError("sinks.delta.path must be set when the Delta sink is enabled")
        return self
