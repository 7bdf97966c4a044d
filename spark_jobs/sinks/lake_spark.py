"""The lake sinks' ``spark`` engine: the session the driver commits through, a batch's staged
parts read by the executors and reduced to one change per key, the MERGE by position that
the executors run (:class:`SparkEngine`, the writes the formats share), and the Spark
types of the lake columns.

The driver plans; Spark's executors read the staged parts, join them with the table's rows
of their keys and write the new files (Delta: deletion vectors, Iceberg: position deletes,
merge-on-read), and the driver commits (delta-spark's and Iceberg's own commit protocols).
Session-wide settings of one commit (Delta's ``txnAppId``/``txnVersion``, Iceberg's snapshot
properties) are set and cleared under one lock (:func:`with_conf`), so the commits of
several jobs of one driver (one query per source) never see each other's.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Callable

import pyarrow as pa

from common.errors import UnsupportedType
from spark_jobs.errors import LakeCommitConflict, SinkError
from spark_jobs.sinks.batch import ApplyResult, check_position
from spark_jobs.sinks.lake_engine import LakeEngine
from spark_jobs.sinks.lake_format import EMPTY_TABLE
from spark_jobs.sinks.lake_stage import StagingArea, part_schema, unified_schema
from spark_jobs.sinks.lake_types import DELETED_COLUMN, OP_COLUMN, is_list_type, lake_schema_of
from spark_jobs.sinks.naming import POSITION_COLUMN

__all__ = ["DELTA_EXTENSION", "ICEBERG_EXTENSION", "lake_session", "check_connectors", "spark_type", "quote",
           "sql_literal", "staged_frame", "merge_statement", "with_conf", "key_range", "java_error", "temp_view",
           "EMPTY_TABLE", "SparkEngine"]

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_ROW = "__cdc_rank"
_LOCK = threading.RLock()
#: The fair scheduler pool of the lake committer's Spark jobs (spark_jobs/sinks/lake_pools.xml).
LAKE_POOL = "lake"
_CONF_LOCKS: dict[frozenset, Any] = {}


def lake_session() -> Any:
    """The Spark session of this process, with the lake connectors (a clear error otherwise)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession
    try:
        SparkSession.active()
    except PySparkRuntimeError:
        raise SinkError("the lake sinks write through Spark and no Spark session runs in this process (build "
                        "one with build_session(conf=spark_jobs.sinks.configured.lake_conf(...)))") from None
    spark = SparkSession.builder.getOrCreate()
    if DELTA_EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise SinkError("the Spark session of this process was built without the lake connectors: build it with "
                        "build_session(conf=spark_jobs.sinks.configured.lake_conf(...)) before anything else "
                        "starts Spark")
    return spark


def check_connectors(spark: Any) -> None:
    """Stop with a clear error when the driver cannot load the lake connectors' classes (a
    JVM started without their jars on its class path: ``spark-submit`` without ``--jars``):
    every commit would fail, and a restart cannot help."""
    try:
        spark.sql("SHOW NAMESPACES IN spark_catalog").collect()
    except Exception as exc:  # noqa: BLE001 - Spark's error, named below
        if "ClassNotFound" in str(exc) or "Cannot find catalog plugin" in str(exc):
            raise SinkError("the lake sinks need delta-spark and iceberg-spark-runtime on the driver's class path, "
                            "which this JVM lacks (" + java_error(exc) + "); with spark-submit pass them with --jars "
                            "(the jars of .jars/spark that `make jars` resolves) or --packages (docs/lake.md)"
                            ) from None
        raise


def spark_type(t: pa.DataType) -> str:
    """The Spark SQL type of a lake column's Arrow type (:mod:`spark_jobs.sinks.lake_types`)."""
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "STRING"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "BINARY"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP_NTZ" if t.tz is None else "TIMESTAMP"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if is_list_type(t):
        return f"ARRAY<{spark_type(t.value_type)}>"
    raise SinkError(f"no Spark type for the lake column type {t}")


def quote(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any) -> str:
    """An integer or a string as a Spark SQL literal."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SinkError(f"no SQL literal for {value!r}")
    if isinstance(value, int):
        return f"{value}BD" if abs(value) >= 2 ** 63 else str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@contextmanager
def with_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Session settings for one commit, cleared after it.  The session's settings are every
    thread's: commits that set the same settings take turns (a lock per set of names), the
    Delta and the Iceberg sinks' commits, which set different ones, run side by side
    (``spark_jobs.commit.batch_commit``)."""
    if not conf:
        yield
        return
    with _LOCK:
        lock = _CONF_LOCKS.setdefault(frozenset(conf), threading.RLock())
    with lock:
        for k, v in conf.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k in conf:
                spark.conf.unset(k)


