"""Key values in canonical forms: hashable (:func:`freeze_key`, for grouping a batch by key)
and JSON text with its hash (:func:`key_json_and_hash`, the key of a tombstone)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

__all__ = ["freeze_key", "key_json", "key_hash", "key_json_and_hash"]

_SCALARS = frozenset({int, str, bytes, bool, Decimal, type(None)})


def freeze_key(v: Any) -> Any:
    """A hashable form of a key (dicts, lists, bytearrays frozen; -0.0 is 0.0)."""
    t = type(v)
    if t in _SCALARS:
        return v
    if t is tuple:
        for x in v:
            if type(x) not in _SCALARS:
                return tuple([freeze_key(x) for x in v])
        return v
    if isinstance(v, Mapping):
        return tuple(sorted((k, freeze_key(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple([freeze_key(x) for x in v])
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, float) and v == 0.0:
        return 0.0  # -0.0 and 0.0 are one key
    return v


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return 0.0 if v == 0.0 else v
    if isinstance(v, Decimal):
        return "0" if v == 0 else format(v.normalize(), "f")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, Mapping):
        return {k: _json_value(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return str(v)


def key_json(values: Sequence[Any]) -> str:
    """Canonical JSON text of a key's Avro values (key order): equal keys, equal text."""
    for v in values:
        if type(v) is not int:
            break
    else:  # integers only (the usual key): what json.dumps writes, without its machinery
        return "[" + ",".join(map(str, values)) + "]"
    return json.dumps([_json_value(v) for v in values], ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)


def key_hash(values: Sequence[Any]) -> bytes:
    """16-byte BLAKE2b of :func:`key_json`: the tombstone table's key."""
    return key_json_and_hash(values)[1]


def key_json_and_hash(values: Sequence[Any]) -> tuple[str, bytes]:
    """(:func:`key_json`, :func:`key_hash`) of a key."""
    text = key_json(values)
    return text, hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
