"""Which table topics' tasks may write the table sinks under their own partition's turn,
rather than the table's whole turn (``MergeSettings.key_partitions``).

Where a topic's records all sit where Kafka's partitioner puts their keys, one row's
records are all in one partition, so the tasks of different partitions never write the
same row and can write side by side.  That holds while the topic's partition count stays
and its table has had one key schema.
"""

from __future__ import annotations

from contract.envelope import record_names
from contract.schema_store import SchemaStore
from contract.topics import table_of_topic


def key_partition_counts(partitions: list[tuple[str, int]], seen: dict[str, int], changed: list[str]
                         ) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """The partition count per topic that a batch's tasks check their records' keys against
    (``MergeSettings.key_partitions``: where the records are all where Kafka's partitioner
    puts their keys, a task writes PostgreSQL under its partition's turn), and the job state
    to keep: ``seen`` (each topic's count when last seen) and ``changed`` (the topics whose
    count changed while the job watched them).

    A changed topic's tasks take the table's whole turn from then on: within a batch every
    task checks against the same count, so only one partition can pass for a key, but a
    task of an earlier attempt still running (a zombie) checked against the old count."""
    now: dict[str, int] = {}
    for topic, _ in partitions:
        now[topic] = now.get(topic, 0) + 1
    seen, changed_set = dict(seen), set(changed)
    for topic, n in now.items():
        if topic in seen and seen[topic] != n:
            changed_set.add(topic)
        seen[topic] = n
    return {t: n for t, n in now.items() if t not in changed_set}, seen, sorted(changed_set)


def partition_turn_keys(counts: dict[str, int], key_fingerprints: dict[str, list[str]]
                        ) -> dict[str, tuple[int, str]]:
    """``MergeSettings.key_partitions``: per table topic, the partition count and the one key
    schema fingerprint its tasks hold each record to before writing under their partition's
    turn.  ``counts``: from :func:`key_partition_counts`; ``key_fingerprints``: per topic,
    the fingerprints of every key schema its table has had (the schema store's, up to the
    batch's end).

    One row can have two key encodings: a primary key column's type change (``INT`` to
    ``BIGINT``) gives it a new key schema, new key bytes, and most likely another partition,
    so its older records sit in one partition and its newer ones in another, each where the
    partitioner puts its own bytes.  Two tasks writing it side by side could let an older
    upsert race a newer delete.  So a topic whose table ever had more than one key schema
    (or none known) is left out: its tasks take the table's whole turn, for good (the schema
    store only grows).  With one key schema, one row has one encoding, and so one
    partition."""
    return {t: (n, fps[0]) for t, n in counts.items() if len(fps := key_fingerprints.get(t) or []) == 1}


def batch_turn_keys(prefix: str, schemas: SchemaStore, counts: dict[str, int], schemas_end: int, *,
                    debezium: bool, several_sources: bool) -> dict[str, tuple[int, str]]:
    """The batch's :func:`partition_turn_keys`: none for Debezium's input (JSON keys, no
    schema store) or where several sources' stores feed the job (sharded sources merged
    into one table: two topics may write one row), nor without the schemas topic's end
    fixed for the batch (what the store holds might then miss a key schema its records
    carry)."""
    if debezium or several_sources or not counts or not schemas_end:
        return {}
    schemas.refresh_until(schemas_end)
    fingerprints = {}
    for topic in counts:
        key_name = record_names(prefix, *table_of_topic(prefix, topic))[0]
        fingerprints[topic] = [fp for fp, _ in schemas.versions_named(key_name)]
    return partition_turn_keys(counts, fingerprints)
