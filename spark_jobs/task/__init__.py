"""The merge task: one micro-batch of one Kafka partition of a table topic, on an executor.

:func:`spark_jobs.task.partition_merge.merge_partition` reads the partition's records and runs
them through the stages:

* :mod:`~spark_jobs.task.decide`: the DBLog decision: records decoded, merged by position with
  their table's window markers, copies and chunk rows that lose dropped (the rule itself, pure:
  :mod:`~spark_jobs.task.dblog`);
* :mod:`~spark_jobs.task.held_records`: pessimistic routes' records held until every shard ran
  the same DDL;
* :mod:`~spark_jobs.task.changelog`: the kept records to the clean changelog (or a route's
  merged one);
* :mod:`~spark_jobs.task.sink_apply`: the kept records applied to the table sinks;
* :mod:`~spark_jobs.task.dead_letters`: what could not be decoded, decided or applied;

with what they share: the task's settings (:mod:`~spark_jobs.task.settings`), the kept record
(:mod:`~spark_jobs.task.kept`), the record decoder (:mod:`~spark_jobs.task.envelope_decoder`),
routing (:mod:`~spark_jobs.task.routing`) and the worker process's caches
(:mod:`~spark_jobs.task.worker_cache`).
"""
