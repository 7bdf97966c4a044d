"""The PostgreSQL sink's COPY path: a batch's rows staged in temporary tables by COPY (from
their Avro bytes where :mod:`spark_jobs.sinks.copy_text` writes their kinds, else from the
decoded rows), then upserted, inserted and deleted from there in a few statements."""

from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import Any, Callable, Sequence

import psycopg

from contract.codecs.avro_decoder import compile_decoder
from contract.errors import NotCompiled
from spark_jobs.sinks.batch import ApplyResult, Change, EncodedChange
from spark_jobs.sinks.copy_text import compile_copy_encoder, copy_lines_of
from spark_jobs.sinks.keys import key_hash, key_json_and_hash
from spark_jobs.sinks.layout import TableLayout
from spark_jobs.sinks.naming import POSITION_COLUMN
from spark_jobs.sinks.table_sink import SqlTables, TableSink, TableWriter
from spark_jobs.sinks.postgres_plan import (
    KEY_HASH,
    KEY_JSON,
    STAGE_DELETES,
    STAGE_INSERTS,
    STAGE_UPSERTS,
    PgTablePlan,
    quote_pg,
)
from spark_jobs.sinks.values import row_error

#: apply_encoded's COPY lines sent per write
_COPY_LINES = 2000
#: An :class:`EncodedChange`'s event bytes, and their writer schema's fingerprint (single-object framing)
_DATA = attrgetter("data")
_OP = attrgetter("op")
_FINGERPRINT = itemgetter(slice(2, 10))


def avro_encoders(writer_schema: Any, layout: TableLayout) -> tuple[Any, Any] | None:
    """(COPY text encoder, key columns' decoder) of the row images of envelope writer
    schema ``writer_schema`` for ``layout``, both reading an image's ``["null", row]`` union at an
    offset; None when :mod:`~spark_jobs.sinks.copy_text` does not write one of its kinds."""
    try:
        fields = {f["name"]: f["type"] for f in writer_schema["fields"]}
        row_union = fields["before"]
        key_fields = {name for names in layout.key_lookup for name in names}
        return (compile_copy_encoder(row_union, layout.columns),
                compile_decoder(row_union, {name: True for name in key_fields}))
    except (NotCompiled, KeyError, TypeError):
        return None


