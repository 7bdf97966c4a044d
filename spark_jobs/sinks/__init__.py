"""Table sinks: apply reduced change batches to PostgreSQL and MySQL/MariaDB tables.

Plain Python (no Spark imports), called from Spark executors once per table per
micro-batch partition::

    sink = PostgresSink(dsn, "public")            # or MySQLSink(host, port, user, password, "cdc_sink")
    result = sink.apply(db, table, value_schema, key_columns, records)
    # records: (key, op, row, position) changes of one table; result: ApplyResult

Every sink implements the one sink interface (:mod:`.interface`): a row sink upserts per
partition (these two), a batch sink commits once per table per batch (lake tables); each
registers under its configuration section (:mod:`.registry`), whose settings its light
``<name>_settings`` module declares (:mod:`.postgres_settings`, ...; the lake sinks' shared
ones in :mod:`.lake_settings`), and :mod:`.configured` builds the enabled ones (a lake
sink is a format and an engine passed into :mod:`.lake_sink`: :mod:`.delta` and :mod:`.iceberg`
build them from their sections).  The row sinks (:mod:`.postgres`, :mod:`.mysql`, each a
:mod:`.table_sink` of a connection, its tables and a writer) import their database drivers;
what they build on
is pure (no I/O): :mod:`.layout` (value schema -> columns and key), :mod:`.types`
(column types), :mod:`.values` (value conversion), :mod:`.batch` (batch reduction),
:mod:`.keys` (key forms, tombstone keys), :mod:`.naming` (table and column names).
See ``docs/sinks.md`` and the module docstrings for the table layout, the position rule
and the tombstones.
"""
