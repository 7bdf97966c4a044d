"""A snapshot's chunks as the coordinator tracks them: in flight (being read), released (read,
their window passed: their rows go out after its CLOSE), their window markers as seen in the
binlog, and the tables of a ``delete-missing`` snapshot read completely."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from contract.position import BinlogPosition
from producer.snapshot.gtid_windows import Boundary
from producer.snapshot.state import KeyRange, TableJob, encode_key
from producer.table_schema import TableDef


@dataclass
class MarkerSeen:
    """A window marker of this process's chunk, at its binlog position (for the markers topic)."""

    kind: str  # OPEN | CLOSE
    snapshot_id: str
    chunk_id: int
    table: str
    key_range: dict
    position: BinlogPosition
    extra: dict = field(default_factory=dict)  # read-only windows: the GTID sets bounding the read


@dataclass
class DeleteMissing:
    """A table of a ``delete-missing`` snapshot was read completely: downstream, the sinks
    delete its rows below ``below`` that the snapshot did not refresh."""

    snapshot_id: str
    table: str
    below: BinlogPosition


@dataclass
class InflightChunk:
    """A chunk being read: its range, table, read (``future``) and window."""

    chunk_id: int
    job: TableJob
    key_range: KeyRange
    table_def: TableDef
    keys: list[str]
    future: Future
    close_marker: tuple[str, str] = ("", "")  # (id, data) of its CLOSE marker row
    open_position: BinlogPosition | None = None
    invalid: str | None = None  # why it must be read again instead of released
    quiet: Boundary | None = None  # read-only: the boundary it was submitted at
    changed: set = field(default_factory=set)  # read-only: record keys written for its table since
    ahead: bool = False  # its read was looked at for the next chunk's start (_read_ahead)
    marker_data: dict = field(init=False)  # the key range as planned (its markers carry it)

    def __post_init__(self) -> None:
        self.marker_data = {"lo": encode_key(self.key_range.lo), "hi": encode_key(self.key_range.hi)}


@dataclass
class ReleasedChunk:
    """A chunk read and released: its rows, to be written after the window's CLOSE."""

    snapshot_id: str
    chunk_id: int
    table_def: TableDef
    rows: list[dict]
    open_position: BinlogPosition
    close_position: BinlogPosition
    key_columns: list[str]
    # read-only windows: record keys changed inside the window (their rows are dropped),
    # and the markers to write before the rows
    changed: set | None = None
    markers: tuple[MarkerSeen, ...] = ()
    # ``source.snapshot`` of its rows: None for an incremental snapshot's ("incremental"); a
    # blocking snapshot's as Debezium's (first, first_in_data_collection, true, ...)
    snapshot_record: str | None = None
    # ``source.server_id`` of its rows (None: the server's; 0 in Debezium's initial snapshot of a
    # first start, before any binlog event was read)
    server_id: int | None = None
