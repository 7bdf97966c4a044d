"""Kafka topic names of captured tables.

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
