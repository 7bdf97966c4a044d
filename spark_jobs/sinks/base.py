"""What the PostgreSQL and MySQL sinks share: table naming and the layout cache."""

from __future__ import annotations

import json
from typing import Any, Sequence

from spark_jobs.sinks.sink_schema import TableLayout, sink_table_name, table_layout


class TableSinkBase:
    """Subclasses set ``MAX_IDENT`` (the database's identifier limit in bytes), create
    ``self._layouts = {}`` and implement ``qualified_name`` and ``_ensure``."""

    MAX_IDENT = 64
    _layouts: dict[tuple[str, tuple], TableLayout]

    def table_name(self, db: str, table: str) -> str:
        """The sink table name of ``db.table`` (unquoted): ``<db>__<table>``, shortened to fit."""
        return sink_table_name(db, table, self.MAX_IDENT)

    def qualified_name(self, db: str, table: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _ensure(self, db: str, table: str, layout: TableLayout) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _layout(self, value_schema: Any, key_columns: Sequence[str]) -> TableLayout:
        text = value_schema if isinstance(value_schema, str) else json.dumps(value_schema, sort_keys=True, default=str)
        ck = (text, tuple(key_columns))
        layout = self._layouts.get(ck)
        if layout is None:
            if len(self._layouts) > 256:
                self._layouts.clear()
            layout = self._layouts[ck] = table_layout(value_schema, key_columns)
        return layout

    def ensure_table(self, db: str, table: str, value_schema: Any, key_columns: Sequence[str]) -> str:
        """Create the sink table of ``db.table`` (or add the columns a newer schema has).

        Returns the quoted, qualified table name.
        """
        return self._ensure(db, table, self._layout(value_schema, key_columns)).qualified
