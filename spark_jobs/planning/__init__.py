"""The merge job's batch planning, on the driver: the topics read, the markers each micro-batch reads
and what each partition gets, the tasks of a micro-batch, the guards (schema, lost history),
the route targets and the operator's route decisions, which tasks may write under their partition's turn.
"""
