"""Fixtures of merge_partition's tests without Kafka."""

from __future__ import annotations

import pytest

from spark_jobs.task import partition_merge


@pytest.fixture
def dead(monkeypatch) -> list:
    """The dead letters merge_partition would send, captured instead of produced."""
    out: list = []
    monkeypatch.setattr(partition_merge, "dead_letters", lambda s, topic, partition, d: out.extend(d))
    return out