class PostgresCopyWriter(TableWriter):
    """The PostgreSQL sink's writes through COPY into stage tables (the writer of
    :class:`~spark_jobs.sinks.postgres.PostgresSink`; ``tables``: its
    :class:`~spark_jobs.sinks.postgres.PostgresTables`)."""

    def __init__(self, tables: SqlTables) -> None:
        self.tables = tables

    def apply_encoded(self, sink: TableSink, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[EncodedChange], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """The upserts' rows COPYed as :func:`~spark_jobs.sinks.copy_text.compile_copy_encoder`
        writes them from their Avro bytes (the deletes as :meth:`apply` does, by their key
        columns); None for a schema with a column kind it does not write
        (:meth:`~spark_jobs.sinks.table_sink.TableSink.apply_encoded`).

        The ``fresh`` changes go to a stage table of their own and into the
        table by a plain ``INSERT`` (with the tombstone guard when it is needed, their key
        hashes staged again under the turn as the upserts' are), in a savepoint: an insert
        of a new key costs PostgreSQL about half of what ``INSERT ... ON CONFLICT`` does
        (no speculative insertion: measured 1.0-1.1 against 1.9-2.0 us of the backend's CPU a
        row).  If one of them meets a row of its key (a replay, a key whose records were in
        two partitions), the savepoint is rolled back and they are upserted as the others
        are: the same result either way, as no row of theirs is there when the INSERT
        succeeds and the table's turn is held."""
        if not changes:
            return ApplyResult()
        layout = sink.layout(value_schema, key_columns)
        plan = sink.plan(db, table, layout, rekey)
        fpb = changes[0].data[2:10]
        if len(set(map(_FINGERPRINT, map(_DATA, changes)))) > 1:
            return None  # (one writer schema per call)
        codec = plan.encoders.get(fpb, False)
        if codec is False:
            codec = plan.encoders[fpb] = avro_encoders(writer_schema, layout)
        if codec is None:
            return None
        line, key_reader = codec
        inserts = list(changes[:fresh])
        if "d" in map(_OP, inserts):
            fresh, inserts = 0, []  # (not as promised: every change the usual way)
        upserts, deletes = [], []
        for ch in changes[fresh:]:
            if ch.op == "d":
                deletes.append((Change(None, "d", None, ch.position), layout.key_values(None, key_reader(ch.data,
                                                                                                         ch.row_at))))
            else:
                upserts.append(ch)
        lowest = min(ch.position for ch in changes)
        result = ApplyResult()
        with sink.db.transaction() as cur:
            self._staged_write(sink, cur, plan, lowest, len(upserts),
                               lambda hashed: self._copy_encoded(cur, plan, upserts, line, key_reader, hashed),
                               deletes, result, encoded=True,
                               inserts=(len(inserts), lambda hashed: self._copy_encoded(
                                   cur, plan, inserts, line, key_reader, hashed, STAGE_INSERTS)))
        return result

    def write_reduced(self, sink: TableSink, cur: psycopg.Cursor, plan: PgTablePlan, lowest: str, upserts: list,
                      deletes: list, result: ApplyResult) -> None:
        self._staged_write(sink, cur, plan, lowest, len(upserts),
                           lambda hashed: self._copy_rows(cur, plan, upserts, hashed),
                           deletes, result)

    def _staged_write(self, sink: TableSink, cur: psycopg.Cursor, plan: PgTablePlan, lowest: str, n_upserts: int,
                      stage_upserts: Callable[[bool], None], deletes: list, result: ApplyResult, *,
                      encoded: bool = False, inserts: tuple[int, Callable[[bool], None] | None] = (0, None)
                      ) -> None:
        """A batch written in the open transaction: its ``n_upserts`` upserts
        (``stage_upserts(hashed)`` COPYs them into the stage table, with the tombstone
        guard's key hashes when ``hashed``) and its deletes (``(change, key values)`` pairs)
        staged first, then the table's turn taken, then the statements.

        The stage tables are this session's own, and writing their COPY lines is the Python
        side's work, which the table's other writers need not wait for: under the turn only
        PostgreSQL's statements run.  A key matched by its hash (not ``plan.json_guard``) has
        its key hashes written when a tombstone is seen at the batch's positions before the
        turn; if one came while waiting for it, the upserts are staged again with them.
        (Without ``serialize`` there is no turn, and the first answer is the one used.)  An
        integer key (``plan.json_guard``) is staged without hashes and the answer under the
        turn decides the guard.  ``inserts``: ``(n, stage)``, ``n`` fresh changes
        (:meth:`apply_encoded`) that ``stage(hashed)`` COPYs into a stage table of their own
        (staged again with their hashes as the upserts are), written by
        :meth:`_insert_staged`."""
        hashed = not plan.json_guard and self.tables.has_tombstones(cur, plan, lowest)
        n_inserts, stage_inserts = inserts
        if n_upserts:
            cur.execute(plan.encoded_stage_ddl if encoded else plan.stage_upserts_ddl)
            stage_upserts(hashed)
        if n_inserts:
            cur.execute(plan.inserts_stage_ddl)
            stage_inserts(hashed)
        if deletes:
            self._stage_deletes(cur, plan, deletes)
        if sink.serialize or plan.json_guard:
            has_tombstones = sink.begin_write(cur, plan, lowest)
        else:
            has_tombstones = hashed
        restage = has_tombstones and not hashed and not plan.json_guard
        if n_inserts:
            if restage:
                cur.execute(f"TRUNCATE pg_temp.{quote_pg(STAGE_INSERTS)}")
                stage_inserts(True)
            self._insert_staged(cur, plan, lowest, n_inserts, has_tombstones, result)
        if n_upserts:
            if restage:
                cur.execute(f"TRUNCATE pg_temp.{quote_pg(STAGE_UPSERTS)}")
                stage_upserts(True)
            self._upsert_staged(cur, plan, lowest, n_upserts, has_tombstones, result, encoded=encoded)
        if deletes:
            self._apply_staged_deletes(cur, plan, lowest, len(deletes), result)

    @staticmethod
    def _insert_staged(cur: psycopg.Cursor, plan: PgTablePlan, lowest: str, n: int, has_tombstones: bool,
                       result: ApplyResult) -> None:
        """The staged fresh changes (``n``, :meth:`apply_encoded`) inserted, in a savepoint;
        upserted instead when one meets a row of its key.  With ``has_tombstones``, the guard
        and the pruning as for the upserts."""
        params = {"table": plan.name, "lowest": lowest}
        try:
            with cur.connection.transaction():
                cur.execute(plan.insert_tomb_sql if has_tombstones else plan.insert_sql, params)
            result.inserted += cur.rowcount
        except psycopg.errors.UniqueViolation:
            result.fresh_refused += 1
            cur.execute(plan.inserts_upsert_tomb_sql if has_tombstones else plan.inserts_upsert_sql, params)
        result.upserted += cur.rowcount
        result.skipped += n - cur.rowcount
        if has_tombstones:
            cur.execute(plan.inserts_prune_sql, params)

    @staticmethod
    def _copy_encoded(cur: psycopg.Cursor, plan: PgTablePlan, upserts: Sequence[EncodedChange], line: Any,
                      key_reader: Any, hashed: bool, stage: str = STAGE_UPSERTS) -> None:
        """The upserts' COPY lines into the stage table (``stage``), written from their Avro
        bytes (``line``; ``key_reader`` reads the key columns of the key hashes, with
        ``hashed``)."""
        layout = plan.layout
        lines = None if hashed else copy_lines_of(line)
        with cur.copy(f"COPY pg_temp.{quote_pg(stage)} ({', '.join(plan.col_names)}, "
                      f"{quote_pg(POSITION_COLUMN)}, {quote_pg(KEY_HASH)}) FROM STDIN") as copy:
            for i in range(0, len(upserts), _COPY_LINES):
                if lines is not None:  # (the native lines, no key hash: the common case, one call per part)
                    copy.write(lines(upserts, i, i + _COPY_LINES))
                    continue
                part = upserts[i:i + _COPY_LINES]
                if hashed:
                    copy.write(b"".join([b"%s\t%s\t\\\\x%s\n" % (
                        line(ch.data, ch.row_at), ch.position.encode(),
                        key_hash(layout.key_values(None, key_reader(ch.data, ch.row_at))).hex().encode())
                        for ch in part]))
                else:  # (no key hash: the common case, one formatting per line)
                    copy.write(b"".join([b"%s\t%s\t\\N\n" % (line(ch.data, ch.row_at), ch.position.encode())
                                         for ch in part]))

    def _upsert_staged(self, cur: psycopg.Cursor, plan: PgTablePlan, lowest: str, n: int, has_tombstones: bool,
                       result: ApplyResult, *, encoded: bool = False) -> None:
        """The staged upserts (``n``, at positions from ``lowest``) applied: the position
        guard, with ``has_tombstones`` the tombstone guard and the tombstones they supersede
        pruned."""
        params = {"table": plan.name, "lowest": lowest}
        if encoded:
            cur.execute(plan.encoded_upsert_tomb_sql if has_tombstones else plan.encoded_upsert_sql, params)
        else:
            cur.execute(plan.upsert_tomb_sql if has_tombstones else plan.upsert_sql, params)
        result.upserted += cur.rowcount
        result.skipped += n - cur.rowcount
        if has_tombstones:
            cur.execute(plan.prune_sql, params)

    def _copy_rows(self, cur: psycopg.Cursor, plan: PgTablePlan, upserts: list, hashed: bool) -> None:
        """The upserts (``(change, key values)`` pairs, their rows decoded) COPYed into the
        stage table, with their key hashes when ``hashed``."""
        with cur.copy(f"COPY pg_temp.{quote_pg(STAGE_UPSERTS)} ({', '.join(plan.col_names)}, "
                      f"{quote_pg(POSITION_COLUMN)}{', ' + quote_pg(KEY_HASH) if hashed else ''}) FROM STDIN") as copy:
            row_values = self._row_values
            for ch, kv in upserts:
                values = row_values(plan, ch)
                values.append(ch.position)
                if hashed:
                    values.append(key_hash(kv))
                copy.write_row(values)

    @staticmethod
    def _stage_deletes(cur: psycopg.Cursor, plan: PgTablePlan, deletes: list) -> None:
        """The deletes (``(change, key values)`` pairs) into their stage table."""
        cur.execute(plan.stage_deletes_ddl)
        cols = ", ".join(plan.col_names[i] for i in plan.key_idx)
        convs = [plan.converters[i] for i in plan.key_idx]
        with cur.copy(f"COPY pg_temp.{quote_pg(STAGE_DELETES)} ({cols}, {quote_pg(POSITION_COLUMN)}, "
                      f"{quote_pg(KEY_HASH)}, {quote_pg(KEY_JSON)}) FROM STDIN") as copy:
            for ch, kv in deletes:
                text, digest = key_json_and_hash(kv)
                values = [conv(v) for conv, v in zip(convs, kv)]
                values += [ch.position, digest, text]
                copy.write_row(values)

    @staticmethod
    def _apply_staged_deletes(cur: psycopg.Cursor, plan: PgTablePlan, lowest: str, n: int, result: ApplyResult) -> None:
        """The ``n`` staged deletes (at positions from ``lowest``) applied (under the table's
        turn), with the tombstones of the keys the table holds neither a row nor a tombstone
        of at a newer position."""
        cur.execute(plan.delete_sql)
        cur.execute(plan.tombstone_sql, {"table": plan.name, "lowest": lowest})
        result.deleted += cur.rowcount
        result.skipped += n - cur.rowcount

    @staticmethod
    def _row_values(plan: PgTablePlan, ch: Any) -> list:
        try:
            values = list(plan.getter(ch.row))
            for i, conv in plan.active:
                v = values[i]
                if v is not None:
                    values[i] = conv(v)
            return values
        except Exception as exc:
            raise row_error(plan.qualified, plan.layout, plan.converters, ch, exc) from exc
