"""Table sinks: apply reduced change batches to PostgreSQL and MySQL/MariaDB tables.

Plain Python (no Spark imports), called from Spark executors once per table per
micro-batch partition::

    sink = PostgresSink(dsn, "public")            # or MySQLSink(host, port, user, password, "cdc_sink")
    result = sink.apply(db, table, value_schema, key_columns, records)
    # records: (key, op, row, position) changes of one table; result: ApplyResult

See ``docs/sinks.md`` and the module docstrings of :mod:`.postgres`, :mod:`.mysql` and
:mod:`.sink_schema` for the table layout, the position rule and the tombstones.
"""

from spark_jobs.sinks.sink_schema import (
    POSITION_COLUMN,
    ApplyResult,
    Change,
    Reduced,
    SinkColumn,
    TableLayout,
    reduce_batch,
    row_columns,
    sink_table_name,
    table_layout,
)


def __getattr__(name: str):
    # The writers import their database drivers only when asked for.
    if name == "PostgresSink":
        from spark_jobs.sinks.postgres import PostgresSink
        return PostgresSink
    if name == "MySQLSink":
        from spark_jobs.sinks.mysql import MySQLSink
        return MySQLSink
    raise AttributeError(name)


__all__ = [
    "POSITION_COLUMN",
    "ApplyResult",
    "Change",
    "MySQLSink",
    "PostgresSink",
    "Reduced",
    "SinkColumn",
    "TableLayout",
    "reduce_batch",
    "row_columns",
    "sink_table_name",
    "table_layout",
]
