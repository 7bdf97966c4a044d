"""What the lake sinks' settings share (``sinks.delta``, ``sinks.iceberg``, docs/lake.md),
as :mod:`spark_jobs.sinks.lake_sink` is what the sinks share: light (pydantic and common
only), registered by each lake sink's own settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from common.config import Section


class LakeSinkConfig(Section):
    """What the lake sinks share (docs/lake.md)."""

    enabled: bool = False
    # Who does the lake's file work: "driver" (delta-rs / pyiceberg in the merge job's driver,
    # copy-on-write: the fastest on one machine and small tables) or "spark" (delta-spark /
    # Iceberg's Spark runtime in the job's session, merged by Spark's executors, merge-on-read:
    # a batch's cost follows the batch, not the table; `make jars` puts the connectors in place).
    engine: Literal["driver", "spark"] = "driver"
    # Where the merge tasks write their staged parts for the driver's commit: a directory the
    # driver and every executor reach ("": beside the tables, <path>/_cdc_staging).
    staging_path: str = ""
    # Deletes: false removes the row; true keeps it with __cdc_deleted = true and the delete's position.
    soft_delete: bool = False
    # Compact a table's small files after every N of its commits (0: only by `cdc lake optimize`),
    # so that a long run keeps a bounded number of files per table.
    compact_every: int = Field(50, ge=0)
    # Also compact a table after any commit that leaves it with at least this many small files
    # (below half of target_file_size: any two of them make one file compaction writes), as
    # Delta's auto compaction (minNumFiles) and Iceberg's rewrite (min-input-files) trigger: a
    # copy-on-write commit writes a file per file it rewrites, and counting commits alone let
    # them pile up between two compactions (0: by compact_every only; 1 is refused: one file is
    # nothing to compact).
    compact_min_files: int = Field(10, ge=0)
    # With each compaction, what older versions go (Delta: VACUUM and old log entries; Iceberg:
    # snapshots expired and the files no snapshot left needs deleted): every version committed
    # within the last retention_hours stays readable; 0 keeps only the latest; null never
    # removes anything (then `cdc lake vacuum|expire`). Each commit rewrites the files holding
    # the rows it replaces, so without it the disk grows with every batch.
    retention_hours: int | None = Field(1, ge=0)
    # How often each lake table is committed (seconds): every micro-batch stages the table's
    # changes (after the DBLog rule) and is done; one committer per table merges every batch
    # staged since its last commit in one commit, off the micro-batch's path (docs/lake.md,
    # "Commit cadence"). 0: a commit with every micro-batch, on its path (the batch ends when
    # its lake commits are done). 60 by measurement (docs/lake.md, "The default").
    commit_interval_s: float = Field(60.0, ge=0)
    # A table is committed before its interval is up once this many changes are staged for it.
    commit_rows: int = Field(500_000, ge=1)
    # The stream waits (a pace warning, cdc_lake_staged_rows) while this many changes are
    # staged and not committed in the sink's tables: a slow or unavailable lake holds the
    # stream back instead of filling the staging directory.
    max_staged_rows: int = Field(2_000_000, ge=1)
    # The committer's thread (and the threads it starts: delta-rs's runtime when it starts it) at
    # this nice value, below the stream's (0: as the job): on a machine short of cores the
    # stream's sinks go first and the lake commits take the time left (the `driver` engine; the
    # `spark` engine's commits run in Spark's executors, in the fair scheduler's `lake` pool).
    commit_nice: int = Field(10, ge=0, le=19)
    # The size compaction aims at, in bytes.
    target_file_size: int = Field(128 * 1024 * 1024, ge=1024 * 1024)

    @field_validator("compact_min_files")
    @classmethod
    def _min_files(cls, v: int) -> int:
        if v == 1:
            raise ValueError("compact_min_files must be 0 (off) or at least 2: compaction merges files")
        return v
