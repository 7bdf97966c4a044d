"""The merge of one Kafka partition's micro-batch, as its stages (the executor work of
:func:`spark_jobs.partition_merge.merge_partition`, which reads the records and runs them):

* :mod:`~spark_jobs.partition.decide`: the DBLog decide stage: records decoded, merged by
  position with their table's window markers, copies and chunk rows that lose dropped;
* :mod:`~spark_jobs.partition.held_records`: pessimistic routes' records held until every
  shard ran the same DDL;
* :mod:`~spark_jobs.partition.changelog`: the kept records to the clean changelog (or a
  route's merged one);
* :mod:`~spark_jobs.partition.sink_apply`: the kept records applied to the table sinks;
* :mod:`~spark_jobs.partition.dead_letters`: what could not be decoded, decided or applied;

with what they share: the task's settings (:mod:`~spark_jobs.partition.settings`), the
kept record (:mod:`~spark_jobs.partition.kept`), the record decoder
(:mod:`~spark_jobs.partition.envelope_decoder`), routing (:mod:`~spark_jobs.partition.routing`)
and the worker process's caches (:mod:`~spark_jobs.partition.worker_cache`).
"""
