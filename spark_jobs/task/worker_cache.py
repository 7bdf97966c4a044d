"""What a Spark Python worker process keeps from task to task (Spark reuses its Python
workers): decoders, sinks, producers, consumers, made once per process and key.

A batch merged in the driver's own process (``spark.inline_batch_records``) keeps them there,
under a namespace of its job's (:func:`namespace`): several sources' jobs run side by side in
one driver, each its batches in its own thread, and must not share a consumer or a
connection.  In a Spark worker the namespace is empty: one task at a time per process."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Iterator

_cache: dict[Any, Any] = {}
_cache_lock = threading.Lock()
_namespace: contextvars.ContextVar[str] = contextvars.ContextVar("worker_cache_namespace", default="")


@contextlib.contextmanager
def namespace(name: str) -> Iterator[None]:
    """Within the block (this thread), what is kept is kept under ``name`` too."""
    token = _namespace.set(name)
    try:
        yield
    finally:
        _namespace.reset(token)


def current_namespace() -> str:
    """The namespace in force in this thread ("" in a Spark worker)."""
    return _namespace.get()


def _key(key: Any) -> Any:
    ns = _namespace.get()
    return (ns, key) if ns else key


def cached(key: Any, make):
    """The object kept under ``key``, made by ``make()`` the first time."""
    key = _key(key)
    with _cache_lock:
        obj = _cache.get(key)
        if obj is None:
            obj = _cache[key] = make()
        return obj


def forget(key: Any) -> Any:
    """Let go of what is kept under ``key``; it (or None)."""
    key = _key(key)
    with _cache_lock:
        return _cache.pop(key, None)


def replace(key: Any, obj: Any) -> None:
    """Keep ``obj`` under ``key`` from now on."""
    key = _key(key)
    with _cache_lock:
        _cache[key] = obj


def release(name: str) -> None:
    """What was kept under namespace ``name`` let go of, each object's ``close()`` called where
    it has one (a job that merged batches inline stops: its consumers and producers must not
    outlive it, reaching for a broker that may have stopped)."""
    with _cache_lock:
        keys = [k for k in _cache if isinstance(k, tuple) and len(k) == 2 and k[0] == name]
        objs = [_cache.pop(k) for k in keys]
    for obj in objs:
        _close(obj)


def _close(obj: Any) -> None:
    """``obj.close()`` where it has one; a list or tuple's items each (the sinks: ``[(name,
    sink), ...]``).  Best effort: one that fails does not keep the rest open."""
    if isinstance(obj, (list, tuple)):
        for item in obj:
            _close(item)
        return
    close = getattr(obj, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001 - letting go is best effort
            pass
