"""The change events of encoded rows straight into Kafka, without a Python call per record.

Streaming, the records of a rows event whose images the binlog reader process encoded
(:class:`~producer.binlog.row_decoder.EncodedImages`) used to be joined in Python (the
envelope around each body, :meth:`EventBuilder._fast_records`) and handed to confluent-kafka
one ``produce`` call each (:meth:`KafkaWriter.produce_all`): together about half of the
producer process's time, the ``produce`` call alone 4.4 us a record where librdkafka's own
takes 0.7.  The native emitter (``producer/_row_emitter.c``) does both for a whole rows
event in one call: the same records, in the same order, with the same header and
partitioner, on the same librdkafka handle -- confluent-kafka's own, so transactions,
flushes, polls, settings and delivery reports stay confluent-kafka's.

It reads two things confluent-kafka does not publish: the librdkafka handle at the start of
its ``Producer`` object, and the layout of the per-message state its delivery report
callback frees (the Producer object and the callback).  Both are the same from 2.4 to 2.16
(its ``confluent_kafka.h`` and ``Producer.c``), so the emitter is made only for a
confluent-kafka of the versions tested (:mod:`common.tested_versions`; pyproject.toml pins
them), and checks the handle it reads (librdkafka's opaque of it is the Producer object, as
confluent-kafka sets it); otherwise (with a WARNING for another version), or where the
extension is not built, or with ``CDC_EMIT_NATIVE=0``, records go the Python way.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

import confluent_kafka

from common.tested_versions import tested

try:  # producer/_row_emitter.c, built by setup.py where a C compiler is
    from producer import _row_emitter
except ImportError:  # pragma: no cover - no compiler at install time: the Python way
    _row_emitter = None

log = logging.getLogger(__name__)

#: Set to 0 to produce every record through confluent-kafka's ``Producer.produce``.
NATIVE_ENV = "CDC_EMIT_NATIVE"

#: ``kind`` of the emitter's ``rows`` by :attr:`RowChanges.kind`, and "r" for a snapshot chunk's rows.
KINDS = {"insert": 0, "update": 1, "delete": 2, "r": 3}


def librdkafka_path() -> str | None:
    """The file of the librdkafka confluent-kafka loaded into this process, from the process's
    memory map: its wheel's copy (beside the package, in ``confluent_kafka.libs``), else the one
    librdkafka mapped; None where it cannot be told (not Linux, or two others mapped)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {p for p in (line.rstrip("\n").split(None, 5)[-1] for line in maps)
                     if p.startswith("/") and os.path.basename(p).startswith("librdkafka")}
    except OSError:
        return None
    home = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    wheel = [p for p in paths if os.path.dirname(p) == os.path.join(home, "confluent_kafka.libs")]
    if len(wheel) == 1:
        return wheel[0]
    return next(iter(paths)) if len(paths) == 1 else None


def native_emitter(producer: confluent_kafka.Producer, on_delivery: Callable[[Any, Any], None]) -> Any | None:
    """The native emitter of ``producer`` (failed deliveries reach ``on_delivery``, as its
    records' own), or None: records then go the Python way."""
    if _row_emitter is None or os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    if not tested("confluent-kafka", "the native row emitter (records are produced one call each)"):
        return None
    path = librdkafka_path()
    if path is None:
        return None
    try:
        return _row_emitter.Emitter(producer, path, on_delivery)
    except (ImportError, TypeError) as exc:
        log.info("the native row emitter is off: %s", exc)
        return None
