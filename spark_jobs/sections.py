"""Every configuration section the merge side declares for itself, registered by importing
this module (:mod:`common.config_sections`): the clean changelog's and each sink's section
of ``sinks``, in the order the sinks are built, and the routes' settings.  Light (pydantic
and common only: the ``cdc`` command imports it, and `cdc produce` carries no Spark).

Adding a sink adds its settings module here.
"""

from __future__ import annotations

from spark_jobs import clean_changelog_settings
from spark_jobs.sharding import route_settings
# (the sinks' sections register as imported, and the sinks are built in that order: not sorted)
from spark_jobs.sinks import postgres_settings  # isort: skip
from spark_jobs.sinks import mysql_settings  # isort: skip
from spark_jobs.sinks import delta_settings  # isort: skip
from spark_jobs.sinks import iceberg_settings  # isort: skip

#: The modules, each registering its sections as imported (the sinks' in the order they are built).
MODULES = (clean_changelog_settings, route_settings, postgres_settings, mysql_settings, delta_settings,
           iceberg_settings)
