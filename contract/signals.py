"""Signals: rows of the signal table, parsed and checked (Debezium's vocabulary).

``execute-snapshot``  data: {"data-collections": ["db.t", "db\\.line_.*"], "type": "incremental",
                             "additional-conditions": [{"data-collection": "db.t", "filter": "..."}],
                             "surrogate-key": "col", "delete-missing": true}
                      ``"type": "blocking"`` (Debezium's blocking snapshot: the stream pauses while
                      the tables are read whole; each filter a full ``SELECT * FROM db.t WHERE ...``
                      or the condition alone; no ``delete-missing``).
                      ``delete-missing`` (ours, not Debezium's): once a table is read, the
                      sinks delete the rows it did not find (deleted while changes were lost).
``stop-snapshot``     data: {"data-collections": [...]} (absent or empty: all), "type": "incremental"
``pause-snapshot``, ``resume-snapshot``: no data needed
``log``               data: {"message": "..."}
``snapshot-window-open`` / ``snapshot-window-close``: the producer's own chunk markers.

Two channels bring user signals (``source.signal_channels``): rows inserted into the
signal table (``source``), and records of ``<prefix>._signals`` keyed by the producer's
name (``kafka``), whose value is the JSON of a row, ``{"id": ..., "type": ..., "data":
{...}}`` (``data`` an object, or a string holding one as in the table; no ``id``: the
record's offset, ``kafka-<offset>``).  Window markers only come through the table.

A malformed signal raises :class:`BadSignal` with the reason; the caller reports it
(notification + log line) and keeps streaming.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from common.sql.quoting import quote_table
from contract.errors import BadSignal
from contract.topics import signals_topic

WINDOW_OPEN = "snapshot-window-open"
WINDOW_CLOSE = "snapshot-window-close"
USER_TYPES = ("execute-snapshot", "stop-snapshot", "pause-snapshot", "resume-snapshot", "log")


@dataclass(frozen=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def data_collections(self) -> list[str]:
        return list(self.data.get("data-collections") or [])

    @property
    def conditions(self) -> dict[str, str]:
        return {c["data-collection"]: c["filter"] for c in self.data.get("additional-conditions") or []}

    @property
    def surrogate_key(self) -> str | None:
        return self.data.get("surrogate-key")

    @property
    def delete_missing(self) -> bool:
        return self.data.get("delete-missing") is True

    @property
    def blocking(self) -> bool:
        """An ``execute-snapshot`` of ``"type": "blocking"`` (Debezium's blocking snapshot)."""
        return str(self.data.get("type") or "incremental").lower() == "blocking"


def is_window_marker(row: dict[str, Any]) -> bool:
    """Whether a signal table row is one of the producer's own chunk window markers (not a
    user signal)."""
    stype = row.get("type")
    return isinstance(stype, str) and stype.strip().lower() in (WINDOW_OPEN, WINDOW_CLOSE)


def parse_signal(row: dict[str, Any]) -> Signal:
    sid = str(row.get("id") or "")
    stype = (row.get("type") or "").strip().lower()
    raw = row.get("data")
    if stype in (WINDOW_OPEN, WINDOW_CLOSE):
        return Signal(sid, stype, json.loads(raw) if raw else {})
    if stype not in USER_TYPES:
        raise BadSignal(sid, f"unknown signal type {row.get('type')!r} (known: {', '.join(USER_TYPES)})")
    data: Any = {}
    if isinstance(raw, (str, bytes, bytearray)):
        if raw:
            try:
                data = loads_lenient(raw)
            except json.JSONDecodeError as exc:
                raise BadSignal(sid, f"data is not valid JSON: {exc.msg} at offset {exc.pos}") from None
    elif raw is not None:
        data = raw  # decoded already (the data object of a Kafka signal)
    if not isinstance(data, dict):
        raise BadSignal(sid, "data must be a JSON object")
    if stype == "execute-snapshot":
        cols = data.get("data-collections")
        if not isinstance(cols, list) or not cols or not all(isinstance(c, str) and c.strip() for c in cols):
            raise BadSignal(sid, "execute-snapshot needs 'data-collections': a non-empty list of table names")
        kind = (data.get("type") or "incremental").lower()
        if kind not in ("incremental", "blocking"):
            raise BadSignal(sid, f"snapshot type {data.get('type')!r} is not supported (use 'incremental' or "
                                 "'blocking')")
        conds = data.get("additional-conditions") or []
        if not isinstance(conds, list) or not all(
                isinstance(c, dict) and isinstance(c.get("data-collection"), str) and isinstance(c.get("filter"), str)
                for c in conds):
            raise BadSignal(sid, "'additional-conditions' must be a list of {\"data-collection\": ..., \"filter\": ...}")
        sk = data.get("surrogate-key")
        if sk is not None and (not isinstance(sk, str) or not sk.strip()):
            raise BadSignal(sid, "'surrogate-key' must be a column name")
        dm = data.get("delete-missing")
        if dm is not None and not isinstance(dm, bool):
            raise BadSignal(sid, "'delete-missing' must be true or false")
        if dm and kind == "blocking":
            raise BadSignal(sid, "'delete-missing' is for incremental snapshots: a blocking snapshot does not "
                                 "delete what it does not find")
        if dm and conds:
            raise BadSignal(sid, "'delete-missing' cannot be combined with 'additional-conditions': the sinks "
                                 "would delete every row outside the filter")
    if stype == "stop-snapshot":
        cols = data.get("data-collections")
        if cols is not None and (not isinstance(cols, list) or not all(isinstance(c, str) for c in cols)):
            raise BadSignal(sid, "'data-collections' must be a list of table names")
    return Signal(sid, stype, data)


# A JSON string escape, or a backslash before anything JSON cannot escape.
_ESCAPE = re.compile(r'\\(["\\/bfnrtu]|.)', re.DOTALL)


def loads_lenient(raw: str) -> Any:
    r"""``json.loads``, but a backslash before a character JSON cannot escape stands for
    itself.  A regular expression typed into SQL, ``'{"data-collections": ["shop\\.line_.*"]}'``,
    reaches the server as ``"shop\.line_.*"`` (MySQL unescapes ``\\`` in string literals),
    which strict JSON refuses; Debezium users write it that way.  Valid JSON reads as
    ``json.loads`` reads it."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        if "escape" not in exc.msg:
            raise
        fixed = _ESCAPE.sub(lambda m: m.group(0) if m.group(1) in '"\\/bfnrtu' else "\\\\" + m.group(1), raw)
        try:
            return json.loads(fixed)
        except json.JSONDecodeError:
            raise exc from None


def execute_snapshot_data(tables: list[str], *, where: str | None = None, surrogate_key: str | None = None,
                          delete_missing: bool = False, blocking: bool = False) -> dict:
    """The ``data`` of an ``execute-snapshot`` signal for ``tables`` (``where``: the same
    additional condition for each of them; ``blocking``: Debezium's blocking snapshot)."""
    data: dict[str, Any] = {"data-collections": list(tables), "type": "blocking" if blocking else "incremental"}
    if delete_missing:
        data["delete-missing"] = True
    if where:
        data["additional-conditions"] = [{"data-collection": t, "filter": where} for t in tables]
    if surrogate_key:
        data["surrogate-key"] = surrogate_key
    return data


def new_signal_id() -> str:
    """A fresh id for a signal sent by the ``cdc`` command."""
    return f"cli-{uuid.uuid4().hex[:16]}"


def send_signal(conn, signal_table: str, signal_type: str, data: dict | None = None,
                signal_id: str | None = None) -> str:
    """INSERT a signal row, as a user would; returns its id.  ``conn``: a pymysql
    connection of a user allowed to insert into the signal table (the CDC user is)."""
    sid = signal_id or new_signal_id()
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {quote_table(signal_table)} (id, type, data) VALUES (%s, %s, %s)",
                    (sid, signal_type, json.dumps(data) if data is not None else None))
    conn.commit()
    return sid


def signal_record(prefix: str, producer: str, signal_id: str, signal_type: str,
                  data: dict | None = None) -> tuple[str, bytes, bytes]:
    """``(topic, key, value)`` of a signal for the producer named ``producer`` on the Kafka
    signal channel ``<prefix>._signals``."""
    value = {"id": signal_id, "type": signal_type, "data": data if data is not None else {}}
    return signals_topic(prefix), producer.encode(), json.dumps(value).encode()


def debezium_snapshot_signal(connector_prefix: str, table: str) -> tuple[bytes, bytes]:
    """``(key, value)`` of an ``execute-snapshot`` signal for Debezium's Kafka signal channel
    (``signal.kafka.topic``): keyed by the connector's ``topic.prefix``, an incremental
    snapshot of ``table`` (``db.table``)."""
    value = {"id": new_signal_id(), "type": "execute-snapshot",
             "data": {"data-collections": [table], "type": "INCREMENTAL"}}
    return connector_prefix.encode(), json.dumps(value).encode()


def kafka_signal_row(value: bytes | None, offset: int) -> dict[str, Any]:
    """The signal row (``id``, ``type``, ``data``, as :func:`parse_signal` takes it) of the
    record at ``offset`` of the Kafka signal channel.  Its id is the record's ``id``, or
    ``kafka-<offset>`` when it has none.  Raises :class:`BadSignal` when the value is not a
    JSON object, or names a window marker type (those are the producer's own rows in the
    signal table, never signals from outside)."""
    fallback = f"kafka-{offset}"
    shape = 'a signal is a JSON object {"id": ..., "type": ..., "data": {...}}'
    if not value:
        raise BadSignal(fallback, f"the record at offset {offset} has no value: {shape}")
    try:
        doc = json.loads(value)
    except UnicodeDecodeError:
        raise BadSignal(fallback, f"the record at offset {offset} is not UTF-8 text: {shape}") from None
    except json.JSONDecodeError as exc:
        raise BadSignal(fallback, f"the record at offset {offset} is not JSON ({exc.msg} at character {exc.pos}): "
                                  f"{shape}") from None
    if not isinstance(doc, dict):
        raise BadSignal(fallback, f"the record at offset {offset} holds a JSON {type(doc).__name__}: {shape}")
    raw_id = doc.get("id")
    sid = fallback if raw_id is None or raw_id == "" else str(raw_id)
    stype = doc.get("type")
    if stype is not None and not isinstance(stype, str):
        stype = json.dumps(stype)
    if is_window_marker({"type": stype}):
        raise BadSignal(sid, f"{stype!r} is the producer's own chunk window marker, not a signal")
    return {"id": sid, "type": stype, "data": doc.get("data")}
