"""The Apache Iceberg sink's settings, ``sinks.iceberg`` (:mod:`spark_jobs.sinks.iceberg`):
declared and registered here, light (pydantic and common only), so that a configuration
loads without pyiceberg."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from common.config_sections import register_sink_settings
from spark_jobs.sinks.lake_settings import LakeSinkConfig


@register_sink_settings("iceberg")
class IcebergSinkConfig(LakeSinkConfig):
    """``sinks.iceberg``: Apache Iceberg tables through a SQL catalog (pyiceberg)."""

    # The catalog database as an SQLAlchemy URL: postgresql+psycopg://user:password@host:port/db,
    # or sqlite:////path/catalog.db for one machine.
    catalog_uri: SecretStr = SecretStr("")
    catalog_uri_file: str = ""
    catalog_name: str = "cdc"
    # Where the tables' files go: a local directory or an object-store URI.
    warehouse: str = ""
    # The namespace of every table ("": the source database's name, table = the source table's).
    namespace: str = ""
    # Passed to pyiceberg's file IO (s3.endpoint, s3.access-key-id ...).
    properties: dict[str, SecretStr] = Field(default_factory=dict)
    # With retention_hours, also expire all but the newest max_snapshots snapshots (null: no
    # cap). Each pyiceberg commit copies the table's metadata, every snapshot in it, several
    # times: keeping an hour of snapshots at a commit a second (two snapshots each) made each
    # commit slower through the hour, until the merge job fell behind (docs/lake.md).
    max_snapshots: int | None = Field(100, ge=1)

    @model_validator(mode="after")
    def _where(self) -> "IcebergSinkConfig":
        if self.enabled and not (self.catalog_uri.get_secret_value() and self.warehouse):
            raise ValueError("sinks.iceberg.catalog_uri and sinks.iceberg.warehouse must be set when the Iceberg sink "
                             "is enabled")
        return self
