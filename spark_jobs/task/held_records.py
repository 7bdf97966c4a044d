"""Pessimistic routes' held records (docs/sharding.md): from the first record written under
a schema version its route's coordinator says WAIT for, every later record of the partition
is held in the partition's state until every shard ran the same DDL."""

from __future__ import annotations

import base64

from contract.codecs.serde import SINGLE_OBJECT_MAGIC
from contract.envelope import TRUNCATE_OP
from spark_jobs.task.envelope_decoder import EnvelopeDecoder
from spark_jobs.task.kept import Kept, row_of
from spark_jobs.task.routing import router_of
from spark_jobs.task.settings import MergeSettings
from spark_jobs.sharding.shapes import ShardId


def hold(s: MergeSettings, dec: EnvelopeDecoder, held: list[dict], kept: list[Kept], out: list[dict]
          ) -> list[Kept]:
    """Pessimistic routes: the records to apply now, of the rows held before (first) and the
    kept ones; from the first record written under a schema version its route's coordinator
    says WAIT for, every later record of the partition is held too (first in, first out: a
    key's changes stay in order), appended to ``out`` as JSON (raw bytes: decoded again when
    released)."""
    router = router_of(s)
    go: list[Kept] = []
    blocked = False
    for k in [unheld(s, dec, h) for h in held] + kept:
        route = router.route_of(s.source_name, *k.table)
        if route is None or route.ddl != "pessimistic":
            go.append(k)
            continue
        version = k.value_bytes[2:10].hex() if k.value_bytes and k.value_bytes[:2] == SINGLE_OBJECT_MAGIC else ""
        waiting = (s.targets.get(route.name) or {}).get("waiting") or ()
        if blocked or f"{ShardId(s.source_name, *k.table)}|{version}" in waiting:
            blocked = True
            out.append({"op": k.op, "position": k.position, "ts_ms": k.ts_ms, "offset": k.offset,
                        "key": base64.b64encode(k.key_bytes).decode() if k.key_bytes is not None else None,
                        "value": base64.b64encode(k.value_bytes).decode(), "table": list(k.table),
                        "old_key": k.old_key})
        else:
            go.append(k)
    return go


def unheld(s: MergeSettings, dec: EnvelopeDecoder, h: dict) -> Kept:
    """A held record (:func:`_hold`) decoded again."""
    value_b = base64.b64decode(h["value"])
    key_b = base64.b64decode(h["key"]) if h.get("key") is not None else None
    value = dec.decode(value_b)
    sid, schema = dec.schema_of(value_b) if h["op"] != TRUNCATE_OP else ("", None)
    row = None if h["op"] == TRUNCATE_OP else row_of(value, h["op"])
    return Kept(h["op"], row, h["position"], sid, schema, int(h["ts_ms"]), int(h["offset"]), key_b, value_b,
                 tuple(h["table"]), bool(h.get("old_key")), value)
