"""The sinks stage of a partition's merge: the kept records upserted and deleted into every
table sink (position guarded, so a replay never moves a row backwards), a run of records
written with one schema at a time, per key only the record with the highest position.

A task writes a sink table under the table's whole turn, or, for a sink with partition turns
where the partition owns its keys (:func:`owns_keys`), under its partition's own turn.  What
no table sink can apply (a table without a key, JSON records) is one dead letter, whatever
the number of sinks; a run a sink refuses is applied record by record, and the records it
still refuses are dead letters.

A batch sink (:class:`~spark_jobs.sinks.interface.BatchSink`) is not written here: the task
stages its part (:func:`stage_runs`), and the driver commits a table's parts once per batch.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

from common.kafka.partitioner import in_partition
from contract.codecs.serde import SINGLE_OBJECT_MAGIC
from contract.envelope import TRUNCATE_OP
from spark_jobs.errors import SinkUnavailable
from spark_jobs.task.envelope_decoder import EnvelopeDecoder
from spark_jobs.task.kept import ENCODED, ENCODED_FIELDS, ROW_AT, Kept, row_of_kept
from spark_jobs.task.routing import routed
from spark_jobs.task.settings import MergeSettings, sinks_of
from spark_jobs.sharding.routes import Router
from spark_jobs.sinks.batch import Change
from spark_jobs.sinks.interface import BatchSink

log = logging.getLogger(__name__)

Dead = list[tuple[int, Any, Any, str]]


def by_target_table(s: MergeSettings, kept: list[Kept], key_columns: dict[tuple[str, str], list[str]],
                    router: Router | None, stats: dict) -> tuple[dict[tuple[str, str], list[Kept]], bool]:
    """The kept records the sinks apply, by sink table (a routed table's: as records of its
    route's target, ``key_columns`` given the target's key), and whether any was routed.
    Records keyed as before their table's primary key changed are counted skipped: the sink
    table is keyed by the new key (rebuilt by it), and the snapshot the producer takes after
    a key change brings every row under the new key.  Truncates go to the changelog only."""
    tables: dict[tuple[str, str], list[Kept]] = {}
    fields_of: dict[str, Any] = {}  # route name -> its target's fields (this batch's layout)
    routed_any = False
    for k in kept:
        if k.old_key:
            stats["sink_skipped"] += 1
        elif k.op != TRUNCATE_OP:
            target = routed(s, router, k, key_columns, fields_of) if router is not None else None
            routed_any = routed_any or target is not None
            tables.setdefault(k.table if target is None else target.table, []).append(target or k)
    return tables, routed_any


def apply_to_sinks(s: MergeSettings, dec: EnvelopeDecoder, topic: str, partition: int, kept: list[Kept],
                   key_columns: dict[tuple[str, str], list[str]], router: Router | None, stats: dict) -> Dead:
    """The sinks stage: ``kept`` (of ``topic``'s ``partition``) applied to every table sink of
    ``s``, counted in ``stats``; returns the dead letters."""
    dead: Dead = []
    tables, routed_any = by_target_table(s, kept, key_columns, router, stats)
    sinks = sinks_of(s)
    turn = s.key_partitions.get(topic)  # (None: the table's whole turn, no key looked at)
    own_turn = (turn is not None and not routed_any and bool(tables)
                and owns_keys(turn, [k.key_bytes for recs in tables.values() for k in recs], partition))

    def writer_of(value_b: bytes) -> Any:
        return dec.store.get(value_b[2:10].hex())
    for (db, table), records_of_table in tables.items():
        # What no table sink can apply is one dead letter, whatever the number of sinks.
        if sinks and not key_columns.get((db, table)):
            refused, records_of_table = records_of_table, []
            reason = "a table without a key cannot be applied to table sinks (give it one: source.message_key_columns)"
        else:  # JSON records: no writer schema to build the table from
            refused = [k for k in records_of_table if k.schema is None]
            records_of_table = [k for k in records_of_table if k.schema is not None]
            reason = "JSON records cannot be applied to table sinks"
        if sinks:
            dead += [(k.offset, k.key_bytes, k.value_bytes, reason) for k in refused]
        if not records_of_table:
            continue
        for name, sink in sinks:
            if sink.KIND == "batch":  # staged here, committed by the driver once per table per batch
                stage_runs(sink, name, db, table, records_of_table, key_columns[(db, table)], s, partition, stats)
                continue
            waited = sink.turn_wait_s
            own = own_turn and sink.PARTITION_TURNS
            sink.turn_partition = partition if own else None
            applied = stats["upserted"] + stats["deleted"]
            try:
                dead += apply_runs(sink, db, table, records_of_table, key_columns[(db, table)], stats, writer_of)
            finally:
                sink.turn_partition = None
            rows = stats.setdefault("sink_rows", {})  # (the metrics' rows per sink and table)
            rows[f"{name}|{db}.{table}"] = rows.get(f"{name}|{db}.{table}", 0) + \
                stats["upserted"] + stats["deleted"] - applied
            stats["sinks_turn_s"] = stats.get("sinks_turn_s", 0.0) + sink.turn_wait_s - waited
            stats["partition_turns" if own else "whole_turns"] += 1
    return dead


def stage_runs(sink: BatchSink, name: str, db: str, table: str, kept: list[Kept], key_columns: list[str],
               s: MergeSettings, partition: int, stats: dict) -> None:
    """A batch sink's part of the partition's kept records of ``db.table``: staged run by run
    (:meth:`BatchSink.stage`), what each run's commit needs noted in ``stats["staged"]`` as
    ``[sink name, db, table, staged part]`` (:mod:`spark_jobs.commit.batch_commit` commits them)."""
    staged = stats.setdefault("staged", [])
    for run in runs(kept):
        changes = [Change(None, k.op, row_of_kept(k), k.position) for k in run]
        part = sink.stage(db, table, run[0].schema, key_columns, changes, batch_id=s.batch_id, partition=partition,
                          app=s.app_id)
        staged.append([name, db, table, part])


def owns_keys(turn: tuple[int, str] | None, keys: list, partition: int) -> bool:
    """Whether a task of ``partition`` may write ``keys`` under its partition's own turn
    (sinks that have one: PostgreSQL), ``turn`` being the topic's ``(partition count, key
    fingerprint)`` of :func:`spark_jobs.planning.partition_turns.partition_turn_keys` (None: the table's
    whole turn).  Yes when every key is Avro single-object framed with the topic's one key
    schema and sits where Kafka's partitioner puts it among the topic's partitions: no other
    partition's task can then write one of its rows (common/kafka/partitioner.py)."""
    if turn is None or not keys:
        return False
    count, fingerprint = turn
    if not in_partition(keys, count, partition):  # (also: every key is bytes)
        return False
    head = SINGLE_OBJECT_MAGIC + bytes.fromhex(fingerprint)
    return all(k[:10] == head for k in keys)


