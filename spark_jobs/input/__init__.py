"""The merge job's input: the ``cdc-kafka`` source (Kafka as a PySpark streaming data source), its
pure offsets and lost-history rules, Spark's offset log read as files, the bounded runs, and the
driver's Kafka look-ups.
"""
