"""The Apache Iceberg sink (``sinks.iceberg``): a :class:`~spark_jobs.sinks.lake_sink.LakeSink`
of the Iceberg format (:class:`~spark_jobs.sinks.iceberg_format.IcebergFormat`: one Iceberg
table per source table, per route target for routed shards, identifier ``<db>.<table>`` or
``<namespace>.<db>__<table>``, in a SQL catalog, data files under ``warehouse``) and the
engine the section names: ``driver`` (the default,
:class:`~spark_jobs.sinks.iceberg_driver.IcebergDriverEngine`: pyiceberg on the driver,
copy-on-write) or ``spark`` (:class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkEngine`:
Iceberg's Spark runtime in the merge job's session, merge-on-read).

Exactly once: each commit's snapshot carries the merge job's application id and batch id
(:mod:`spark_jobs.sinks.lake_sink`), so a replayed batch finds itself committed.
"""

from __future__ import annotations

from typing import Any

from spark_jobs.errors import SinkError
from spark_jobs.sinks.iceberg_driver import IcebergDriverEngine
from spark_jobs.sinks.iceberg_format import IcebergFormat
from spark_jobs.sinks.iceberg_spark import IcebergSparkEngine
from spark_jobs.sinks.lake_engine import LakeEngine
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.lake_stage import StagingArea
from spark_jobs.sinks.registry import register_sink

__all__ = ["IcebergSink"]


@register_sink("iceberg")
class IcebergSink(LakeSink):
    """Source tables as Iceberg tables of a SQL catalog, written by ``engine`` (see the module docstring)."""

    format: IcebergFormat

    @classmethod
    def from_config(cls, section: Any) -> "IcebergSink":
        """The sink of ``sinks.iceberg``."""
        return cls(section.catalog_uri.get_secret_value(), section.warehouse, engine=section.engine,
                   catalog_name=section.catalog_name, namespace=section.namespace,
                   properties={k: v.get_secret_value() for k, v in (section.properties or {}).items()},
                   staging=section.staging_path or None, soft_delete=section.soft_delete,
                   compact_every=section.compact_every, compact_min_files=section.compact_min_files,
                   retention_hours=section.retention_hours,
                   max_snapshots=section.max_snapshots, target_file_size=section.target_file_size)

    def __init__(self, catalog_uri: str, warehouse: str, *, engine: str = "driver", catalog_name: str = "cdc",
                 namespace: str = "", properties: dict[str, str] | None = None, staging: str | None = None,
                 soft_delete: bool = False, compact_every: int = 0, compact_min_files: int = 0,
                 retention_hours: int | None = None, max_snapshots: int | None = None,
                 target_file_size: int = 128 * 1024 * 1024) -> None:
        fmt = IcebergFormat(catalog_uri, warehouse, catalog_name=catalog_name, namespace=namespace,
                            properties=properties, max_snapshots=max_snapshots, target_file_size=target_file_size)
        area = StagingArea(staging or fmt.default_staging())
        writer: LakeEngine
        if engine == "spark":
            writer = IcebergSparkEngine(fmt, area, soft_delete=soft_delete)
        elif engine == "driver":
            writer = IcebergDriverEngine(fmt, area, soft_delete=soft_delete)
        else:
            raise SinkError(f"sinks.iceberg.engine {engine!r}: driver or spark")
        super().__init__(fmt, writer, compact_every=compact_every, compact_min_files=compact_min_files,
                         retention_hours=retention_hours)
