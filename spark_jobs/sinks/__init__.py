"""Table sinks: apply reduced change batches to PostgreSQL and MySQL/MariaDB tables.

Plain Python (no Spark imports), called from Spark executors once per table per
micro-batch partition::

    sink = PostgresSink(dsn, "public")            # or MySQLSink(host, port, user, password, "cdc_sink")
    result = sink.apply(db, table, value_schema, key_columns, records)
    # records: (key, op, row, position) changes of one table; result: ApplyResult

The writers (:mod:`.postgres`, :mod:`.mysql`, on :mod:`.base`; built from the
configuration by :mod:`.configured`) import their database drivers; what they build on
is pure (no I/O): :mod:`.layout` (value schema -> columns and key), :mod:`.types`
(column types), :mod:`.values` (value conversion), :mod:`.batch` (batch reduction),
:mod:`.keys` (key forms, tombstone keys), :mod:`.naming` (table and column names).
See ``docs/sinks.md`` and the module docstrings for the table layout, the position rule
and the tombstones.
"""
