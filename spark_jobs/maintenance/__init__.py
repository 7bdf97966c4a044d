"""The table sinks' upkeep between micro-batches: when tombstones may go (the horizon, pure) and their
purge.
"""
