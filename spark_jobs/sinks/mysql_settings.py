"""The MySQL/MariaDB sink's settings, ``sinks.mysql`` (:mod:`spark_jobs.sinks.mysql`):
declared and registered here, light (pydantic and common only), so that a configuration
loads without the sink's driver."""

from __future__ import annotations

from pydantic import Field, SecretStr

from common.config import Section, TlsConfig
from common.config_sections import register_sink_settings


@register_sink_settings("mysql")
class MySQLSinkConfig(Section):
    """``sinks.mysql``: the sink tables in one database of a MySQL/MariaDB server."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: SecretStr = SecretStr("")
    password_file: str = ""
    ssl: TlsConfig = Field(default_factory=TlsConfig)
    database: str = "cdc_sink"
