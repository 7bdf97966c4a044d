"""Table routing inside a merge task (docs/sharding.md): the routes' router, and a kept
record of a routed table as a record of its route's target."""

from __future__ import annotations

from typing import Any

from spark_jobs.errors import RouteError
from spark_jobs.task.kept import Kept, row_of_kept
from spark_jobs.task.settings import MergeSettings
from spark_jobs.task.worker_cache import cached
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import target_fields, target_row


def router_of(s: MergeSettings) -> Router | None:
    """The routes' router (None without routes), made once per worker process."""
    return cached(("router", repr(s.routes)), lambda: Router(s.routes)) if s.routes else None


def routed(s: MergeSettings, router: Router, k: Kept, key_columns: dict[tuple[str, str], list[str]],
            fields_of: dict[str, Any]) -> Kept | None:
    """A kept record of a routed table as a record of the route's target (origin values in
    its row, the target's layout and key), or None: the table is not routed.  ``fields_of``
    keeps each target's fields for the partition's other records."""
    route = router.route_of(s.source_name, *k.table)
    if route is None:
        return None
    target = s.targets.get(route.name)
    if target is None:
        raise RouteError(f"{s.source_name}/{k.table[0]}.{k.table[1]} is routed to {route.name}, but the batch was "
                         "planned without that route's target layout")
    key_columns[route.target] = list(target["key"])
    fields = fields_of.get(route.name)
    if fields is None:
        fields = fields_of[route.name] = target_fields(target["schema"])
    row = target_row(route, ShardId(s.source_name, *k.table), row_of_kept(k), fields)
    return Kept(k.op, row, k.position, f"route:{route.name}", target["schema"], k.ts_ms, k.offset, k.key_bytes,
                 k.value_bytes, route.target, k.old_key)
