"""What a merge task needs to know (plain data: shipped with the task), and the table
sinks it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.config import SinksConfig
from spark_jobs.task import worker_cache
from spark_jobs.sinks.configured import build_sinks, configured_sinks


@dataclass
class MergeSettings:
    """What an executor needs (plain data: shipped with the task)."""

    bootstrap: str
    prefix: str
    client: dict = field(default_factory=dict)
    registry_url: str | None = None
    registry_client: dict = field(default_factory=dict)  # (kafka.schema_registry_client)
    changelog: bool = True
    sinks: SinksConfig = field(default_factory=SinksConfig)  # the table sinks (configured_sinks)
    dlq_topic: str = ""
    # Table routing (docs/sharding.md): the source's name (the ``__source`` origin value),
    # the configured routes, and per batch each route's target (``{"schema", "key"}`` by
    # route name, :func:`spark_jobs.sharding.target.target_schema`, planned on the driver).
    source_name: str = ""
    routes: list = field(default_factory=list)
    targets: dict = field(default_factory=dict)
    clean_prefix: str = ""  # kafka.topic_prefix: the merged clean topics' (default: ``prefix``)
    # kafka.input: debezium: the table topics are Debezium's (positions from ``source`` and the
    # Kafka offset, :mod:`contract.debezium`; no markers: its snapshot rows come deduplicated)
    debezium: bool = False
    # Per batch, ``{topic: (partition count, key fingerprint)}`` of the table topics whose
    # tasks may write PostgreSQL under their partition's turn
    # (:func:`spark_jobs.planning.partition_turns.partition_turn_keys`, :func:`owns_keys`); a topic absent:
    # the table's whole turn.
    key_partitions: dict = field(default_factory=dict)
    # The micro-batch's id: what a batch sink stages its parts under (its commit, on the
    # driver, is idempotent by it); -1: not known (a task run outside a batch).
    batch_id: int = -1
    # The batch sinks' application id (the job's checkpoint: a batch sink's commit of a batch is
    # recognised by it and the batch id, :func:`spark_jobs.sinks.lake_sink.app_id`) and the
    # pipeline owning the lake tables (``cdc-merge:<kafka.topic_prefix>``).
    app_id: str = ""
    owner: str = ""


def sinks_of(s: MergeSettings) -> list[tuple[str, Any]]:
    """The table sinks of the job, built once per worker process; in a batch merged in the
    driver (:func:`~spark_jobs.task.worker_cache.namespace`), once per job there: two
    sources' jobs merge side by side in one driver and must not share a connection."""
    if worker_cache.current_namespace():
        return worker_cache.cached(("sinks", repr(s.sinks)), lambda: build_sinks(s.sinks))
    return configured_sinks(s.sinks)
