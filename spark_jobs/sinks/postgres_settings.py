"""The PostgreSQL sink's settings, ``sinks.postgres`` (:mod:`spark_jobs.sinks.postgres`):
declared and registered here, light (pydantic and common only), so that a configuration
loads without the sink's driver."""

from __future__ import annotations

from pydantic import SecretStr

from common.config import Section
from common.config_sections import register_sink_settings


@register_sink_settings("postgres")
class PostgresSinkConfig(Section):
    """``sinks.postgres``: the sink tables in one schema of a PostgreSQL database."""

    enabled: bool = False
    # libpq's DSN: its sslmode / sslrootcert / sslcert / sslkey are honoured (hostssl servers),
    # and its passfile keeps the password out of it.
    dsn: SecretStr = SecretStr("")
    dsn_file: str = ""
    schema_name: str = "public"
