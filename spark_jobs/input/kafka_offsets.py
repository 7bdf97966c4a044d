"""The ``cdc-kafka`` source's offsets and batch planning: pure, I/O-free.

Offsets are ``{"topic": {"partition": next_offset}}`` dicts (JSON-ready, canonical order),
plus ``"@ids": {"topic": "<topic id>"}`` (Kafka's topic ids, which change when a topic is
recreated) and, in a batch that skipped lost records, ``"@lost"``.  ``@`` cannot appear in
a topic name, so these keys never collide with one.  The merge job reads the same JSON
from Spark's offset log.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

from spark_jobs.input.data_loss import TP, DataLoss
from spark_jobs.errors import KafkaSourceOptionError

EARLIEST = -2  # in startingOffsets JSON and in planned ranges: the partition's first offset
LATEST = -1    # in startingOffsets JSON: the partition's end offset when the query starts

#: Keys of the offset JSON that are not topics ('@' is not allowed in a topic name).
IDS_KEY = "@ids"
LOST_KEY = "@lost"
WAKE_KEY = "@wake"
LOG_END_KEY = "@log_end"


def offsets_to_json(offsets: Mapping[TP, int], *, ids: Mapping[str, str] | None = None,
                    lost: Sequence[DataLoss] = (), wake: Mapping[TP, int] | None = None,
                    log_end: Mapping[TP, int] | None = None) -> dict[str, Any]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}`` in canonical order (topics by name,
    partitions by number), so equal offsets always serialise to the same JSON text;
    ``ids`` (topic ids of those topics) under ``"@ids"``, ``lost`` under ``"@lost"``,
    ``wake`` (the end offsets of the topics a batch wakes on, none of them read) under
    ``"@wake"`` as ``{"t|p": o}``; ``log_end`` (the logs' end offsets when the batch was
    planned) under ``"@log_end"`` as ``{"t|p": o}`` for the partitions it ends short of."""
    doc: dict[str, Any] = {}
    for (topic, part) in sorted(offsets):
        doc.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    kept_ids = {t: ids[t] for t in sorted(ids or {}) if t in doc and ids[t]}
    if kept_ids:
        doc[IDS_KEY] = kept_ids
    if lost:
        doc[LOST_KEY] = [x.to_json() for x in lost]
    if wake:
        doc[WAKE_KEY] = {f"{t}|{p}": int(wake[(t, p)]) for t, p in sorted(wake)}
    behind = {tp: int(o) for tp, o in (log_end or {}).items() if tp in offsets and int(o) > int(offsets[tp])}
    if behind:
        doc[LOG_END_KEY] = {f"{t}|{p}": behind[(t, p)] for t, p in sorted(behind)}
    return doc


def _keyed_offsets(raw: Any) -> dict[TP, int]:
    out: dict[TP, int] = {}
    if isinstance(raw, dict):
        for key, offset in raw.items():
            topic, _, part = str(key).rpartition("|")
            out[(topic, int(part))] = int(offset)
    return out


def log_end_from_json(doc: Mapping | None) -> dict[TP, int]:
    """The logs' end offsets when the batch ending at ``doc`` was planned: the batch's end
    where the batch reached it, else the end recorded under ``"@log_end"``."""
    return {**offsets_from_json(doc), **_keyed_offsets((doc or {}).get(LOG_END_KEY))}


def wake_from_json(doc: Mapping | None) -> dict[TP, int]:
    """The end offsets of the wake topics recorded in an offset JSON (``{}``: none)."""
    return _keyed_offsets((doc or {}).get(WAKE_KEY))


def offsets_from_json(doc: Mapping | None) -> dict[TP, int]:
    """Inverse of :func:`offsets_to_json` (``None`` or ``{}`` is no partition); the
    ``@`` keys are left out."""
    if not doc:
        return {}
    return offsets_from_doc({k: v for k, v in dict(doc).items() if not str(k).startswith("@")}, "offset",
                             min_offset=0)


def ids_from_json(doc: Mapping | None) -> dict[str, str]:
    """The topic ids recorded in an offset JSON (``{}`` when it has none)."""
    ids = (doc or {}).get(IDS_KEY) or {}
    return {str(t): str(i) for t, i in ids.items()} if isinstance(ids, dict) else {}


def lost_from_json(doc: Mapping | None) -> list[DataLoss]:
    """The data losses a batch's end offset records (``failOnDataLoss=false``)."""
    return [DataLoss.from_json(x) for x in (doc or {}).get(LOST_KEY) or []]


