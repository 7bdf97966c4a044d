"""The one sink interface: what every sink is to the merge job, and its two kinds.

A **row sink** (:class:`RowSink`: PostgreSQL, MySQL) upserts per partition: each merge task
applies its partition's kept records itself (:meth:`RowSink.apply`, or from their Avro bytes
:meth:`RowSink.apply_encoded`), under the table's turn, position guarded so a replay never
moves a row backwards.

A **batch sink** (:class:`BatchSink`: lake tables such as Delta Lake or Iceberg) commits in
transactions of its own: each task stages its partition's changes (:meth:`BatchSink.stage`:
files written, nothing visible), the driver hands each table's staged batch to the sink's lake
committer (:mod:`spark_jobs.commit.lake_committer`), which commits the parts of every batch staged
since its last commit in one transaction (:meth:`BatchSink.commit`), idempotent by the
commit's number (a commit replayed after a crash commits nothing twice).

Both kinds answer the driver's table operations (:class:`Sink`): the table markers
(``delete_below``, ``drop_table``, ``rename_table``), the tombstone purge, and how far a
table got (``applied_positions``, for the data-loss report).  A sink is built from its
configuration section (:meth:`Sink.from_config`) and registered under that section's name
(:func:`spark_jobs.sinks.registry.register_sink`); the driver never names a sink.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

from spark_jobs.sinks.batch import ApplyResult


class Sink:
    """A sink of source tables, as the merge job's driver and tasks use it.  A sink pickles
    without its connections (Spark ships it to the executors, each connects on first use)."""

    #: The configuration section it is built from (``sinks.<NAME>``), set by its registration.
    NAME: ClassVar[str] = ""
    #: ``"row"`` (:class:`RowSink`) or ``"batch"`` (:class:`BatchSink`).
    KIND: ClassVar[str] = ""

    @classmethod
    def from_config(cls, section: Any) -> "Sink":
        """The sink of its configuration section ``sinks.<NAME>`` (enabled)."""
        raise NotImplementedError

    # -- the driver's table operations ----------------------------------------------------------
    def delete_below(self, db: str, table: str, position: str, where: Mapping[str, str] | None = None) -> int:
        """Delete ``db.table``'s rows written below ``position`` (a DELETE_MISSING or TRUNCATE
        marker; ``where``: only the rows with these column values); how many."""
        raise NotImplementedError

    def drop_table(self, db: str, table: str, below: str | None = None) -> bool:
        """Drop ``db.table``'s sink table (a DROP TABLE); whether there was one."""
        raise NotImplementedError

    def rename_table(self, db: str, table: str, to_db: str, to_table: str, position: str | None = None) -> str:
        """Rename ``db.table``'s sink table (a RENAME TABLE); what was done (``"none"``: nothing)."""
        raise NotImplementedError

    def purge_tombstones(self, before_position: str, db: str | None = None, table: str | None = None, *,
                         wanted: Callable[[str, str], bool] | None = None) -> int:
        """Drop the tombstones below ``before_position`` that no replay can reach; how many."""
        return 0

    def applied_positions(self) -> dict[tuple[str, str], str]:
        """Per source table, the highest position the sink applied."""
        raise NotImplementedError

    def forget_plans(self) -> None:
        """Forget what was prepared for the tables (the driver dropped or renamed some)."""

    def close(self) -> None:
        """Let go of the sink's connections (made again on next use)."""


class RowSink(Sink):
    """A sink that upserts per partition: the merge tasks apply their kept records.

    ``turn_partition`` (set by the task around its writes, where ``PARTITION_TURNS``): the
    Kafka partition whose turn the writes take instead of the table's whole turn;
    ``turn_wait_s``: seconds spent waiting for turns since the sink was made."""

    KIND: ClassVar[str] = "row"
    #: Whether the sink has turns per Kafka partition (``turn_partition``).
    PARTITION_TURNS: ClassVar[bool] = False
    turn_partition: int | None = None
    turn_wait_s: float = 0.0

    def ensure_table(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], *,
                     rekey: bool = False) -> Any:
        """Create or alter ``db.table``'s sink table to the value schema's layout."""
        raise NotImplementedError

    def apply(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
              records: Iterable[Any], *, rekey: bool = False) -> ApplyResult:
        """Apply one batch of changes of ``db.table`` (position guarded)."""
        raise NotImplementedError

    def apply_encoded(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str],
                      changes: Sequence[Any], writer_schema: Any, *, rekey: bool = False,
                      fresh: int = 0) -> ApplyResult | None:
        """:meth:`apply` from the changes' Avro bytes; None where the sink does not (the
        caller then decodes them and calls :meth:`apply`)."""
        return None


class BatchSink(Sink):
    """A sink that commits once per table per batch: the tasks stage, the driver commits."""

    KIND: ClassVar[str] = "batch"

    def stage(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str], records: Sequence[Any], *,
              batch_id: int, partition: int, app: str = "") -> dict:
        """In a merge task: write one partition's changes of ``db.table`` where the commit
        will take them (nothing visible yet); returns what the commit needs of them (JSON
        data: it travels to the driver with the task's figures).  ``app``: the job's
        application id (:func:`spark_jobs.sinks.lake_sink.app_id`)."""
        raise NotImplementedError

    def commit(self, db: str, table: str, staged: Sequence[dict], *, batch_id: int, app: str = "",
               owner: str = "") -> ApplyResult:
        """On the driver, once every task of batch ``batch_id`` is done: the table's staged
        parts in one transaction, per key the change with the highest position; a batch
        already committed by ``app`` (a replay) commits nothing.  ``owner``: the pipeline the
        tables it creates belong to (a table of another is refused)."""
        raise NotImplementedError
