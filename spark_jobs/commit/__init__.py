"""What a micro-batch leaves behind, on the driver: the state store (its plan, replayed the same),
the batch sinks' commit, the lake tables' committer on a cadence of their own, and the table
markers (delete-missing, truncate, drop, rename) applied once every partition has reached them.
"""
