"""The cyclic garbage collector tuned for processes that stream many small records.

Every record allocates containers (dicts and tuples of values, lists) that reference
counting frees; with Python's default thresholds (700, 10, 10) each 700 allocations start a
young collection and, as long-lived objects pile up (a batch's records, the imported
modules), full collections scan the whole heap.  The producer's processes and the merge
job's Python workers set higher thresholds and take what is alive at their start (imports,
configuration) out of every later collection.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

#: The thresholds of a process that streams records (Python's default: 700, 10, 10): the young
#: generation scanned 70 times less often, the old ones a little less.  The producer's parent
#: process and the merge job's Spark Python workers use them.
STREAMING_THRESHOLDS = (50_000, 20, 100)


def tune_gc(thresholds: tuple[int, int, int], *, freeze: bool = False) -> None:
    """Set the collector's ``thresholds``; ``freeze``: and leave the objects alive so far out
    of every later collection (in a process that does nothing else but the streaming)."""
    if freeze:
        gc.freeze()
    gc.set_threshold(*thresholds)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block (garbage without cycles is freed as always):
    for a bounded batch of work whose objects hold no cycles, so that a collection would
    only walk live objects.  The collector runs again as before after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
