"""``cdc verify``: every captured source table compared with its sinks, row for row.

In the spirit of TiDB's sync-diff-inspector and Percona's pt-table-checksum: the source
table is read in primary-key chunks; for every chunk each side gives a row count and an
order-independent checksum over *normalised* row values, computed here in Python; chunks
whose count or checksum differ are compared row by row (drill-down), which names the keys
missing in the sink, the keys only the sink has and the rows whose values differ (with the
columns).  Targets: the PostgreSQL sink table, the MySQL sink table (whichever sinks are
enabled) and, with ``changelog=True``, the clean changelog topic replayed.

Public API::

    report = verify(cfg, ["shop.orders"], changelog=True, chunk_size=10_000, samples=5)
    report.equal           # True only when every table equals every target
    print_report(report)   # rich tables; report.to_dict() for JSON

The parts: :mod:`~cdc.verify.normalise` (comparable values), :mod:`~cdc.verify.spec`
(compared columns and key of a table), :mod:`~cdc.verify.checksum`,
:mod:`~cdc.verify.source` (the source in key chunks), :mod:`~cdc.verify.targets` (the sink
tables), :mod:`~cdc.verify.changelog` (the clean changelog replayed),
:mod:`~cdc.verify.diff` (row by row), :mod:`~cdc.verify.discovery` (which tables),
:mod:`~cdc.verify.shards` (a route's shards against its merged target),
:mod:`~cdc.verify.run` (the run), :mod:`~cdc.verify.report` and :mod:`~cdc.verify.render`.
"""

from cdc.verify.render import print_report
from cdc.verify.report import RowDiff, SinkResult, TableReport, VerifyReport
from cdc.verify.run import verify

__all__ = ["verify", "print_report", "VerifyReport", "TableReport", "SinkResult", "RowDiff"]