def runs(kept: list[Kept]) -> Iterator[list[Kept]]:
    """Consecutive records written with the same schema (a schema change starts a run)."""
    run: list[Kept] = []
    for k in kept:
        if run and k.schema_id != run[0].schema_id:
            yield run
            run = []
        run.append(k)
    if run:
        yield run


def winners(run: list[Kept]) -> tuple[list[Kept], int]:
    """Of a run's records, per key the one with the highest position (what applying the
    run leaves; the sinks reduce a batch so too), keyed by the key record's bytes: equal
    keys of one key writer schema have equal bytes.  The run itself where its records do
    not all have a key of one writer schema (the sinks then reduce by the decoded key
    columns).

    And how many of the winners are *fresh*, placed first: not deletes, of a key whose first
    record in the run is an insert (``c``), so that the source held no row of it before and
    the sinks, which applied the partition's records before this run in order, most likely
    hold none either (``apply_encoded``'s ``fresh``: they may write them as plain inserts).
    The others follow in the run's order."""
    first = run[0].key_bytes
    if first is None or first[:2] != SINGLE_OBJECT_MAGIC:
        return run, 0
    framing = first[:10]
    best: dict[bytes, Kept] = {}
    fresh: set[bytes] = set()
    for k in run:
        kb = k.key_bytes
        if kb is None or kb[:10] != framing:
            return run, 0
        held = best.get(kb)
        if held is None:
            best[kb] = k
            if k.op == "c":
                fresh.add(kb)
        elif held.position < k.position:
            best[kb] = k
    winners = run if len(best) == len(run) else [k for k in run if best[k.key_bytes] is k]
    if not fresh:
        return winners, 0
    new = [k for k in winners if k.key_bytes in fresh and k.op != "d"]
    if not new:
        return winners, 0
    return new + [k for k in winners if k.key_bytes not in fresh or k.op == "d"], len(new)


def apply_runs(sink, db: str, table: str, kept: list[Kept], key_columns: list[str], stats: dict,
               writer_of: Callable[[bytes], Any]) -> Dead:
    """Apply the kept records run by run; a run the sink refuses is applied record by
    record, and the records it still refuses are dead letters.  ``writer_of``: a
    record's writer schema (the records whose images are not decoded are written from
    their bytes where the sink can: :meth:`~spark_jobs.sinks.table_sink.TableSink.apply_encoded`)."""
    dead = []
    for run in runs(kept):
        schema = run[0].schema
        # A table the sink cannot create or alter is the sink's problem, not the records':
        # it fails the batch (retried) instead of filling the dead-letter topic.
        # (rekey: the records carry the table's newest key, so a sink table keyed otherwise
        # predates a primary key change and is rebuilt)
        sink.ensure_table(db, table, schema, key_columns, rekey=True)
        try:
            best, fresh = winners(run)
            res = None
            if all(map(ROW_AT, best)):  # images in their bytes: written straight from them
                encoded = list(map(ENCODED, map(ENCODED_FIELDS, best)))
                res = sink.apply_encoded(db, table, schema, key_columns, encoded, writer_of(best[0].value_bytes),
                                         rekey=True, fresh=fresh)
                if res is not None:
                    stats["from_bytes"] += len(best)
                    stats["inserted"] += res.inserted
                    stats["fresh_refused"] += res.fresh_refused
            if res is None:
                res = sink.apply(db, table, schema, key_columns,
                                 [Change(None, k.op, row_of_kept(k), k.position) for k in best], rekey=True)
            stats["upserted"] += res.upserted
            stats["deleted"] += res.deleted
            stats["sink_skipped"] += res.skipped
        except SinkUnavailable:  # a lost database is not a poison record: the batch fails and is retried
            raise
        except Exception as exc:  # noqa: BLE001 - isolate the records the sink refuses
            log.warning("%s.%s: the sink refused a run of %d records (%s); applying one by one", db, table,
                        len(run), exc)
            refused = []
            for k in run:
                try:
                    rec = Change(None, k.op, row_of_kept(k), k.position)
                    res = sink.apply(db, table, schema, key_columns, [rec], rekey=True)
                    stats["upserted"] += res.upserted
                    stats["deleted"] += res.deleted
                except SinkUnavailable:
                    raise
                except Exception as exc2:  # noqa: BLE001 - a poison record
                    refused.append((k.offset, k.key_bytes, k.value_bytes, f"sink {type(sink).__name__}: {exc2}"))
            if len(run) > 1 and len(refused) == len(run):
                raise exc  # every record refused: the sink is the problem
            dead += refused
    return dead