@contextmanager
def temp_view(df: Any) -> Iterator[str]:
    """``df`` as a temporary view of a name of its own, dropped after use."""
    name = f"cdc_changes_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    try:
        yield name
    finally:
        df.sparkSession.catalog.dropTempView(name)


def staged_frame(spark: Any, staging: StagingArea, parts: Sequence[dict], columns: Sequence[tuple[str, str]],
                 key: Sequence[str]) -> Any:
    """The batch's changes from its staged parts, read by the executors: the table's
    ``columns`` (``(name, Spark type)``; a column a part lacks is null), then the position and
    the op; per key the change with the highest position (a part holds each key once: only
    parts of several tasks are reduced, in a shuffle of the batch's changes)."""
    groups: dict[str, list[dict]] = {}
    for p in parts:  # parts of one schema read together, each with its own schema (no footer read on the driver)
        groups.setdefault(p["schema"], []).append(p)
    frames = []
    for group in groups.values():
        schema = part_schema(group[0])
        ddl = ", ".join(f"{quote(f.name)} {spark_type(f.type)}" for f in schema)
        df = spark.read.schema(ddl).parquet(*[staging.uri_of(p["path"]) for p in group])
        have = set(schema.names)
        cols = [f"CAST({quote(n) if n in have else 'NULL'} AS {t}) AS {quote(n)}" for n, t in columns
                if n not in (POSITION_COLUMN, DELETED_COLUMN)]
        cols += [f"CAST({quote(POSITION_COLUMN)} AS STRING) AS {quote(POSITION_COLUMN)}",
                 f"CAST({quote(OP_COLUMN)} AS STRING) AS {quote(OP_COLUMN)}"]
        frames.append(df.selectExpr(*cols))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    if len(parts) > 1:
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        order = Window.partitionBy(*[F.col(quote(k)) for k in key]).orderBy(F.col(quote(POSITION_COLUMN)).desc())
        df = df.withColumn(_ROW, F.row_number().over(order)).where(F.col(_ROW) == 1).drop(_ROW)
    return df


def key_range(parts: Sequence[dict]) -> tuple[Any, Any] | None:
    """The lowest and highest first key value of the batch's parts (None: unknown)."""
    lows = [p.get("key_min") for p in parts]
    highs = [p.get("key_max") for p in parts]
    if not parts or any(v is None for v in lows + highs) or len({type(v) for v in lows + highs}) != 1:
        return None
    return min(lows), max(highs)


def merge_statement(target: str, source: str, columns: Sequence[str], key: Sequence[str], *, soft_delete: bool,
                    bounds: tuple[Any, Any] | None = None) -> str:
    """The MERGE of the changes of view ``source`` into table ``target`` by position: a row is
    replaced (or deleted) only by a change with a higher position; a delete of a key the table
    does not hold inserts nothing (with ``soft_delete``: its key, flagged); ``bounds``: the
    first key column's range in the batch, so that the table's files outside it are skipped."""
    q = quote
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    if bounds is not None:
        on += f" AND t.{q(key[0])} >= {sql_literal(bounds[0])} AND t.{q(key[0])} <= {sql_literal(bounds[1])}"
    is_delete = f"s.{q(OP_COLUMN)} = 'd'"
    newer = f"s.{q(POSITION_COLUMN)} > t.{q(POSITION_COLUMN)}"
    every = [c for c in columns if c != DELETED_COLUMN]
    sets = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in every)
    names = ", ".join(q(c) for c in every)
    values = ", ".join(f"s.{q(c)}" for c in every)
    if soft_delete:
        flag = q(DELETED_COLUMN)
        keys = [*key, POSITION_COLUMN]
        return (f"MERGE INTO {target} t USING {source} s ON {on} "
                f"WHEN MATCHED AND {is_delete} AND {newer} THEN UPDATE SET t.{q(POSITION_COLUMN)} = "
                f"s.{q(POSITION_COLUMN)}, t.{flag} = true "
                f"WHEN MATCHED AND {newer} THEN UPDATE SET {sets}, t.{flag} = false "
                f"WHEN NOT MATCHED AND {is_delete} THEN INSERT ({', '.join(q(c) for c in keys)}, {flag}) "
                f"VALUES ({', '.join(f's.{q(c)}' for c in keys)}, true) "
                f"WHEN NOT MATCHED THEN INSERT ({names}, {flag}) VALUES ({values}, false)")
    return (f"MERGE INTO {target} t USING {source} s ON {on} "
            f"WHEN MATCHED AND {is_delete} AND {newer} THEN DELETE "
            f"WHEN MATCHED AND {newer} THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT {is_delete} THEN INSERT ({names}) VALUES ({values})")


