"""Debezium's transaction metadata (``producer.transaction_metadata``): a BEGIN record on
``<prefix>.transaction`` before a transaction's first change event and an END record with
its event count per table after its last, as Debezium's ``provide.transaction.metadata``."""

from __future__ import annotations

from typing import Callable

from contract.records import transaction_record
from producer.binlog.reader import RowChanges, TransactionEnd


class TransactionMetadata:
    """The open transaction of one session: ``begin`` for each batch of its change events,
    ``end`` at its end, which returns how many records it wrote for the transaction (the
    session's batch counts them then)."""

    def __init__(self, prefix: str, produce: Callable[..., None]) -> None:
        self.prefix, self.produce = prefix, produce
        self.open: dict | None = None

    def _write(self, status: str, txn_id: str, position: str, **extra) -> int:
        self.produce(*transaction_record(self.prefix, status, txn_id, position, **extra))
        return 1

    def begin(self, item: RowChanges, events: int) -> None:
        """``events`` change events of ``item`` are about to be written: BEGIN first when
        they open a transaction."""
        txn_id = item.gtid or f"{item.resume_file}:{item.resume_pos}"
        if self.open is None or self.open["id"] != txn_id:
            self.open = {"id": txn_id, "count": 0, "collections": {}}
            self._write("BEGIN", txn_id, item.base.encode())
        self.open["count"] += events
        name = f"{item.db}.{item.table}"
        self.open["collections"][name] = self.open["collections"].get(name, 0) + events

    def end(self, end: TransactionEnd) -> int:
        """The transaction ends: END with its counts, if it wrote any change event.  The records
        written for the transaction, its BEGIN and END (its change events are counted where
        they are written; the BEGIN, written with the first of them, here)."""
        txn, self.open = self.open, None
        if txn is None:
            return 0
        return 1 + self._write("END", txn["id"], end.position.encode(), event_count=txn["count"],
                               data_collections=txn["collections"])
