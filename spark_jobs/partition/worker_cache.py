"""What a Spark Python worker process keeps from task to task (Spark reuses its Python
workers): decoders, sinks, producers, consumers, made once per process and key."""

from __future__ import annotations

import threading
from typing import Any

_cache: dict[Any, Any] = {}
_cache_lock = threading.Lock()


def cached(key: Any, make):
    """The object kept under ``key``, made by ``make()`` the first time."""
    with _cache_lock:
        obj = _cache.get(key)
        if obj is None:
            obj = _cache[key] = make()
        return obj


def forget(key: Any) -> Any:
    """Let go of what is kept under ``key``; it (or None)."""
    with _cache_lock:
        return _cache.pop(key, None)


def replace(key: Any, obj: Any) -> None:
    """Keep ``obj`` under ``key`` from now on."""
    with _cache_lock:
        _cache[key] = obj
