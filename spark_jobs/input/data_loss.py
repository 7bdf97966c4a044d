"""Lost Kafka history, as a reader of Kafka sees it: pure, I/O-free.

A reader that keeps offsets (Spark's checkpoint, the merge job's read position in the
markers topic) finds records gone when Kafka lost history: a topic or partition deleted,
a topic deleted and created again (its topic id changed), records removed by retention
before they were read, or a checkpoint pointed at another cluster (its offsets past the
end of the log).  :func:`detect_data_loss` tells which partitions lost what;
:func:`apply_data_loss` moves them to where reading carries on; :func:`data_loss_message`
says it to a user.  The ``cdc-kafka`` source and the merge job use the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

TP = tuple[str, int]

_LOSS_REASONS = {
    "deleted": "the topic or partition was deleted: the records the query had not read are gone",
    "recreated": "the topic was deleted and created again (its topic id changed): the records of the old topic "
                 "the query had not read are gone, and the new topic's offsets start over",
    "past-end": "the checkpoint's offset is past the end of the log: the topic was deleted and created again, "
                "or the checkpoint belongs to another Kafka cluster",
    "truncated": "records below the broker's earliest offset were removed (retention, or records deleted) "
                 "before the query read them",
    "vanished": "records the batch was planned to read were removed while it ran (the topic was deleted or "
                "created again)",
}


@dataclass(frozen=True)
class DataLoss:
    """Records of ``topic``/``partition`` the query had not read and Kafka no longer holds."""

    topic: str
    partition: int
    checkpoint: int            # the offset the query was to read next
    earliest: int | None       # the broker's offsets now (None: the partition is gone)
    latest: int | None
    kind: str                  # a key of _LOSS_REASONS
    skipped: int | None        # records known to be skipped (None: how many is unknown)
    resume: int | None         # where reading carries on with failOnDataLoss=false (None: dropped)
    until: int | None = None   # "vanished": the end of the range the batch was planned to read

    def describe(self) -> str:
        broker = "gone from the broker" if self.earliest is None else \
            f"broker earliest offset {self.earliest}, latest {self.latest}"
        skipped = "" if self.skipped is None else f" ({self.skipped:,} records skipped)"
        where = f"planned range [{self.checkpoint}, {self.until})" if self.until is not None else \
            f"checkpoint offset {self.checkpoint}"
        return f"{self.topic} partition {self.partition}: {where}, {broker}: {_LOSS_REASONS[self.kind]}{skipped}"

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "checkpoint": self.checkpoint,
                "earliest": self.earliest, "latest": self.latest, "kind": self.kind, "skipped": self.skipped,
                "resume": self.resume, "until": self.until}

    @classmethod
    def from_json(cls, d: Mapping) -> "DataLoss":
        return cls(str(d["topic"]), int(d["partition"]), int(d["checkpoint"]), d.get("earliest"), d.get("latest"),
                   str(d["kind"]), d.get("skipped"), d.get("resume"), d.get("until"))


def detect_data_loss(start: Mapping[TP, int], latest: Mapping[TP, tuple[int, int]],
                     start_ids: Mapping[str, str] | None = None,
                     ids: Mapping[str, str] | None = None) -> list[DataLoss]:
    """The partitions of ``start`` (the offsets the query reads next) whose records from
    there on are not all in Kafka any more, given ``latest`` (``{tp: (low, end)}`` now)
    and the topic ids recorded with ``start`` and found now (either may be empty: ids are
    compared only where both are known).

    A recreated topic whose new log already reaches past the old offset is only seen by
    its topic id; without ids it cannot be told from the old topic (Spark's own source has
    the same blind spot)."""
    out: list[DataLoss] = []
    start_ids, ids = start_ids or {}, ids or {}
    for (topic, part), off in sorted(start.items()):
        if (topic, part) not in latest:
            out.append(DataLoss(topic, part, off, None, None, "deleted", None, None))
            continue
        low, end = latest[(topic, part)]
        old_id, new_id = start_ids.get(topic), ids.get(topic)
        if old_id and new_id and old_id != new_id:
            out.append(DataLoss(topic, part, off, low, end, "recreated", None, low))
        elif off > end:
            out.append(DataLoss(topic, part, off, low, end, "past-end", None, low))
        elif off < low:
            out.append(DataLoss(topic, part, off, low, end, "truncated", low - off, low))
    return out


def apply_data_loss(start: Mapping[TP, int], losses: Sequence[DataLoss]) -> dict[TP, int]:
    """``start`` with every lost partition moved to where reading carries on (dropped when
    the partition is gone)."""
    out = dict(start)
    for x in losses:
        if x.resume is None:
            out.pop((x.topic, x.partition), None)
        else:
            out[(x.topic, x.partition)] = x.resume
    return out


def data_loss_message(losses: Sequence[DataLoss], setting: str = "failOnDataLoss=true") -> str:
    """The message of a query stopped for data loss (by ``setting``): what was lost, and
    what to do."""
    lines = [f"Kafka no longer holds records the query had not read ({setting}):"]
    lines += [f"  - {x.describe()}" for x in losses]
    lines.append("The changes in those records are missing downstream. To recover, publish the affected tables "
                 "again (a snapshot: cdc snapshot DB.TABLE --delete-missing), then run the query once with "
                 "failOnDataLoss=false (cdc merge: spark.fail_on_data_loss: false, or "
                 "CDC__SPARK__FAIL_ON_DATA_LOSS=false) to carry on from what Kafka holds now; or delete the "
                 "checkpoint to start again from the earliest offsets.")
    return "\n".join(lines)
