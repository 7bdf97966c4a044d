"""The operator tools: the ``cdc`` command and what it runs (docs/DESIGN.md, "Where things live").

The tools load whole configurations: every section the parts declare for themselves (each
sink's, the routes') is registered as this package is imported, before any is loaded.
"""

from spark_jobs import sections  # noqa: F401 - registers the merge side's sections (light: no Spark)
