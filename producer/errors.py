"""Errors of the binlog producer."""

from __future__ import annotations

from pathlib import Path

from common.errors import CDCError, ConfigError, SourceError


class ProducerStopped(CDCError):
    """The producer stopped for a reason the user must act on (the message says what)."""


class KafkaHistoryLost(ProducerStopped):
    """A position kept locally is not in Kafka: Kafka lost the producer's history, and no
    recovery was asked for (``producer.lost_history`` / ``cdc produce --recover``)."""

    def __init__(self, message: str, local: dict, local_path: Path) -> None:
        super().__init__(message)
        self.local = local
        self.local_path = local_path


class BinlogPurgedError(SourceError):
    """The stored position is in a binlog file (``file``) the server no longer has;
    ``oldest``: the oldest binlog file it has (None: none)."""

    def __init__(self, message: str, file: str = "", oldest: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.oldest = oldest


class WriterError(CDCError):
    """Kafka refused or lost a write; the batch was not committed."""


class ConversionError(CDCError, ValueError):
    """A value that does not fit its column's mapped type (the message names the column)."""


class FilterRefused(CDCError, ValueError):
    """A snapshot filter (additional-conditions) that is not accepted; the message says why."""


class FilterConfigError(ConfigError):
    """A capture filter of the configuration that cannot be used (a bad regular expression)."""


class ColumnControlsError(ConfigError):
    """A column setting (``source.column_include_list``, ``column_exclude_list``,
    ``message_key_columns``, ``exclude_columns``, ``key_columns``) that cannot be used, or
    cannot apply to a table: the message names the setting."""


class OutboxError(ConfigError):
    """A ``producer.outbox`` setting (Debezium's outbox event router) that cannot be used, or
    cannot apply to the outbox table: the message names the setting."""
