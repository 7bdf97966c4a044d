"""The event contract: what the producer writes and every reader relies on.

Positions, topic names, the Debezium envelope and its ``source`` block, window markers,
notifications, signals' wire form, record framing (serde) and the writer-schema store.
The ``.avsc`` files are beside it, in :mod:`schemas`.
"""