def java_error(exc: BaseException) -> str:
    """A Spark or JVM error's first line (no stack)."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("An error occurred while calling", "at ")):
            return line[:500]
    return text[:500]


class SparkEngine(LakeEngine):
    """The ``spark`` engine's writes that the formats share: a batch's commit (:meth:`apply`:
    the table's schema from the parts' descriptions, no part opened on the driver; the table
    made or evolved; then the executors read the parts and either append them, every key above
    the table's highest: new rows of a rising key, or MERGE them by position), the driver's
    table operations in Spark SQL, and Spark's errors sorted.  Each format's engine
    (:class:`~spark_jobs.sinks.delta_spark.DeltaSparkEngine`,
    :class:`~spark_jobs.sinks.iceberg_spark.IcebergSparkEngine`) gives the statements:
    :meth:`create_table`, :meth:`evolve`, :meth:`merge_frame`, :meth:`append_frame`,
    :meth:`spark_name`, :data:`conflicts` and :meth:`spark_error`."""

    #: Spark's messages of a commit that lost the race with another writer (the format's)
    conflicts: tuple[str, ...] = ()

    def session(self) -> Any:
        """The session the format's statements run in."""
        return lake_session()

    def spark_name(self, db: str, table: str) -> str:
        """The table as Spark SQL names it."""
        raise NotImplementedError

    def in_commit_thread(self) -> None:
        """The Spark jobs of this thread (the lake committer's) in the fair scheduler's ``lake``
        pool (``lake_pools.xml``): a micro-batch's tasks take the next free slot, not the slot
        after a MERGE's last task."""
        self.session().sparkContext.setLocalProperty("spark.scheduler.pool", LAKE_POOL)

    def spark_error(self, what: str, db: str, table: str, exc: Exception) -> SinkError:
        """The sink's error for Spark's ``exc`` (not a lost race) while ``what`` on the table."""
        return SinkError(f"{db}.{table}: {what} failed: {java_error(exc)}")

    def _failure(self, what: str, db: str, table: str, exc: Exception) -> Exception:
        """What to raise for ``exc``: a lost race :class:`LakeCommitConflict` (the job commits
        the batch again), the sink's own errors as they are, the rest :meth:`spark_error`."""
        if any(c in str(exc) for c in self.conflicts):
            return LakeCommitConflict(java_error(exc))
        if isinstance(exc, SinkError):
            return exc
        return self.spark_error(what, db, table, exc)

    def run(self, what: str, db: str, table: str, action: Callable[[], Any]) -> Any:
        """``action()`` (Spark's work on the table), its errors sorted (a lost race, the sink's
        own, :meth:`spark_error`)."""
        try:
            return action()
        except Exception as exc:  # noqa: BLE001 - Spark's errors, sorted by _failure
            error = self._failure(what, db, table, exc)
            if error is exc:
                raise
            raise error from exc

    def run_sql(self, what: str, db: str, table: str, statement: str, conf: dict[str, str] | None = None) -> list:
        """Run a statement on the table in Spark (with ``conf`` set meanwhile); its rows."""
        spark = self.session()

        def run() -> list:
            with with_conf(spark, conf or {}):
                return spark.sql(statement).collect()
        return self.run(what, db, table, run)

    def apply(self, handle: Any, db: str, table: str, staged: Sequence[dict], key: list[str], batch_id: int,
              app: str, owner: str, given: int, meta: dict[str, str]) -> ApplyResult:
        try:
            wanted = unified_schema(staged)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UnsupportedType(f"the staged parts of {db}.{table} do not share a schema: {exc}") from exc
        target = lake_schema_of(wanted, self.soft_delete)
        if handle is None:
            handle = self.create_table(db, table, target, key, owner)
        else:
            handle = self.evolve(handle, db, table, target, key)
        schema = self.format.schema(handle)
        changes = staged_frame(self.session(), self.staging, staged, [(f.name, spark_type(f.type)) for f in schema],
                               key)
        if len(staged) > 1:  # (a job of its own: Delta refuses a MERGE source that is cached)
            from pyspark.sql import functions as F
            row = changes.agg(F.count(F.lit(1)), F.sum(F.when(F.col(OP_COLUMN) == "d", 1).otherwise(0))).first()
            rows, deletes = int(row[0]), int(row[1] or 0)
        else:
            rows, deletes = int(staged[0]["rows"]), int(staged[0].get("deletes", 0))
        bounds = key_range(staged)
        if deletes == 0 and self._above_every_key(handle, key, bounds):
            # every key of the batch above the table's highest (new rows of a rising key):
            # no row of the table can match, and the MERGE's result is an append of the rows
            self.append_frame(db, table, changes, schema.names, batch_id, app, meta)
            merged: tuple[int, int] | None = (rows, 0)
        else:
            merged = self.merge_frame(db, table, changes, schema.names, key, batch_id, app, bounds, meta)
        if merged is None:  # the format found the batch committed in the commit itself
            return ApplyResult(skipped=given)
        upserted, deleted = merged
        if self.soft_delete:  # flagged deletes are among the rows the MERGE changed
            deleted = min(deletes, upserted)
            upserted -= deleted
        skipped = max(0, rows - upserted - deleted)  # older than the table's rows
        return ApplyResult(upserted=upserted, deleted=deleted, skipped=skipped, superseded=given - rows)

    def evolve(self, handle: Any, db: str, table: str, schema: pa.Schema, key: list[str]) -> Any:
        """The table with ``schema``'s columns (added, types widened, or the table written
        again), by Spark; its handle."""
        raise NotImplementedError

    def merge_frame(self, db: str, table: str, changes: Any, columns: list[str], key: list[str], batch_id: int,
                    app: str, bounds: tuple | None, meta: dict[str, str]) -> tuple[int, int] | None:
        """MERGE the reduced changes (a Spark DataFrame of the table's ``columns``, the position
        and the op) by position in one commit tagged with ``app`` and ``batch_id``; ``bounds``:
        the first key column's range in the batch (None: unknown).  ``(rows upserted or
        changed, rows deleted)``; None when the commit found the batch committed already."""
        raise NotImplementedError

    def append_frame(self, db: str, table: str, changes: Any, columns: list[str], batch_id: int, app: str,
                     meta: dict[str, str]) -> None:
        """Append the changes (none a delete, none of a key the table holds) as rows in one
        commit tagged like :meth:`merge_frame`'s."""
        raise NotImplementedError

    def _above_every_key(self, handle: Any, key: list[str], bounds: tuple | None) -> bool:
        """Whether the batch's lowest first key value (``bounds``) lies above every value of
        the table's first key column (from the table's file statistics, an upper bound; an
        integer key only: a string's statistics are a truncated prefix): then no row of the
        table holds a key of the batch.  False where unknown."""
        if bounds is None or not isinstance(bounds[0], int) or isinstance(bounds[0], bool):
            return False
        top = self.format.key_upper_bound(handle, key[0])
        return top is not None and (top is EMPTY_TABLE or bounds[0] > top)

    # -- the driver's table operations in Spark SQL ------------------------------------------------
    @staticmethod
    def spark_predicate(position: str, where: dict | None) -> str:
        """The rows below ``position`` (and equal to ``where``'s values)."""
        check_position(position)
        conds = [f"{quote(POSITION_COLUMN)} < {sql_literal(position)}"]
        conds += [f"{quote(c)} = {sql_literal(str(v))}" for c, v in (where or {}).items()]
        return " AND ".join(conds)

    def delete_rows_below(self, db: str, table: str, position: str) -> None:
        self.run_sql("deleting rows below a DROP", db, table,
                     f"DELETE FROM {self.spark_name(db, table)} WHERE {self.spark_predicate(position, None)}")

    def has_rows(self, db: str, table: str) -> bool:
        if self.format.load_table(db, table) is None:
            return False
        return bool(self.run_sql("reading", db, table, f"SELECT 1 FROM {self.spark_name(db, table)} LIMIT 1"))

    def rows_above(self, db: str, table: str, position: str) -> bool:
        return bool(self.run_sql("reading", db, table,
                                 f"SELECT 1 FROM {self.spark_name(db, table)} WHERE "
                                 f"{quote(POSITION_COLUMN)} > {sql_literal(position)} LIMIT 1"))
