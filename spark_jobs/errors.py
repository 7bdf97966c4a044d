"""Errors of the merge stage: the Kafka source, the DBLog rule, the clean changelog, the sinks."""

from __future__ import annotations

from typing import Any, Sequence

from common.errors import CDCError


class KafkaSourceError(CDCError):
    """The cdc-kafka source could not read what its plan says it must read."""


class KafkaSourceOptionError(KafkaSourceError, ValueError):
    """The options given to the cdc-kafka source are missing or inconsistent."""


class KafkaReadTimeout(KafkaSourceError, TimeoutError):
    """A task waited longer than ``kafkaConsumer.pollTimeoutMs`` without progress."""


class KafkaDataLossError(KafkaSourceError):
    """Kafka no longer holds records the query has not read (``failOnDataLoss=true``);
    ``losses``: the :class:`spark_jobs.input.data_loss.DataLoss` of each partition."""

    def __init__(self, message: str, losses: Sequence[Any]) -> None:
        super().__init__(message)
        self.losses = list(losses)


class MergeDataLoss(CDCError):
    """The merge job stopped: Kafka no longer holds records it had not read."""

    def __init__(self, message: str, losses: Sequence[Any]) -> None:
        super().__init__(message)
        self.losses = list(losses)


class DBLogError(CDCError, ValueError):
    """Input that breaks the contract of the DBLog rule."""


class UnknownWindowError(DBLogError):
    """A chunk row of a window whose OPEN marker the buffer never saw."""


class OrderingError(DBLogError):
    """A record arrived after a record of the other feed with a higher position."""


class CleanChangelogError(CDCError):
    """The clean changelog could not be written (Kafka refused or lost records)."""


class SinkError(CDCError):
    """A sink refused a table or a record (the message names them)."""


class SinkUnavailable(SinkError):
    """A sink's database cannot be reached: the batch fails and is retried, no record is
    dead-lettered."""


class LakeCommitConflict(SinkError):
    """Another writer committed to a lake table between this commit's read and its write (the
    lake sinks commit the batch again)."""


class SchemaChangeStopped(CDCError):
    """A table's schema changed and ``sinks.schema_changes`` says ``columns: stop`` for it."""


class BatchKeepsFailing(CDCError):
    """A bounded run (``cdc merge --available-now``) failed on the same batch again and again
    (:data:`spark_jobs.query_restarts.BOUNDED_RUN_ATTEMPTS` times, no batch finished between):
    it stops with the last failure instead of retrying it forever."""


class MergeStateError(CDCError):
    """The merge job's checkpoint does not hold what a micro-batch needs (its offsets)."""


class RouteError(CDCError):
    """A routing rule (``routes``) cannot be applied as configured; the message names the
    route and the tables."""


class IncompatibleShards(RouteError):
    """A route would merge tables whose keys or column types do not agree (the message
    names both tables): refused at start."""


class RouteCollision(RouteError):
    """Two different sources of rows would land in one sink table (a route's target and a
    table of that name, or same-named tables of two sources)."""


class ShardDDLConflict(RouteError):
    """A shard ran DDL the route's target cannot follow (a different type for a column, a
    key the other shards do not have in optimistic mode): the route stops."""


class ColumnMappingMismatch(RouteError):
    """A route's column mapping (``extract_source``, ``extract_schema``, ``extract_table``)
    cannot fill its column for a shard: the regular expression does not match the shard's
    name (the route is refused at start; a shard that appears later stops the job)."""