def resolve_starting_offsets(spec: Union[str, Mapping[TP, int]],
                             latest: Mapping[TP, tuple[int, int]]) -> dict[TP, int]:
    """Concrete start offsets for the partitions in ``latest`` (``{tp: (low, end)}``).

    Partitions that a JSON spec leaves out start at earliest; a JSON offset is kept as
    given (clamped into ``[low, end]`` like a consumer would be), -2/-1 become low/end.
    """
    result: dict[TP, int] = {}
    for tp, (low, end) in latest.items():
        if spec == "earliest":
            result[tp] = low
        elif spec == "latest":
            result[tp] = end
        else:
            wanted = spec.get(tp, EARLIEST)  # type: ignore[union-attr]
            if wanted == EARLIEST:
                result[tp] = low
            elif wanted == LATEST:
                result[tp] = end
            else:
                result[tp] = min(max(wanted, low), end)
    return result


def spread_limit(backlogs: Mapping[Any, int], limit: int | None) -> dict[Any, int]:
    """How many offsets each partition may advance in one batch.

    Every partition with a backlog gets at least 1 (so none starves); the rest of the
    cap is shared in proportion to the remaining backlogs by largest remainder, ties to
    the smaller key.  The total is ``min(limit, sum)`` unless more partitions have a
    backlog than ``limit`` allows (then each of them gets exactly 1).  ``None``: no cap.
    """
    shares = {k: max(0, int(b)) for k, b in backlogs.items()}
    if limit is None:
        return shares
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    pending = {k: b for k, b in shares.items() if b > 0}
    total = sum(pending.values())
    if total <= limit:
        return shares
    result = {k: (1 if b > 0 else 0) for k, b in shares.items()}
    rest = limit - len(pending)
    if rest <= 0:
        return result
    # Share ``rest`` in proportion to b - 1 (what is left after the guaranteed 1).
    weights = {k: b - 1 for k, b in pending.items()}
    wsum = sum(weights.values())  # >= rest, because total > limit
    floors = {k: rest * w // wsum for k, w in weights.items()}
    for k, f in floors.items():
        result[k] += f
    left = rest - sum(floors.values())
    order = sorted(weights, key=lambda k: (-(rest * weights[k] % wsum), _sort_key(k)))
    for k in order[:left]:
        result[k] += 1
    return result


def _sort_key(k: Any) -> Any:
    return (0, k) if isinstance(k, tuple) else (1, repr(k))


def plan_end_offsets(start: Mapping[TP, int], latest: Mapping[TP, tuple[int, int]],
                     max_offsets: int | None = None) -> dict[TP, int]:
    """The end offsets of the next batch.

    ``start`` is the previous batch's end; ``latest`` maps every partition known now to
    ``(low, end)``.  A partition that ``start`` does not have is new and starts at its
    ``low`` (earliest); a partition that disappeared keeps its offset; an end below the
    start (a recreated topic) never moves a partition backwards.  ``max_offsets`` caps
    the batch through :func:`spread_limit`.
    """
    result: dict[TP, int] = dict(start)
    first: dict[TP, int] = {}
    backlogs: dict[TP, int] = {}
    for tp, (low, end) in latest.items():
        s = start.get(tp)
        first[tp] = low if s is None else max(s, low)
        backlogs[tp] = max(0, end - first[tp])
        result[tp] = low if s is None else s
    for tp, n in spread_limit(backlogs, max_offsets).items():
        if n > 0:
            result[tp] = first[tp] + n
    return result


def offsets_from_doc(doc: Any, what: str, *, min_offset: int) -> dict[TP, int]:
    if not isinstance(doc, dict):
        raise KafkaSourceOptionError(f"{what} must be a JSON object of topics, got {doc!r}")
    result: dict[TP, int] = {}
    for topic, parts in doc.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
            raise KafkaSourceOptionError(f"{what}: topic {topic!r} must map to an object of partitions")
        for part, off in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                raise KafkaSourceOptionError(f"{what}: partition {part!r} of {topic} is not an integer") from None
            if p < 0 or str(part).strip() != str(p):
                raise KafkaSourceOptionError(f"{what}: partition {part!r} of {topic} is not a partition number")
            if isinstance(off, bool) or not isinstance(off, int) or off < min_offset:
                raise KafkaSourceOptionError(f"{what}: offset {off!r} of {topic}/{p} is not valid")
            result[(topic, p)] = off
    return result
