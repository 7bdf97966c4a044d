"""The sinks a configuration enables: the one place that builds them from ``sinks``.

Every sink module registers its class under its configuration section's name
(:mod:`spark_jobs.sinks.registry`), and its settings module the section's model
(:mod:`common.config_sections`); a sink is built for each section that is enabled, in the
order the sections registered (:mod:`spark_jobs.sections`).  The merge job names no sink:
adding one is its modules (the sink's imported here, its settings' in
:mod:`spark_jobs.sections`).

The sink objects pickle without their connections (each connects on first use), so the
merge job ships the configuration to its executors, and each Python worker builds its sinks
once and keeps them (and their connections) for the tasks it runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from common.config import SinksConfig
from common.jars import module_jars
from spark_jobs.errors import SinkError
# the sink modules: registered as imported
from spark_jobs.sinks import delta, iceberg, mysql, postgres  # noqa: F401
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.iceberg_spark import catalog_conf
from spark_jobs.sinks.lake_spark import DELTA_EXTENSION, ICEBERG_EXTENSION
from spark_jobs.sinks.interface import Sink
from spark_jobs.sinks.registry import registered_sinks

_built: dict[tuple, list[tuple[str, Sink]]] = {}
_lock = threading.Lock()


def _sections(cfg: SinksConfig) -> list[tuple[str, type[Sink], Any]]:
    """``(name, sink class, section)`` of every registered sink, in the sections' order."""
    kinds, sections = registered_sinks(), cfg.sections()
    unset = sorted(set(kinds) - set(sections))
    if unset:
        raise SinkError(f"no settings registered for the sinks {', '.join(unset)}: their settings modules are "
                        f"imported by spark_jobs.sections")
    return [(name, kinds[name], section) for name, section in sections.items() if name in kinds]


def _plain(value: Any) -> Any:
    """A section's value in a hashable form (secrets as their values, mappings as items)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, BaseModel):  # a nested section (``ssl``)
        return tuple((k, _plain(v)) for k, v in value)
    return value


def _identity(cfg: SinksConfig) -> tuple:
    return tuple((name, tuple((k, _plain(v)) for k, v in section)) for name, _, section in _sections(cfg))


def build_sinks(cfg: SinksConfig) -> list[tuple[str, Sink]]:
    """``[(name, sink)]`` for the enabled sinks (``[("postgres", sink), ("mysql", sink)]``), new objects."""
    return [(name, kind.from_config(section)) for name, kind, section in _sections(cfg) if section.enabled]


def configured_sinks(cfg: SinksConfig) -> list[tuple[str, Sink]]:
    """:func:`build_sinks`, built once per process and configuration (the sinks keep their
    connections between calls)."""
    key = _identity(cfg)
    with _lock:
        sinks = _built.get(key)
        if sinks is None:
            sinks = _built[key] = build_sinks(cfg)
        return sinks


def spark_lakes(cfg: SinksConfig | None) -> list[str]:
    """The lake sinks ``cfg`` turns on with the ``spark`` engine (their section names)."""
    if cfg is None:
        return []
    return [name for name, _, section in _sections(cfg)
            if section.enabled and getattr(section, "engine", "") == "spark"]


def lake_conf(cfg: SinksConfig | None) -> dict[str, str]:
    """The Spark session settings of the lake sinks ``cfg`` turns on with the ``spark`` engine
    (none without one), for ``spark_jobs.spark_session.build_session(conf=...)``: the
    connectors' jars (``make jars``: nothing fetched at run time), Delta's SQL extension and
    catalog, Iceberg's extension and its catalog (:func:`~spark_jobs.sinks.iceberg_spark.catalog_conf`), and
    Delta's settings for small, frequent commits."""
    lakes = spark_lakes(cfg)
    if not lakes:
        return {}
    out = {"spark.jars": ",".join(str(j) for j in module_jars("spark")),
           "spark.sql.extensions": f"{DELTA_EXTENSION},{ICEBERG_EXTENSION}",
           "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
           # the log's state in 2 partitions, not 50: a commit a second reads it each time
           "spark.databricks.delta.snapshotPartitions": "2",
           # a MERGE's source is a batch's staged parts, files that do not change until the
           # commit is done: read twice, not copied first (one Spark job less a MERGE)
           "spark.databricks.delta.merge.materializeSource": "none",
           # VACUUM at sinks.delta.retention_hours (1 h by default), below Delta's 7-day guard
           "spark.databricks.delta.retentionDurationCheck.enabled": "false",
           # no .crc file beside each commit's log entry (optional; the log's own cleanup leaves them)
           "spark.databricks.delta.writeChecksumFile.enabled": "false",
           # VACUUM lists a table's directory in a Spark job of this many tasks (Spark's default
           # 10,000: 44-58 s for a table of 14 files on local[2], 5.5 s with 4)
           "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
           # the lake committer's MERGEs in a pool of their own, the micro-batches first (lake_pools.xml)
           "spark.scheduler.mode": "FAIR",
           "spark.scheduler.allocation.file": str(Path(__file__).with_name("lake_pools.xml"))}
    if "iceberg" in lakes:
        out.update(catalog_conf(IcebergSink.from_config(cfg.iceberg).format))  # type: ignore[union-attr]
    return out
