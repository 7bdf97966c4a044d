"""The Delta Lake sink (``sinks.delta``): a :class:`~spark_jobs.sinks.lake_sink.LakeSink` of
the Delta format (:class:`~spark_jobs.sinks.delta_format.DeltaFormat`: one Delta table per
source table, per route target for routed shards, at ``<path>/<db>/<table>``) and the engine
the section names: ``driver`` (the default, :class:`~spark_jobs.sinks.delta_driver.DeltaDriverEngine`:
delta-rs on the driver, copy-on-write) or ``spark``
(:class:`~spark_jobs.sinks.delta_spark.DeltaSparkEngine`: delta-spark in the merge job's
session, merge-on-read).

Exactly once: each commit carries the merge job's application transaction (app id, version
= the batch id: :mod:`spark_jobs.sinks.lake_sink`), so a replayed batch finds
``transaction_version(app) >= batch`` and commits nothing.  ``change_data_feed`` turns on
Delta's change data feed (``table_changes`` / ``load_cdf``).
"""

from __future__ import annotations

from typing import Any

from spark_jobs.errors import SinkError
from spark_jobs.sinks.delta_driver import DeltaDriverEngine
from spark_jobs.sinks.delta_format import DeltaFormat
from spark_jobs.sinks.delta_spark import DeltaSparkEngine
from spark_jobs.sinks.lake_engine import LakeEngine
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.lake_stage import StagingArea
from spark_jobs.sinks.registry import register_sink

__all__ = ["DeltaSink"]


@register_sink("delta")
class DeltaSink(LakeSink):
    """Source tables as Delta tables under ``path``, written by ``engine`` (see the module docstring)."""

    format: DeltaFormat

    @classmethod
    def from_config(cls, section: Any) -> "DeltaSink":
        """The sink of ``sinks.delta``."""
        return cls(section.path, engine=section.engine,
                   storage_options={k: v.get_secret_value() if hasattr(v, "get_secret_value") else v
                                    for k, v in (section.storage_options or {}).items()},
                   staging=section.staging_path or None, soft_delete=section.soft_delete,
                   change_data_feed=section.change_data_feed, compact_every=section.compact_every,
                   compact_min_files=section.compact_min_files, retention_hours=section.retention_hours,
                   target_file_size=section.target_file_size)

    def __init__(self, path: str, *, engine: str = "driver", storage_options: dict[str, str] | None = None,
                 staging: str | None = None, soft_delete: bool = False, change_data_feed: bool = False,
                 compact_every: int = 0, compact_min_files: int = 0, retention_hours: int | None = None,
                 target_file_size: int = 128 * 1024 * 1024) -> None:
        fmt = DeltaFormat(path, storage_options=storage_options, change_data_feed=change_data_feed,
                          target_file_size=target_file_size)
        area = StagingArea(staging or fmt.default_staging())
        writer: LakeEngine
        if engine == "spark":
            writer = DeltaSparkEngine(fmt, area, soft_delete=soft_delete, retention_hours=retention_hours)
        elif engine == "driver":
            writer = DeltaDriverEngine(fmt, area, soft_delete=soft_delete)
        else:
            raise SinkError(f"sinks.delta.engine {engine!r}: driver or spark")
        super().__init__(fmt, writer, compact_every=compact_every, compact_min_files=compact_min_files,
                         retention_hours=retention_hours)
