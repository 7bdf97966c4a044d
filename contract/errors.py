"""Errors of the event contract: records that cannot be framed or read, signals that
cannot be acted on."""

from __future__ import annotations

from common.errors import CDCError


class SerdeError(CDCError):
    """A record could not be encoded or decoded (the message names why)."""


class BadSignal(CDCError, ValueError):
    """A signal row that cannot be acted on; the message names the reason."""

    def __init__(self, signal_id: str, reason: str) -> None:
        super().__init__(f"signal {signal_id!r}: {reason}")
        self.signal_id = signal_id
        self.reason = reason


class GtidError(CDCError, ValueError):
    """Text that is not a GTID or a GTID set of either flavour (MariaDB, MySQL)."""


class NotCompiled(CDCError):
    """A writer schema :func:`contract.codecs.avro_decoder.compile_decoder` leaves to fastavro
    (a logical type fastavro converts to dates and times, a recursive schema)."""


class RuleError(CDCError, ValueError):
    """A conversion rule (contract.conversion_rules) uses what its C translation does not take."""
