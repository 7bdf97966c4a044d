"""Errors of the operator tools."""

from __future__ import annotations

from common.errors import CDCError


class CommandError(CDCError):
    """A command that cannot do what was asked (the message says why)."""


class StackError(CDCError):
    """The embedded stack cannot start or stop a part (the message names it and its log)."""


class LoginRefused(StackError):
    """The embedded broker's guard refused a client's SASL login (the message goes back to the
    client: never a secret in it)."""


class VerifyError(CDCError):
    """``cdc verify`` cannot compare (no sink to compare with, the source unreachable)."""


class TargetUnusable(VerifyError):
    """A table cannot be compared with one target (its sink table lacks a key column); the
    message goes into that table's result for the target."""


class TargetMissing(TargetUnusable):
    """The sink table or the clean changelog topic to compare with does not exist: every
    source row counts as missing."""


class BenchError(CDCError):
    """A benchmark cannot run (the message says why)."""


class ChaosError(CDCError):
    """The chaos run cannot go on (the message says why)."""
