"""Debezium's (and Kafka Connect's) logical type names: the ``connect.name`` of a column's
Avro type, written once.

The producer gives a column's Avro type one of these names (``producer.events.avro_types``),
the Connect JSON codec carries them into the ``schema`` part of a record
(``contract.codecs.connect_json``), and the table sinks lay a column out by them
(``spark_jobs.sinks.layout``): the three must agree with each other and with Debezium, so
the names live here, in the contract.
"""

from __future__ import annotations

#: Avro's primitive type names (the Avro specification): a type named by one of these is no named
#: type of a schema.
AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

#: Kafka Connect's decimal: bytes (two's complement, big-endian) with a ``scale`` parameter.
DECIMAL = "org.apache.kafka.connect.data.Decimal"
#: The parameter names of :data:`DECIMAL`.
DECIMAL_PRECISION_PARAMETER = "connect.decimal.precision"
DECIMAL_SCALE_PARAMETER = "scale"

#: Kafka Connect's own temporal types (Debezium's ``time.precision.mode: connect``): days, ms of
#: the day (int32), ms since the epoch (int64), with Avro's logical types date, time-millis,
#: timestamp-millis.
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"

#: Debezium's data types (``io.debezium.data.*``).
DATA_PREFIX = "io.debezium.data."
BITS = "io.debezium.data.Bits"
ENUM = "io.debezium.data.Enum"
ENUM_SET = "io.debezium.data.EnumSet"
JSON = "io.debezium.data.Json"
#: MySQL 9's VECTOR: an array of float32 (Debezium's ``io.debezium.data.vector.FloatVector``
#: schema, whose name is this).
FLOAT_VECTOR = "io.debezium.data.FloatVector"

#: Debezium's spatial records, and the namespace of their Avro records.
GEOMETRY_NAMESPACE = "io.debezium.data.geometry"
GEOMETRY = "io.debezium.data.geometry.Geometry"
POINT = "io.debezium.data.geometry.Point"

#: Debezium's time types (``io.debezium.time.*``).
TIME_PREFIX = "io.debezium.time."
DATE = "io.debezium.time.Date"
MICRO_TIME = "io.debezium.time.MicroTime"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
YEAR = "io.debezium.time.Year"
