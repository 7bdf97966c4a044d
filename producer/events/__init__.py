"""Building change events: Avro types of MySQL columns, converting values, the envelopes."""
