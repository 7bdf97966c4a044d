"""Merging sharded tables into one target (issue 15, docs/sharding.md): table shapes and
their unions (``shapes``), routing rules with the shard-origin columns (``routes``) and their
settings (``route_settings``, registered: each entry of the configuration's ``routes``), and the
sharding DDL coordinator of a route (``coordinator``).  Pure: the merge job is to wire them
in (not yet done)."""
