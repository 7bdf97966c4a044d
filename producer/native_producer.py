"""The producer's own Kafka client: a librdkafka handle of its own, with the row emitter on it.

:class:`~producer.kafka_writer.KafkaWriter` writes through a ``NativeProducer``
(``producer/_native_producer.c``): records one by one (``produce``), transactions, polls and
flushes as confluent-kafka's ``Producer`` has them (same names, same errors:
``KafkaException(KafkaError)`` with librdkafka's fatal, retriable and abortable flags,
``BufferError`` when the local queue is full), and the change events of a whole rows event or
snapshot chunk in one call (``rows``): the envelopes joined around the bodies the binlog reader
or the chunk reads encoded and each record handed to librdkafka in C, without a Python call
per record (confluent-kafka's ``produce`` takes 4.4 us a record, librdkafka's own 0.7).

The client is made with librdkafka's public API only, from its header (Debian's
``librdkafka-dev``, built against at install time), on its own ``rd_kafka_t``: nothing of
confluent-kafka's layout is read.  The library is the one confluent-kafka's wheel ships (in
``confluent_kafka.libs`` beside the package: the version the rest of the project runs), else
the system's ``librdkafka.so.1``; it must be 2.0 or later.  Where the extension is not built
(no compiler or header), the library cannot be loaded, or with ``CDC_NATIVE_PRODUCER=0``, the
writer takes confluent-kafka's ``Producer`` and every record goes through its ``produce``.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Any, Callable

import confluent_kafka

try:  # producer/_native_producer.c, built by setup.py where a C compiler and librdkafka's header are
    from producer import _native_producer
except ImportError:  # pragma: no cover - not built: confluent-kafka's Producer
    _native_producer = None

log = logging.getLogger(__name__)

#: Set to 0 to write through confluent-kafka's ``Producer`` (every record a ``produce`` call).
NATIVE_ENV = "CDC_NATIVE_PRODUCER"

#: ``kind`` of ``rows`` by :attr:`RowChanges.kind`, and "r" for a snapshot chunk's rows.
KINDS = {"insert": 0, "update": 1, "delete": 2, "r": 3}

#: The dynamic loader's name of a system librdkafka (when confluent-kafka's wheel ships none).
SYSTEM_LIBRDKAFKA = "librdkafka.so.1"


def librdkafka_file() -> str:
    """The librdkafka confluent-kafka's wheel ships (beside the package, in
    ``confluent_kafka.libs``), else the system's by its soname."""
    home = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    shipped = sorted(glob.glob(os.path.join(home, "confluent_kafka.libs", "librdkafka*.so*")))
    return shipped[0] if len(shipped) == 1 else SYSTEM_LIBRDKAFKA


def as_text(settings: dict[str, Any]) -> dict[str, str]:
    """librdkafka settings as the text its ``rd_kafka_conf_set`` takes (booleans ``true``/``false``)."""
    out = {}
    for name, value in settings.items():
        if callable(value):
            raise TypeError(f"setting {name!r}: a callback is not a librdkafka setting")
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def open_native_producer(settings: dict[str, Any], on_delivery: Callable[[Any, str], None],
                         on_error: Callable[[Any], None]) -> Any | None:
    """A ``NativeProducer`` with these librdkafka settings (failed deliveries reach
    ``on_delivery(error, topic)``, client errors ``on_error(error)``), or None: then write
    through confluent-kafka's ``Producer``.  A setting librdkafka refuses raises
    ``KafkaException``, as confluent-kafka's ``Producer`` does."""
    if _native_producer is None or os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    path = librdkafka_file()
    try:
        return _native_producer.NativeProducer(path, as_text(settings), on_delivery, on_error)
    except ImportError as exc:
        log.warning("the producer's native Kafka client is off (records go one produce call each): %s", exc)
        return None
