"""Every Kafka topic name of the pipeline: one definition each.

``<prefix>`` is ``kafka.topic_prefix``:

=====================================  ====================================================
``<prefix>.<db>.<table>``              a table's change events and snapshot rows
``<prefix>.clean.<db>.<table>``        its clean changelog (the merge job's output)
``<prefix>``                           schema changes (DDL)
``<prefix>.transaction``               transaction BEGIN/END records (``transaction_metadata``)
``<prefix>._schemas``                  Avro writer schemas, keyed by fingerprint (compacted)
``<prefix>._offsets``                  the producer's stored position (compacted)
``<prefix>._markers``                  snapshot window markers (one partition)
``<prefix>._notifications``            snapshot notifications (one partition)
``<prefix>._signals``                  the Kafka signal channel (one partition, key = producer name)
``<prefix>._heartbeat``                heartbeats
``<prefix>._dlq``                      the merge job's dead letters
``<prefix>._routes``                   the operator's decisions on routes' held DDL (compacted)
=====================================  ====================================================

Table names:

Kafka allows only ``[a-zA-Z0-9._-]`` in a topic name (249 characters at most); MySQL
identifiers may hold almost anything (spaces, ``$``, accented letters, dots).  As
Debezium does, every other character of a database or table name is replaced by ``_``,
and so is a dot inside a name, so ``<prefix>.<db>.<table>`` keeps exactly three parts.
Two tables whose names differ only in such characters share a topic (Debezium's
behaviour too): the records still carry the true names in ``source.db`` and
``source.table``, and the merge job takes the names from there.
"""

from __future__ import annotations

import re

_ILLEGAL = re.compile(r"[^a-zA-Z0-9_-]")


def topic_part(name: str) -> str:
    """``name`` with every character Kafka refuses in a topic name (and ``.``) as ``_``."""
    return _ILLEGAL.sub("_", name)


def table_topic(prefix: str, db: str, table: str) -> str:
    """The topic of a table's change events: ``<prefix>.<db>.<table>``."""
    return f"{prefix}.{topic_part(db)}.{topic_part(table)}"


def clean_topic(prefix: str, db: str, table: str) -> str:
    """The clean changelog topic of a table: ``<prefix>.clean.<db>.<table>``."""
    return f"{prefix}.clean.{topic_part(db)}.{topic_part(table)}"


def table_topic_pattern(prefix: str) -> str:
    """The regular expression of every table topic ``<prefix>.<db>.<table>`` (not
    ``<prefix>._*``, ``<prefix>.clean.*``, ``<prefix>.transaction`` or the DDL topic ``<prefix>``)."""
    return re.escape(prefix) + r"\.(?!_|clean\.)[^.]+\.[^.]+"


def table_of_topic(prefix: str, topic: str) -> tuple[str, str]:
    """``(db, table)`` as written in a table topic's name (Kafka's characters only: the
    true names are in each record's ``source``)."""
    db, table = topic[len(prefix) + 1:].split(".", 1)
    return db, table


def ddl_topic(prefix: str) -> str:
    return prefix


def transaction_topic(prefix: str) -> str:
    return f"{prefix}.transaction"


def schemas_topic(prefix: str) -> str:
    return f"{prefix}._schemas"


def offsets_topic(prefix: str) -> str:
    return f"{prefix}._offsets"


def markers_topic(prefix: str) -> str:
    return f"{prefix}._markers"


def notifications_topic(prefix: str) -> str:
    return f"{prefix}._notifications"


def signals_topic(prefix: str) -> str:
    """The Kafka signal channel: signals as JSON, keyed by the producer's name (one partition)."""
    return f"{prefix}._signals"


def heartbeat_topic(prefix: str) -> str:
    return f"{prefix}._heartbeat"


def dlq_topic(prefix: str) -> str:
    return f"{prefix}._dlq"


def route_decisions_topic(prefix: str) -> str:
    """The operator's decisions on pessimistic routes' waiting DDL (``cdc route force|skip``),
    keyed by route, shard and schema version (compacted, one partition)."""
    return f"{prefix}._routes"
