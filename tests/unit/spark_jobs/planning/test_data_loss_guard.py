"""The data-loss guard's one policy: stop on lost Kafka history, or let it through to be counted."""

from __future__ import annotations

import pytest

from spark_jobs.input.data_loss import DataLoss
from spark_jobs.planning.data_loss_guard import DataLossGuard, data_loss_stop
from spark_jobs.errors import MergeDataLoss
from spark_jobs.commit.merge_state import MergeStateStore
from spark_jobs.task.settings import MergeSettings

LOST = DataLoss("cdc._markers", 0, 3, 10, 20, "truncated", 7, 10)


class _Kafka:
    """The markers topic as a fake broker holds it: ``(low, end)`` and its id."""

    def __init__(self, low_end=None, topic_id="id-1") -> None:
        self.low_end, self.topic_id = low_end, topic_id

    def offsets_now(self, tps):
        return {tp: self.low_end for tp in tps} if self.low_end else {}

    def topic_ids(self, topics):
        return {t: self.topic_id for t in topics}


def _guard(tmp_path, fail: bool, kafka=None) -> DataLossGuard:
    settings = MergeSettings(bootstrap="127.0.0.1:1", prefix="cdc")
    return DataLossGuard(kafka or _Kafka(), "cdc", tmp_path / "query", MergeStateStore(tmp_path / "state"), settings,
                         fail)


def test_losses_stop_the_job_when_told_and_are_let_through_otherwise(tmp_path, monkeypatch):
    monkeypatch.setattr(DataLossGuard, "sinks_note", lambda self, losses: "")
    with pytest.raises(MergeDataLoss) as err:
        _guard(tmp_path, True).enforce([LOST])
    assert err.value.losses == [LOST] and "cdc._markers" in str(err.value)
    assert _guard(tmp_path, False).enforce([LOST]) == [LOST]
    assert _guard(tmp_path, True).enforce([]) == []


def test_the_stop_names_the_partition_and_how_far_the_sinks_got():
    err = data_loss_stop([LOST], "How far the sinks got: ...")
    assert isinstance(err, MergeDataLoss) and err.losses == [LOST]
    assert str(err).startswith("the merge job stopped: ") and str(err).endswith("How far the sinks got: ...")


def test_the_markers_topic_is_checked_from_the_merge_states_position(tmp_path):
    guard = _guard(tmp_path, True, _Kafka((10, 20)))
    assert guard.markers_losses(12, "id-1") == []
    assert guard.markers_losses(3, "id-1")[0].kind == "truncated"  # records 3..9 are gone
    assert guard.markers_losses(12, "id-1", plan_end=25)[0].kind == "past-end"  # planned past its end
    assert guard.markers_losses(12, "id-0")[0].kind == "recreated"  # the topic was made again
    assert _guard(tmp_path, True, _Kafka(None)).markers_losses(0, None) == []  # no markers written yet
