"""Incremental snapshots: signals in, chunk reads bracketed by OPEN/CLOSE markers out."""
