"""``cdc bench``: benchmarks on the embedded stack, each against reference runs made in the
same session.

:mod:`~cdc.bench.stream` (binlog to Kafka), :mod:`~cdc.bench.snapshot` (incremental
snapshots), :mod:`~cdc.bench.merge` (the Spark merge job into PostgreSQL),
:mod:`~cdc.bench.report` (all three into ``docs/benchmarks.md``), and
:mod:`~cdc.bench.harness`, what they share.  ``python -m cdc.bench.stream`` is the stream
benchmark's child process, not a user command.
"""
