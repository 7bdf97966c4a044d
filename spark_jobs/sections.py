"""Every configuration section the merge side declares for itself, registered by importing
this module (:mod:`common.config_sections`): the clean changelog's and each sink's section
of ``sinks``, in the order the sinks are built, and the routes' settings.  Light (pydantic
and common only: the ``cdc`` command imports it, and `cdc produce` carries no Spark).

Adding a sink adds its settings module here.
"""

from __future__ import annotations

from spark_jobs import clean_changelog_settings  # noqa: F401 - each module registers its sections as imported
from spark_jobs.sharding import route_settings  # noqa: F401
from spark_jobs.sinks import postgres_settings  # noqa: F401 - (first: the sinks are built in this order)
from spark_jobs.sinks import mysql_settings  # noqa: F401
from spark_jobs.sinks import delta_settings  # noqa: F401
from spark_jobs.sinks import iceberg_settings  # noqa: F401
